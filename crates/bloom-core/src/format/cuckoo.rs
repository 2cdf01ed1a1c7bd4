//! Kind 3, a cuckoo filter: the header, the packed buckets in 64-bit words, and a CRC-32C
//! over both. A file is exactly `64 + 8·W + 4` bytes, `W = ceil(m·(4f − 4) / 64)`.

use std::io::{self, Read, Write};

use super::checksum::{CHECKSUM_LEN, Summed};
use super::header::{FilterKind, HEADER_LEN, KIND_OFFSET, decode_kind, encode, fields};
use super::{DecodeError, read_up_to};
use crate::CuckooFilter;
use crate::bit_vector::WordFill;
use crate::cuckoo::{MAX_FINGERPRINT_BITS, MIN_FINGERPRINT_BITS, SLOTS, Shape, Table};
use crate::hasher::KeyHasher;
use crate::params::MAX_BITS;
use crate::sync::AtomicU64;

/// A cuckoo filter's header, parsed and validated.
struct CuckooHeader {
    shape: Shape,
    buckets: u64,
    seed: u128,
    capacity: Option<u64>,
    target_fpr: Option<f64>,
    num_words: u64,
}

impl CuckooHeader {
    fn of(filter: &CuckooFilter) -> Self {
        let shape = Shape {
            fingerprint_bits: filter.fingerprint_bits(),
        };
        Self {
            shape,
            buckets: filter.num_buckets(),
            seed: filter.seed(),
            capacity: filter.capacity(),
            target_fpr: filter.target_fpr(),
            num_words: Table::body_words(filter.num_buckets(), shape),
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let shape_field = self.shape.fingerprint_bits | ((SLOTS as u32) << 8);
        encode(
            FilterKind::Cuckoo,
            0,
            (
                shape_field,
                self.buckets,
                self.seed,
                self.capacity.unwrap_or(0),
                self.target_fpr.unwrap_or(0.0).to_bits(),
                self.num_words,
            ),
        )
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_kind(bytes, HEADER_LEN, FilterKind::Cuckoo)?;
        if bytes[KIND_OFFSET + 1] != 0 {
            return Err(DecodeError::Inconsistent(
                "a cuckoo filter's layout byte is not 0",
            ));
        }
        let (shape_field, buckets, seed, capacity, target_fpr, num_words) = fields(bytes);
        let fingerprint_bits = shape_field & 0xFF;
        if shape_field >> 8 != SLOTS as u32 {
            return Err(DecodeError::Inconsistent(
                "slots per bucket is not 4, the only size this crate reads",
            ));
        }
        if !(MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS).contains(&fingerprint_bits) {
            return Err(DecodeError::Inconsistent(
                "fingerprint width outside 5 to 17 bits",
            ));
        }
        let shape = Shape { fingerprint_bits };
        if buckets == 0
            || buckets
                .checked_mul(u64::from(shape.bucket_bits()))
                .is_none_or(|bits| bits > MAX_BITS)
        {
            return Err(DecodeError::Inconsistent(
                "number of buckets is 0 or above the maximum",
            ));
        }
        if num_words != Table::body_words(buckets, shape) {
            return Err(DecodeError::Inconsistent(
                "word count does not match the buckets",
            ));
        }
        let target_fpr = f64::from_bits(target_fpr);
        if target_fpr.to_bits() != 0 && !(target_fpr > 0.0 && target_fpr < 1.0) {
            return Err(DecodeError::Inconsistent(
                "target false-positive rate outside (0, 1)",
            ));
        }
        Ok(Self {
            shape,
            buckets,
            seed,
            capacity: (capacity != 0).then_some(capacity),
            target_fpr: (target_fpr.to_bits() != 0).then_some(target_fpr),
            num_words,
        })
    }

    fn file_len(&self) -> u64 {
        (HEADER_LEN + CHECKSUM_LEN) as u64 + self.num_words * 8
    }

    /// The filter the words describe, once every bucket is one this crate could write and
    /// the bits past the last bucket are 0.
    /// The filter of `words`: the body's words, and room for the table's spare word.
    fn filter(self, words: WordFill<AtomicU64>) -> Result<CuckooFilter, DecodeError> {
        let used = (self.buckets * u64::from(self.shape.bucket_bits())) % 64;
        if let Some(last) = words.last() {
            if used != 0 && last >> used != 0 {
                return Err(DecodeError::Inconsistent(
                    "bits set beyond the filter's last bucket",
                ));
            }
        }
        let table = Table::new(self.buckets, self.shape, Some(words.finish()));
        if !(0..self.buckets).all(|i| self.shape.is_valid(table.load(i))) {
            return Err(DecodeError::Inconsistent(
                "a bucket's code is not one of the 3,876 nibble multisets",
            ));
        }
        Ok(CuckooFilter::from_parts(
            table,
            KeyHasher::new(self.seed),
            self.capacity,
            self.target_fpr,
        ))
    }
}

impl CuckooFilter {
    /// The filter in the file format, kind "cuckoo" (see `docs/FORMAT.md`). It contains the
    /// secret hash key: store it like a credential. Write it while no insert or remove runs,
    /// or the file may hold a key twice or miss one that was moving.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// f.insert("a")?;
    /// let copy = CuckooFilter::from_bytes(&f.to_bytes())?;
    /// assert!(copy.contains("a") && copy.len() == 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = CuckooHeader::of(self);
        let mut out = Vec::with_capacity(header.file_len() as usize);
        self.write_to(&mut out).expect("a Vec takes every write");
        out
    }

    /// Writes [`to_bytes`](Self::to_bytes)'s output to `w` without building it in memory.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// let mut file = Vec::new();
    /// f.write_to(&mut file)?;
    /// assert_eq!(file, f.to_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        let header = CuckooHeader::of(self);
        let mut out = Summed::new(w);
        out.write_all(&header.encode())?;
        super::words::write_body(&mut out, header.num_words, self.table.body())?;
        out.finish()
    }

    /// Reads a cuckoo filter from exactly `bytes`; any defect is a distinct [`DecodeError`].
    ///
    /// ```
    /// use bloom_core::{CuckooFilter, DecodeError};
    ///
    /// let bytes = CuckooFilter::new(1_000, 0.01)?.to_bytes();
    /// assert!(CuckooFilter::from_bytes(&bytes).is_ok());
    /// assert!(matches!(
    ///     CuckooFilter::from_bytes(&bytes[..100]),
    ///     Err(DecodeError::Truncated { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let header = CuckooHeader::decode(bytes)?;
        let body = super::words::body_of(bytes, header.file_len())?;
        let mut words = super::words::word_fill(header.num_words, 1)?;
        words.push_le_bytes(body);
        header.filter(words)
    }

    /// Reads one cuckoo filter from `r`, which must end right after it. Memory grows only as
    /// data arrives.
    ///
    /// ```
    /// use bloom_core::CuckooFilter;
    ///
    /// let f = CuckooFilter::new(1_000, 0.01)?;
    /// let bytes = f.to_bytes();
    /// let copy = CuckooFilter::read_from(&mut bytes.as_slice())?;
    /// assert_eq!(copy.num_buckets(), f.num_buckets());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        let mut head = [0u8; HEADER_LEN];
        let got = read_up_to(r, &mut head)?;
        let header = CuckooHeader::decode(&head[..got])?;
        let words = super::words::read_staged(r, &head, header.num_words, header.file_len(), 1)?;
        header.filter(words)
    }
}

/// W, from a header whose shared fields were checked (for [`peek`](super::peek())).
pub(crate) fn num_words_of(bytes: &[u8]) -> u64 {
    fields(bytes).5
}
