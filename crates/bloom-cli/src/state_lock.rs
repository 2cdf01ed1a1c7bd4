//! One `dedup --state` run per state at a time: an advisory lock (`flock`) on `.FILE.lock`
//! beside the state, taken before the state is read and held until the process ends,
//! however it ends (the kernel releases it on `kill -9` too). A second run on the same state
//! fails at once, before reading any input, instead of saving over the first run's lines
//! (`tests/cli.rs` `a_second_dedup_on_the_same_state_is_refused_while_the_first_runs`).
//!
//! The lock is on a file of its own because a save replaces the state file (a rename): a lock
//! on it would not be seen by the run that opens the new one. The lock file is empty and
//! never removed (removing it would let two runs lock two different files). Where `flock`
//! does not exist (not Unix) no lock is taken.

use std::fs::{File, OpenOptions};
use std::path::Path;

use anyhow::{Result, anyhow};

use crate::input::io_msg;

/// The lock on a state, released when dropped or when the process ends.
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// Takes the lock on the state at `state`, whose directory must exist; an error if
    /// another process holds it.
    pub fn acquire(state: &Path) -> Result<Self> {
        let name = state.display();
        let file_name = state
            .file_name()
            .ok_or_else(|| anyhow!("{name}: not a file name"))?;
        let mut lock_name = std::ffi::OsString::from(".");
        lock_name.push(file_name);
        lock_name.push(".lock");
        let lock = state.with_file_name(lock_name);
        let mut options = OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&lock).map_err(|e| {
            anyhow!(
                "{name}: cannot open its lock {}: {}",
                lock.display(),
                io_msg(&e)
            )
        })?;
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, flock};
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    return Err(anyhow!(
                        "{name}: in use by another `bloom dedup` (it holds {}); runs on one \
                         state must not overlap: wait for it to end, or give another --state",
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
