//! The file format: a fixed 64-byte header, the words, and a CRC-32C over both.
//! `docs/FORMAT.md` at the repository root documents it byte by byte.

use std::io::{self, Read, Write};

use crc::{CRC_32_ISCSI, Crc, Digest, Table};

use crate::bit_vector::BitVector;
use crate::builder::{check_hashes, round_bits};
use crate::hasher::KeyHasher;
use crate::{BloomFilter, Layout};

/// The first eight bytes of every file. The high byte catches 7-bit transfers, the CR LF pair
/// newline translation, 0x1A a DOS `type` (the same trick as PNG's signature).
pub const MAGIC: [u8; 8] = [0x89, b'B', b'L', b'M', b'\r', b'\n', 0x1A, b'\n'];

/// The format version this crate writes. It reads every version up to this one.
pub const FORMAT_VERSION: u16 = 1;

/// Bytes before the words.
pub(crate) const HEADER_LEN: usize = 64;
/// Bytes after the words (the checksum).
pub(crate) const TRAILER_LEN: usize = 4;

/// What the payload words hold; a file of one kind is refused by a reader of another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One bit per slot: [`BloomFilter`].
    Bits = 0,
    /// A 4-bit counter per slot, 16 per word: [`CountingBloomFilter`](crate::CountingBloomFilter).
    Counting = 1,
    /// A list of [`Kind::Bits`] stages: [`ScalableBloomFilter`](crate::ScalableBloomFilter).
    Scalable = 2,
}

impl Kind {
    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Kind::Bits),
            1 => Some(Kind::Counting),
            2 => Some(Kind::Scalable),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Bits => "plain Bloom filter",
            Kind::Counting => "counting Bloom filter",
            Kind::Scalable => "scalable Bloom filter",
        }
    }

    /// Slots held by one 64-bit word.
    fn slots_per_word(self) -> u64 {
        match self {
            Kind::Counting => 16,
            Kind::Bits | Kind::Scalable => 64,
        }
    }
}

static CRC32C: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);

/// Why a byte string or file is not a valid filter. Each problem has its own variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input does not start with [`MAGIC`]: it is not a filter file.
    #[error("not a bloom filter file (bad magic bytes)")]
    BadMagic,
    /// Written by a newer version of this format.
    #[error("unsupported format version {found} (this build reads up to version {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version in the file.
        found: u16,
    },
    /// A kind of structure this version does not know.
    #[error("unsupported filter kind {found} in the header")]
    UnsupportedKind {
        /// The kind byte in the file.
        found: u8,
    },
    /// A valid file of another structure (say, a counting filter read as a plain one).
    #[error("the file holds a {found}, not a {expected}")]
    WrongKind {
        /// What the reader loads.
        expected: &'static str,
        /// What the file holds.
        found: &'static str,
    },
    /// An unknown layout byte.
    #[error("unknown layout {found} in the header")]
    UnknownLayout {
        /// The layout byte in the file.
        found: u8,
    },
    /// The input ends before the filter does.
    #[error("file is truncated: {available} bytes, the header promises {needed}")]
    Truncated {
        /// Bytes a complete file has (or the header alone, if even that is cut).
        needed: u64,
        /// Bytes present.
        available: u64,
    },
    /// Bytes follow the checksum.
    #[error("{extra} unexpected bytes after the end of the filter")]
    TrailingBytes {
        /// How many (at least; a reader stops counting at one).
        extra: u64,
    },
    /// The header's fields contradict each other or are out of range.
    #[error("inconsistent header: {0}")]
    Inconsistent(&'static str),
    /// The stored checksum does not match the content: the file is corrupt.
    #[error(
        "checksum mismatch: file says {stored:#010x}, content gives {computed:#010x} (corrupt file)"
    )]
    ChecksumMismatch {
        /// CRC-32C stored in the file.
        stored: u32,
        /// CRC-32C computed over the content.
        computed: u32,
    },
    /// Reading failed; the I/O error is the [`source`](std::error::Error::source).
    #[error("read failed")]
    Io(#[from] io::Error),
}

/// The parsed, validated 64-byte header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) layout: Layout,
    pub(crate) num_hashes: u32,
    pub(crate) num_bits: u64,
    pub(crate) seed: u128,
    pub(crate) capacity: Option<u64>,
    pub(crate) target_fpr: Option<f64>,
    pub(crate) num_words: u64,
}

impl Header {
    pub(crate) fn of(filter: &BloomFilter) -> Self {
        Self::new(
            Kind::Bits,
            filter.layout(),
            filter.num_bits(),
            filter.num_hashes(),
            filter.seed(),
            filter.capacity(),
            filter.target_fpr(),
        )
    }

    pub(crate) fn new(
        kind: Kind,
        layout: Layout,
        num_slots: u64,
        num_hashes: u32,
        seed: u128,
        capacity: Option<u64>,
        target_fpr: Option<f64>,
    ) -> Self {
        Self {
            kind,
            layout,
            num_hashes,
            num_bits: num_slots,
            seed,
            capacity,
            target_fpr,
            num_words: num_slots.div_ceil(kind.slots_per_word()),
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[10] = self.kind as u8;
        h[11] = self.layout.to_byte();
        h[12..16].copy_from_slice(&self.num_hashes.to_le_bytes());
        h[16..24].copy_from_slice(&self.num_bits.to_le_bytes());
        h[24..40].copy_from_slice(&self.seed.to_le_bytes());
        h[40..48].copy_from_slice(&self.capacity.unwrap_or(0).to_le_bytes());
        h[48..56].copy_from_slice(&self.target_fpr.unwrap_or(0.0).to_bits().to_le_bytes());
        h[56..64].copy_from_slice(&self.num_words.to_le_bytes());
        h
    }

    /// Parses and validates a header. `bytes` may be shorter than a header: the magic is
    /// still checked first, so a short non-filter reads as `BadMagic`, a short filter as
    /// `Truncated`.
    pub(crate) fn decode(bytes: &[u8], expected: Kind) -> Result<Self, DecodeError> {
        let magic_len = bytes.len().min(MAGIC.len());
        if bytes[..magic_len] != MAGIC[..magic_len] {
            return Err(DecodeError::BadMagic);
        }
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: HEADER_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let u16_at = |i: usize| u16::from_le_bytes(bytes[i..i + 2].try_into().unwrap());
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());

        let version = u16_at(8);
        if version == 0 || version > FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion { found: version });
        }
        let kind =
            Kind::from_byte(bytes[10]).ok_or(DecodeError::UnsupportedKind { found: bytes[10] })?;
        // Other kinds lay out the rest of the header differently: stop here.
        if kind != expected {
            return Err(DecodeError::WrongKind {
                expected: expected.name(),
                found: kind.name(),
            });
        }
        let layout =
            Layout::from_byte(bytes[11]).ok_or(DecodeError::UnknownLayout { found: bytes[11] })?;
        let num_hashes = u32_at(12);
        let num_bits = u64_at(16);
        let seed = u128::from_le_bytes(bytes[24..40].try_into().unwrap());
        let capacity = u64_at(40);
        let target_fpr = f64::from_bits(u64_at(48));
        let num_words = u64_at(56);

        if check_hashes(num_hashes).is_err() {
            return Err(DecodeError::Inconsistent(
                "number of hashes is 0 or above the maximum",
            ));
        }
        match round_bits(layout, num_bits) {
            Ok(rounded) if rounded == num_bits => {}
            Ok(_) => {
                return Err(DecodeError::Inconsistent(
                    "blocked layout with bits not a multiple of 512",
                ));
            }
            Err(_) => {
                return Err(DecodeError::Inconsistent(
                    "number of bits is 0 or above the maximum",
                ));
            }
        }
        if num_words != num_bits.div_ceil(kind.slots_per_word()) {
            return Err(DecodeError::Inconsistent(
                "word count does not match the number of bits",
            ));
        }
        // Only +0.0 means "not recorded": any other bit pattern must be a real rate, so a
        // file re-encodes to exactly its own bytes.
        if target_fpr.to_bits() != 0 && !(target_fpr > 0.0 && target_fpr < 1.0) {
            return Err(DecodeError::Inconsistent(
                "target false-positive rate outside (0, 1)",
            ));
        }
        Ok(Self {
            kind,
            layout,
            num_hashes,
            num_bits,
            seed,
            capacity: (capacity != 0).then_some(capacity),
            target_fpr: (target_fpr.to_bits() != 0).then_some(target_fpr),
            num_words,
        })
    }

    /// Bytes of the complete file.
    fn file_len(&self) -> u64 {
        HEADER_LEN as u64 + self.num_words * 8 + TRAILER_LEN as u64
    }

    /// Slots past m in the last word are never set by this crate; set ones mean the file
    /// was not written by it (or was corrupted before its checksum was computed).
    fn check_tail(&self, words: &[u64]) -> Result<(), DecodeError> {
        let used_bits =
            (self.num_bits % self.kind.slots_per_word()) * (64 / self.kind.slots_per_word());
        match words.last() {
            Some(last) if used_bits != 0 && last >> used_bits != 0 => Err(
                DecodeError::Inconsistent("slots set beyond the filter's last slot"),
            ),
            _ => Ok(()),
        }
    }
}

/// A header followed by its word array and a CRC-32C over both.
pub(crate) fn encode_words(header: &Header, words: impl Iterator<Item = u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(header.file_len() as usize);
    out.extend_from_slice(&header.encode());
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    let crc = CRC32C.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// [`encode_words`] streamed to `w` without building the file in memory.
pub(crate) fn write_words<W: Write + ?Sized>(
    w: &mut W,
    header: &Header,
    words: impl Iterator<Item = u64>,
) -> io::Result<()> {
    let mut digest = CRC32C.digest();
    let header = header.encode();
    digest.update(&header);
    w.write_all(&header)?;
    let mut buf = Vec::with_capacity(64 * 1024);
    for word in words {
        buf.extend_from_slice(&word.to_le_bytes());
        if buf.len() == buf.capacity() {
            digest.update(&buf);
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    digest.update(&buf);
    w.write_all(&buf)?;
    w.write_all(&digest.finalize().to_le_bytes())
}

/// Parses exactly `bytes` as a file of `kind`.
pub(crate) fn decode_words(bytes: &[u8], kind: Kind) -> Result<(Header, Vec<u64>), DecodeError> {
    let header = Header::decode(bytes, kind)?;
    let needed = header.file_len();
    let available = bytes.len() as u64;
    if available < needed {
        return Err(DecodeError::Truncated { needed, available });
    }
    if available > needed {
        return Err(DecodeError::TrailingBytes {
            extra: available - needed,
        });
    }
    let body_end = bytes.len() - TRAILER_LEN;
    let stored = u32::from_le_bytes(bytes[body_end..].try_into().unwrap());
    let computed = CRC32C.checksum(&bytes[..body_end]);
    if stored != computed {
        return Err(DecodeError::ChecksumMismatch { stored, computed });
    }
    let words: Vec<u64> = bytes[HEADER_LEN..body_end]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    header.check_tail(&words)?;
    Ok((header, words))
}

/// Reads one file of `kind` from `r`, which must end right after it.
pub(crate) fn read_words<R: Read + ?Sized>(
    r: &mut R,
    kind: Kind,
) -> Result<(Header, Vec<u64>), DecodeError> {
    let mut header_bytes = [0u8; HEADER_LEN];
    let got = read_up_to(r, &mut header_bytes)?;
    let header = Header::decode(&header_bytes[..got], kind)?;
    let needed = header.file_len();
    let mut digest = CRC32C.digest();
    digest.update(&header_bytes);

    let mut words: Vec<u64> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut remaining = header.num_words * 8;
    while remaining > 0 {
        let want = remaining.min(chunk.len() as u64) as usize;
        let got = read_up_to(r, &mut chunk[..want])?;
        if got < want {
            let available = needed - remaining - TRAILER_LEN as u64 + got as u64;
            return Err(DecodeError::Truncated { needed, available });
        }
        digest_words(&mut digest, &chunk[..got], &mut words);
        remaining -= got as u64;
    }
    let mut trailer = [0u8; TRAILER_LEN];
    let got = read_up_to(r, &mut trailer)?;
    if got < TRAILER_LEN {
        return Err(DecodeError::Truncated {
            needed,
            available: needed - (TRAILER_LEN - got) as u64,
        });
    }
    let stored = u32::from_le_bytes(trailer);
    let computed = digest.finalize();
    if stored != computed {
        return Err(DecodeError::ChecksumMismatch { stored, computed });
    }
    if read_up_to(r, &mut [0u8; 1])? != 0 {
        return Err(DecodeError::TrailingBytes { extra: 1 });
    }
    header.check_tail(&words)?;
    Ok((header, words))
}

impl BloomFilter {
    /// The filter in the file format (see `docs/FORMAT.md`). It contains the secret hash
    /// key: store it like a credential.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// let copy = BloomFilter::from_bytes(&f.to_bytes())?;
    /// assert!(copy.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        encode_words(&Header::of(self), self.words())
    }

    /// Writes [`to_bytes`](Self::to_bytes)'s output to `w` without building it in memory.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// let mut file = Vec::new();
    /// f.write_to(&mut file)?;
    /// assert_eq!(file, f.to_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        write_words(w, &Header::of(self), self.words())
    }

    /// Reads a filter from exactly `bytes`; any defect is a distinct [`DecodeError`].
    ///
    /// ```
    /// use bloom_core::{BloomFilter, DecodeError};
    ///
    /// let bytes = BloomFilter::new(1_000, 0.01)?.to_bytes();
    /// assert!(BloomFilter::from_bytes(&bytes).is_ok());
    /// assert!(matches!(
    ///     BloomFilter::from_bytes(&bytes[..100]),
    ///     Err(DecodeError::Truncated { .. })
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (header, words) = decode_words(bytes, Kind::Bits)?;
        Ok(Self::from_header(&header, words))
    }

    /// Reads one filter from `r`, which must hold exactly one filter: bytes after it are an
    /// error ([`DecodeError::TrailingBytes`]). Memory grows only as data arrives, so a
    /// header that claims a huge filter cannot make it allocate more than the input backs.
    ///
    /// ```
    /// use bloom_core::BloomFilter;
    ///
    /// let f = BloomFilter::new(1_000, 0.01)?;
    /// let mut bytes = f.to_bytes();
    /// let copy = BloomFilter::read_from(&mut bytes.as_slice())?;
    /// assert_eq!(copy.num_bits(), f.num_bits());
    /// bytes.push(0);
    /// assert!(BloomFilter::read_from(&mut bytes.as_slice()).is_err()); // trailing byte
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        let (header, words) = read_words(r, Kind::Bits)?;
        Ok(Self::from_header(&header, words))
    }

    fn from_header(header: &Header, words: Vec<u64>) -> Self {
        BloomFilter::from_parts(
            header.layout,
            header.num_bits,
            header.num_hashes,
            KeyHasher::new(header.seed),
            header.capacity,
            header.target_fpr,
            Some(BitVector::from_words(words.into_iter())),
        )
    }
}

fn digest_words(digest: &mut Digest<'_, u32, Table<16>>, bytes: &[u8], words: &mut Vec<u64>) {
    digest.update(bytes);
    words.extend(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
    );
}

/// Fills as much of `buf` as the reader has; returns how much (less than `buf.len()` only at
/// end of input).
pub(crate) fn read_up_to<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
