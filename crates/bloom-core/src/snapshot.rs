//! Snapshot files: a filter file of any kind behind a short, checksummed label that says what
//! the filter is valid for (its name, and how far into its source it is complete).
//!
//! A service that restarts from a snapshot must not serve a filter that misses keys created
//! while it was down. The label's *watermark* is the position in the source (an opaque value
//! the source hands out: a highest id, a timestamp, a log offset) up to which every key is in
//! the filter, so a restart can read only the keys changed since and catch up before serving.
//! `docs/FORMAT.md` documents the label byte by byte.

use std::io::{self, Read, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use crc::{CRC_32_ISCSI, Crc};

use crate::AnyFilter;
use crate::format::{DecodeError, read_up_to};

/// The first eight bytes of a snapshot file (a filter file starts with [`MAGIC`]). Built the
/// same way: `L` for label where the filter file has `M`.
///
/// [`MAGIC`]: crate::MAGIC
pub const SNAPSHOT_MAGIC: [u8; 8] = [0x89, b'B', b'L', b'S', b'\r', b'\n', 0x1A, b'\n'];

/// The label version this crate writes.
const LABEL_VERSION: u16 = 1;
/// The longest label a reader accepts: a name and a watermark are small; a length beyond this
/// is a damaged file, not a reason to allocate.
const MAX_LABEL_LEN: u32 = 1 << 20;
/// The longest name stored.
const MAX_NAME_LEN: usize = u16::MAX as usize;

static CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// What a snapshot says about its filter, besides the filter itself.
///
/// ```
/// use bloom_core::SnapshotLabel;
///
/// let label = SnapshotLabel::new("users").with_watermark(1_042u64.to_le_bytes().to_vec());
/// assert_eq!(label.name, "users");
/// assert_eq!(label.watermark.as_deref(), Some(&1_042u64.to_le_bytes()[..]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotLabel {
    /// The name of the filter that was saved (a service keeps one snapshot per filter).
    pub name: String,
    /// The source position up to which every key is in the filter, if known; `None`: the
    /// filter cannot be caught up, only rebuilt.
    pub watermark: Option<Vec<u8>>,
    /// When the snapshot was written, in milliseconds since the Unix epoch.
    pub saved_at_unix_ms: u64,
}

impl SnapshotLabel {
    /// A label for the filter `name`, saved now, with no watermark.
    ///
    /// ```
    /// let label = bloom_core::SnapshotLabel::new("users");
    /// assert!(label.watermark.is_none() && label.saved_at_unix_ms > 0);
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        let saved_at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        Self {
            name: name.into(),
            watermark: None,
            saved_at_unix_ms,
        }
    }

    /// The same label with `watermark`.
    ///
    /// ```
    /// let label = bloom_core::SnapshotLabel::new("users").with_watermark(vec![7]);
    /// assert_eq!(label.watermark, Some(vec![7]));
    /// ```
    pub fn with_watermark(mut self, watermark: Vec<u8>) -> Self {
        self.watermark = Some(watermark);
        self
    }

    fn encode(&self) -> io::Result<Vec<u8>> {
        let name = self.name.as_bytes();
        if name.len() > MAX_NAME_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a snapshot's filter name is at most 65,535 bytes",
            ));
        }
        let watermark = self.watermark.as_deref();
        let mut body = Vec::with_capacity(16 + name.len() + watermark.map_or(0, <[u8]>::len));
        body.extend_from_slice(&self.saved_at_unix_ms.to_le_bytes());
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name);
        match watermark {
            None => body.push(0),
            Some(watermark) => {
                body.push(1);
                body.extend_from_slice(&(watermark.len() as u32).to_le_bytes());
                body.extend_from_slice(watermark);
            }
        }
        if body.len() > MAX_LABEL_LEN as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a snapshot's label (name and watermark) is at most 1 MiB",
            ));
        }
        Ok(body)
    }

    fn decode(mut body: &[u8]) -> Result<Self, DecodeError> {
        let saved_at_unix_ms = u64::from_le_bytes(take(&mut body, 8)?.try_into().unwrap());
        let name_len = u16::from_le_bytes(take(&mut body, 2)?.try_into().unwrap());
        let name = std::str::from_utf8(take(&mut body, name_len.into())?)
            .map_err(|_| DecodeError::Inconsistent("the snapshot's filter name is not UTF-8"))?
            .to_owned();
        let watermark = match take(&mut body, 1)?[0] {
            0 => None,
            1 => {
                let len = u32::from_le_bytes(take(&mut body, 4)?.try_into().unwrap());
                Some(take(&mut body, len as usize)?.to_vec())
            }
            _ => {
                return Err(DecodeError::Inconsistent(
                    "bad watermark flag in the snapshot",
                ));
            }
        };
        if !body.is_empty() {
            return Err(DecodeError::Inconsistent(
                "the snapshot's label is longer than its fields",
            ));
        }
        Ok(Self {
            name,
            watermark,
            saved_at_unix_ms,
        })
    }
}

fn take<'a>(body: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if body.len() < n {
        return Err(DecodeError::Inconsistent(
            "the snapshot's label is shorter than its fields",
        ));
    }
    let (head, rest) = body.split_at(n);
    *body = rest;
    Ok(head)
}

/// A filter read back from a snapshot file, with its label (`None` for a bare filter file,
/// which every reader of snapshots also accepts).
#[derive(Debug)]
#[non_exhaustive]
pub struct Snapshot {
    /// What the file says the filter is valid for; `None` for a bare filter file.
    pub label: Option<SnapshotLabel>,
    /// The filter.
    pub filter: AnyFilter,
}

impl Snapshot {
    /// Writes `label` then `filter` (in its own file format) to `w`, streaming the filter's
    /// words.
    ///
    /// ```
    /// use bloom_core::{AnyFilter, BloomFilter, Snapshot, SnapshotLabel};
    ///
    /// let filter = AnyFilter::from(BloomFilter::new(1_000, 0.01)?);
    /// filter.insert("ada");
    /// let mut file = Vec::new();
    /// Snapshot::write(&mut file, &SnapshotLabel::new("users"), &filter)?;
    /// let read = Snapshot::read_from(&mut file.as_slice())?;
    /// assert_eq!(read.label.unwrap().name, "users");
    /// assert!(read.filter.contains("ada"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Those of `w`, and [`io::ErrorKind::InvalidInput`] for a name over 64 KiB or a label
    /// over 1 MiB.
    pub fn write<W: Write + ?Sized>(
        w: &mut W,
        label: &SnapshotLabel,
        filter: &AnyFilter,
    ) -> io::Result<()> {
        let body = label.encode()?;
        let mut head = Vec::with_capacity(14 + body.len() + 4);
        head.extend_from_slice(&SNAPSHOT_MAGIC);
        head.extend_from_slice(&LABEL_VERSION.to_le_bytes());
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        head.extend_from_slice(&body);
        let checksum = CRC32C.checksum(&head);
        head.extend_from_slice(&checksum.to_le_bytes());
        w.write_all(&head)?;
        filter.write_to(w)
    }

    /// Reads a snapshot file, or a bare filter file of any kind, from `r`, which must end
    /// right after it. A damaged label is refused like a damaged filter.
    ///
    /// ```
    /// use bloom_core::{BloomFilter, Snapshot};
    ///
    /// let bare = BloomFilter::new(1_000, 0.01)?.to_bytes();
    /// let read = Snapshot::read_from(&mut bare.as_slice())?;
    /// assert!(read.label.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        let mut magic = [0u8; 8];
        let got = read_up_to(r, &mut magic)?;
        if got < magic.len() || magic != SNAPSHOT_MAGIC {
            // A bare filter file (or garbage, which the filter decoder names).
            let mut whole = io::Cursor::new(&magic[..got]).chain(r);
            return Ok(Self {
                label: None,
                filter: AnyFilter::read_from(&mut whole)?,
            });
        }
        let mut fixed = [0u8; 6];
        if read_up_to(r, &mut fixed)? < fixed.len() {
            return Err(DecodeError::Truncated {
                needed: 18,
                available: (8 + got) as u64,
            });
        }
        let version = u16::from_le_bytes([fixed[0], fixed[1]]);
        if version != LABEL_VERSION {
            return Err(DecodeError::UnsupportedVersion { found: version });
        }
        let len = u32::from_le_bytes(fixed[2..6].try_into().unwrap());
        if len > MAX_LABEL_LEN {
            return Err(DecodeError::Inconsistent(
                "the snapshot's label claims more than 1 MiB",
            ));
        }
        let mut body = vec![0u8; len as usize + 4];
        let read = read_up_to(r, &mut body)?;
        if read < body.len() {
            return Err(DecodeError::Truncated {
                needed: 14 + body.len() as u64,
                available: 14 + read as u64,
            });
        }
        let stored = u32::from_le_bytes(body[len as usize..].try_into().unwrap());
        body.truncate(len as usize);
        let mut digest = CRC32C.digest();
        digest.update(&magic);
        digest.update(&fixed);
        digest.update(&body);
        let computed = digest.finalize();
        if stored != computed {
            return Err(DecodeError::ChecksumMismatch { stored, computed });
        }
        let label = SnapshotLabel::decode(&body)?;
        let filter = AnyFilter::read_from(r)?;
        Ok(Self {
            label: Some(label),
            filter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BloomFilter, CountingBloomFilter};

    fn labelled() -> (Vec<u8>, AnyFilter) {
        let filter = AnyFilter::from(
            CountingBloomFilter::builder()
                .expected_items(100)
                .false_positive_rate(0.01)
                .seed(9)
                .build()
                .unwrap(),
        );
        filter.insert(&5u64);
        let label = SnapshotLabel::new("users").with_watermark(vec![1, 2, 3]);
        let mut bytes = Vec::new();
        Snapshot::write(&mut bytes, &label, &filter).unwrap();
        (bytes, filter)
    }

    #[test]
    fn a_labelled_snapshot_round_trips() {
        let (bytes, filter) = labelled();
        let read = Snapshot::read_from(&mut bytes.as_slice()).unwrap();
        let label = read.label.unwrap();
        assert_eq!(
            (label.name.as_str(), label.watermark),
            ("users", Some(vec![1, 2, 3]))
        );
        assert_eq!(read.filter.to_bytes(), filter.to_bytes());
        assert_eq!(read.filter.kind(), "counting");
    }

    #[test]
    fn every_damage_to_the_label_is_refused() {
        let (bytes, _) = labelled();
        let label_end = 14 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize + 4;
        for cut in 0..label_end {
            let result = Snapshot::read_from(&mut &bytes[..cut]);
            assert!(
                result.is_err(),
                "a snapshot cut at {cut} bytes was accepted"
            );
        }
        for at in 8..label_end {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                Snapshot::read_from(&mut damaged.as_slice()).is_err(),
                "a flipped bit at byte {at} was accepted"
            );
        }
    }

    #[test]
    fn a_huge_label_length_is_refused_without_allocating_it() {
        let (mut bytes, _) = labelled();
        bytes[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        let error = Snapshot::read_from(&mut bytes.as_slice()).unwrap_err();
        assert!(error.to_string().contains("1 MiB"), "{error}");
    }

    #[test]
    fn a_bare_filter_file_reads_with_no_label() {
        let filter = BloomFilter::new(100, 0.01).unwrap();
        let read = Snapshot::read_from(&mut filter.to_bytes().as_slice()).unwrap();
        assert!(read.label.is_none());
        assert!(Snapshot::read_from(&mut &b"not a filter"[..]).is_err());
    }
}
