//! The symlink-swap race of issue #22: a helper thread exchanges a real directory inside the
//! root with a symbolic link pointing outside, as fast as it can, while a test drives a server
//! against paths under that directory. A server that resolves a path string and then opens the
//! string again reads, writes or deletes outside the root in the gap; one that acts on file
//! descriptors never does.
//!
//! `renameat2(RENAME_EXCHANGE)` swaps both names in one step, so at every instant `dir` is
//! either the real directory or the link — the worst case for a check-then-use server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{CWD, RenameFlags, renameat_with};

/// A marker unlikely to occur anywhere else: `OUTSIDE_SENTINEL_<hex>` (a valid identifier in
/// most languages, so AST tools can match it too).
pub fn sentinel() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("OUTSIDE_SENTINEL_{:x}{:x}", std::process::id(), nanos)
}

/// A running swapper; it stops by itself at its deadline (or when dropped).
pub struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    deadline: Instant,
    handle: Option<JoinHandle<()>>,
}

impl Swapper {
    /// Exchange `dir` (a real directory) and `link` (a symbolic link) for `run` at most.
    pub fn start(dir: &Path, link: &Path, run: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + run;
        let (dir, link) = (dir.to_path_buf(), link.to_path_buf());
        let (stop2, swaps2) = (stop.clone(), swaps.clone());
        let handle = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                // Two exchanges per round so each state lasts about as long as the other.
                for _ in 0..2 {
                    renameat_with(CWD, &dir, CWD, &link, RenameFlags::EXCHANGE)
                        .expect("renameat2(RENAME_EXCHANGE)");
                    swaps2.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Swapper {
            stop,
            swaps,
            deadline,
            handle: Some(handle),
        }
    }

    /// Whether the swapper is still within its time.
    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Stop (if still running) and return the number of exchanges made. An even number of
    /// exchanges per round leaves `dir` the real directory again.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("swapper thread");
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Every entry under `dir` (not following links) with its content: `name/` for directories,
/// `name@` with the target for links, the bytes for files. For "byte-for-byte unchanged".
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap_or(&p).to_path_buf();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            let target = std::fs::read_link(&p).unwrap_or_default();
            out.insert(rel, format!("@{}", target.display()).into_bytes());
        } else if ft.is_dir() {
            out.insert(rel, b"/".to_vec());
            walk(base, &p, out);
        } else {
            out.insert(rel, std::fs::read(&p).unwrap_or_default());
        }
    }
}

/// Describe how two snapshots differ (empty when equal).
pub fn diff(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (p, b) in before {
        match after.get(p) {
            None => out.push(format!("removed {}", p.display())),
            Some(a) if a != b => out.push(format!("changed {}", p.display())),
            Some(_) => {}
        }
    }
    for p in after.keys() {
        if !before.contains_key(p) {
            out.push(format!("created {}", p.display()));
        }
    }
    out
}
