//! Reading keys: one per line, LF or CR LF, from files or standard input.
//!
//! Input is read in large chunks straight into one reused buffer and split in place, so
//! there is no allocation or copy per line, and the commands get the keys in batches (which
//! lets them use the filter's prefetching batch forms).
//! A key is the raw bytes of its line without the line ending: `\n`, or `\r\n`, and a
//! final line without a newline counts too. Bytes need not be UTF-8.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};

/// Bytes read at a time. Large enough that system calls cost nothing per line, small
/// enough that a chunk stays in the L2 cache while its lines are hashed and copied out.
pub const CHUNK: usize = 256 * 1024;

/// An `io::Error`'s message without the `(os error N)` suffix (and anything a wrapper
/// appended after it, such as tempfile's `at path ...`: callers name the file themselves).
pub fn io_msg(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// Where keys come from.
pub enum Source {
    /// Standard input (`-`).
    Stdin,
    /// A file.
    File(PathBuf),
    /// Standard input copied to an anonymous temporary file, so it can be read twice.
    Spooled(File),
}

impl Source {
    /// `-` is standard input, anything else a path.
    pub fn from_arg(arg: &OsStr) -> Self {
        if arg == "-" {
            Source::Stdin
        } else {
            Source::File(PathBuf::from(arg))
        }
    }

    /// The name used in messages.
    pub fn name(&self) -> String {
        match self {
            Source::Stdin | Source::Spooled(_) => "stdin".to_owned(),
            Source::File(p) => p.display().to_string(),
        }
    }

    /// The size in bytes if known up front (regular files), for progress bars.
    pub fn len(&self) -> Option<u64> {
        let meta = match self {
            Source::Stdin => return None,
            Source::File(p) => std::fs::metadata(p).ok()?,
            Source::Spooled(f) => f.metadata().ok()?,
        };
        meta.is_file().then_some(meta.len())
    }

    /// Opens it for reading from the start.
    pub fn open(&self) -> Result<Lines<Box<dyn Read>>> {
        Ok(Lines::new(self.reader()?, self.name()))
    }

    /// A plain reader positioned at the start.
    fn reader(&self) -> Result<Box<dyn Read>> {
        Ok(match self {
            Source::Stdin => stdin_reader(),
            Source::File(p) => Box::new(
                File::open(p)
                    .map_err(|e| anyhow!("{}: cannot open: {}", p.display(), io_msg(&e)))?,
            ),
            Source::Spooled(f) => {
                let spool_failed = |e: io::Error| {
                    anyhow!("stdin: cannot read back the temporary copy: {}", io_msg(&e))
                };
                let mut f = f.try_clone().map_err(spool_failed)?;
                f.rewind().map_err(spool_failed)?;
                Box::new(f)
            }
        })
    }

    /// Counts the lines. Standard input is copied to an anonymous temporary file as it is
    /// counted (deleted by the OS when closed), so it can be read again: the returned source
    /// is the one to read the keys from afterwards.
    pub fn count_lines(self, mut progress: impl FnMut(u64)) -> Result<(Source, u64)> {
        let name = self.name();
        let spool_failed = |e: io::Error| {
            anyhow!(
                "stdin: cannot keep a temporary copy of the input for --items auto: {}",
                io_msg(&e)
            )
        };
        let mut spool = match self {
            Source::Stdin => Some(tempfile::tempfile().map_err(spool_failed)?),
            _ => None,
        };
        let mut reader = self.reader()?;
        let mut buf = vec![0u8; CHUNK];
        let (mut lines, mut bytes, mut last) = (0u64, 0u64, b'\n');
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{name}: read failed: {}", io_msg(&e)),
            };
            let chunk = &buf[..n];
            lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
            last = chunk[n - 1];
            bytes += n as u64;
            if let Some(f) = spool.as_mut() {
                f.write_all(chunk).map_err(spool_failed)?;
            }
            progress(bytes);
        }
        if last != b'\n' {
            lines += 1; // a final line without a newline
        }
        Ok((spool.map_or(self, Source::Spooled), lines))
    }
}

/// Standard input as a plain reader. On Unix it is a duplicate of file descriptor 0, which
/// bypasses std's 8 KiB stdin buffer (and its lock) so reads go straight into our chunk.
pub fn stdin_reader() -> Box<dyn Read> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() {
            return Box::new(File::from(fd));
        }
    }
    Box::new(io::stdin().lock())
}

/// The keys of one chunk of input: the complete lines read so far, in input order.
pub struct Batch<'a> {
    buf: &'a [u8],
    spans: &'a [(usize, usize)],
}

impl<'a> Batch<'a> {
    /// The keys, in input order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + Clone + 'a {
        let buf = self.buf;
        self.spans.iter().map(move |&(s, e)| &buf[s..e])
    }
}

/// Lines of one input, a chunk at a time.
///
/// Each call to [`next_batch`](Self::next_batch) reads a large chunk straight into an
/// internal buffer (no intermediate `BufReader` copy), splits it at `\n` with SIMD `memchr`,
/// and hands out the complete lines in place; a line cut by the chunk's end is moved to the
/// front and completed by the next read. No allocation per line, one copy of the data
/// (the kernel's).
pub struct Lines<R> {
    reader: R,
    name: String,
    buf: Vec<u8>,
    /// `buf[..filled]` holds data; `buf[consumed..filled]` is an incomplete last line.
    filled: usize,
    consumed: usize,
    spans: Vec<(usize, usize)>,
    bytes: u64,
    lines: u64,
    eof: bool,
}

impl<R> Lines<R> {
    /// Bytes read so far, line endings included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Complete lines handed out so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

impl<R: Read> Lines<R> {
    /// Reads lines from `reader`, `CHUNK` bytes at a time; `name` is used in error
    /// messages.
    pub fn new(reader: R, name: String) -> Self {
        Self {
            reader,
            name,
            buf: vec![0; CHUNK],
            filled: 0,
            consumed: 0,
            spans: Vec::with_capacity(CHUNK / 16),
            bytes: 0,
            lines: 0,
            eof: false,
        }
    }

    /// The next chunk's complete lines, or `None` at the end of the input.
    pub fn next_batch(&mut self) -> Result<Option<Batch<'_>>> {
        self.spans.clear();
        // Move the incomplete line to the front.
        self.buf.copy_within(self.consumed..self.filled, 0);
        self.filled -= self.consumed;
        self.consumed = 0;
        loop {
            if self.eof {
                if self.filled == 0 {
                    return Ok(None);
                }
                // A last line without a newline.
                let end = strip_cr(&self.buf, 0, self.filled);
                self.spans.push((0, end));
                self.consumed = self.filled;
                break;
            }
            if self.filled == self.buf.len() {
                // A line longer than the buffer: make room for the rest of it.
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let n = match self.reader.read(&mut self.buf[self.filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{}: read failed: {}", self.name, io_msg(&e)),
            };
            if n == 0 {
                self.eof = true;
                continue;
            }
            let scanned = self.filled;
            self.filled += n;
            self.bytes += n as u64;
            let mut line_start = self.consumed;
            for nl in memchr::memchr_iter(b'\n', &self.buf[scanned..self.filled]) {
                let end = scanned + nl;
                self.spans
                    .push((line_start, strip_cr(&self.buf, line_start, end)));
                line_start = end + 1;
            }
            self.consumed = line_start;
            if !self.spans.is_empty() {
                break;
            }
        }
        self.lines += self.spans.len() as u64;
        Ok(Some(Batch {
            buf: &self.buf,
            spans: &self.spans,
        }))
    }
}

/// `end`, less one if the line `buf[start..end]` ends in CR.
#[inline]
fn strip_cr(buf: &[u8], start: usize, end: usize) -> usize {
    if end > start && buf[end - 1] == b'\r' {
        end - 1
    } else {
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of `input` read through a reader that returns at most `step` bytes per
    /// read, and the number of batches.
    fn keys(input: &[u8], step: usize) -> (Vec<Vec<u8>>, usize) {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut lines = Lines::new(Trickle(input, step), "test".to_owned());
        let mut out = Vec::new();
        let mut batches = 0;
        while let Some(batch) = lines.next_batch().unwrap() {
            out.extend(batch.iter().map(<[u8]>::to_vec));
            batches += 1;
        }
        assert_eq!(lines.bytes(), input.len() as u64);
        assert_eq!(lines.lines(), out.len() as u64);
        (out, batches)
    }

    #[test]
    fn lf_crlf_and_a_last_line_without_newline() {
        let want: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"bb".to_vec(),
            b"".to_vec(),
            b"c\r".to_vec(),
            b"last".to_vec(),
        ];
        for step in [1, 2, 3, 7, 1 << 20] {
            assert_eq!(keys(b"a\nbb\r\n\nc\r\r\nlast", step).0, want, "step {step}");
            assert_eq!(
                keys(b"a\nbb\r\n\nc\r\r\nlast\r", step).0,
                want,
                "step {step}"
            );
        }
        assert!(keys(b"", 10).0.is_empty());
        assert_eq!(keys(b"\n", 10).0, vec![b"".to_vec()]);
        assert_eq!(keys(b"\r\n", 1).0, vec![b"".to_vec()]);
    }

    #[test]
    fn lines_longer_than_the_buffer_and_many_chunks() {
        let long = vec![b'x'; 3 * CHUNK + 5];
        let mut input = long.clone();
        input.extend_from_slice(b"\r\nshort\n");
        input.extend_from_slice(&long);
        let (got, _) = keys(&input, 1 << 20);
        assert_eq!(got, vec![long.clone(), b"short".to_vec(), long]);

        let many: Vec<u8> = (0..100_000)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let (got, batches) = keys(&many, CHUNK);
        assert_eq!(got.len(), 100_000);
        assert_eq!(got[99_999], b"99999");
        assert!(batches > 1);
    }

    #[test]
    fn io_messages_lose_the_os_error_suffix() {
        let e = io::Error::from_raw_os_error(2);
        assert!(!io_msg(&e).contains("os error"), "{}", io_msg(&e));
    }
}
