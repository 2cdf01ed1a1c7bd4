//! One writing run per file at a time, for the commands that read a file and save it back
//! (`dedup --state`, `remove`): an advisory lock (`flock`) on `.FILE.lock` beside the file,
//! taken before the file is read and held until the process ends, however it ends (the
//! kernel releases it on `kill -9` too). A second run on the same file, by either command,
//! fails at once, before reading any input, instead of saving over the first run's work
//! (`tests/cli.rs` `a_second_dedup_on_the_same_state_is_refused_while_the_first_runs`,
//! `tests/remove.rs` `remove_takes_the_lock_dedup_state_takes`).
//!
//! The lock is on a file of its own because a save replaces the state file (a rename): a lock
//! on it would not be seen by the run that opens the new one. The lock file is empty and
//! never removed (removing it would let two runs lock two different files). Where `flock`
//! does not exist (not Unix) no lock is taken.
//!
//! Rule: the lock is opened without following a symbolic link and only if it is a regular
//! file (Unix: `O_NOFOLLOW`, `O_NONBLOCK` so a FIFO does not block the open, then `fstat`),
//! read-only, and nothing is ever written to it: a link or a special file planted at the
//! lock's path is an error naming it, never a file created or opened through it
//! (`tests/cli.rs` `a_symlink_or_fifo_planted_at_the_lock_path_is_refused`).

use std::fs::File;
use std::path::Path;

use anyhow::{Result, anyhow};

use crate::input::io_msg;

/// The lock on a state, released when dropped or when the process ends.
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// Takes the lock on the file at `state`, whose directory must exist; an error if
    /// another process holds it, or if its lock's path is a symbolic link or not a regular
    /// file.
    pub fn acquire(state: &Path) -> Result<Self> {
        let name = state.display();
        let file_name = state
            .file_name()
            .ok_or_else(|| anyhow!("{name}: not a file name"))?;
        let mut lock_name = std::ffi::OsString::from(".");
        lock_name.push(file_name);
        lock_name.push(".lock");
        let lock = state.with_file_name(lock_name);
        let file = open_lock(&lock)
            .map_err(|why| anyhow!("{name}: cannot open its lock {}: {why}", lock.display()))?;
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, flock};
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    return Err(anyhow!(
                        "{name}: in use by another `bloom dedup` or `bloom remove` (it holds \
                         {}); runs on one file must not overlap: wait for it to end (dedup: \
                         or give another --state)",
                        lock.display()
                    ));
                }
                Err(e) => {
                    return Err(anyhow!("{name}: cannot lock {}: {e}", lock.display()));
                }
            }
        }
        Ok(Self { _file: file })
    }
}

/// Opens (creating it, mode 0600) the lock file at `lock` as the module docs' rule says; the
/// error says why not.
#[cfg(unix)]
fn open_lock(lock: &Path) -> std::result::Result<File, String> {
    use rustix::fs::{FileType, Mode, OFlags, fstat, open};
    use rustix::io::Errno;

    let flags = OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let fd = open(lock, flags | OFlags::CLOEXEC, Mode::from_raw_mode(0o600)).map_err(|e| {
        if e == Errno::LOOP {
            "it is a symbolic link; a state's lock must be a regular file (remove the link \
             if you did not make it)"
                .to_owned()
        } else if e == Errno::NXIO {
            "it is a FIFO or a socket, not a regular file".to_owned()
        } else {
            io_msg(&std::io::Error::from(e))
        }
    })?;
    let kind = fstat(&fd)
        .map(|stat| FileType::from_raw_mode(stat.st_mode))
        .map_err(|e| io_msg(&std::io::Error::from(e)))?;
    if kind != FileType::RegularFile {
        return Err(format!(
            "it is a {}, not a regular file",
            match kind {
                FileType::Directory => "directory",
                FileType::Fifo => "FIFO",
                FileType::CharacterDevice | FileType::BlockDevice => "device",
                FileType::Socket => "socket",
                _ => "special file",
            }
        ));
    }
    Ok(File::from(fd))
}

/// Elsewhere no lock is taken; the file is only created (as before this rule).
#[cfg(not(unix))]
fn open_lock(lock: &Path) -> std::result::Result<File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .map_err(|e| io_msg(&e))
}
