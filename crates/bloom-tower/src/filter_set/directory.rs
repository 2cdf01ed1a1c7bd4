//! [`DirectoryStore`]: one file per filter under a directory.
//!
//! A filter named `name` lives at `<root>/<xx>/<file>`, where `xx` (two hex digits of a hash
//! of the name) spreads a million files over 256 directories. `<file>` is the name escaped
//! (bytes outside `[A-Za-z0-9_-]` written `%XX`) plus `.bloom`. The mapping is injective and
//! every file name fits `NAME_MAX` (255 bytes):
//!
//! * **Short names** (escaped to at most 249 bytes): `<escaped>.bloom`, and the
//!   file holds the filter's bytes as they are.
//! * **Long names**: `<escaped prefix>~<digest>.bloom`, where the prefix is the first at most
//!   96 escaped bytes (never a cut `%XX`) and the digest is the 128-bit
//!   SipHash-2-4 of the whole name, in hex. `~` never occurs in an escaped name, so a long
//!   name's file is never a short name's. The file starts with `BGNAMED1`, the name's
//!   length (`u32`, little endian) and the name, then the filter's bytes: a load checks that
//!   the name in the file is the one asked for, and a store refuses to replace a file that
//!   names another, so two names whose digests collide get an error, never each other's
//!   filter.
//!
//! Guarded by `tests/filter_set_long_names.rs` (names of 100, 300 and 2,000 bytes stored,
//! evicted and loaded with every key; names equal in their first 255 bytes kept apart; a
//! digest collision refused; a path past `PATH_MAX` an error).
//!
//! A store writes a temporary file (mode 0600, random name, in the same directory), optionally
//! `fsync`s it, renames it over the old file and optionally `fsync`s the directory: a reader
//! sees the old file or the new one, never a part (guarded by `tests/filter_set_kill.rs`
//! `a_store_killed_midway_leaves_the_old_or_the_new_filter`).

use crate::shared_filter::snapshot::sync_dir;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use siphasher::sip128::SipHasher24;

use super::store::{FilterStore, StoreError};

/// Filters as files under one directory (see the module docs for the layout).
///
/// With `sync(true)` (the default) a completed store survives a lost machine; with
/// `sync(false)` it survives a killed process (the rename is atomic either way) and costs no
/// `fsync`.
///
/// ```
/// use bloom_tower::filter_set::{DirectoryStore, FilterStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = DirectoryStore::new(dir.path())?;
/// store.store("user/42", b"bytes".to_vec()).await?;
/// assert_eq!(store.load("user/42").await?, Some(b"bytes".to_vec()));
/// assert_eq!(store.load("user/43").await?, None);
/// assert!(store.path_of("user/42").ends_with("user%2F42.bloom"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct DirectoryStore {
    root: PathBuf,
    sync: bool,
}

impl DirectoryStore {
    /// A store under `root`, created if missing.
    ///
    /// ```
    /// use bloom_tower::filter_set::DirectoryStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = DirectoryStore::new(dir.path().join("filters"))?;
    /// assert!(dir.path().join("filters").is_dir());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        fs::create_dir_all(&root)?;
        Ok(Self { root, sync: true })
    }

    /// Whether a store `fsync`s the file and its directory (default `true`).
    ///
    /// ```
    /// use bloom_tower::filter_set::DirectoryStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let fast = DirectoryStore::new(dir.path())?.sync(false); // survives kill -9, not a power cut
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// The directory the store keeps its files under.
    ///
    /// ```
    /// use bloom_tower::filter_set::DirectoryStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// assert_eq!(DirectoryStore::new(dir.path())?.root(), dir.path());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file that holds the filter `name`: ASCII letters, digits, `-` and `_` as they are,
    /// any other byte as `%XX`, so no name can leave its directory; a name escaped to more than
    /// 249 bytes is cut and followed by `~` and a digest of the whole name (see
    /// the module docs), so every file name fits `NAME_MAX` and no two names share a file.
    ///
    /// ```
    /// use bloom_tower::filter_set::DirectoryStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = DirectoryStore::new(dir.path())?;
    /// assert!(store.path_of("tenant-7").ends_with("tenant-7.bloom"));
    /// assert!(store.path_of("../é").ends_with("%2E%2E%2F%C3%A9.bloom"));
    /// let long = store.path_of(&"é".repeat(100));
    /// assert!(long.file_name().unwrap().len() <= 255);
    /// assert!(long.to_str().unwrap().contains('~'));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn path_of(&self, name: &str) -> PathBuf {
        let mut file = escape(name);
        if file.len() > MAX_ESCAPED {
            let mut cut = LONG_PREFIX;
            // Never cut a `%XX` apart: a `%` one or two bytes before `cut` starts the cut.
            if let Some(percent) = file[cut - 2..cut].find('%') {
                cut = cut - 2 + percent;
            }
            file.truncate(cut);
            let digest = SipHasher24::new_with_keys(DIGEST_KEY.0, DIGEST_KEY.1)
                .hash(name.as_bytes())
                .as_u128();
            // Infallible: writing to a String.
            let _ = write!(file, "~{digest:032x}");
        }
        file.push_str(".bloom");
        self.root.join(format!("{:02x}", spread(name))).join(file)
    }
}

/// The longest escaped name kept whole in its file name: with `.bloom`, `NAME_MAX` (255).
pub(crate) const MAX_ESCAPED: usize = 255 - ".bloom".len();

/// The escaped prefix of a long name's file name, at most (the file name is then at most
/// `LONG_PREFIX + 1 + 32 + 6` = 135 bytes).
pub(crate) const LONG_PREFIX: usize = 96;

/// The start of a long name's file, before the name's length and the name.
pub(crate) const NAMED_MAGIC: &[u8; 8] = b"BGNAMED1";

/// The SipHash key of the long names' digest: fixed, since the file names outlive processes.
const DIGEST_KEY: (u64, u64) = (0x626c_6f6f_6d67_7561, 0x7264_2d6e_616d_6573);

/// The name with bytes outside `[A-Za-z0-9_-]` written `%XX`.
fn escape(name: &str) -> String {
    let mut file = String::with_capacity(name.len() + 6);
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            file.push(b as char);
        } else {
            // Infallible: writing to a String.
            let _ = write!(file, "%{b:02X}");
        }
    }
    file
}

/// Whether `name`'s file carries the name in front of the filter (a long name).
fn is_named(name: &str) -> bool {
    escape_len(name) > MAX_ESCAPED
}

/// The length of [`escape`]`(name)`, without building it.
fn escape_len(name: &str) -> usize {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                1
            } else {
                3
            }
        })
        .sum()
}

/// A long name's file: [`NAMED_MAGIC`], the name's length, the name, the filter.
fn named_file(name: &str, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(name.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name longer than 4 GiB"))?;
    let mut file = Vec::with_capacity(12 + name.len() + bytes.len());
    file.extend_from_slice(NAMED_MAGIC);
    file.extend_from_slice(&len.to_le_bytes());
    file.extend_from_slice(name.as_bytes());
    file.extend_from_slice(bytes);
    Ok(file)
}

/// The filter in a long name's file, if the file names `name`; an `InvalidData` error if it
/// names another (a digest collision) or is not such a file.
fn unnamed(name: &str, mut file: Vec<u8>) -> io::Result<Vec<u8>> {
    let header = 12 + name.len();
    match named_in(&file) {
        Some(found) if found == name.as_bytes() => {
            file.drain(..header);
            Ok(file)
        }
        Some(found) => Err(another_name(found)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a long-name filter file (no name header)",
        )),
    }
}

/// The name a long name's file starts with, if it starts with one.
fn named_in(file: &[u8]) -> Option<&[u8]> {
    let rest = file.strip_prefix(NAMED_MAGIC)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    rest.get(4..4 + len)
}

fn another_name(found: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the file holds the filter of another name ({:?}): the two names' digests collide",
            String::from_utf8_lossy(found)
        ),
    )
}

/// Refuses to replace a long name's file that names another name.
fn check_owner(path: &Path, name: &str) -> io::Result<()> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(12 + name.len());
    match fs::File::open(path) {
        Ok(file) => {
            file.take(12 + name.len() as u64).read_to_end(&mut head)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    match named_in(&head) {
        Some(found) if found == name.as_bytes() => Ok(()),
        Some(found) => Err(another_name(found)),
        // Not ours to replace either: a long name's file always starts with its name.
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "refusing to replace a file without a name header",
        )),
    }
}

/// FNV-1a of the name, folded to a byte: which of the 256 directories holds it.
fn spread(name: &str) -> u8 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in name.as_bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 8) ^ (h >> 16) ^ (h >> 24)) as u8
}

impl FilterStore for DirectoryStore {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path_of(name);
        let named = is_named(name).then(|| name.to_owned());
        blocking(move || match fs::read(&path) {
            Ok(bytes) => match named {
                Some(name) => unnamed(&name, bytes)
                    .map(Some)
                    .map_err(|e| io_error(&path, e)),
                None => Ok(Some(bytes)),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(io_error(&path, source)),
        })
        .await
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        let store = self.clone();
        let name = name.to_owned();
        blocking(move || store.write(&name, &bytes)).await
    }

    /// A batch's files are written in one trip to a blocking thread, one after another.
    const MAX_BATCH: usize = 64;

    async fn store_many(&self, batch: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        let store = self.clone();
        blocking(move || {
            batch
                .iter()
                .try_for_each(|(name, bytes)| store.write(name, bytes))
        })
        .await
    }
}

impl DirectoryStore {
    /// Replaces `name`'s file atomically (on the calling thread).
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.path_of(name);
        let written = if is_named(name) {
            check_owner(&path, name)
                .and_then(|()| named_file(name, bytes))
                .and_then(|file| write_atomically(&path, &file, self.sync))
        } else {
            write_atomically(&path, bytes, self.sync)
        };
        written.map_err(|e| io_error(&path, e))
    }
}

/// Temporary file, optional fsync, rename over `path`, optional fsync of the directory.
fn write_atomically(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .expect("path_of always names a file in a directory");
    fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    if sync {
        temp.as_file().sync_all()?;
    }
    temp.persist(path).map_err(|e| e.error)?;
    if sync {
        sync_dir(dir)?;
    }
    Ok(())
}

fn io_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Runs file I/O off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|join| {
        Err(StoreError::Io {
            path: String::new(),
            source: io::Error::other(join),
        })
    })
}
