//! The one checksum: a CRC-32C (Castagnoli, the iSCSI polynomial), stored little-endian
//! after what it covers. It ends every container: a plain or counting filter, a scalable
//! filter (whose stages carry their own as well), and a snapshot's label.

use std::io::{self, Write};

use crc::{CRC_32_ISCSI, Crc, Table};

/// Bytes of a stored checksum.
pub(crate) const CHECKSUM_LEN: usize = 4;

/// Slice-by-16 tables: most of what it sums is a large filter's words.
static CRC32C: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);

/// A checksum being computed piece by piece.
pub(crate) type Digest = crc::Digest<'static, u32, Table<16>>;

/// The checksum of `bytes`.
pub(crate) fn checksum(bytes: &[u8]) -> u32 {
    CRC32C.checksum(bytes)
}

/// A digest to feed a container's bytes as they are read.
pub(crate) fn digest() -> Digest {
    CRC32C.digest()
}

/// Passes everything written on to `inner` and checksums it on the way, so a container is
/// written as it is produced; [`finish`](Self::finish) appends the checksum.
pub(crate) struct Summed<'w, W: Write + ?Sized> {
    inner: &'w mut W,
    digest: Digest,
}

impl<'w, W: Write + ?Sized> Summed<'w, W> {
    pub(crate) fn new(inner: &'w mut W) -> Self {
        Self {
            inner,
            digest: digest(),
        }
    }

    /// Writes the checksum of everything written so far.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.inner.write_all(&self.digest.finalize().to_le_bytes())
    }
}

impl<W: Write + ?Sized> Write for Summed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.digest.update(&buf[..n]);
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.digest.update(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
