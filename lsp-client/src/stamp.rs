//! When an open document can be trusted unchanged without reading it again.
//!
//! Every request first brings the server's view up to date with the disk. Re-reading and
//! hashing every open document each time costs milliseconds once hundreds are open, so a
//! document whose metadata is exactly as it was is skipped — but only when its change time was
//! already well in the past when it was recorded. File times are coarse (a few milliseconds on
//! many kernels), so a write within the same tick as the recorded one could leave them equal;
//! an old recorded time rules that out, as git does for its index. The change time (which a
//! program cannot set back, and which moves with every content or mtime change) decides.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

/// How far in the past a recorded modification time must be to be trusted.
const SETTLE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime: (i64, i64),
    // A content change cannot set this back (unlike mtime), and a replacing rename gives a
    // new inode.
    ctime: (i64, i64),
    ino: u64,
    dev: u64,
    settled: bool,
}

impl Stamp {
    /// Record `meta`, taken before the content was read (a write in between then shows up
    /// as a different stamp next time).
    pub fn of(meta: &Metadata) -> Self {
        Self::at(meta, SystemTime::now())
    }

    fn at(meta: &Metadata, now: SystemTime) -> Self {
        let changed = SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(
                meta.ctime().max(0) as u64,
                meta.ctime_nsec().clamp(0, 999_999_999) as u32,
            ))
            .unwrap_or(now);
        let settled = now.duration_since(changed).is_ok_and(|age| age >= SETTLE);
        Stamp {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
            settled,
        }
    }

    /// The file certainly holds what was read when this stamp was taken.
    pub fn unchanged(&self, meta: &Metadata) -> bool {
        self.settled
            && *self
                == Stamp {
                    settled: true,
                    ..Self::at(meta, SystemTime::UNIX_EPOCH)
                }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn meta(p: &std::path::Path) -> Metadata {
        std::fs::metadata(p).expect("meta")
    }

    /// A stamp recorded as if a minute after the file's last change. The clock then really
    /// moves on a little, so the next write cannot share the recorded tick even where file
    /// times are coarse (what the real minute guarantees).
    fn settled(p: &std::path::Path) -> Stamp {
        let s = Stamp::at(&meta(p), SystemTime::now() + Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(25));
        s
    }

    #[test]
    fn only_a_settled_untouched_file_is_trusted() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("a.py");
        std::fs::write(&p, "x = 1\n").expect("w");
        // Recorded right after the write: too recent to trust.
        assert!(!Stamp::of(&meta(&p)).unchanged(&meta(&p)));
        assert!(settled(&p).unchanged(&meta(&p)));

        // Same size, the old modification time put back: the change time still moves.
        let old = settled(&p);
        let mtime = meta(&p).modified().expect("mtime");
        std::fs::write(&p, "x = 2\n").expect("w");
        File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(mtime))
            .expect("set mtime");
        assert_eq!(meta(&p).modified().expect("mtime"), mtime);
        assert!(!old.unchanged(&meta(&p)));

        // Replaced by a rename (an atomic write): a new inode.
        let again = settled(&p);
        let tmp = d.path().join("a.py.tmp");
        std::fs::write(&tmp, "x = 3\n").expect("w");
        std::fs::rename(&tmp, &p).expect("rename");
        assert!(!again.unchanged(&meta(&p)));

        // A different size.
        let before = settled(&p);
        std::fs::write(&p, "x = 30\n").expect("w");
        assert!(!before.unchanged(&meta(&p)));
    }
}
