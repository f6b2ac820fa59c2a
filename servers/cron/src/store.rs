//! The store: `<root>/.kitbag/cron.json` (entries, hand-editable) and the run history
//! `<root>/.kitbag/cron-runs.jsonl` (JSON lines, rotated to `.1`/`.2`).
//!
//! Every change is a read-modify-write under an exclusive `flock` on
//! `<root>/.kitbag/cron.lock`, and the file is replaced atomically (temp file, fsync,
//! rename): two processes on one store never lose each other's changes, and a reader never
//! sees half a file. Hand edits are picked up on the next read; an entry that does not
//! parse is kept as written (and reported), never dropped.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fs4::fs_std::FileExt;
use kitbag_shared::atomic::write_atomic;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Most entries one store holds.
pub const MAX_ENTRIES: usize = 10_000;
/// How long a change waits for the store lock before answering `file_busy`.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Rotated history files kept beside the live one.
const ROTATED_KEEP: usize = 2;

fn yes() -> bool {
    true
}

/// Default seconds a command action may run before its process group is killed.
pub const DEFAULT_COMMAND_TIMEOUT: u64 = 60;

fn default_timeout() -> u64 {
    DEFAULT_COMMAND_TIMEOUT
}

/// A shell command run when the entry fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandAction {
    /// Run with `/bin/sh -c` in the server's root.
    pub run: String,
    /// Seconds before its whole process group is killed.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

/// How a run came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Fired on time.
    Fired,
    /// Made up once at start-up (or after a long stall) for a run missed meanwhile.
    CaughtUp,
    /// Missed while the server was down and not made up (`catch_up: false`).
    Missed,
    /// Not fired: the entry's previous command was still running.
    SkippedBusy,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fired => "fired",
            Outcome::CaughtUp => "caught_up",
            Outcome::Missed => "missed",
            Outcome::SkippedBusy => "skipped_busy",
        }
    }
}

/// The latest run of an entry, kept in the entry itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LastRun {
    pub scheduled_at: DateTime<Utc>,
    pub fired_at: DateTime<Utc>,
    pub outcome: Outcome,
}

/// One cron entry as stored (the seed's shape plus scheduling state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub schedule: String,
    pub message: String,
    /// Session the firing is delivered to; empty means the entry's id.
    #[serde(default)]
    pub session: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// IANA zone; empty means the machine's.
    #[serde(default)]
    pub timezone: String,
    #[serde(default = "yes")]
    pub recurring: bool,
    #[serde(default = "yes")]
    pub catch_up: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    /// The latest scheduled instant already handled (fired, made up or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Fields a hand edit added, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Entry {
    pub fn session(&self) -> &str {
        if self.session.is_empty() {
            &self.id
        } else {
            &self.session
        }
    }

    pub fn timezone_or<'a>(&'a self, machine: &'a str) -> &'a str {
        if self.timezone.is_empty() {
            machine
        } else {
            &self.timezone
        }
    }
}

/// An element of `entries`: a usable entry, or one kept as written because it did not parse.
#[derive(Debug, Clone)]
pub enum Slot {
    Entry(Box<Entry>),
    Invalid { raw: Value, error: String },
}

/// The whole store file.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub next_id: u64,
    pub slots: Vec<Slot>,
}

impl Doc {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Doc::default());
        }
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let (next_id, items) = match v {
            Value::Array(items) => (0, items),
            Value::Object(mut m) => {
                let next = m.get("next_id").and_then(Value::as_u64).unwrap_or(0);
                match m.remove("entries") {
                    Some(Value::Array(items)) => (next, items),
                    None => (next, Vec::new()),
                    Some(_) => return Err("`entries` must be an array".into()),
                }
            }
            _ => return Err("the file must hold an object with `entries` (or an array)".into()),
        };
        let slots = items
            .into_iter()
            .map(|raw| match serde_json::from_value::<Entry>(raw.clone()) {
                Ok(e) if e.id.trim().is_empty() => Slot::Invalid {
                    raw,
                    error: "`id` is empty".into(),
                },
                Ok(e) => Slot::Entry(Box::new(e)),
                Err(e) => Slot::Invalid {
                    raw,
                    error: e.to_string(),
                },
            })
            .collect();
        let mut doc = Doc { next_id, slots };
        let max = doc
            .entries()
            .filter_map(|e| e.id.strip_prefix("cron-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        doc.next_id = doc.next_id.max(max + 1);
        Ok(doc)
    }

    pub fn to_json(&self) -> String {
        let entries: Vec<Value> = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Entry(e) => serde_json::to_value(e).unwrap_or(Value::Null),
                Slot::Invalid { raw, .. } => raw.clone(),
            })
            .collect();
        let v = json!({ "next_id": self.next_id.max(1), "entries": entries });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(|s| match s {
            Slot::Entry(e) => Some(e.as_ref()),
            Slot::Invalid { .. } => None,
        })
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.slots.iter_mut().find_map(|s| match s {
            Slot::Entry(e) if e.id == id => Some(e.as_mut()),
            _ => None,
        })
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries().find(|e| e.id == id)
    }

    /// Hand out the next `cron-N` id.
    pub fn allocate_id(&mut self) -> String {
        let mut n = self.next_id.max(1);
        while self.get(&format!("cron-{n}")).is_some() {
            n += 1;
        }
        self.next_id = n + 1;
        format!("cron-{n}")
    }
}

/// A recorded run (one JSON line in the history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecord {
    pub id: String,
    pub session: String,
    pub scheduled_at: DateTime<Utc>,
    pub fired_at: DateTime<Utc>,
    pub outcome: Outcome,
    /// A client was connected and the notification was sent.
    pub delivered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandOutcome>,
    /// The server process that fired it.
    pub pid: u32,
}

/// What a command action did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandOutcome {
    /// `ok` (exit 0), `failed` (non-zero exit or signal), `timed_out` (killed), `spawn_failed`,
    /// or `disabled` (the server runs with --no-commands).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// The last few KB of combined stdout and stderr.
    pub output_tail: String,
    /// Earlier output was dropped from `output_tail`.
    pub output_truncated: bool,
    /// How the command's processes were contained so all of them could be stopped:
    /// `cgroup-v2`, `cgroup-v1-freezer`, `subreaper` or `env-tag` (strongest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
}

/// Paths of one store.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
    pub file: PathBuf,
    lock: PathBuf,
    pub runs: PathBuf,
    runs_max_bytes: u64,
    /// The last parse, keyed by the file's identity (device, inode, size, mtime, ctime).
    cache: Arc<Mutex<Option<Cached>>>,
}

type FileId = (u64, u64, u64, i64, i64, i64, i64);
type Cached = (FileId, Arc<Doc>);

fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// An exclusive hold on the store; released on drop.
pub struct StoreLock {
    _file: File,
}

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::IoError,
        format!("{what} {}: {e}", path.display()),
    )
}

impl Store {
    pub fn new(root: &Path, runs_max_bytes: u64) -> Self {
        let dir = root.join(".kitbag");
        Self {
            file: dir.join("cron.json"),
            lock: dir.join("cron.lock"),
            runs: dir.join("cron-runs.jsonl"),
            dir,
            runs_max_bytes: runs_max_bytes.max(1024),
            cache: Arc::new(Mutex::new(None)),
        }
    }

    /// Take the exclusive store lock (waits up to 10 s, then `file_busy`).
    pub fn lock(&self) -> ToolResult<StoreLock> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io_err("cannot create", &self.dir, &e))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|e| io_err("cannot open", &self.lock, &e))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match FileExt::try_lock_exclusive(&file) {
                Ok(true) => return Ok(StoreLock { _file: file }),
                Ok(false) => {}
                Err(e) => return Err(io_err("cannot lock", &self.lock, &e)),
            }
            if Instant::now() > deadline {
                return Err(ToolError::new(
                    ErrorCode::FileBusy,
                    format!(
                        "{} is held by another process for more than 10 s; try again",
                        self.lock.display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Read the store as it is on disk (no lock needed: writes are atomic renames).
    pub fn load(&self) -> ToolResult<Doc> {
        let text = match std::fs::read_to_string(&self.file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Doc::default()),
            Err(e) => return Err(io_err("cannot read", &self.file, &e)),
        };
        Doc::parse(&text).map_err(|e| {
            ToolError::new(
                ErrorCode::IoError,
                format!(
                    "{} is not a valid cron store ({e}); fix or move it — nothing was changed",
                    self.file.display()
                ),
            )
        })
    }

    /// Like [`Store::load`], but reuses the last parse while the file is unchanged
    /// (same inode, size and timestamps). For reads only; changes use a fresh `load`.
    pub fn load_cached(&self) -> ToolResult<Arc<Doc>> {
        let meta = match std::fs::metadata(&self.file) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Arc::new(Doc::default()));
            }
            Err(e) => return Err(io_err("cannot read", &self.file, &e)),
        };
        let id = file_id(&meta);
        if let Some((cached_id, doc)) = &*self.cache.lock().unwrap_or_else(|p| p.into_inner())
            && *cached_id == id
        {
            return Ok(doc.clone());
        }
        let doc = Arc::new(self.load()?);
        // Keep it only if the file did not change while it was read.
        if let Ok(after) = std::fs::metadata(&self.file)
            && file_id(&after) == id
        {
            *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, doc.clone()));
        }
        Ok(doc)
    }

    pub fn save(&self, doc: &Doc, _lock: &StoreLock) -> ToolResult<()> {
        write_atomic(&self.file, doc.to_json().as_bytes(), true)
            .map_err(|e| io_err("cannot write", &self.file, &e))
    }

    /// Lock, read, change, write. `f` returning an error leaves the file untouched.
    pub fn update<T>(&self, f: impl FnOnce(&mut Doc) -> ToolResult<T>) -> ToolResult<T> {
        let lock = self.lock()?;
        let mut doc = self.load()?;
        let out = f(&mut doc)?;
        self.save(&doc, &lock)?;
        Ok(out)
    }

    fn rotated(&self, n: usize) -> PathBuf {
        self.dir.join(format!("cron-runs.{n}.jsonl"))
    }

    /// Append one run to the history, rotating first when the live file is full.
    /// Call with the store lock held.
    pub fn append_run(&self, rec: &RunRecord, _lock: &StoreLock) -> ToolResult<()> {
        let size = std::fs::metadata(&self.runs).map(|m| m.len()).unwrap_or(0);
        if size >= self.runs_max_bytes {
            for n in (1..ROTATED_KEEP).rev() {
                let _ = std::fs::rename(self.rotated(n), self.rotated(n + 1));
            }
            std::fs::rename(&self.runs, self.rotated(1))
                .map_err(|e| io_err("cannot rotate", &self.runs, &e))?;
        }
        let mut line = serde_json::to_string(rec)
            .map_err(|e| ToolError::internal(format!("run encoding: {e}")))?;
        line.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.runs)
            .map_err(|e| io_err("cannot open", &self.runs, &e))?;
        f.write_all(line.as_bytes())
            .map_err(|e| io_err("cannot append to", &self.runs, &e))
    }

    /// Runs newest first, optionally for one entry: `(page, total matching)`.
    pub fn read_runs(
        &self,
        id: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> ToolResult<(Vec<RunRecord>, usize)> {
        // Oldest file first, so the concatenation is in time order.
        let mut files: Vec<PathBuf> = (1..=ROTATED_KEEP).rev().map(|n| self.rotated(n)).collect();
        files.push(self.runs.clone());
        let mut all = Vec::new();
        for path in files {
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("cannot read", &path, &e)),
            };
            for line in BufReader::new(f).lines() {
                let Ok(line) = line else { break };
                let Ok(rec) = serde_json::from_str::<RunRecord>(&line) else {
                    continue; // a torn or hand-mangled line
                };
                if id.is_none_or(|want| rec.id == want) {
                    all.push(rec);
                }
            }
        }
        let total = all.len();
        let page = all.into_iter().rev().skip(offset).take(limit).collect();
        Ok((page, total))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(id: &str) -> Entry {
        serde_json::from_value(json!({"id": id, "schedule": "* * * * *", "message": "m"})).unwrap()
    }

    #[test]
    fn seed_shape_and_bare_array_load_and_unknown_or_bad_entries_survive() {
        let text = r#"[
          {"id": "cron-1", "schedule": "*/5 * * * *", "message": "Check", "session": "health-check", "enabled": true, "owner": "me"},
          {"schedule": "oops"}
        ]"#;
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.entries().count(), 1);
        let e = doc.get("cron-1").unwrap();
        assert_eq!(e.session(), "health-check");
        assert!(e.recurring && e.catch_up && e.enabled);
        assert_eq!(doc.next_id, 2);
        let out = doc.to_json();
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["entries"][0]["owner"], "me", "unknown fields are kept");
        assert_eq!(
            back["entries"][1],
            json!({"schedule": "oops"}),
            "bad entries are kept as written"
        );
        assert!(matches!(&doc.slots[1], Slot::Invalid { error, .. } if error.contains("id")));
    }

    #[test]
    fn ids_are_never_reused() {
        let mut doc = Doc::default();
        assert_eq!(doc.allocate_id(), "cron-1");
        doc.slots.push(Slot::Entry(Box::new(entry("cron-1"))));
        assert_eq!(doc.allocate_id(), "cron-2");
        doc.slots.clear();
        assert_eq!(doc.allocate_id(), "cron-3");
        let again = Doc::parse(&doc.to_json()).unwrap();
        assert_eq!(again.next_id, 4);
    }

    #[test]
    fn update_is_all_or_nothing_and_broken_files_are_not_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), 1 << 20);
        s.update(|doc| {
            doc.slots.push(Slot::Entry(Box::new(entry("cron-1"))));
            Ok(())
        })
        .unwrap();
        let r: ToolResult<()> = s.update(|doc| {
            doc.slots.clear();
            Err(ToolError::invalid_field("id", "nope"))
        });
        assert!(r.is_err());
        assert_eq!(s.load().unwrap().entries().count(), 1);
        std::fs::write(&s.file, "{ not json").unwrap();
        let e = s.update(|_| Ok(())).unwrap_err();
        assert_eq!(e.code, ErrorCode::IoError);
        assert_eq!(std::fs::read_to_string(&s.file).unwrap(), "{ not json");
    }

    #[test]
    fn cached_load_sees_every_rewrite() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), 1 << 20);
        assert_eq!(s.load_cached().unwrap().slots.len(), 0);
        s.update(|doc| {
            doc.slots.push(Slot::Entry(Box::new(entry("cron-1"))));
            Ok(())
        })
        .unwrap();
        let a = s.load_cached().unwrap();
        assert_eq!(a.entries().count(), 1);
        assert!(
            Arc::ptr_eq(&a, &s.load_cached().unwrap()),
            "unchanged file: reused"
        );
        // A hand edit in place (same inode) with other content.
        std::fs::write(&s.file, r#"{"entries": []}"#).unwrap();
        assert_eq!(s.load_cached().unwrap().entries().count(), 0);
        // A replacement by rename (as editors and the server do).
        s.update(|doc| {
            doc.slots.push(Slot::Entry(Box::new(entry("cron-2"))));
            Ok(())
        })
        .unwrap();
        assert!(s.load_cached().unwrap().get("cron-2").is_some());
    }

    #[test]
    fn lock_excludes_a_second_holder() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), 1 << 20);
        let held = s.lock().unwrap();
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            let started = Instant::now();
            let _l = s2.lock().unwrap();
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let waited = t.join().unwrap();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
    }

    #[test]
    fn history_rotates_and_reads_newest_first() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), 1024);
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        for i in 0..60 {
            let lock = s.lock().unwrap();
            let rec = RunRecord {
                id: format!("cron-{}", i % 2 + 1),
                session: "s".into(),
                scheduled_at: t0 + chrono::TimeDelta::minutes(i),
                fired_at: t0 + chrono::TimeDelta::minutes(i),
                outcome: Outcome::Fired,
                delivered: true,
                command: None,
                pid: 1,
            };
            s.append_run(&rec, &lock).unwrap();
        }
        assert!(s.rotated(1).exists() && s.rotated(2).exists());
        assert!(!s.rotated(3).exists(), "only two rotated files are kept");
        assert!(std::fs::metadata(&s.runs).unwrap().len() <= 1024 + 300);
        let (page, total) = s.read_runs(None, 0, 5).unwrap();
        assert!(
            total < 60 && total > 10,
            "old generations were dropped: {total}"
        );
        assert_eq!(page.len(), 5);
        assert_eq!(page[0].scheduled_at, t0 + chrono::TimeDelta::minutes(59));
        assert!(
            page.windows(2)
                .all(|w| w[0].scheduled_at > w[1].scheduled_at)
        );
        let (only, _) = s.read_runs(Some("cron-1"), 0, 100).unwrap();
        assert!(only.iter().all(|r| r.id == "cron-1"));
        let (second, _) = s.read_runs(None, 5, 5).unwrap();
        assert_eq!(second[0].scheduled_at, t0 + chrono::TimeDelta::minutes(54));
    }
}
