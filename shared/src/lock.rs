//! Per-path locks: tools that touch the same file serialize; a waiter gives up after a
//! bounded time with `file_busy` rather than hanging the request. And [`LockExt`]: the one
//! way kitbag takes a std lock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::error::{ErrorCode, ToolError};

pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Taking a std lock whose previous holder panicked: kitbag's locks guard plain data that a
/// panic (caught per call, see `ToolRouter::call`) cannot leave half-changed in a way later
/// callers must not see, so the data is used as it is instead of poisoning every later call.
pub trait LockExt<T: ?Sized> {
    type Guard<'a>
    where
        Self: 'a;
    /// The guard, whether or not an earlier holder panicked.
    fn locked(&self) -> Self::Guard<'_>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    type Guard<'a>
        = std::sync::MutexGuard<'a, T>
    where
        T: 'a;
    fn locked(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// [`LockExt`] for readers and writers of an `RwLock`.
pub trait RwLockExt<T: ?Sized> {
    fn read_locked(&self) -> std::sync::RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> std::sync::RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for std::sync::RwLock<T> {
    fn read_locked(&self) -> std::sync::RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    fn write_locked(&self) -> std::sync::RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, Default, Clone)]
pub struct PathLocks {
    inner: Arc<Mutex<HashMap<PathBuf, Arc<AsyncMutex<()>>>>>,
    wait: Option<Duration>,
}

/// Held while a path is being worked on; released on drop.
pub struct PathGuard {
    _guards: Vec<OwnedMutexGuard<()>>,
}

impl PathLocks {
    pub fn new(wait: Duration) -> Self {
        Self {
            inner: Arc::default(),
            wait: Some(wait),
        }
    }

    fn slot(&self, path: &Path) -> Arc<AsyncMutex<()>> {
        let mut map = self.inner.locked();
        // Forget entries nobody holds, so the map does not grow without bound.
        if map.len() > 1024 {
            map.retain(|_, m| Arc::strong_count(m) > 1);
        }
        map.entry(path.to_path_buf()).or_default().clone()
    }

    /// Lock one path.
    pub async fn lock(&self, path: &Path) -> Result<PathGuard, ToolError> {
        self.lock_many(&[path.to_path_buf()]).await
    }

    /// Lock several paths, in sorted order so two callers never deadlock.
    pub async fn lock_many(&self, paths: &[PathBuf]) -> Result<PathGuard, ToolError> {
        let mut sorted: Vec<&PathBuf> = paths.iter().collect();
        sorted.sort();
        sorted.dedup();
        let wait = self.wait.unwrap_or(DEFAULT_LOCK_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let mut guards = Vec::with_capacity(sorted.len());
        for p in sorted {
            let slot = self.slot(p);
            match tokio::time::timeout_at(deadline, slot.lock_owned()).await {
                Ok(g) => guards.push(g),
                Err(_) => {
                    return Err(ToolError::new(
                        ErrorCode::FileBusy,
                        format!(
                            "{}: another call is working on this file; gave up after {} ms",
                            p.display(),
                            wait.as_millis()
                        ),
                    ));
                }
            }
        }
        Ok(PathGuard { _guards: guards })
    }
}

/// Retry `f` while `busy` says its error is another process briefly holding what it needs, for
/// at most `within` (a new SQLite file switching to WAL takes an exclusive lock that SQLite
/// does not wait for: servers starting together would fail with "database is locked").
pub fn retry_while_busy<T, E>(
    within: std::time::Duration,
    busy: impl Fn(&E) -> bool,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match f() {
            Err(e) if busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn busy_after_wait() {
        let locks = PathLocks::new(Duration::from_millis(50));
        let p = PathBuf::from("/x/y");
        let _held = locks.lock(&p).await.expect("first");
        let e = locks.lock(&p).await.err().expect("second must time out");
        assert_eq!(e.code, ErrorCode::FileBusy);
        // A different path is independent.
        assert!(locks.lock(Path::new("/x/z")).await.is_ok());
    }
}
