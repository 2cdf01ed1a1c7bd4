//! [`DirectoryStore`]: one file per filter under a directory.
//!
//! A filter named `name` lives at `<root>/<xx>/<name>.bloom`, where `xx` (two hex digits of a
//! hash of the name) spreads a million files over 256 directories, and bytes outside
//! `[A-Za-z0-9_-]` of the name are written `%XX`. A store writes a temporary file (mode 0600,
//! random name, in the same directory), optionally `fsync`s it, renames it over the old file
//! and optionally `fsync`s the directory: a reader sees the old file or the new one, never a
//! part (guarded by `tests/filter_set_kill.rs`
//! `a_store_killed_midway_leaves_the_old_or_the_new_filter`).

use crate::shared_filter::snapshot::sync_dir;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
    /// any other byte as `%XX`, so no name can leave its directory.
    ///
    /// ```
    /// use bloom_tower::filter_set::DirectoryStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = DirectoryStore::new(dir.path())?;
    /// assert!(store.path_of("tenant-7").ends_with("tenant-7.bloom"));
    /// assert!(store.path_of("../é").ends_with("%2E%2E%2F%C3%A9.bloom"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn path_of(&self, name: &str) -> PathBuf {
        let mut file = String::with_capacity(name.len() + 6);
        for &b in name.as_bytes() {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                file.push(b as char);
            } else {
                // Infallible: writing to a String.
                let _ = write!(file, "%{b:02X}");
            }
        }
        file.push_str(".bloom");
        self.root.join(format!("{:02x}", spread(name))).join(file)
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
        blocking(move || match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(io_error(&path, source)),
        })
        .await
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        let path = self.path_of(name);
        let sync = self.sync;
        blocking(move || write_atomically(&path, &bytes, sync).map_err(|e| io_error(&path, e)))
            .await
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
