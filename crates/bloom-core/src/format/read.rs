//! Filling a buffer from a reader that returns less than asked (pipes, sockets, `Take`).

use std::io::{self, Read};

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
