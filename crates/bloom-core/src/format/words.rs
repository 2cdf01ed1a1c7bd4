//! Kinds 0 and 1, a plain or counting filter: the header, the body's 64-bit words, and a
//! CRC-32C over both. A file is exactly `64 + 8·W + 4` bytes.

use std::io::{self, Read, Write};

use super::checksum::{CHECKSUM_LEN, Summed, checksum, digest};
use super::header::{FilterKind, HEADER_LEN, WordsHeader};
use super::{DecodeError, read_up_to};
use crate::bit_vector::{WordElement, WordFill};
use crate::builder::Parts;
use crate::{BloomFilter, CountingBloomFilter};

/// Bytes written or read at a time: a huge filter's body goes through this, never whole.
const CHUNK: usize = 64 * 1024;

/// What a plain or counting filter tells the format about itself: its settings (the header)
/// and its words (the body). The format does the rest.
pub(crate) trait WordBody: Sized {
    /// The kind byte its files carry.
    const KIND: FilterKind;
    /// Slots one 64-bit word holds: W = ceil(m / this).
    const SLOTS_PER_WORD: u64;
    /// What its word array is made of.
    type Element: WordElement;
    /// Its settings.
    fn parts(&self) -> Parts;
    /// Its W words, first to last; slot `i` is in word `i / SLOTS_PER_WORD`, least
    /// significant first, and slots at and above m are 0.
    fn body_words(&self) -> impl Iterator<Item = u64> + '_;
    /// The filter `parts` and `words` describe, both validated (the words all written).
    fn from_body(parts: Parts, words: WordFill<Self::Element>) -> Self;
}

fn header_of<F: WordBody>(filter: &F) -> WordsHeader {
    WordsHeader::new(F::KIND, F::SLOTS_PER_WORD, filter.parts())
}

/// Bytes of the complete file.
fn file_len(header: &WordsHeader) -> u64 {
    (HEADER_LEN + CHECKSUM_LEN) as u64 + header.num_words * 8
}

fn to_bytes<F: WordBody>(filter: &F) -> Vec<u8> {
    let header = header_of(filter);
    let mut out = Vec::with_capacity(file_len(&header) as usize);
    write_words(&mut out, &header, filter.body_words()).expect("a Vec takes every write");
    out
}

/// Writes `filter`'s file to `w` (a scalable filter's stages come through here too).
pub(crate) fn write_to<F: WordBody, W: Write + ?Sized>(filter: &F, w: &mut W) -> io::Result<()> {
    write_words(w, &header_of(filter), filter.body_words())
}

/// Bytes of `filter`'s file, without writing it.
pub(crate) fn encoded_len<F: WordBody>(filter: &F) -> u64 {
    file_len(&header_of(filter))
}

fn write_words<W: Write + ?Sized>(
    w: &mut W,
    header: &WordsHeader,
    words: impl Iterator<Item = u64>,
) -> io::Result<()> {
    let mut out = Summed::new(w);
    out.write_all(&header.encode())?;
    write_body(&mut out, header.num_words, words)?;
    out.finish()
}

/// Writes `num_words` words little-endian, [`CHUNK`] bytes at a time (a plain, counting or
/// cuckoo filter's body).
pub(crate) fn write_body<W: Write + ?Sized>(
    out: &mut W,
    num_words: u64,
    words: impl Iterator<Item = u64>,
) -> io::Result<()> {
    let chunk_len = (num_words as usize * 8).min(CHUNK);
    let mut buf = Vec::with_capacity(chunk_len);
    for word in words {
        buf.extend_from_slice(&word.to_le_bytes());
        if buf.len() >= chunk_len {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

/// Parses exactly `bytes` as a file of `F`'s kind.
pub(crate) fn from_bytes<F: WordBody>(bytes: &[u8]) -> Result<F, DecodeError> {
    let header = WordsHeader::decode(bytes, F::KIND, F::SLOTS_PER_WORD)?;
    let body = body_of(bytes, file_len(&header))?;
    let mut words = word_fill(header.num_words, 0)?;
    words.push_le_bytes(body);
    check_tail::<F>(&header, &words)?;
    Ok(F::from_body(header.parts, words))
}

/// An array for a body of `num_words` words plus `spare` zero words; an error if the
/// allocator refuses it (a header that claims more than this machine can hold).
pub(crate) fn word_fill<T: WordElement>(
    num_words: u64,
    spare: usize,
) -> Result<WordFill<T>, DecodeError> {
    usize::try_from(num_words)
        .ok()
        .and_then(|n| n.checked_add(spare))
        .and_then(WordFill::new)
        .ok_or_else(|| out_of_memory(num_words))
}

/// The allocator refused an array for `num_words` words.
pub(crate) fn out_of_memory(num_words: u64) -> DecodeError {
    DecodeError::Io(io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "cannot allocate the {} bytes the header promises",
            num_words.saturating_mul(8)
        ),
    ))
}

/// The body (the words' bytes) of a file of `header + 8·W + checksum` bytes that must be
/// exactly `needed` long: its length and its checksum checked (for every kind whose body is
/// words).
pub(crate) fn body_of(bytes: &[u8], needed: u64) -> Result<&[u8], DecodeError> {
    let available = bytes.len() as u64;
    if available < needed {
        return Err(DecodeError::Truncated { needed, available });
    }
    if available > needed {
        return Err(DecodeError::TrailingBytes {
            extra: available - needed,
        });
    }
    let body_end = bytes.len() - CHECKSUM_LEN;
    let stored = u32::from_le_bytes(bytes[body_end..].try_into().unwrap());
    let computed = checksum(&bytes[..body_end]);
    if stored != computed {
        return Err(DecodeError::ChecksumMismatch { stored, computed });
    }
    Ok(&bytes[HEADER_LEN..body_end])
}

/// Reads one file of `F`'s kind from `r`, which must end right after it, through
/// [`read_staged`]: a header that claims a huge filter cannot make it take more than the
/// input backs.
fn read_from<F: WordBody, R: Read + ?Sized>(r: &mut R) -> Result<F, DecodeError> {
    let mut header_bytes = [0u8; HEADER_LEN];
    let got = read_up_to(r, &mut header_bytes)?;
    let header = WordsHeader::decode(&header_bytes[..got], F::KIND, F::SLOTS_PER_WORD)?;
    let words = read_staged(r, &header_bytes, header.num_words, file_len(&header), 0)?;
    check_tail::<F>(&header, &words)?;
    Ok(F::from_body(header.parts, words))
}

/// Bytes of the largest staging buffer: glibc's largest `mmap` threshold, so each full one
/// is its own mapping and freeing it gives its pages back at once.
const STAGE: u64 = 32 << 20;
/// Bytes of the first staging buffer; each later one is as large as all before it together,
/// up to [`STAGE`].
const FIRST_STAGE: u64 = CHUNK as u64;

/// Reads a body like [`read_body`] into the filter's word array (plus `spare` zero words).
///
/// Rule: nothing is allocated for words that have not arrived beyond what arrived already.
/// The words are staged in buffers allocated as they arrive, the first of 64 KiB and each
/// later one as large as all before it (at most [`STAGE`]); once the whole array is at most
/// twice what arrived (at a buffer's end), it is allocated, the buffers are moved into it
/// and freed one by one, and the rest is read straight into it. So while `L` bytes have been
/// read the reader holds at most `3·L` bytes of words plus the 64 KiB read chunk, whatever
/// the header claims (`tests/crafted_files.rs`
/// `plain_and_counting_files_claiming_huge_sizes_are_refused`, `tests/format.rs`
/// `a_huge_claimed_size_with_a_tiny_body_is_truncated_without_allocating_it`). The array is
/// allocated uninitialised and takes its pages as the words are written, so the resident
/// peak while loading is the filter plus at most a buffer and what the allocator keeps of
/// the smaller ones, not twice the filter (`tests/load_memory.rs`
/// `loading_takes_the_filter_and_one_buffer`).
pub(crate) fn read_staged<T: WordElement, R: Read + ?Sized>(
    r: &mut R,
    header_bytes: &[u8; HEADER_LEN],
    num_words: u64,
    needed: u64,
    spare: usize,
) -> Result<WordFill<T>, DecodeError> {
    let total = num_words * 8;
    let mut staged = 0u64;
    let mut stages: Vec<Vec<u8>> = Vec::new();
    let mut words: Result<Option<WordFill<T>>, DecodeError> = Ok(None);
    read_body(r, header_bytes, num_words, needed, |mut body| {
        while !body.is_empty() {
            match &mut words {
                Ok(Some(words)) => return words.push_le_bytes(body),
                Err(_) => return,
                Ok(None) => {}
            }
            if stages.last().is_none_or(|s| s.len() == s.capacity()) {
                // Every buffer is full: `staged` bytes arrived.
                if total <= 2 * staged {
                    words = word_fill(num_words, spare).map(|mut array| {
                        for stage in stages.drain(..) {
                            array.push_le_bytes(&stage);
                        }
                        Some(array)
                    });
                    continue;
                }
                let len = (total - staged).min(STAGE).min(staged.max(FIRST_STAGE));
                stages.push(Vec::with_capacity(len as usize));
            }
            let stage = stages.last_mut().expect("pushed above");
            let take = (stage.capacity() - stage.len()).min(body.len());
            stage.extend_from_slice(&body[..take]);
            staged += take as u64;
            body = &body[take..];
        }
    })?;
    if let Some(words) = words? {
        return Ok(words);
    }
    let mut words = word_fill(num_words, spare)?;
    for stage in stages {
        words.push_le_bytes(&stage);
    }
    Ok(words)
}

/// Reads one plain filter's file from `r`, which must end right after it, and checks its
/// header, length and checksum without keeping its bits (a windowed file's expired
/// generations).
pub(crate) fn check_plain_file<R: Read + ?Sized>(r: &mut R) -> Result<(), DecodeError> {
    let mut header_bytes = [0u8; HEADER_LEN];
    let got = read_up_to(r, &mut header_bytes)?;
    let header = WordsHeader::decode(
        &header_bytes[..got],
        BloomFilter::KIND,
        BloomFilter::SLOTS_PER_WORD,
    )?;
    read_body(
        r,
        &header_bytes,
        header.num_words,
        file_len(&header),
        |_| {},
    )
}

/// Reads the `num_words` words after `header_bytes` (already read from `r`), handing them
/// to `each` a chunk of whole words at a time, then the checksum of both, and nothing after
/// it; `needed` is the whole file's length, for the errors. The words are only good once
/// this returns `Ok`: the checksum comes last.
pub(crate) fn read_body<R: Read + ?Sized>(
    r: &mut R,
    header_bytes: &[u8; HEADER_LEN],
    num_words: u64,
    needed: u64,
    mut each: impl FnMut(&[u8]),
) -> Result<(), DecodeError> {
    let mut digest = digest();
    digest.update(header_bytes);
    let mut remaining = num_words * 8;
    let mut chunk = vec![0u8; remaining.min(CHUNK as u64) as usize];
    while remaining > 0 {
        let want = remaining.min(chunk.len() as u64) as usize;
        let got = read_up_to(r, &mut chunk[..want])?;
        if got < want {
            let available = needed - remaining - CHECKSUM_LEN as u64 + got as u64;
            return Err(DecodeError::Truncated { needed, available });
        }
        digest.update(&chunk[..got]);
        each(&chunk[..got]);
        remaining -= got as u64;
    }
    let mut trailer = [0u8; CHECKSUM_LEN];
    let got = read_up_to(r, &mut trailer)?;
    if got < CHECKSUM_LEN {
        return Err(DecodeError::Truncated {
            needed,
            available: needed - (CHECKSUM_LEN - got) as u64,
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
    Ok(())
}

/// Slots past m in the last word are never set by this crate; set ones mean the file was not
/// written by it (or was corrupted before its checksum was computed).
fn check_tail<F: WordBody>(
    header: &WordsHeader,
    words: &WordFill<F::Element>,
) -> Result<(), DecodeError> {
    let used_bits = (header.parts.slots % F::SLOTS_PER_WORD) * (64 / F::SLOTS_PER_WORD);
    match words.last() {
        Some(last) if used_bits != 0 && last >> used_bits != 0 => Err(DecodeError::Inconsistent(
            "slots set beyond the filter's last slot",
        )),
        _ => Ok(()),
    }
}

/// A [`WordBody`] filter's `to_bytes`, `write_to`, `from_bytes` and `read_from`, the file
/// functions above as inherent methods, each with the rustdoc written before its name.
macro_rules! file_methods {
    ($($(#[$attr:meta])* $name:ident;)*) => {
        $(file_methods!(@one $name $(#[$attr])*);)*
    };
    (@one to_bytes $(#[$attr:meta])*) => {
        $(#[$attr])*
        pub fn to_bytes(&self) -> Vec<u8> {
            to_bytes(self)
        }
    };
    (@one write_to $(#[$attr:meta])*) => {
        $(#[$attr])*
        pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
            write_to(self, w)
        }
    };
    (@one from_bytes $(#[$attr:meta])*) => {
        $(#[$attr])*
        pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
            from_bytes(bytes)
        }
    };
    (@one read_from $(#[$attr:meta])*) => {
        $(#[$attr])*
        pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
            read_from(r)
        }
    };
}

impl BloomFilter {
    file_methods! {
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
        to_bytes;

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
        write_to;

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
        from_bytes;

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
        read_from;
    }
}

impl CountingBloomFilter {
    file_methods! {
        /// The filter in the file format, kind "counting" (see `docs/FORMAT.md`).
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// f.insert("a");
        /// let copy = CountingBloomFilter::from_bytes(&f.to_bytes())?;
        /// assert!(copy.contains("a"));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        to_bytes;

        /// Writes [`to_bytes`](Self::to_bytes)'s output to `w`.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// let mut file = Vec::new();
        /// f.write_to(&mut file)?;
        /// assert_eq!(file, f.to_bytes());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        write_to;

        /// Reads a counting filter from exactly `bytes`.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// f.insert("a");
        /// let copy = CountingBloomFilter::from_bytes(&f.to_bytes())?;
        /// assert!(copy.remove("a"));
        /// // A plain filter's file is refused: it has no counters.
        /// let plain = bloom_core::BloomFilter::new(1_000, 0.01)?;
        /// assert!(CountingBloomFilter::from_bytes(&plain.to_bytes()).is_err());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        from_bytes;

        /// Reads one counting filter from `r`, which must end right after it.
        ///
        /// ```
        /// use bloom_core::CountingBloomFilter;
        ///
        /// let f = CountingBloomFilter::new(1_000, 0.01)?;
        /// let bytes = f.to_bytes();
        /// let copy = CountingBloomFilter::read_from(&mut bytes.as_slice())?;
        /// assert_eq!(copy.num_slots(), f.num_slots());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        read_from;
    }
}
