//! `cron.lock`: the exclusive `flock` that guards the SQLite store's files beside the database
//! (the run history's appends and rotations, the `cron.json` import) across processes. The
//! entries themselves are guarded by the database's own lock.
//!
//! A taker that finds the lock held waits without polling: a helper thread blocks in
//! `flock(2)` on a duplicate of the same descriptor, which the kernel wakes the moment the
//! holder lets go, and the taker waits for that thread's word for at most the deadline, then
//! answers `file_busy`. A helper whose taker gave up takes the lock when it comes free and lets
//! it go at once (its descriptor closes with the message no one received).

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use fs4::fs_std::FileExt;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};

/// How long a taker waits for another process's hold before answering `file_busy`.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// An exclusive hold on the lock file; released when dropped (the descriptor closes).
pub struct FileLock {
    _file: File,
}

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::IoError,
        format!("{what} {}: {e}", path.display()),
    )
}

impl FileLock {
    /// Lock `file` (opened for writing; `shown` names it in messages), waiting up to `wait`
    /// for another holder, then `file_busy`.
    pub fn take(file: File, shown: &Path, wait: Duration) -> ToolResult<FileLock> {
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => return Ok(FileLock { _file: file }),
            Ok(false) => {}
            Err(e) => return Err(io_err("cannot lock", shown, &e)),
        }
        // The lock belongs to the open file description: the duplicate's lock is `file`'s.
        let waiter = file
            .try_clone()
            .map_err(|e| io_err("cannot lock", shown, &e))?;
        let (tell, told) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("cron-lock-wait".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let got = loop {
                    match FileExt::lock_exclusive(&waiter) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        other => break other,
                    }
                };
                // Given up on meanwhile: the message, and `waiter` with it, is dropped.
                let _ = tell.send(got.map(|()| waiter));
            })
            .map_err(|e| io_err("cannot wait for", shown, &e))?;
        match told.recv_timeout(wait) {
            Ok(Ok(_waiter)) => Ok(FileLock { _file: file }),
            Ok(Err(e)) => Err(io_err("cannot lock", shown, &e)),
            Err(RecvTimeoutError::Timeout) => Err(ToolError::new(
                ErrorCode::FileBusy,
                format!(
                    "{} is held by another process for more than {} s; try again",
                    shown.display(),
                    wait.as_secs()
                ),
            )),
            Err(RecvTimeoutError::Disconnected) => Err(ToolError::internal(format!(
                "waiting for {} failed",
                shown.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Instant;

    /// Another open file description of the same file: it contends as another process does.
    fn open(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_second_taker_gets_the_lock_as_soon_as_the_first_lets_go() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cron.lock");
        let held = FileLock::take(open(&path), &path, LOCK_WAIT).unwrap();
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let started = Instant::now();
            let lock = FileLock::take(open(&p), &p, LOCK_WAIT).unwrap();
            (started.elapsed(), lock)
        });
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
        let (waited, second) = t.join().unwrap();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "woken late: {waited:?}");
        // The second holds it now: a third taker waits in turn.
        let e = FileLock::take(open(&path), &path, Duration::from_millis(100))
            .err()
            .unwrap();
        assert_eq!(e.code, ErrorCode::FileBusy);
        drop(second);
        FileLock::take(open(&path), &path, Duration::from_millis(100)).unwrap();
    }

    #[test]
    fn a_taker_past_its_deadline_is_busy_and_leaves_the_lock_free() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("cron.lock");
        let held = FileLock::take(open(&path), &path, LOCK_WAIT).unwrap();
        let started = Instant::now();
        let e = FileLock::take(open(&path), &path, Duration::from_millis(200))
            .err()
            .unwrap();
        let waited = started.elapsed();
        assert_eq!(e.code, ErrorCode::FileBusy);
        assert!(e.message.contains("cron.lock"), "{}", e.message);
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        // The abandoned waiter takes the lock once it is free and lets it go at once.
        drop(held);
        let again = Instant::now();
        FileLock::take(open(&path), &path, Duration::from_secs(5)).unwrap();
        assert!(
            again.elapsed() < Duration::from_secs(3),
            "{:?}",
            again.elapsed()
        );
    }
}
