//! Command logs on disk, bounded: each log keeps its first bytes (head) and a rolling window
//! of its last bytes (tail); the logs directory keeps a total size.
//!
//! While a command runs, the head is `NAME.log` and the tail lives in two alternating segment
//! files `NAME.log.tail0` / `NAME.log.tail1` of `tail / 2` bytes each: when the current segment
//! is full, the other one is truncated and written next, so the segment before it is kept and
//! everything older is dropped. Every write is an append — O(1), nothing is rewritten. When the
//! output ends, the segments (at most `tail` bytes) are appended to `NAME.log` once, behind a
//! marker line when bytes were dropped, and removed: a finished log is one file.
//!
//! Offsets are stream offsets (bytes since the command started); [`CappedLog::read`] maps them
//! to whatever file holds them and reports a requested range that was dropped.

use kitbag_shared::lock::LockExt;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Room kept for the marker line of a consolidated log, so that head + marker + tail stays
/// within the per-log cap.
const MARKER_RESERVE: u64 = 256;

/// How a per-log cap of `max` bytes is split: head a fifth, the tail the rest (minus the marker's
/// room). `max == 0`: unbounded.
pub fn split_cap(max: u64) -> (u64, u64) {
    if max == 0 {
        return (u64::MAX / 4, u64::MAX / 4);
    }
    let max = max.max(4 * MARKER_RESERVE);
    let head = max / 5;
    (head, max - head - MARKER_RESERVE)
}

/// A stretch of the stream held by a file.
#[derive(Debug, Clone)]
struct Piece {
    stream_start: u64,
    len: u64,
    file: PathBuf,
    file_offset: u64,
}

/// What [`CappedLog::read`] found.
#[derive(Debug, Default)]
pub struct ReadOut {
    pub bytes: Vec<u8>,
    /// Stream offset of `bytes[0]`.
    pub start: u64,
    /// Set when the requested offset fell in the dropped middle: `[from, to)` is gone and
    /// `bytes` start at `to`.
    pub dropped: Option<(u64, u64)>,
}

/// One command's log: head file + two alternating tail segments.
pub struct CappedLog {
    path: PathBuf,
    head_cap: u64,
    seg_cap: u64,
    head: Option<File>,
    head_len: u64,
    /// Index of the segment being written (segment k covers stream bytes
    /// `head_cap + k*seg_cap ..`), `None` before the head is full.
    seg: Option<u64>,
    seg_file: Option<File>,
    seg_len: u64,
    /// After [`finish`](Self::finish): where the tail sits in `NAME.log`.
    consolidated: Option<u64>,
    pub total: u64,
}

impl CappedLog {
    /// Create `path` (truncating) with head and tail caps from [`split_cap`].
    pub fn create(path: &Path, head_cap: u64, tail_cap: u64) -> std::io::Result<Self> {
        let head = create_no_follow(path)?;
        Ok(CappedLog {
            path: path.to_path_buf(),
            head_cap: head_cap.max(1),
            seg_cap: (tail_cap / 2).max(1),
            head: Some(head),
            head_len: 0,
            seg: None,
            seg_file: None,
            seg_len: 0,
            consolidated: None,
            total: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn seg_path(&self, k: u64) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".tail{}", k % 2));
        PathBuf::from(p)
    }

    /// Append output. Errors are ignored (a full disk must not stop the command).
    pub fn write(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        while !bytes.is_empty() {
            if self.head_len < self.head_cap {
                let n = (self.head_cap - self.head_len).min(bytes.len() as u64) as usize;
                if let Some(f) = &mut self.head {
                    let _ = f.write_all(&bytes[..n]);
                }
                self.head_len += n as u64;
                bytes = &bytes[n..];
                continue;
            }
            if self.seg.is_none() || self.seg_len == self.seg_cap {
                let k = self.seg.map_or(0, |k| k + 1);
                self.seg = Some(k);
                self.seg_len = 0;
                // Truncating the older segment drops its bytes.
                self.seg_file = create_no_follow(&self.seg_path(k)).ok();
            }
            let n = (self.seg_cap - self.seg_len).min(bytes.len() as u64) as usize;
            if let Some(f) = &mut self.seg_file {
                let _ = f.write_all(&bytes[..n]);
            }
            self.seg_len += n as u64;
            bytes = &bytes[n..];
        }
    }

    /// Stream offset where the retained tail starts (= head length when nothing was dropped).
    pub fn tail_start(&self) -> u64 {
        match self.seg {
            Some(k) if k >= 1 => self.head_cap + (k - 1) * self.seg_cap,
            _ => self.head_len,
        }
    }

    /// Bytes dropped between the head and the tail so far.
    pub fn dropped(&self) -> u64 {
        self.tail_start() - self.head_len
    }

    fn pieces(&self) -> Vec<Piece> {
        let mut out = vec![Piece {
            stream_start: 0,
            len: self.head_len,
            file: self.path.clone(),
            file_offset: 0,
        }];
        let Some(k) = self.seg else {
            return out;
        };
        let tail_start = self.tail_start();
        let tail_len = self.total - tail_start;
        if let Some(off) = self.consolidated {
            out.push(Piece {
                stream_start: tail_start,
                len: tail_len,
                file: self.path.clone(),
                file_offset: off,
            });
            return out;
        }
        if k >= 1 {
            out.push(Piece {
                stream_start: tail_start,
                len: self.seg_cap,
                file: self.seg_path(k - 1),
                file_offset: 0,
            });
        }
        out.push(Piece {
            stream_start: self.head_cap + k * self.seg_cap,
            len: self.seg_len,
            file: self.seg_path(k),
            file_offset: 0,
        });
        out
    }

    /// At most `max` bytes from stream offset `since`, never across the dropped middle.
    pub fn read(&self, since: u64, max: u64) -> std::io::Result<ReadOut> {
        let mut from = since.min(self.total);
        let mut dropped = None;
        if from >= self.head_len && from < self.tail_start() {
            dropped = Some((self.head_len, self.tail_start()));
            from = self.tail_start();
        }
        let mut out = ReadOut {
            bytes: Vec::new(),
            start: from,
            dropped,
        };
        let end = self.total.min(from.saturating_add(max));
        let mut at = from;
        for p in self.pieces() {
            if at >= end {
                break;
            }
            let p_end = p.stream_start + p.len;
            if at < p.stream_start || at >= p_end {
                continue;
            }
            let n = end.min(p_end) - at;
            let mut f = File::open(&p.file)?;
            f.seek(SeekFrom::Start(p.file_offset + (at - p.stream_start)))?;
            let before = out.bytes.len();
            f.take(n).read_to_end(&mut out.bytes)?;
            let got = (out.bytes.len() - before) as u64;
            at += got;
            if got < n {
                break; // the file is shorter than expected (a failed write): stop there
            }
            if p_end == self.head_len && self.dropped() > 0 {
                break; // the head ends here; the next call reports the dropped range
            }
        }
        Ok(out)
    }

    /// The output ended: append the tail segments to the log file (behind a marker when bytes
    /// were dropped) and remove them. Idempotent.
    pub fn finish(&mut self) {
        if self.consolidated.is_some() || self.head.is_none() {
            return;
        }
        let Some(k) = self.seg else {
            self.head = None;
            return;
        };
        let dropped = self.dropped();
        let tail_start = self.tail_start();
        let mut f = match OpenOptions::new().append(true).open(&self.path) {
            Ok(f) => f,
            Err(_) => return,
        };
        let mut off = self.head_len;
        if dropped > 0 {
            let marker = format!(
                "\n… [kitbag: {dropped} bytes of output dropped here (stream bytes {}–{}); \
                 the log keeps the first {} and the last {} bytes] …\n",
                self.head_len,
                tail_start,
                self.head_len,
                self.total - tail_start,
            );
            let _ = f.write_all(marker.as_bytes());
            off += marker.len() as u64;
        }
        self.seg_file = None;
        let segs: Vec<PathBuf> = if k >= 1 {
            vec![self.seg_path(k - 1), self.seg_path(k)]
        } else {
            vec![self.seg_path(k)]
        };
        // Each segment is read, removed, then appended: the directory never holds a byte of
        // it twice, so it stays within the cap while the log is put together (copying first
        // and removing after briefly held head + 2 × tail).
        for s in &segs {
            let bytes = std::fs::read(s);
            let _ = std::fs::remove_file(s);
            if let Ok(bytes) = bytes {
                let _ = f.write_all(&bytes);
            }
        }
        let _ = f.flush();
        self.head = None;
        self.consolidated = Some(off);
    }
}

/// Create (truncating) a log file; a link planted under its name is refused, not followed.
fn create_no_follow(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(kitbag_shared::state::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)
}

/// The logs directory: the logs being written, and the limits applied when pruning.
pub struct LogDir {
    pub dir: PathBuf,
    pub keep: usize,
    /// Total bytes of the directory; 0: unbounded.
    pub max_total: u64,
    /// The most one log of this server grows to (0: unbounded). A log being written is counted
    /// at this size, so the total holds while it grows, not only at the prunes.
    pub per_log_max: u64,
    active: Mutex<HashSet<PathBuf>>,
}

impl LogDir {
    pub fn new(dir: PathBuf, keep: usize, max_total: u64, per_log_max: u64) -> Self {
        LogDir {
            dir,
            keep,
            max_total,
            per_log_max,
            active: Mutex::new(HashSet::new()),
        }
    }

    /// A command starts writing `log`: it is never pruned while written, and room for all of
    /// it is made now.
    pub fn begin(&self, log: &Path) {
        self.lock().insert(log.to_path_buf());
        self.prune();
    }

    /// The command's output ended: its log may now be pruned; prune.
    pub fn end(&self, log: &Path) {
        self.lock().remove(log);
        self.prune();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.active.locked()
    }

    /// Delete finished commands' logs, oldest first, while there are more than `keep` of them
    /// or the directory holds more than `max_total` bytes (this server's logs being written
    /// counted at `per_log_max`). Never a log being written by this server, nor one of another
    /// server that is still running (`PID-…` names). Returns the directory's size afterwards,
    /// counted the same way.
    pub fn prune(&self) -> u64 {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        // Files grouped by their log (`NAME.log` and its `NAME.log.tailN` segments).
        let mut groups: std::collections::HashMap<PathBuf, (std::time::SystemTime, u64)> =
            Default::default();
        let mut total = 0u64;
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if !md.is_file() {
                continue;
            }
            total += md.len();
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(i) = name.find(".log") else { continue };
            let rest = &name[i + 4..];
            if !(rest.is_empty() || rest.starts_with(".tail")) {
                continue;
            }
            let key = self.dir.join(&name[..i + 4]);
            let mtime = md.modified().unwrap_or(std::time::UNIX_EPOCH);
            let g = groups.entry(key).or_insert((mtime, 0));
            g.0 = g.0.max(mtime);
            g.1 += md.len();
        }
        let active = self.lock().clone();
        // Logs being written still grow: counted at the most they may hold.
        if self.per_log_max > 0 {
            for log in &active {
                let written = groups.get(log).map_or(0, |g| g.1);
                total += self.per_log_max.saturating_sub(written);
            }
        }
        let mut count = groups.len();
        let mut finished: Vec<(std::time::SystemTime, PathBuf, u64)> = groups
            .into_iter()
            .filter(|(p, _)| !active.contains(p) && !owner_running(p))
            .map(|(p, (t, n))| (t, p, n))
            .collect();
        finished.sort();
        let over = |count: usize, total: u64| {
            count > self.keep || (self.max_total > 0 && total > self.max_total)
        };
        for (_, log, size) in finished {
            if !over(count, total) {
                break;
            }
            let _ = std::fs::remove_file(&log);
            for k in 0..2 {
                let mut seg = log.clone().into_os_string();
                seg.push(format!(".tail{k}"));
                let _ = std::fs::remove_file(seg);
            }
            count -= 1;
            total = total.saturating_sub(size);
        }
        total
    }
}

/// Whether the log was written by another server process that is still alive (its commands
/// may be running). Log names start with the server's PID.
fn owner_running(log: &Path) -> bool {
    let Some(pid) = log
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return false;
    };
    pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn small_output_is_one_complete_file() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("a.log");
        let mut log = CappedLog::create(&p, 100, 400).expect("create");
        let s = stream(450);
        for c in s.chunks(7) {
            log.write(c);
        }
        assert_eq!(log.dropped(), 0);
        let r = log.read(0, 1000).expect("read");
        assert_eq!(r.bytes, s);
        log.finish();
        assert_eq!(std::fs::read(&p).expect("r"), s);
        assert_eq!(std::fs::read_dir(d.path()).expect("ls").count(), 1);
        assert_eq!(log.read(123, 1000).expect("read").bytes, &s[123..]);
    }

    #[test]
    fn big_output_keeps_head_and_tail_in_stream_coordinates() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("a.log");
        let mut log = CappedLog::create(&p, 100, 400).expect("create");
        let s = stream(10_000);
        for c in s.chunks(33) {
            log.write(c);
            let on_disk: u64 = std::fs::read_dir(d.path())
                .expect("ls")
                .map(|e| e.expect("e").metadata().expect("m").len())
                .sum();
            assert!(on_disk <= 500, "{on_disk}");
        }
        let ts = log.tail_start();
        assert!((10_000 - 400..=10_000 - 200).contains(&ts), "{ts}");
        assert_eq!(log.dropped(), ts - 100);
        let check = |log: &CappedLog| {
            let r = log.read(0, 1000).expect("read");
            assert_eq!(r.bytes, &s[..100], "the head, not across the gap");
            assert!(r.dropped.is_none());
            let r = log.read(100, 50).expect("read");
            assert_eq!(r.dropped, Some((100, ts)));
            assert_eq!(r.start, ts);
            assert_eq!(r.bytes, &s[ts as usize..ts as usize + 50]);
            let r = log.read(9_990, 50).expect("read");
            assert_eq!(r.bytes, &s[9_990..]);
            let r = log.read(ts + 10, 10_000).expect("read");
            assert_eq!(r.bytes, &s[ts as usize + 10..], "across both segments");
        };
        check(&log);
        log.finish();
        check(&log);
        let file = std::fs::read(&p).expect("r");
        assert!(file.starts_with(&s[..100]));
        assert!(file.ends_with(&s[ts as usize..]));
        assert!(String::from_utf8_lossy(&file).contains("bytes of output dropped here"));
        assert!(file.len() <= 100 + 400 + MARKER_RESERVE as usize);
        assert_eq!(std::fs::read_dir(d.path()).expect("ls").count(), 1);
    }
}
