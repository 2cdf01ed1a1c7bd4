//! Kind 4 split in files: a windowed filter as a small **manifest** (the kind-4 file with bit
//! 9 of its first field set, each generation stored as its length and its own file's
//! checksum) and one kind-0 file per generation holding keys, named after its epoch and
//! checksum ([`GenerationFile::file_name`]).
//!
//! A generation's file never changes once written: a run that inserts only into the newest
//! generation (a crawler restarted every hour) writes that one file and a new manifest, and
//! names the others again. Rules for a writer (what `bloom dedup --window --state` does):
//! write and sync the generations' files first, then replace the manifest atomically, and
//! only then remove the files it no longer names; a reader of either manifest then finds
//! every file it names. A reader checks each file's checksum against the manifest, so a
//! file of another state or another write is refused.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::sync::Arc;

use super::DecodeError;
use super::checksum::CHECKSUM_LEN;
use super::windowed::{Container, read_windowed};
use crate::windowed::Clock;
use crate::{BloomFilter, WindowedFilter};

/// One generation of a windowed filter stored in a file of its own, as a manifest names it:
/// the newest epoch it holds and its file's checksum (the file's last four bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GenerationFile {
    /// The epoch whose keys the generation holds (`⌊ms since the Unix epoch / T⌋`, or
    /// `⌊inserts / T⌋`).
    pub epoch: u64,
    /// The CRC-32C that ends the generation's file.
    pub checksum: u32,
}

impl GenerationFile {
    /// The file's name beside a manifest named `manifest`: `<manifest>.g<epoch>-<checksum
    /// as 8 lowercase hex digits>`.
    ///
    /// ```
    /// use bloom_core::windowed::GenerationFile;
    ///
    /// let file = GenerationFile { epoch: 225_003, checksum: 0x0badcafe };
    /// assert_eq!(file.file_name("seen.bloom".as_ref()), "seen.bloom.g225003-0badcafe");
    /// assert_eq!(GenerationFile::parse("seen.bloom".as_ref(), "seen.bloom.g225003-0badcafe".as_ref()), Some(file));
    /// ```
    pub fn file_name(&self, manifest: &OsStr) -> OsString {
        let mut name = manifest.to_owned();
        name.push(format!(".g{}-{:08x}", self.epoch, self.checksum));
        name
    }

    /// The generation a file named `name` holds, if it is named as a generation of the
    /// manifest `manifest` ([`file_name`](Self::file_name)'s inverse).
    ///
    /// ```
    /// use bloom_core::windowed::GenerationFile;
    ///
    /// assert_eq!(GenerationFile::parse("a".as_ref(), "b.g1-00000000".as_ref()), None);
    /// assert_eq!(GenerationFile::parse("a".as_ref(), "a.g1-0000000".as_ref()), None);
    /// ```
    pub fn parse(manifest: &OsStr, name: &OsStr) -> Option<Self> {
        let rest = name
            .as_encoded_bytes()
            .strip_prefix(manifest.as_encoded_bytes())?
            .strip_prefix(b".g")?;
        let rest = std::str::from_utf8(rest).ok()?;
        let (epoch, checksum) = rest.split_once('-')?;
        let digits = |s: &str, radix: u32| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_digit(radix) && !c.is_ascii_uppercase())
        };
        if !digits(epoch, 10) || checksum.len() != 8 || !digits(checksum, 16) {
            return None;
        }
        let file = Self {
            epoch: epoch.parse().ok()?,
            checksum: u32::from_str_radix(checksum, 16).ok()?,
        };
        // One spelling per file: no leading zeros in the epoch.
        (file.file_name(manifest) == name).then_some(file)
    }
}

impl WindowedFilter {
    /// The epochs whose generations hold keys, newest first: the generations a manifest
    /// names, each written by [`write_generation_to`](Self::write_generation_to).
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?;
    /// assert!(f.epochs_with_keys().is_empty());
    /// f.insert("a");
    /// assert_eq!(f.epochs_with_keys(), [0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn epochs_with_keys(&self) -> Vec<u64> {
        let ring = self.ring_len() as u64;
        let epoch = self.epoch();
        (0..ring)
            .filter_map(|back| {
                let e = epoch.checked_sub(back)?;
                self.ring_has_keys((e % ring) as usize).then_some(e)
            })
            .collect()
    }

    /// Writes epoch `epoch`'s generation to `w` as a plain filter's file (kind 0), and
    /// returns how a manifest names it. An epoch whose generation holds no key is an
    /// `InvalidInput` error. Write it while no insert runs, as [`write_to`](Self::write_to).
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let mut file = Vec::new();
    /// let named = f.write_generation_to(0, &mut file)?;
    /// assert_eq!(named.checksum.to_le_bytes(), file[file.len() - 4..]);
    /// assert!(bloom_core::BloomFilter::from_bytes(&file)?.contains("a"));
    /// assert!(f.write_generation_to(1, &mut Vec::new()).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_generation_to<W: Write + ?Sized>(
        &self,
        epoch: u64,
        w: &mut W,
    ) -> io::Result<GenerationFile> {
        let ring = self.ring_len() as u64;
        let generation = self
            .epochs_with_keys()
            .contains(&epoch)
            .then(|| self.ring_written((epoch % ring) as usize))
            .flatten()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("epoch {epoch}'s generation holds no key"),
                )
            })?;
        let mut tail = Tail::new(w);
        super::words::write_to(&*generation, &mut tail)?;
        Ok(GenerationFile {
            epoch,
            checksum: u32::from_le_bytes(tail.last),
        })
    }

    /// Writes the manifest to `w`: the header, the newest epoch and insert count, and for
    /// each generation holding keys its length and the checksum of its file in `files`
    /// (each written by [`write_generation_to`](Self::write_generation_to), now or by an
    /// earlier save while that generation was not written to since). A generation with
    /// keys and no file in `files` is an `InvalidInput` error.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bloom_core::windowed::{SystemClock, Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let mut generation = Vec::new();
    /// let named = f.write_generation_to(0, &mut generation)?;
    /// let mut manifest = Vec::new();
    /// f.write_split_to(&mut manifest, &[named])?;
    /// let (copy, files) = WindowedFilter::read_split_with_clock(
    ///     &mut manifest.as_slice(),
    ///     Arc::new(SystemClock),
    ///     |_file| Ok(generation.as_slice()),
    /// )?;
    /// assert!(copy.contains("a") && files == [named]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_split_to<W: Write + ?Sized>(
        &self,
        w: &mut W,
        files: &[GenerationFile],
    ) -> io::Result<()> {
        let mut out = Container::start(self, true, w)?;
        let with_keys = self.epochs_with_keys();
        let ring = self.ring_len() as u64;
        for i in 0..self.ring_len() {
            let (Some(&epoch), Some(generation)) = (
                with_keys.iter().find(|&&e| e % ring == i as u64),
                self.ring_written(i),
            ) else {
                out.put(&0u64.to_le_bytes())?;
                continue;
            };
            let file = files.iter().find(|f| f.epoch == epoch).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("no file given for epoch {epoch}'s generation"),
                )
            })?;
            out.put(&super::words::encoded_len(&*generation).to_le_bytes())?;
            out.put(&file.checksum.to_le_bytes())?;
        }
        out.finish()
    }

    /// Reads a manifest from `r` (which must end right after it) on `clock`, opening each
    /// generation still inside the window with `open`; also returns the files it read.
    /// A generation file that cannot be opened or read, or whose checksum is not the
    /// manifest's, is refused as [`DecodeError::Generation`], the reason its source. A windowed filter's single file is read too (no
    /// generation is opened; the list is empty).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bloom_core::windowed::{SystemClock, Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let whole = f.to_bytes();
    /// let (copy, files) = WindowedFilter::read_split_with_clock(
    ///     &mut whole.as_slice(),
    ///     Arc::new(SystemClock),
    ///     |_file| Ok(&[][..]),
    /// )?;
    /// assert!(copy.contains("a") && files.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_split_with_clock<R, G>(
        r: &mut R,
        clock: Arc<dyn Clock>,
        mut open: impl FnMut(&GenerationFile) -> io::Result<G>,
    ) -> Result<(Self, Vec<GenerationFile>), DecodeError>
    where
        R: Read + ?Sized,
        G: Read,
    {
        read_windowed(r, clock, &mut |file| {
            let read = |open: &mut dyn FnMut(&GenerationFile) -> io::Result<G>| {
                let mut tail = Tail::new(open(&file)?);
                let generation = BloomFilter::read_from(&mut tail)?;
                if u32::from_le_bytes(tail.last) != file.checksum {
                    return Err(DecodeError::Inconsistent(
                        "a generation's file is not the one the manifest names",
                    ));
                }
                Ok(generation)
            };
            read(&mut open).map_err(|source| DecodeError::Generation {
                epoch: file.epoch,
                source: Box::new(source),
            })
        })
    }
}

/// A reader or writer that remembers the last four bytes through it: a file's checksum.
struct Tail<T> {
    inner: T,
    last: [u8; CHECKSUM_LEN],
}

impl<T> Tail<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            last: [0; CHECKSUM_LEN],
        }
    }

    fn remember(&mut self, bytes: &[u8]) {
        if bytes.len() >= CHECKSUM_LEN {
            self.last
                .copy_from_slice(&bytes[bytes.len() - CHECKSUM_LEN..]);
        } else {
            self.last.rotate_left(bytes.len());
            self.last[CHECKSUM_LEN - bytes.len()..].copy_from_slice(bytes);
        }
    }
}

impl<R: Read> Read for Tail<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.remember(&buf[..n]);
        Ok(n)
    }
}

impl<W: Write + ?Sized> Write for Tail<&mut W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.remember(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
