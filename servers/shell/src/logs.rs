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
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// How many commands may begin between two reads of the logs directory. In between, the
/// directory is known from what this server wrote (see [`LogDir`]).
pub const RESCAN_EVERY: u32 = 64;

/// The logs directory: the logs being written, and the limits applied when pruning.
///
/// Pruning must not cost a command a read of the whole directory (a `stat` of each of up to
/// `keep` logs, twice per command; issue #43). The directory is read at server start and every
/// [`RESCAN_EVERY`] commands; in between a ledger of its logs is kept up to date from what
/// this server itself does — a log begun (counted at its cap), a log ended (its size read
/// back: one `stat` per file of it), a log deleted — so each prune decides from memory and
/// touches the disk only to delete. What another process adds in between (another server's
/// logs) is counted from the next read on.
///
/// The deletions a command's start decides on are carried out by [`LogDir::sweep`], which
/// the spawn calls once the shell is started — while the shell loads, before any of the new
/// command's output is written — rather than before it.
pub struct LogDir {
    pub dir: PathBuf,
    pub keep: usize,
    /// Total bytes of the directory; 0: unbounded.
    pub max_total: u64,
    /// The most one log of this server grows to (0: unbounded). A log being written is counted
    /// at this size, so the total holds while it grows, not only at the prunes.
    pub per_log_max: u64,
    ledger: Mutex<Ledger>,
}

/// What the logs directory holds, as far as this server knows.
#[derive(Default)]
struct Ledger {
    /// Each log (`NAME.log` with its `NAME.log.tailN` segments): newest modification time,
    /// bytes on disk. Logs being written are in here from the moment they begin.
    logs: HashMap<PathBuf, (SystemTime, u64)>,
    /// The same logs, oldest first (the order they are pruned in).
    order: BTreeSet<(SystemTime, PathBuf)>,
    /// Bytes of the directory's other files.
    other_bytes: u64,
    /// Logs being written by this server: never pruned.
    active: HashSet<PathBuf>,
    /// Commands begun since the directory was last read.
    since_scan: u32,
    /// Logs taken out of the ledger, to be deleted by the next [`LogDir::sweep`].
    doomed: Vec<PathBuf>,
}

impl LogDir {
    pub fn new(dir: PathBuf, keep: usize, max_total: u64, per_log_max: u64) -> Self {
        LogDir {
            dir,
            keep,
            max_total,
            per_log_max,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// A command starts writing `log`: it is never pruned while written, and room for all of
    /// it is made now (the logs that go are deleted by the next [`LogDir::sweep`]).
    pub fn begin(&self, log: &Path) {
        let mut l = self.ledger.locked();
        l.since_scan += 1;
        if l.since_scan >= RESCAN_EVERY {
            self.scan(&mut l);
        }
        l.active.insert(log.to_path_buf());
        l.set(log, Some((SystemTime::now(), 0)));
        self.prune_known(&mut l);
    }

    /// The command's output ended: its log may now be pruned; its size is read back; prune.
    pub fn end(&self, log: &Path) {
        let mut l = self.ledger.locked();
        l.active.remove(log);
        l.set(log, log_on_disk(log));
        self.prune_known(&mut l);
        drop(l);
        self.sweep();
    }

    /// Delete the logs that the last prunes took out of the ledger. (They stay listed until
    /// deleted, so that a read of the directory meanwhile does not count them again.)
    pub fn sweep(&self) {
        let doomed = self.ledger.locked().doomed.clone();
        if doomed.is_empty() {
            return;
        }
        for log in &doomed {
            let _ = std::fs::remove_file(log);
            for seg in segments(log) {
                let _ = std::fs::remove_file(seg);
            }
        }
        self.ledger.locked().doomed.retain(|d| !doomed.contains(d));
    }

    /// Read the directory, then delete finished commands' logs, oldest first, while there are
    /// more than `keep` of them or the directory holds more than `max_total` bytes (this
    /// server's logs being written counted at `per_log_max`). Never a log being written by
    /// this server, nor one of another server that is still running (`PID-…` names). Returns
    /// the directory's size afterwards, counted the same way.
    pub fn prune(&self) -> u64 {
        let total = {
            let mut l = self.ledger.locked();
            self.scan(&mut l);
            self.prune_known(&mut l)
        };
        self.sweep();
        total
    }

    /// The ledger from the directory as it is now (logs begun but not created yet kept).
    fn scan(&self, l: &mut Ledger) {
        l.since_scan = 0;
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut logs: HashMap<PathBuf, (SystemTime, u64)> = HashMap::new();
        let mut other = 0u64;
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if !md.is_file() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(key) = log_key(&name) else {
                other += md.len();
                continue;
            };
            let key = self.dir.join(key);
            if l.doomed.contains(&key) {
                continue; // gone with the next sweep
            }
            let mtime = md.modified().unwrap_or(UNIX_EPOCH);
            let g = logs.entry(key).or_insert((mtime, 0));
            g.0 = g.0.max(mtime);
            g.1 += md.len();
        }
        for a in &l.active {
            logs.entry(a.clone()).or_insert((SystemTime::now(), 0));
        }
        l.order = logs.iter().map(|(p, g)| (g.0, p.clone())).collect();
        l.logs = logs;
        l.other_bytes = other;
    }

    /// Prune by the ledger (see [`LogDir::prune`]); the total afterwards.
    fn prune_known(&self, l: &mut Ledger) -> u64 {
        let mut total = l.other_bytes + l.logs.values().map(|g| g.1).sum::<u64>();
        // Logs being written still grow: counted at the most they may hold.
        if self.per_log_max > 0 {
            for log in &l.active {
                let written = l.logs.get(log).map_or(0, |g| g.1);
                total += self.per_log_max.saturating_sub(written);
            }
        }
        let mut count = l.logs.len();
        let over = |count: usize, total: u64| {
            count > self.keep || (self.max_total > 0 && total > self.max_total)
        };
        if !over(count, total) {
            return total;
        }
        // Oldest first, past the logs that may not go; each owner looked up once.
        let mut owners: HashMap<u32, bool> = HashMap::new();
        let mut going = Vec::new();
        for (_, log) in &l.order {
            if !over(count, total) {
                break;
            }
            if l.active.contains(log) {
                continue;
            }
            if let Some(pid) = other_owner(log)
                && *owners.entry(pid).or_insert_with(|| pid_running(pid))
            {
                continue;
            }
            count -= 1;
            total = total.saturating_sub(l.logs.get(log).map_or(0, |g| g.1));
            going.push(log.clone());
        }
        for log in going {
            l.set(&log, None);
            l.doomed.push(log);
        }
        total
    }
}

impl Ledger {
    /// Record `log` as `entry` (newest modification time, bytes), or as gone.
    fn set(&mut self, log: &Path, entry: Option<(SystemTime, u64)>) {
        if let Some((t, _)) = self.logs.remove(log) {
            self.order.remove(&(t, log.to_path_buf()));
        }
        if let Some(e) = entry {
            self.logs.insert(log.to_path_buf(), e);
            self.order.insert((e.0, log.to_path_buf()));
        }
    }
}

/// `NAME.log` for a log's own file or one of its segments (`NAME.log.tailN`).
fn log_key(name: &str) -> Option<&str> {
    let i = name.find(".log")?;
    let rest = &name[i + 4..];
    (rest.is_empty() || rest.starts_with(".tail")).then(|| &name[..i + 4])
}

/// A log's tail segment files.
fn segments(log: &Path) -> [PathBuf; 2] {
    [0, 1].map(|k| {
        let mut seg = log.as_os_str().to_os_string();
        seg.push(format!(".tail{k}"));
        PathBuf::from(seg)
    })
}

/// A log's newest modification time and bytes on disk (its segments included), or `None`
/// when none of its files exists.
fn log_on_disk(log: &Path) -> Option<(SystemTime, u64)> {
    let mut found: Option<(SystemTime, u64)> = None;
    let [a, b] = segments(log);
    for f in [log.to_path_buf(), a, b] {
        let Ok(md) = std::fs::symlink_metadata(&f) else {
            continue;
        };
        if !md.is_file() {
            continue;
        }
        let mtime = md.modified().unwrap_or(UNIX_EPOCH);
        let g = found.get_or_insert((mtime, 0));
        g.0 = g.0.max(mtime);
        g.1 += md.len();
    }
    found
}

/// The PID of the server that wrote `log` when it is another process (log names start with
/// the server's PID): its commands may still be running.
fn other_owner(log: &Path) -> Option<u32> {
    let pid = log
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())?;
    (pid != std::process::id()).then_some(pid)
}

fn pid_running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    /// One command's life as the spawn and the pump tell the directory about it.
    fn command(dir: &LogDir, n: usize, bytes: usize) -> PathBuf {
        let log = dir.dir.join(format!("{}-{n:04}-0.log", std::process::id()));
        dir.begin(&log);
        std::fs::write(&log, vec![b'x'; bytes]).expect("w");
        dir.sweep();
        dir.end(&log);
        log
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("e").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_ledger_keeps_the_directory_bounded_between_reads() {
        let d = tempfile::tempdir().expect("tmp");
        let logs = LogDir::new(d.path().to_path_buf(), 3, 350, 100);
        logs.prune();
        let mut last = PathBuf::new();
        for n in 0..2 * RESCAN_EVERY as usize {
            if n == 10 {
                // Another (dead) server's log appears between two reads of the directory:
                // counted, and pruned as the oldest, once the directory is read again.
                let foreign = d.path().join("4194305-1-0.log");
                std::fs::write(&foreign, vec![b'f'; 10]).expect("w");
                filetime_past(&foreign);
            }
            last = command(&logs, n, 100);
            let names = listing(d.path());
            assert!(names.len() <= 4, "{n}: {names:?}");
            let bytes: u64 = std::fs::read_dir(d.path())
                .expect("ls")
                .map(|e| e.expect("e").metadata().expect("m").len())
                .sum();
            assert!(bytes <= 350, "{n}: {bytes}");
            assert!(last.exists(), "the newest log is kept");
        }
        let names = listing(d.path());
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            !names.iter().any(|n| n.starts_with("4194305-")),
            "{names:?}"
        );
        assert!(last.exists());
    }

    #[test]
    fn logs_being_written_are_never_pruned() {
        let d = tempfile::tempdir().expect("tmp");
        let logs = LogDir::new(d.path().to_path_buf(), 2, 0, 0);
        let old = command(&logs, 0, 10);
        let running: Vec<PathBuf> = (1..5)
            .map(|n| {
                let log = d
                    .path()
                    .join(format!("{}-{n:04}-0.log", std::process::id()));
                logs.begin(&log);
                std::fs::write(&log, b"r").expect("w");
                logs.sweep();
                log
            })
            .collect();
        assert!(!old.exists(), "the finished log made room");
        assert!(
            running.iter().all(|l| l.exists()),
            "{:?}",
            listing(d.path())
        );
        for l in &running {
            logs.end(l);
        }
        assert_eq!(listing(d.path()).len(), 2);
        assert!(running[2].exists() && running[3].exists());
    }

    /// Another live server's logs are never deleted, and passing them costs each prune one
    /// look per server, not one per log (issue #43: several servers sharing a directory).
    #[test]
    fn another_live_servers_logs_are_passed_over_cheaply() {
        let d = tempfile::tempdir().expect("tmp");
        // PID 1 runs as long as this test does.
        for n in 0..2000 {
            let f = d.path().join(format!("1-0-{n}.log"));
            std::fs::write(&f, b"o").expect("w");
            filetime_past(&f);
        }
        let logs = LogDir::new(d.path().to_path_buf(), 10, 0, 0);
        logs.prune();
        let t = std::time::Instant::now();
        for n in 0..2 * RESCAN_EVERY as usize {
            command(&logs, n, 10);
        }
        let took = t.elapsed();
        assert_eq!(
            listing(d.path()).len(),
            2000,
            "only this server's logs went"
        );
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }

    /// Back-date a file's modification time by an hour (oldest of the directory).
    fn filetime_past(p: &Path) {
        let f = File::options().write(true).open(p).expect("open");
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        f.set_modified(t).expect("mtime");
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
