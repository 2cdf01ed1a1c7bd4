//! A file of whichever kind: the kind byte, at the same place in every header, picks the
//! reader; each kind writes its own.

use std::io::{self, Read, Write};

use super::header::{FilterKind, KIND_OFFSET, kind_at};
use super::{DecodeError, read_up_to};
use crate::{
    AnyFilter, BloomFilter, CountingBloomFilter, CuckooFilter, ScalableBloomFilter, WindowedFilter,
};

impl AnyFilter {
    /// The filter in the file format of its kind (see `docs/FORMAT.md`).
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(CountingBloomFilter::new(100, 0.01)?);
    /// f.insert("a");
    /// let copy = AnyFilter::from_bytes(&f.to_bytes())?;
    /// assert!(copy.contains("a") && copy.kind() == "counting");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            AnyFilter::Plain(f) => f.to_bytes(),
            AnyFilter::Counting(f) => f.to_bytes(),
            AnyFilter::Scalable(f) => f.to_bytes(),
            AnyFilter::Cuckoo(f) => f.to_bytes(),
            AnyFilter::Windowed(f) => f.to_bytes(),
        }
    }

    /// Writes [`to_bytes`](Self::to_bytes)'s output to `w`.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let f = AnyFilter::from(BloomFilter::new(100, 0.01)?);
    /// let mut file = Vec::new();
    /// f.write_to(&mut file)?;
    /// assert_eq!(file, f.to_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        match self {
            AnyFilter::Plain(f) => f.write_to(w),
            AnyFilter::Counting(f) => f.write_to(w),
            AnyFilter::Scalable(f) => f.write_to(w),
            AnyFilter::Cuckoo(f) => f.write_to(w),
            AnyFilter::Windowed(f) => f.write_to(w),
        }
    }

    /// Reads a filter of any kind from exactly `bytes`.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let bytes = ScalableBloomFilter::new(100, 0.01)?.to_bytes();
    /// assert_eq!(AnyFilter::from_bytes(&bytes)?.kind(), "scalable");
    /// assert!(AnyFilter::from_bytes(b"not a filter").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        match kind_at(bytes) {
            Some(FilterKind::Counting) => {
                CountingBloomFilter::from_bytes(bytes).map(Self::Counting)
            }
            Some(FilterKind::Scalable) => {
                ScalableBloomFilter::from_bytes(bytes).map(Self::Scalable)
            }
            Some(FilterKind::Cuckoo) => CuckooFilter::from_bytes(bytes).map(Self::Cuckoo),
            Some(FilterKind::Windowed) => WindowedFilter::from_bytes(bytes).map(Self::Windowed),
            // Also anything unrecognisable: the plain decoder names what is wrong with it.
            Some(FilterKind::Plain) | None => BloomFilter::from_bytes(bytes).map(Self::Plain),
        }
    }

    /// Reads one filter of any kind from `r`, which must end right after it.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, ScalableBloomFilter};
    ///
    /// let bytes = CountingBloomFilter::new(100, 0.01)?.to_bytes();
    /// let f = AnyFilter::read_from(&mut bytes.as_slice())?;
    /// assert_eq!(f.kind(), "counting");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        // The kind byte is at the same place in every kind's header: read up to it, then hand
        // the decoder those bytes followed by the rest of the stream.
        let mut head = [0u8; KIND_OFFSET + 1];
        let got = read_up_to(r, &mut head)?;
        let mut whole = io::Cursor::new(&head[..got]).chain(r);
        match kind_at(&head[..got]) {
            Some(FilterKind::Counting) => {
                CountingBloomFilter::read_from(&mut whole).map(Self::Counting)
            }
            Some(FilterKind::Scalable) => {
                ScalableBloomFilter::read_from(&mut whole).map(Self::Scalable)
            }
            Some(FilterKind::Cuckoo) => CuckooFilter::read_from(&mut whole).map(Self::Cuckoo),
            Some(FilterKind::Windowed) => WindowedFilter::read_from(&mut whole).map(Self::Windowed),
            Some(FilterKind::Plain) | None => BloomFilter::read_from(&mut whole).map(Self::Plain),
        }
    }
}
