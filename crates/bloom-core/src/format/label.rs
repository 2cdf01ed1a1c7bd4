//! A snapshot: a short label (its own magic, version and length, the label's fields, a
//! CRC-32C) in front of a filter file of any kind, unchanged.

use std::io::{self, Read, Write};

use super::checksum::{CHECKSUM_LEN, Summed, digest};
use super::{DecodeError, read_up_to};
use crate::{AnyFilter, Snapshot, SnapshotLabel};

/// The first eight bytes of a snapshot file (a filter file starts with [`MAGIC`]). Built the
/// same way: `L` for label where the filter file has `M`.
///
/// [`MAGIC`]: crate::MAGIC
pub const SNAPSHOT_MAGIC: [u8; 8] = [0x89, b'B', b'L', b'S', b'\r', b'\n', 0x1A, b'\n'];

/// The label version this crate writes.
const LABEL_VERSION: u16 = 1;
/// Bytes after the magic before the label's fields: the version and the length.
const FIXED_LEN: usize = 6;
/// The magic, the version and the length.
const PREFIX_LEN: usize = SNAPSHOT_MAGIC.len() + FIXED_LEN;
/// The longest label a reader accepts: a name and a watermark are small; a length beyond this
/// is a damaged file, not a reason to allocate.
const MAX_LABEL_LEN: u32 = 1 << 20;
/// The longest name stored.
const MAX_NAME_LEN: usize = u16::MAX as usize;

/// The label's length from the version and length fields, refusing an unknown version or a
/// length beyond [`MAX_LABEL_LEN`].
fn label_len(fixed: &[u8; FIXED_LEN]) -> Result<u32, DecodeError> {
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
    Ok(len)
}

/// Bytes of the label in front of the filter, checksum included, if `bytes` starts with
/// one; `None` for a bare filter file. The label's fields and checksum are not read.
pub(crate) fn peek_label_len(bytes: &[u8]) -> Result<Option<u64>, DecodeError> {
    if !bytes.starts_with(&SNAPSHOT_MAGIC) {
        return Ok(None);
    }
    let Some(fixed) = bytes.get(SNAPSHOT_MAGIC.len()..PREFIX_LEN) else {
        return Err(DecodeError::Truncated {
            needed: (PREFIX_LEN + CHECKSUM_LEN) as u64,
            available: bytes.len() as u64,
        });
    };
    let len = label_len(fixed.try_into().unwrap())?;
    Ok(Some((PREFIX_LEN + CHECKSUM_LEN) as u64 + u64::from(len)))
}

/// Writes the label's fields, after checking they fit, with its magic, version, length and
/// checksum.
fn write_label<W: Write + ?Sized>(w: &mut W, label: &SnapshotLabel) -> io::Result<()> {
    let name = label.name.as_bytes();
    if name.len() > MAX_NAME_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a snapshot's filter name is at most 65,535 bytes",
        ));
    }
    let watermark = label.watermark.as_deref();
    let len = 8 + 2 + name.len() + 1 + watermark.map_or(0, |w| 4 + w.len());
    if len > MAX_LABEL_LEN as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a snapshot's label (name and watermark) is at most 1 MiB",
        ));
    }
    let mut out = Summed::new(w);
    out.write_all(&SNAPSHOT_MAGIC)?;
    out.write_all(&LABEL_VERSION.to_le_bytes())?;
    out.write_all(&(len as u32).to_le_bytes())?;
    out.write_all(&label.saved_at_unix_ms.to_le_bytes())?;
    out.write_all(&(name.len() as u16).to_le_bytes())?;
    out.write_all(name)?;
    match watermark {
        None => out.write_all(&[0])?,
        Some(watermark) => {
            out.write_all(&[1])?;
            out.write_all(&(watermark.len() as u32).to_le_bytes())?;
            out.write_all(watermark)?;
        }
    }
    out.finish()
}

/// The label's fields, which must fill `body` exactly.
fn decode_label(mut body: &[u8]) -> Result<SnapshotLabel, DecodeError> {
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
    Ok(SnapshotLabel {
        name,
        watermark,
        saved_at_unix_ms,
    })
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
        write_label(w, label)?;
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
        let mut magic = [0u8; SNAPSHOT_MAGIC.len()];
        let got = read_up_to(r, &mut magic)?;
        if got < magic.len() || magic != SNAPSHOT_MAGIC {
            // A bare filter file (or garbage, which the filter decoder names).
            let mut whole = io::Cursor::new(&magic[..got]).chain(r);
            return Ok(Self {
                label: None,
                filter: AnyFilter::read_from(&mut whole)?,
            });
        }
        let mut fixed = [0u8; FIXED_LEN];
        if read_up_to(r, &mut fixed)? < fixed.len() {
            return Err(DecodeError::Truncated {
                needed: (PREFIX_LEN + CHECKSUM_LEN) as u64,
                available: (SNAPSHOT_MAGIC.len() + got) as u64,
            });
        }
        let len = label_len(&fixed)? as usize;
        // Grown as the bytes arrive: a label that claims 1 MiB in a short file allocates
        // what the file holds (`tests/crafted_files.rs`
        // `a_snapshot_label_claiming_a_megabyte_allocates_what_arrives`).
        let mut body = Vec::new();
        let read = (&mut *r)
            .take((len + CHECKSUM_LEN) as u64)
            .read_to_end(&mut body)?;
        if read < len + CHECKSUM_LEN {
            return Err(DecodeError::Truncated {
                needed: (PREFIX_LEN + len + CHECKSUM_LEN) as u64,
                available: (PREFIX_LEN + read) as u64,
            });
        }
        let stored = u32::from_le_bytes(body[len..].try_into().unwrap());
        body.truncate(len);
        let mut digest = digest();
        digest.update(&magic);
        digest.update(&fixed);
        digest.update(&body);
        let computed = digest.finalize();
        if stored != computed {
            return Err(DecodeError::ChecksumMismatch { stored, computed });
        }
        let label = decode_label(&body)?;
        let filter = AnyFilter::read_from(r)?;
        Ok(Self {
            label: Some(label),
            filter,
        })
    }
}
