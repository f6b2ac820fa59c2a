//! The store: `<root>/.kitbag/cron.db` (SQLite, WAL) holds the entries; the run history is
//! `<root>/.kitbag/cron-runs.jsonl` (JSON lines, rotated to `.1`/`.2`).
//!
//! Every change is one IMMEDIATE transaction that touches the rows it changes by key, so a
//! change costs the same with ten entries or ten thousand, and several processes on one
//! store never lose each other's changes; readers never wait for writers (WAL) and never see
//! half a change. A `cron.json` — the store of earlier versions, or entries written by hand
//! in the seed's shape — is imported on sight (entries replace those with the same id) and
//! kept as `cron.json.bak`; an entry in it that does not parse is kept as written and
//! reported, never dropped.

use kitbag_shared::lock::LockExt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fs4::fs_std::FileExt;
use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::sqlite::{self, StateDb};
use kitbag_shared::state::{OFlags, Stat, StateDir};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Most entries one store holds.
pub const MAX_ENTRIES: usize = 10_000;
/// How long a change waits for another process's before answering `file_busy`.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Rotated history files kept beside the live one.
const ROTATED_KEEP: usize = 2;

// The store's files, all in `<root>/.kitbag`.
const DB: &str = "cron.db";
const LEGACY: &str = "cron.json";
const IMPORTING: &str = "cron.json.importing";
const LOCK: &str = "cron.lock";
const RUNS: &str = "cron-runs.jsonl";

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

impl Slot {
    /// A stored row (both backends keep an entry as its JSON body, plus the error of one kept
    /// as written).
    pub fn of_row(body: &str, error: Option<String>) -> Slot {
        let raw =
            || serde_json::from_str::<Value>(body).unwrap_or_else(|_| Value::String(body.into()));
        match error {
            Some(error) => Slot::Invalid { raw: raw(), error },
            None => match serde_json::from_str::<Entry>(body) {
                Ok(e) => Slot::Entry(Box::new(e)),
                Err(e) => Slot::Invalid {
                    raw: raw(),
                    error: e.to_string(),
                },
            },
        }
    }
}

/// The whole store: every entry, in creation order.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub next_id: u64,
    pub slots: Vec<Slot>,
}

/// Why a `cron.json` cannot be read as a store.
#[derive(Debug)]
pub enum DocError {
    Json(serde_json::Error),
    EntriesNotArray,
    NotAStore,
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Json(e) => e.fmt(f),
            DocError::EntriesNotArray => f.write_str("`entries` must be an array"),
            DocError::NotAStore => f.write_str(
                "write an array of entries, one entry object ({\"id\": \"cron-1\", \"schedule\": \"*/5 * * * *\", \"message\": \"…\"}), or {\"next_id\": N, \"entries\": [...]}",
            ),
        }
    }
}

impl std::error::Error for DocError {}

/// What to write for an entry of a hand-written `cron.json` without a usable id.
const ID_HINT: &str =
    "give each entry an `id` no other entry has (e.g. \"cron-7\"), or create it with cron_create";

/// An object holding entry fields (`schedule`, `message`, `id`): one entry, not a store.
fn looks_like_entry(m: &Map<String, Value>) -> bool {
    ["schedule", "message", "id"]
        .iter()
        .any(|k| m.contains_key(*k))
}

impl Doc {
    pub fn parse(text: &str) -> Result<Self, DocError> {
        if text.trim().is_empty() {
            return Ok(Doc::default());
        }
        let v: Value = serde_json::from_str(text).map_err(DocError::Json)?;
        let (next_id, items) = match v {
            Value::Array(items) => (0, items),
            // One entry written as the seed prints it: that entry.
            Value::Object(m) if !m.contains_key("entries") && looks_like_entry(&m) => {
                (0, vec![Value::Object(m)])
            }
            Value::Object(mut m) => {
                let next = m.get("next_id").and_then(Value::as_u64).unwrap_or(0);
                match m.remove("entries") {
                    Some(Value::Array(items)) => (next, items),
                    // `{}` or `{"next_id": N}`: a store without entries.
                    None if m.keys().all(|k| k == "next_id") => (next, Vec::new()),
                    None => return Err(DocError::NotAStore),
                    Some(_) => return Err(DocError::EntriesNotArray),
                }
            }
            _ => return Err(DocError::NotAStore),
        };
        let slots = items
            .into_iter()
            .map(|raw| match serde_json::from_value::<Entry>(raw.clone()) {
                Ok(e) if e.id.trim().is_empty() => Slot::Invalid {
                    raw,
                    error: format!("`id` is empty; {ID_HINT}"),
                },
                Err(_) if raw.is_object() && raw.get("id").is_none() => Slot::Invalid {
                    raw,
                    error: format!("`id` is missing; {ID_HINT}"),
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

/// Version of the database layout (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// One row per entry, in creation order. An entry that did not parse when it was imported
/// from a hand-written `cron.json` is kept as written (`id` NULL, `error` set), never dropped.
/// `meta` holds `next_id`, the row `count` (kept by triggers, so the entry cap costs no scan)
/// and `import`, the identity of the last imported `cron.json`.
const SCHEMA: &str = "
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    body TEXT NOT NULL,
    error TEXT
);
CREATE TABLE meta (
    k TEXT PRIMARY KEY,
    v
);
INSERT INTO meta (k, v) VALUES ('next_id', 1), ('count', 0), ('import', '');
CREATE TRIGGER entries_count_insert AFTER INSERT ON entries BEGIN
    UPDATE meta SET v = v + 1 WHERE k = 'count';
END;
CREATE TRIGGER entries_count_delete AFTER DELETE ON entries BEGIN
    UPDATE meta SET v = v - 1 WHERE k = 'count';
END;
";

/// The store: the entries database, the legacy file it imports, the history files.
///
/// The paths below are for messages. Every file is reached through `.kitbag` opened beneath
/// the root's descriptor without following links, afresh for each operation (the SQLite
/// connection keeps the directory it was opened through): a program renaming `.kitbag` and
/// planting a link cannot make the store read or write outside the root (issue #22).
#[derive(Clone)]
pub struct Store {
    policy: PathPolicy,
    pub dir: PathBuf,
    /// The entries database, `<root>/.kitbag/cron.db`.
    pub file: PathBuf,
    /// A `cron.json` (the old store, or one written by hand) imported on sight.
    pub legacy: PathBuf,
    lock: PathBuf,
    pub runs: PathBuf,
    runs_max_bytes: u64,
    writable: bool,
    db: Arc<Mutex<Option<Open>>>,
    /// The last read, keyed by the file's identity, `PRAGMA data_version` (other
    /// connections' commits) and this process's own commits.
    cache: Arc<Mutex<Option<CachedDoc>>>,
    /// Commits made through this store (they do not change `data_version`).
    writes: Arc<AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("file", &self.file).finish()
    }
}

type FileIdent = (u64, u64);
type CacheKey = (FileIdent, i64, u64);
type CachedDoc = (CacheKey, Arc<Doc>);

struct Open {
    conn: StateDb,
    ident: FileIdent,
}

/// An exclusive hold on `cron.lock` (history appends and imports); released on drop.
pub struct StoreLock {
    _file: File,
}

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ToolError {
    ToolError::new(
        ErrorCode::IoError,
        format!("{what} {}: {e}", path.display()),
    )
}

#[allow(clippy::unnecessary_cast)] // `st_dev`/`st_ino` widths differ between architectures
fn ident_of(st: &Stat) -> FileIdent {
    (st.st_dev as u64, st.st_ino as u64)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// A change in progress: one IMMEDIATE transaction, committed when the closure returns `Ok`.
/// Every method touches one row by key (or one `meta` row): its cost does not grow with the
/// number of entries.
pub struct Tx<'a> {
    tx: Transaction<'a>,
    store: &'a Store,
}

impl Tx<'_> {
    fn err(&self, e: rusqlite::Error) -> ToolError {
        self.store.db_err(e)
    }

    fn meta_int(&self, k: &str) -> ToolResult<u64> {
        let v: i64 = self
            .tx
            .query_row("SELECT v FROM meta WHERE k = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?
            .unwrap_or(0);
        Ok(v.max(0) as u64)
    }

    /// Rows in the store (unparsable ones included).
    pub fn count(&self) -> ToolResult<usize> {
        Ok(self.meta_int("count")? as usize)
    }

    /// The entry with this id (None when absent or its stored body does not parse).
    pub fn get(&self, id: &str) -> ToolResult<Option<Entry>> {
        let body: Option<String> = self
            .tx
            .query_row(
                "SELECT body FROM entries WHERE id = ?1 AND error IS NULL",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(body.and_then(|b| serde_json::from_str(&b).ok()))
    }

    fn encode(e: &Entry) -> ToolResult<String> {
        serde_json::to_string(e)
            .map_err(|err| ToolError::internal(format!("entry encoding: {err}")))
    }

    /// Replace a stored entry (by its id); false when there is none.
    pub fn put(&self, e: &Entry) -> ToolResult<bool> {
        let n = self
            .tx
            .execute(
                "UPDATE entries SET body = ?2, error = NULL WHERE id = ?1",
                params![e.id, Self::encode(e)?],
            )
            .map_err(|err| self.err(err))?;
        Ok(n > 0)
    }

    /// Add an entry after all others (its id must be new).
    pub fn insert(&self, e: &Entry) -> ToolResult<()> {
        self.tx
            .execute(
                "INSERT INTO entries (id, body) VALUES (?1, ?2)",
                params![e.id, Self::encode(e)?],
            )
            .map_err(|err| self.err(err))?;
        Ok(())
    }

    fn insert_invalid(&self, raw: &Value, error: &str) -> ToolResult<()> {
        self.tx
            .execute(
                "INSERT INTO entries (id, body, error) VALUES (NULL, ?1, ?2)",
                params![raw.to_string(), error],
            )
            .map_err(|err| self.err(err))?;
        Ok(())
    }

    /// Delete an entry; false when there is none.
    pub fn remove(&self, id: &str) -> ToolResult<bool> {
        let n = self
            .tx
            .execute("DELETE FROM entries WHERE id = ?1", [id])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Hand out the next `cron-N` id (never one used before in this store).
    pub fn allocate_id(&self) -> ToolResult<String> {
        let mut n = self.meta_int("next_id")?.max(1);
        loop {
            let id = format!("cron-{n}");
            let taken: bool = self
                .tx
                .query_row("SELECT 1 FROM entries WHERE id = ?1", [&id], |_| Ok(()))
                .optional()
                .map_err(|e| self.err(e))?
                .is_some();
            if !taken {
                self.set_next_id(n + 1)?;
                return Ok(id);
            }
            n += 1;
        }
    }

    fn set_next_id(&self, n: u64) -> ToolResult<()> {
        self.tx
            .execute(
                "UPDATE meta SET v = max(v, ?1) WHERE k = 'next_id'",
                [n as i64],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The first few ids, for an error message that names some.
    pub fn some_ids(&self, n: usize) -> ToolResult<Vec<String>> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT id FROM entries WHERE id IS NOT NULL AND error IS NULL ORDER BY seq LIMIT ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([n as i64], |r| r.get::<_, String>(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }
}

impl Store {
    pub fn new(policy: &PathPolicy, runs_max_bytes: u64) -> Self {
        let dir = policy.root().join(".kitbag");
        Self {
            policy: policy.clone(),
            file: dir.join(DB),
            legacy: dir.join(LEGACY),
            lock: dir.join(LOCK),
            runs: dir.join(RUNS),
            dir,
            runs_max_bytes: runs_max_bytes.max(1024),
            writable: true,
            db: Arc::new(Mutex::new(None)),
            cache: Arc::new(Mutex::new(None)),
            writes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A store this process must not change (`--read-only`): the database is opened
    /// read-only, never created, and a `cron.json` is read in place instead of imported.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.writable = !read_only;
        self
    }

    /// Where a `cron.json` is moved while it is being imported.
    fn importing(&self) -> PathBuf {
        self.dir.join(IMPORTING)
    }

    /// `.kitbag`, opened beneath the root for one operation (made when `create`); `None` when
    /// it does not exist and `create` is false.
    fn state_dir(&self, create: bool) -> ToolResult<Option<StateDir>> {
        match StateDir::open(&self.policy, &self.dir, create) {
            Ok(d) => Ok(Some(d)),
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot open", &self.dir, &e)),
        }
    }

    fn made_dir(&self) -> ToolResult<StateDir> {
        self.state_dir(true)?
            .ok_or_else(|| ToolError::internal("the state directory could not be made"))
    }

    fn db_err(&self, e: rusqlite::Error) -> ToolError {
        if is_busy(&e) {
            return ToolError::new(
                ErrorCode::FileBusy,
                format!(
                    "{} is held by another process for more than 10 s; try again",
                    self.file.display()
                ),
            );
        }
        ToolError::new(
            ErrorCode::IoError,
            format!("cron store {}: {e}", self.file.display()),
        )
    }

    /// Take the exclusive `cron.lock` (waits up to 10 s, then `file_busy`). Guards the run
    /// history and imports; entries are guarded by the database's own lock.
    pub fn lock(&self) -> ToolResult<StoreLock> {
        let file = self
            .made_dir()?
            .open_file(LOCK, OFlags::WRONLY | OFlags::CREATE)
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

    /// Open the database in `dir` (creating and preparing it when `create`).
    fn open(&self, dir: StateDir, create: bool) -> ToolResult<StateDb> {
        let fail = |e: rusqlite::Error| {
            ToolError::new(
                ErrorCode::IoError,
                format!(
                    "{} is not a usable cron store ({e}); move it away to start a new one",
                    self.file.display()
                ),
            )
        };
        let dir = Arc::new(dir);
        if !create {
            let conn = StateDb::open(
                dir,
                DB,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(fail)?;
            conn.busy_timeout(LOCK_WAIT).map_err(fail)?;
            return Ok(conn);
        }
        let conn = StateDb::open(dir, DB, sqlite::read_write_create()).map_err(fail)?;
        conn.busy_timeout(LOCK_WAIT).map_err(fail)?;
        // Switching a new file to WAL takes a lock SQLite does not wait for (the busy timeout
        // is not consulted): a server starting beside another retries briefly.
        kitbag_shared::lock::retry_while_busy(LOCK_WAIT, is_busy, || {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        })
        .map_err(fail)?;
        conn.execute_batch("PRAGMA synchronous=NORMAL;")
            .map_err(fail)?;
        self.migrate(&conn).map_err(|e| match e {
            MigrateError::Sql(e) if is_busy(&e) => self.db_err(e),
            MigrateError::Sql(e) => fail(e),
            MigrateError::Foreign(msg) => ToolError::new(
                ErrorCode::IoError,
                format!(
                    "{} is not a kitbag-cron store ({msg}); move it away to start a new one",
                    self.file.display()
                ),
            ),
        })?;
        Ok(conn)
    }

    fn migrate(&self, conn: &Connection) -> Result<(), MigrateError> {
        let version =
            |c: &Connection| c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
        let v = version(conn)?;
        if v == SCHEMA_VERSION {
            return Ok(());
        }
        if v > SCHEMA_VERSION {
            return Err(MigrateError::Foreign(format!(
                "layout version {v} is newer than this kitbag-cron understands"
            )));
        }
        // IMMEDIATE: two servers starting on a new store must not both create it.
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        if version(&tx)? == 0 {
            let tables: i64 = tx.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )?;
            if tables > 0 {
                return Err(MigrateError::Foreign("it holds other tables".into()));
            }
            tx.execute_batch(SCHEMA)?;
            tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Run `f` on the open database, opening it first (and reopening it when the file was
    /// replaced or removed). A `cron.json` lying beside it is imported first. Without
    /// `create`, a missing database is `Ok(None)` and nothing is created.
    fn with_db<T>(
        &self,
        create: bool,
        f: impl FnOnce(&mut Connection, FileIdent) -> ToolResult<T>,
    ) -> ToolResult<Option<T>> {
        let mut slot = self.db.locked();
        if self.writable {
            self.import_legacy(&mut slot)?;
        }
        let open = self.ensure_open(&mut slot, create && self.writable)?;
        match open {
            Some(o) => f(&mut o.conn, o.ident).map(Some),
            None => Ok(None),
        }
    }

    fn ensure_open<'a>(
        &self,
        slot: &'a mut Option<Open>,
        create: bool,
    ) -> ToolResult<Option<&'a mut Open>> {
        let Some(dir) = self.state_dir(create)? else {
            *slot = None;
            return Ok(None);
        };
        let ident = |dir: &StateDir| match dir.stat(DB) {
            Ok(st) => Ok(st.as_ref().map(ident_of)),
            Err(e) => Err(io_err("cannot read", &self.file, &e)),
        };
        let current = ident(&dir)?;
        if slot.as_ref().map(|o| o.ident) != current || current.is_none() {
            *slot = None;
            if current.is_none() && !create {
                return Ok(None);
            }
            let conn = self.open(dir, self.writable)?;
            let Some(ident) = ident(conn.dir())? else {
                return Err(ToolError::internal(format!(
                    "{} disappeared while it was being opened",
                    self.file.display()
                )));
            };
            *slot = Some(Open { conn, ident });
        }
        Ok(slot.as_mut())
    }

    /// Import a `cron.json` (the store of earlier versions, or entries written by hand in the
    /// seed's shape) into the database, then keep the file as `cron.json.bak` (`.bak.2`, …).
    /// Entries replace those with the same id; the others are added. The file is claimed by
    /// renaming it (one process wins), and the import is recorded in the same transaction
    /// as the entries, so it happens exactly once even when the process dies half-way.
    fn import_legacy(&self, slot: &mut Option<Open>) -> ToolResult<()> {
        let claimed = self.importing();
        let Some(dir) = self.state_dir(false)? else {
            return Ok(());
        };
        let exists = |name: &str, shown: &Path| {
            dir.exists(name)
                .map_err(|e| io_err("cannot read", shown, &e))
        };
        if !exists(IMPORTING, &claimed)? {
            match dir.stat(LEGACY) {
                Ok(Some(st)) if st.st_size > 0 => {}
                Ok(_) => return Ok(()), // missing, or empty: being written, nothing to import
                Err(e) => return Err(io_err("cannot read", &self.legacy, &e)),
            }
        }
        let _lock = self.lock()?;
        let leftover = exists(IMPORTING, &claimed)?;
        if !leftover && !self.claim_legacy(&dir)? {
            return Ok(());
        }
        let (bytes, m) =
            read_file(&dir, IMPORTING).map_err(|e| io_err("cannot read", &claimed, &e))?;
        let mark = import_mark(&bytes, &m);
        let imported = self.import_claimed(slot, &dir, &bytes, &mark, leftover)?;
        let backup = self.keep_backup(&dir)?;
        tracing::info!(
            "imported {imported} entries from {} into {}; the file is kept as {}",
            self.legacy.display(),
            self.file.display(),
            backup.display()
        );
        Ok(())
    }

    /// Check the legacy file and claim it by renaming it to `IMPORTING`; false when there is
    /// nothing to import (gone, or empty).
    fn claim_legacy(&self, dir: &StateDir) -> ToolResult<bool> {
        let text = match read_file(dir, LEGACY) {
            Ok(t) => String::from_utf8_lossy(&t.0).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("cannot read", &self.legacy, &e)),
        };
        if text.trim().is_empty() {
            return Ok(false);
        }
        // A broken file is left as it is, and reported on every call until it is fixed.
        Doc::parse(&text).map_err(|e| self.invalid_legacy(&e))?;
        match dir.rename(LEGACY, IMPORTING) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err("cannot move", &self.legacy, &e)),
        }
    }

    /// Import the claimed file's entries in one transaction that also records `mark`, unless
    /// that mark shows a leftover claim was imported already. Returns the entries imported.
    fn import_claimed(
        &self,
        slot: &mut Option<Open>,
        dir: &StateDir,
        bytes: &[u8],
        mark: &str,
        leftover: bool,
    ) -> ToolResult<usize> {
        let Some(open) = self.ensure_open(slot, true)? else {
            return Err(ToolError::internal("the cron store could not be created"));
        };
        let tx = open
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.db_err(e))?;
        let tx = Tx { tx, store: self };
        let done: String = tx
            .tx
            .query_row("SELECT v FROM meta WHERE k = 'import'", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.db_err(e))?
            .unwrap_or_default();
        // A leftover claim whose import was committed: the process died before moving
        // the file away. Do not import it twice.
        let already = leftover && done == mark;
        let mut n = 0;
        if !already {
            let text = String::from_utf8_lossy(bytes);
            let doc = match Doc::parse(&text) {
                Ok(d) => d,
                Err(e) => {
                    drop(tx);
                    self.unclaim(dir);
                    return Err(self.invalid_legacy(&e));
                }
            };
            for s in &doc.slots {
                match s {
                    Slot::Entry(e) => {
                        if !tx.put(e)? {
                            tx.insert(e)?;
                        }
                    }
                    Slot::Invalid { raw, error } => tx.insert_invalid(raw, error)?,
                }
                n += 1;
            }
            tx.set_next_id(doc.next_id)?;
        }
        tx.tx
            .execute("UPDATE meta SET v = ?1 WHERE k = 'import'", [mark])
            .map_err(|e| self.db_err(e))?;
        tx.tx.commit().map_err(|e| self.db_err(e))?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }

    fn invalid_legacy(&self, e: &DocError) -> ToolError {
        ToolError::new(
            ErrorCode::IoError,
            format!(
                "{} is not a valid cron store ({e}); fix or move it — it was not imported and nothing was changed",
                self.legacy.display()
            ),
        )
    }

    /// Put a claimed file back (unless a new `cron.json` appeared meanwhile).
    fn unclaim(&self, dir: &StateDir) {
        if dir.hard_link(IMPORTING, LEGACY).is_ok() {
            let _ = dir.remove(IMPORTING);
        }
    }

    /// Move an imported file to the first free `cron.json.bak[.N]`, never over another.
    fn keep_backup(&self, dir: &StateDir) -> ToolResult<PathBuf> {
        let claimed = self.importing();
        for n in 1..10_000 {
            let name = if n == 1 {
                "cron.json.bak".to_string()
            } else {
                format!("cron.json.bak.{n}")
            };
            match dir.hard_link(IMPORTING, &name) {
                Ok(()) => {
                    dir.remove(IMPORTING)
                        .map_err(|e| io_err("cannot remove", &claimed, &e))?;
                    return Ok(self.dir.join(name));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err("cannot keep a backup of", &claimed, &e)),
            }
        }
        Err(ToolError::new(
            ErrorCode::IoError,
            format!("too many cron.json.bak files in {}", self.dir.display()),
        ))
    }

    /// Read every row, in creation order.
    fn read_doc(&self, conn: &Connection) -> ToolResult<Doc> {
        let next_id: i64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'next_id'", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.db_err(e))?
            .unwrap_or(1);
        let mut st = conn
            .prepare_cached("SELECT body, error FROM entries ORDER BY seq")
            .map_err(|e| self.db_err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .map_err(|e| self.db_err(e))?;
        let mut slots = Vec::new();
        for row in rows {
            let (body, error) = row.map_err(|e| self.db_err(e))?;
            slots.push(Slot::of_row(&body, error));
        }
        Ok(Doc {
            next_id: next_id.max(1) as u64,
            slots,
        })
    }

    /// Read the whole store (a missing database is an empty store; nothing is created).
    pub fn load(&self) -> ToolResult<Doc> {
        match self.with_db(false, |conn, _| self.read_doc(conn))? {
            Some(doc) => Ok(doc),
            None => self.load_legacy(),
        }
    }

    /// A read-only server with no database reads a `cron.json` in place.
    fn load_legacy(&self) -> ToolResult<Doc> {
        if self.writable {
            return Ok(Doc::default());
        }
        let Some(dir) = self.state_dir(false)? else {
            return Ok(Doc::default());
        };
        let text = match read_file(&dir, LEGACY) {
            Ok((t, _)) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Doc::default()),
            Err(e) => return Err(io_err("cannot read", &self.legacy, &e)),
        };
        Doc::parse(&text).map_err(|e| self.invalid_legacy(&e))
    }

    /// Like [`Store::load`], but reuses the last read while nothing was committed since
    /// (by this process or another). For reads only; changes go through [`Store::write`].
    pub fn load_cached(&self) -> ToolResult<Arc<Doc>> {
        let got = self.with_db(false, |conn, ident| {
            let dv: i64 = conn
                .query_row("PRAGMA data_version", [], |r| r.get(0))
                .map_err(|e| self.db_err(e))?;
            let key = (ident, dv, self.writes.load(Ordering::SeqCst));
            if let Some((k, doc)) = &*self.cache.locked()
                && *k == key
            {
                return Ok(doc.clone());
            }
            let doc = Arc::new(self.read_doc(conn)?);
            *self.cache.locked() = Some((key, doc.clone()));
            Ok(doc)
        })?;
        match got {
            Some(doc) => Ok(doc),
            None => Ok(Arc::new(self.load_legacy()?)),
        }
    }

    /// Change the store in one IMMEDIATE transaction (waits up to 10 s for another
    /// process's, then `file_busy`). `f` returning an error changes nothing.
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> ToolResult<T>) -> ToolResult<T> {
        if !self.writable {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("the cron store {} is read-only", self.file.display()),
            ));
        }
        let out = self.with_db(true, |conn, _| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.db_err(e))?;
            let tx = Tx { tx, store: self };
            let out = f(&tx)?;
            tx.tx.commit().map_err(|e| self.db_err(e))?;
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(out)
        })?;
        out.ok_or_else(|| ToolError::internal("the cron store could not be created"))
    }

    fn rotated(n: usize) -> String {
        format!("cron-runs.{n}.jsonl")
    }

    /// Append one run to the history, rotating first when the live file is full.
    /// Call with the store lock held.
    pub fn append_run(&self, rec: &RunRecord, _lock: &StoreLock) -> ToolResult<()> {
        let dir = self.made_dir()?;
        let size = dir
            .stat(RUNS)
            .ok()
            .flatten()
            .map_or(0, |st| st.st_size as u64);
        if size >= self.runs_max_bytes {
            for n in (1..ROTATED_KEEP).rev() {
                let _ = dir.rename(Self::rotated(n), Self::rotated(n + 1));
            }
            dir.rename(RUNS, Self::rotated(1))
                .map_err(|e| io_err("cannot rotate", &self.runs, &e))?;
        }
        let mut line = serde_json::to_string(rec)
            .map_err(|e| ToolError::internal(format!("run encoding: {e}")))?;
        line.push('\n');
        let mut f = dir
            .open_file(RUNS, OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND)
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
        let Some(dir) = self.state_dir(false)? else {
            return Ok((Vec::new(), 0));
        };
        // Oldest file first, so the concatenation is in time order.
        let mut files: Vec<String> = (1..=ROTATED_KEEP).rev().map(Self::rotated).collect();
        files.push(RUNS.to_string());
        let mut all = Vec::new();
        for name in files {
            let f = match dir.open_file(&name, OFlags::RDONLY) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("cannot read", &self.dir.join(&name), &e)),
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

enum MigrateError {
    Sql(rusqlite::Error),
    Foreign(String),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sql(e)
    }
}

/// What identifies one claimed file's content: device, inode, size, mtime and a hash.
fn import_mark(bytes: &[u8], m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}:{}:{}:{}:{:016x}",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime_nsec() + m.mtime() * 1_000_000_000,
        xxhash_rust::xxh3::xxh3_64(bytes)
    )
}

/// Read the whole file `name` in `dir` (a link there is refused), with its metadata.
fn read_file(dir: &StateDir, name: &str) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    let mut f = dir.open_file(name, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let m = f.metadata()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok((bytes, m))
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

    fn store_at(root: &Path) -> Store {
        Store::new(&PathPolicy::new(root, &[], false).unwrap(), 1 << 20)
    }

    fn add(s: &Store, id: &str) {
        s.write(|tx| tx.insert(&entry(id))).unwrap();
    }

    #[test]
    fn writes_are_all_or_nothing_and_ids_are_never_reused() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        assert!(!s.file.exists(), "reading creates nothing");
        assert_eq!(s.load().unwrap().slots.len(), 0);
        assert!(!s.file.exists());
        let id = s
            .write(|tx| {
                let id = tx.allocate_id()?;
                tx.insert(&entry(&id))?;
                Ok(id)
            })
            .unwrap();
        assert_eq!(id, "cron-1");
        let r: ToolResult<()> = s.write(|tx| {
            assert!(tx.remove("cron-1")?);
            tx.insert(&entry("cron-7"))?;
            Err(ToolError::invalid_field("id", "nope"))
        });
        assert!(r.is_err());
        let doc = s.load().unwrap();
        assert_eq!(doc.entries().count(), 1, "the failed change left nothing");
        assert!(doc.get("cron-1").is_some());
        s.write(|tx| {
            let id = tx.allocate_id()?;
            tx.insert(&entry(&id))
        })
        .unwrap();
        s.write(|tx| tx.remove("cron-2").map(|_| ())).unwrap();
        assert_eq!(s.write(|tx| tx.allocate_id()).unwrap(), "cron-3");
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 1);
        // A duplicate id is refused by the database, not silently doubled.
        assert!(s.write(|tx| tx.insert(&entry("cron-1"))).is_err());
        assert_eq!(s.load().unwrap().entries().count(), 1);
    }

    #[test]
    fn a_cron_json_is_imported_once_and_kept_as_a_backup() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        std::fs::create_dir_all(&s.dir).unwrap();
        let text = r#"{"next_id": 40, "entries": [
          {"id": "cron-3", "schedule": "*/5 * * * *", "message": "Check", "owner": "me"},
          {"schedule": "oops"},
          {"id": "cron-9", "schedule": "@daily", "message": "Digest", "enabled": false}
        ]}"#;
        std::fs::write(&s.legacy, text).unwrap();
        let doc = s.load_cached().unwrap();
        assert_eq!(doc.entries().count(), 2);
        assert!(
            matches!(&doc.slots[1], Slot::Invalid { raw, .. } if raw == &json!({"schedule": "oops"}))
        );
        assert_eq!(
            doc.get("cron-3").unwrap().extra["owner"],
            "me",
            "unknown fields are kept"
        );
        assert!(!s.legacy.exists());
        let bak = s.dir.join("cron.json.bak");
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), text);
        assert_eq!(
            s.write(|tx| tx.allocate_id()).unwrap(),
            "cron-40",
            "next_id is kept"
        );
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 3);

        // Another store object (another connection, as another process) sees it too.
        let other = store_at(d.path());
        assert_eq!(other.load().unwrap().entries().count(), 2);

        // A later cron.json replaces entries by id and adds the others; the first backup stays.
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-9", "schedule": "@hourly", "message": "Changed by hand"},
                {"id": "cron-50", "schedule": "@hourly", "message": "New"}]"#,
        )
        .unwrap();
        let doc = other.load_cached().unwrap();
        assert_eq!(doc.entries().count(), 3);
        assert_eq!(doc.get("cron-9").unwrap().message, "Changed by hand");
        assert!(doc.get("cron-9").unwrap().enabled);
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), text);
        assert!(s.dir.join("cron.json.bak.2").exists());
        assert_eq!(s.write(|tx| tx.allocate_id()).unwrap(), "cron-51");
    }

    #[test]
    fn a_half_done_import_is_finished_exactly_once() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-1", "schedule": "@daily", "message": "a"}]"#,
        )
        .unwrap();
        assert_eq!(s.load().unwrap().entries().count(), 1);
        // A change after the import that a second import of the same file would undo.
        s.write(|tx| {
            let mut e = tx.get("cron-1")?.unwrap();
            e.message = "changed".into();
            tx.put(&e).map(|_| ())
        })
        .unwrap();
        // The importer died after its commit, before moving the file away.
        std::fs::rename(s.dir.join("cron.json.bak"), s.importing()).unwrap();
        let fresh = store_at(d.path());
        let doc = fresh.load().unwrap();
        assert_eq!(
            doc.get("cron-1").unwrap().message,
            "changed",
            "not imported twice"
        );
        assert!(!s.importing().exists());
        assert!(s.dir.join("cron.json.bak").exists());
        // The importer died before its commit: the claimed file is imported.
        std::fs::write(
            s.importing(),
            r#"[{"id": "cron-2", "schedule": "@daily", "message": "b"}]"#,
        )
        .unwrap();
        assert_eq!(fresh.load().unwrap().entries().count(), 2);
        assert!(!s.importing().exists());
        assert!(s.dir.join("cron.json.bak.2").exists());
    }

    #[test]
    fn a_broken_cron_json_is_reported_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        add(&s, "cron-1");
        std::fs::write(&s.legacy, "{ not json").unwrap();
        let e = s.write(|tx| tx.insert(&entry("cron-2"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::IoError);
        assert!(e.message.contains("cron.json"), "{}", e.message);
        assert_eq!(s.load_cached().unwrap_err().code, ErrorCode::IoError);
        assert_eq!(std::fs::read_to_string(&s.legacy).unwrap(), "{ not json");
        std::fs::remove_file(&s.legacy).unwrap();
        assert_eq!(
            s.load().unwrap().entries().count(),
            1,
            "nothing was changed"
        );
    }

    #[test]
    fn cached_load_sees_every_commit() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
        assert_eq!(s.load_cached().unwrap().slots.len(), 0);
        add(&s, "cron-1");
        let a = s.load_cached().unwrap();
        assert_eq!(a.entries().count(), 1);
        assert!(
            Arc::ptr_eq(&a, &s.load_cached().unwrap()),
            "nothing committed: reused"
        );
        // A commit through another connection (another process).
        let other = store_at(d.path());
        add(&other, "cron-2");
        assert!(s.load_cached().unwrap().get("cron-2").is_some());
        // The database moved away (a reset by hand): a new one is started.
        drop(other);
        std::fs::rename(&s.file, d.path().join("old.db")).unwrap();
        let _ = std::fs::remove_file(s.dir.join("cron.db-wal"));
        let _ = std::fs::remove_file(s.dir.join("cron.db-shm"));
        assert_eq!(s.load_cached().unwrap().entries().count(), 0);
        add(&s, "cron-3");
        assert_eq!(store_at(d.path()).load().unwrap().entries().count(), 1);
    }

    #[test]
    fn a_read_only_store_reads_in_place_and_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path()).read_only(true);
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-1", "schedule": "@daily", "message": "a"}]"#,
        )
        .unwrap();
        assert_eq!(s.load_cached().unwrap().entries().count(), 1);
        assert_eq!(
            s.write(|tx| tx.insert(&entry("cron-2"))).unwrap_err().code,
            ErrorCode::CapabilityDenied
        );
        assert!(s.legacy.exists() && !s.file.exists());
        // With a database, it is read (a cron.json is then not looked at).
        store_at(d.path()).load().unwrap();
        std::fs::write(
            &s.legacy,
            r#"[{"id": "cron-5", "schedule": "@daily", "message": "b"}]"#,
        )
        .unwrap();
        let doc = s.load().unwrap();
        assert!(doc.get("cron-1").is_some() && doc.get("cron-5").is_none());
    }

    #[test]
    fn writers_on_separate_connections_never_collide() {
        let d = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let root = d.path().to_path_buf();
                std::thread::spawn(move || {
                    let s = store_at(&root);
                    (0..50)
                        .map(|_| {
                            s.write(|tx| {
                                let id = tx.allocate_id()?;
                                tx.insert(&entry(&id))?;
                                Ok(id)
                            })
                            .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<String> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 200);
        let s = store_at(d.path());
        assert_eq!(s.load().unwrap().entries().count(), 200);
        assert_eq!(s.write(|tx| tx.count()).unwrap(), 200);
    }

    #[test]
    fn lock_excludes_a_second_holder() {
        let d = tempfile::tempdir().unwrap();
        let s = store_at(d.path());
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
        let s = Store::new(&PathPolicy::new(d.path(), &[], false).unwrap(), 1024);
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
        assert!(s.dir.join(Store::rotated(1)).exists() && s.dir.join(Store::rotated(2)).exists());
        assert!(
            !s.dir.join(Store::rotated(3)).exists(),
            "only two rotated files are kept"
        );
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
