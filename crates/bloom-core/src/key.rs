//! What a key *is* to the filter: a byte string.
//!
//! The filter never hashes through [`std::hash::Hash`]: its output is not stable across Rust
//! versions or platforms. Instead every key defines the exact bytes that identify it, and the
//! filter hashes those bytes with keyed SipHash-1-3. A filter written to disk on one machine
//! therefore answers identically when read on another.

/// A value that can be inserted into and looked up in a filter.
///
/// The contract is the byte string returned by [`Key::key_bytes`]: two keys are the same key
/// exactly when their bytes are equal. The built-in implementations are:
///
/// | type | bytes |
/// | --- | --- |
/// | `str`, `String` | the UTF-8 bytes, no terminator |
/// | `[u8]`, `Vec<u8>`, `[u8; N]` | the bytes themselves |
/// | `u8` … `u128`, `i8` … `i128` | little-endian two's complement, the type's own width |
/// | `usize`, `isize` | as `u64` / `i64` little-endian, on every platform |
/// | `&T`, `Box<T>` | the bytes of `T` |
/// | `uuid::Uuid` (feature `uuid`) | its 16 bytes in RFC 9562 order ([`Uuid::as_bytes`]): the same key as that `[u8; 16]` |
///
/// [`Uuid::as_bytes`]: https://docs.rs/uuid/1/uuid/struct.Uuid.html#method.as_bytes
///
/// So `"42"` and `42u64` are different keys, and `42u32` and `42u64` are different keys
/// (4 bytes vs 8 bytes): pick one type per filter. A `Uuid` is not the key of its text, nor
/// of `uuid.as_u128()` (a `u128` is little-endian; the UUID's bytes are its big-endian form,
/// `u128::to_be_bytes`).
///
/// # Implementing it for your own type
///
/// ```
/// use bloom_core::Key;
///
/// struct UserId(u64);
///
/// impl Key for UserId {
///     fn key_bytes(&self) -> impl AsRef<[u8]> {
///         self.0.to_le_bytes() // the same key as the bare `u64`
///     }
/// }
///
/// let filter = bloom_core::BloomFilter::new(1_000, 0.01).unwrap();
/// filter.insert(&UserId(7));
/// assert!(filter.contains(&7u64));
/// ```
pub trait Key {
    /// The bytes that identify this key. They must depend only on the value, never on the
    /// platform, process or Rust version.
    fn key_bytes(&self) -> impl AsRef<[u8]>;
}

impl Key for str {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.as_bytes()
    }
}

impl Key for String {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.as_bytes()
    }
}

impl Key for [u8] {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self
    }
}

impl Key for Vec<u8> {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.as_slice()
    }
}

impl<const N: usize> Key for [u8; N] {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.as_slice()
    }
}

impl<T: Key + ?Sized> Key for &T {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        (**self).key_bytes()
    }
}

impl<T: Key + ?Sized> Key for Box<T> {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        (**self).key_bytes()
    }
}

macro_rules! integer_keys {
    ($($t:ty),*) => {$(
        impl Key for $t {
            #[inline]
            fn key_bytes(&self) -> impl AsRef<[u8]> {
                self.to_le_bytes()
            }
        }
    )*};
}
integer_keys!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

// Pointer-sized integers hash as 64-bit so a filter answers the same on 32- and 64-bit machines.
impl Key for usize {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        (*self as u64).to_le_bytes()
    }
}

impl Key for isize {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        (*self as i64).to_le_bytes()
    }
}

/// A UUID is its 16 bytes as stored and sent on the wire (big-endian, RFC 9562 order), so the
/// same UUID read from a database column, parsed from text or generated is the same key.
#[cfg(feature = "uuid")]
#[cfg_attr(docsrs, doc(cfg(feature = "uuid")))]
impl Key for uuid::Uuid {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        *self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::Key;

    fn bytes<K: Key + ?Sized>(k: &K) -> Vec<u8> {
        k.key_bytes().as_ref().to_vec()
    }

    #[test]
    fn keys_are_defined_as_bytes() {
        assert_eq!(bytes("ab"), b"ab");
        assert_eq!(bytes(&String::from("ab")), b"ab");
        assert_eq!(bytes(&vec![1u8, 2]), [1, 2]);
        assert_eq!(bytes(&[1u8, 2]), [1, 2]);
        assert_eq!(bytes(&0x0102_u16), [2, 1]);
        assert_eq!(bytes(&-1i32), [0xff; 4]);
        assert_eq!(bytes(&1usize), 1u64.to_le_bytes());
        assert_eq!(bytes(&-2isize), (-2i64).to_le_bytes());
        assert_eq!(bytes(&&&"x"), b"x");
    }

    #[cfg(feature = "uuid")]
    #[test]
    fn a_uuid_is_its_sixteen_bytes_in_rfc_order() {
        let text = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let uuid: uuid::Uuid = text.parse().unwrap();
        let want = [
            0x67, 0xe5, 0x50, 0x44, 0x10, 0xb1, 0x42, 0x6f, 0x92, 0x47, 0xbb, 0x68, 0x0e, 0x5f,
            0xe0, 0xc8,
        ];
        assert_eq!(bytes(&uuid), want);
        assert_eq!(bytes(&uuid), uuid.as_u128().to_be_bytes());
        assert_ne!(bytes(&uuid), bytes(&uuid.as_u128()), "not the u128 key");
        assert_ne!(bytes(&uuid), bytes(text), "not the text key");
    }
}
