//! Reading keys: one per line, LF or CR LF, from files or standard input.
//!
//! Input is read in large chunks straight into one reused buffer and split in place, so
//! there is no allocation or copy per line, and the commands get the keys in batches (which
//! lets them use the filter's prefetching batch forms).
//! A key is the raw bytes of its line without the line ending: `\n`, or `\r\n`, and a
//! final line without a newline counts too. Bytes need not be UTF-8.
//!
//! Input is bounded: a named input must be a regular file (a directory, a device such as
//! `/dev/zero`, a FIFO or a socket is refused before it is read; a pipe or device can still be
//! given as `-`, standard input), and a line longer than the cap (`--max-line-bytes`,
//! [`DEFAULT_MAX_LINE_BYTES`] by default) is an error naming the input and the line number,
//! found without holding more of it than the cap. It is an error for every command, never a
//! skipped line: `build` then writes no file and `dedup --state` saves no state, so no key is
//! silently left out, and `dedup` keeps its promise that a repeated line is always dropped.

use std::ffi::OsStr;
use std::fs::{File, FileType, Metadata};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

/// Bytes read at a time. Large enough that system calls cost nothing per line, small
/// enough that a chunk stays in the L2 cache while its lines are hashed and copied out.
pub const CHUNK: usize = 256 * 1024;

/// The longest line accepted by default, in bytes without its line ending: 1 MiB, far more
/// than any URL, identifier or cache key, small enough that a stream with no newline (say
/// `/dev/zero` on standard input) is refused after reading 1 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

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

    /// Opens it for reading from the start; a line longer than `max_line` bytes is an error.
    pub fn open(&self, max_line: usize) -> Result<Lines<Box<dyn Read>>> {
        Ok(Lines::new(self.reader()?, self.name(), max_line))
    }

    /// A plain reader positioned at the start.
    fn reader(&self) -> Result<Box<dyn Read>> {
        Ok(match self {
            Source::Stdin => stdin_reader(),
            Source::File(p) => Box::new(open_regular(p)?),
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
    /// is the one to read the keys from afterwards. A line longer than `max_line` bytes is an
    /// error, found as it is read: neither memory nor the copy grows past it.
    pub fn count_lines(
        self,
        max_line: usize,
        mut progress: impl FnMut(u64),
    ) -> Result<(Source, u64)> {
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
        // Bytes of the line being read so far (a CR at its end included).
        let mut current = 0usize;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{name}: read failed: {}", io_msg(&e)),
            };
            let chunk = &buf[..n];
            let mut start = 0;
            for nl in memchr::memchr_iter(b'\n', chunk) {
                let before = if nl > start { chunk[nl - 1] } else { last };
                let len = current + (nl - start) - usize::from(before == b'\r');
                if len > max_line {
                    return Err(line_too_long(&name, lines + 1, max_line));
                }
                lines += 1;
                current = 0;
                start = nl + 1;
                last = b'\n';
            }
            current += n - start;
            last = chunk[n - 1];
            // A CR at the end may yet be the line ending's.
            if current - usize::from(last == b'\r') > max_line {
                return Err(line_too_long(&name, lines + 1, max_line));
            }
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

/// Opens `path`, which must be a regular file. It is checked before opening (opening a FIFO
/// would block until a writer came along) and again on what was opened.
fn open_regular(path: &Path) -> Result<File> {
    let cannot_open = |e: io::Error| anyhow!("{}: cannot open: {}", path.display(), io_msg(&e));
    check_regular(path, &std::fs::metadata(path).map_err(cannot_open)?)?;
    let file = File::open(path).map_err(cannot_open)?;
    check_regular(path, &file.metadata().map_err(cannot_open)?)?;
    Ok(file)
}

fn check_regular(path: &Path, meta: &Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    bail!(
        "{}: not a regular file ({}): an input must be a file of keys; to read a pipe or a \
         device, redirect it to standard input and give -",
        path.display(),
        kind_of(&meta.file_type()),
    )
}

/// What a file that is not a regular one is, for messages.
fn kind_of(t: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// The error for line `line` of `name` being longer than `max` bytes.
fn line_too_long(name: &str, line: u64, max: usize) -> anyhow::Error {
    anyhow!(
        "{name}: line {line} is longer than {max} bytes (--max-line-bytes); stopped there, \
         neither it nor any later line was used"
    )
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

/// The keys of the commands that take them as `KEY` arguments or on standard input (`check`,
/// `remove`): the arguments, as one batch, if any are given; else the lines of standard input
/// (capped at `max_line` bytes each), a chunk at a time as they arrive. `each` gets every
/// batch in order; its error, or a read error, stops the reading.
pub fn each_key_batch(
    args: &[std::ffi::OsString],
    max_line: usize,
    mut each: impl FnMut(&Batch<'_>) -> Result<()>,
) -> Result<()> {
    if args.is_empty() {
        let mut lines = Source::Stdin.open(max_line)?;
        while let Some(batch) = lines.next_batch()? {
            each(&batch)?;
        }
        return Ok(());
    }
    let mut buf = Vec::new();
    let spans: Vec<(usize, usize)> = args
        .iter()
        .map(|arg| {
            let start = buf.len();
            buf.extend_from_slice(arg.as_encoded_bytes());
            (start, buf.len())
        })
        .collect();
    each(&Batch {
        buf: &buf,
        spans: &spans,
    })
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
///
/// A line longer than the cap is an error (after the lines before it are handed out), found
/// without reading more of it than the cap: the buffer never grows past the larger of
/// [`CHUNK`] and the cap plus two bytes (a CR LF).
pub struct Lines<R> {
    reader: R,
    name: String,
    /// The longest line accepted, in bytes without its line ending.
    max_line: usize,
    /// The number of a line found too long, reported by the next call.
    too_long: Option<u64>,
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
    /// messages; a line longer than `max_line` bytes (line ending excluded) is an error.
    pub fn new(reader: R, name: String, max_line: usize) -> Self {
        Self {
            reader,
            name,
            max_line,
            too_long: None,
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
        if let Some(line) = self.too_long {
            return Err(line_too_long(&self.name, line, self.max_line));
        }
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
                // A line longer than the buffer (but not yet than the cap, checked below):
                // make room for the rest of it, up to the cap and a CR LF.
                let grown = (self.buf.len() * 2).min(self.max_line.saturating_add(2));
                self.buf.resize(grown.max(self.buf.len() + 1), 0);
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
            let mut too_long = false;
            for nl in memchr::memchr_iter(b'\n', &self.buf[scanned..self.filled]) {
                let end = scanned + nl;
                let key_end = strip_cr(&self.buf, line_start, end);
                if key_end - line_start > self.max_line {
                    too_long = true;
                    break;
                }
                self.spans.push((line_start, key_end));
                line_start = end + 1;
            }
            self.consumed = line_start;
            // The incomplete last line is already too long (a CR at its end may yet be the
            // line ending's).
            too_long = too_long
                || strip_cr(&self.buf, self.consumed, self.filled) - self.consumed > self.max_line;
            if too_long {
                let line = self.lines + self.spans.len() as u64 + 1;
                self.too_long = Some(line);
                if self.spans.is_empty() {
                    return Err(line_too_long(&self.name, line, self.max_line));
                }
                break;
            }
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
        let mut lines = Lines::new(Trickle(input, step), "test".to_owned(), usize::MAX / 2);
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

    /// Reads `input` with a cap of `max` bytes per line, `step` bytes per read: the keys
    /// handed out, and the error if any.
    fn capped(input: &[u8], step: usize, max: usize) -> (Vec<Vec<u8>>, Option<String>) {
        let reader = std::io::Cursor::new(input.to_vec()).take(u64::MAX);
        struct Step<R>(R, usize);
        impl<R: Read> Read for Step<R> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.1);
                self.0.read(&mut buf[..n])
            }
        }
        let mut lines = Lines::new(Step(reader, step), "in".to_owned(), max);
        let mut out = Vec::new();
        loop {
            match lines.next_batch() {
                Ok(Some(batch)) => out.extend(batch.iter().map(<[u8]>::to_vec)),
                Ok(None) => return (out, None),
                Err(e) => {
                    // The error sticks.
                    let again = lines.next_batch().err().map(|e| e.to_string());
                    assert_eq!(again, Some(e.to_string()));
                    return (out, Some(e.to_string()));
                }
            }
        }
    }

    #[test]
    fn a_line_over_the_cap_is_an_error_after_the_lines_before_it() {
        for step in [1, 2, 3, 7, 1 << 20] {
            // Up to the cap, with LF, CR LF or nothing after it, is fine.
            let (got, err) = capped(b"12345\nabcde\r\n\nvwxyz", step, 5);
            assert_eq!(err, None, "step {step}");
            assert_eq!(got.len(), 4);
            // One byte more is not, wherever the line is.
            for (input, line, before) in [
                (&b"123456\na\n"[..], 1, 0),
                (b"a\nb\n123456\r\nc\n", 3, 2),
                (b"a\n123456", 2, 1),
                (b"a\n12345\r\r\n", 2, 1),
            ] {
                let (got, err) = capped(input, step, 5);
                let err = err.unwrap_or_else(|| panic!("step {step}: {input:?} accepted"));
                assert!(
                    err.starts_with(&format!("in: line {line} is longer than 5 bytes")),
                    "{err}"
                );
                assert_eq!(got.len(), before, "step {step}: {input:?}");
            }
        }
    }

    #[test]
    fn an_endless_line_is_refused_without_buffering_past_the_cap() {
        for max in [10, CHUNK - 1, CHUNK, 3 * CHUNK + 1] {
            // Far longer than the cap, but finite: without the cap this ends instead of hanging.
            let zeros = io::repeat(0).take((max + 4 * CHUNK) as u64);
            let mut lines = Lines::new(zeros, "zeros".to_owned(), max);
            let err = lines
                .next_batch()
                .err()
                .expect("an endless line is refused");
            assert!(err.to_string().contains("line 1 is longer"), "{err}");
            assert!(
                lines.buf.len() <= CHUNK.max(max + 2),
                "{max}: {}",
                lines.buf.len()
            );
            assert!(lines.bytes() <= (CHUNK.max(max + 2)) as u64);
        }
    }

    #[test]
    fn counting_lines_applies_the_same_cap() {
        let dir = tempfile::tempdir().unwrap();
        let count = |input: &[u8], max: usize| {
            let path = dir.path().join("keys");
            std::fs::write(&path, input).unwrap();
            Source::File(path)
                .count_lines(max, |_| ())
                .map(|(_, lines)| lines)
                .map_err(|e| e.to_string())
        };
        assert_eq!(count(b"12345\nabcde\r\n\nvwxyz", 5), Ok(4));
        assert_eq!(count(b"12345\r", 5), Ok(1));
        for (input, line) in [
            (&b"123456\n"[..], 1),
            (b"a\nb\n123456\r\nc\n", 3),
            (b"a\n123456", 2),
            (b"a\n12345\r\r\n", 2),
        ] {
            let err = count(input, 5).unwrap_err();
            assert!(
                err.contains(&format!("line {line} is longer than 5 bytes")),
                "{err}"
            );
        }
        let long = vec![b'x'; 3 * CHUNK];
        assert_eq!(count(&long, 3 * CHUNK), Ok(1));
        assert!(count(&long, 3 * CHUNK - 1).is_err());
    }

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let err = Source::File(dir.path().to_owned()).open(10).err().unwrap();
        assert!(
            err.to_string().contains("not a regular file (a directory)"),
            "{err}"
        );
        #[cfg(unix)]
        {
            let err = Source::File("/dev/zero".into()).open(10).err().unwrap();
            assert!(err.to_string().contains("(a character device)"), "{err}");
        }
    }

    #[test]
    fn io_messages_lose_the_os_error_suffix() {
        let e = io::Error::from_raw_os_error(2);
        assert!(!io_msg(&e).contains("os error"), "{}", io_msg(&e));
    }
}
