//! `accessors!`: the inherent methods [`BloomFilter`](crate::BloomFilter),
//! [`CountingBloomFilter`](crate::CountingBloomFilter) and
//! [`CuckooFilter`](crate::CuckooFilter) share (`new`, what they were sized with, their
//! memory), each body written once here and documented at its call site.

/// Writes the listed methods into the `impl` it is called in, each with the rustdoc written
/// before its entry:
///
/// * `new;`: `new(expected_items, false_positive_rate)`, through `Self::builder()`;
/// * `name: Type;`: `name(&self) -> Type`, the field `name`;
/// * `seed;`: `seed(&self) -> u128`, the field `hasher`'s key;
/// * `size_in_bytes(field);`: `size_in_bytes(&self) -> usize`, 8 bytes a word of the word
///   array `field`.
macro_rules! accessors {
    () => {};
    ($(#[$attr:meta])* new; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn new(
            expected_items: u64,
            false_positive_rate: f64,
        ) -> Result<Self, $crate::BuildError> {
            Self::builder()
                .expected_items(expected_items)
                .false_positive_rate(false_positive_rate)
                .build()
        }
        $crate::accessors::accessors!($($rest)*);
    };
    ($(#[$attr:meta])* seed; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn seed(&self) -> u128 {
            self.hasher.seed()
        }
        $crate::accessors::accessors!($($rest)*);
    };
    ($(#[$attr:meta])* size_in_bytes($words:ident); $($rest:tt)*) => {
        $(#[$attr])*
        pub fn size_in_bytes(&self) -> usize {
            self.$words.len() * 8
        }
        $crate::accessors::accessors!($($rest)*);
    };
    ($(#[$attr:meta])* $field:ident: $type:ty; $($rest:tt)*) => {
        $(#[$attr])*
        pub fn $field(&self) -> $type {
            self.$field
        }
        $crate::accessors::accessors!($($rest)*);
    };
}
pub(crate) use accessors;
