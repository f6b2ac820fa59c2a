//! Where entries and the run history live: the SQLite file under the root (`store.rs`, the
//! default) or a PostgreSQL shared by several servers (`pg.rs`, with `--database-url`). Tools
//! and the scheduler see one [`Backend`]; what is due, and whether a fire is owed, is decided
//! the same way on both (scheduler.rs) — only storage differs.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kitbag_shared::ToolResult;

use crate::entry_tx::EntryTx;
use crate::pg::PgStore;
use crate::store::{Doc, Entry, Outcome, RunRecord, Store, Tx};

/// The SQLite store's IMMEDIATE transaction is one change in progress.
impl EntryTx for Tx<'_> {
    fn count(&self) -> ToolResult<usize> {
        Tx::count(self)
    }
    fn get(&self, id: &str) -> ToolResult<Option<Entry>> {
        Tx::get(self, id)
    }
    fn put(&self, e: &Entry) -> ToolResult<bool> {
        Tx::put(self, e)
    }
    fn insert(&self, e: &Entry) -> ToolResult<()> {
        Tx::insert(self, e)
    }
    fn remove(&self, id: &str) -> ToolResult<bool> {
        Tx::remove(self, id)
    }
    fn allocate_id(&self) -> ToolResult<String> {
        Tx::allocate_id(self)
    }
    fn some_ids(&self, n: usize) -> ToolResult<Vec<String>> {
        Tx::some_ids(self, n)
    }
    fn claim_fire(
        &self,
        _id: &str,
        _scheduled_at: DateTime<Utc>,
        _fired_at: DateTime<Utc>,
        _outcome: Outcome,
    ) -> ToolResult<bool> {
        // The IMMEDIATE transaction is the only writer: the caller's re-read of
        // `last_scheduled_at` cannot be overtaken.
        Ok(true)
    }
}

// One per server, made once: the SQLite store's size is of no concern.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Sqlite(Store),
    Postgres(Arc<PgStore>),
}

impl Backend {
    /// Change the store in one transaction; `f` returning an error changes nothing.
    pub fn write<T>(&self, f: impl FnOnce(&dyn EntryTx) -> ToolResult<T>) -> ToolResult<T> {
        match self {
            Backend::Sqlite(s) => s.write(|tx| f(tx)),
            Backend::Postgres(p) => p.write(f),
        }
    }

    /// Every entry, reused while nothing was committed since (by any process).
    pub fn load_cached(&self) -> ToolResult<Arc<Doc>> {
        match self {
            Backend::Sqlite(s) => s.load_cached(),
            Backend::Postgres(p) => p.load_cached(),
        }
    }

    /// Every entry as committed now, by any process: what a tool shows. On PostgreSQL the
    /// cache follows other replicas' changes only once their NOTIFY arrives, so a read that
    /// must include a change another replica just acknowledged reads the table.
    pub fn load_current(&self) -> ToolResult<Arc<Doc>> {
        match self {
            Backend::Sqlite(s) => s.load_cached(),
            Backend::Postgres(p) => p.load().map(Arc::new),
        }
    }

    /// Add a run to the history (trimmed to `--history-max-bytes`).
    pub fn record_run(&self, rec: &RunRecord) -> ToolResult<()> {
        match self {
            Backend::Sqlite(s) => {
                let lock = s.lock()?;
                s.append_run(rec, &lock)
            }
            Backend::Postgres(p) => p.record_run(rec),
        }
    }

    /// Runs newest first, optionally for one entry: `(page, total matching)`.
    pub fn read_runs(
        &self,
        id: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> ToolResult<(Vec<RunRecord>, usize)> {
        match self {
            Backend::Sqlite(s) => s.read_runs(id, offset, limit),
            Backend::Postgres(p) => p.read_runs(id, offset, limit),
        }
    }

    /// The store for messages: the database file, or the database URL without credentials.
    pub fn location(&self) -> String {
        match self {
            Backend::Sqlite(s) => s.file.display().to_string(),
            Backend::Postgres(p) => p.location(),
        }
    }

    /// Whether changes by other processes wake the scheduler at once. While they do not (a
    /// PostgreSQL listener reconnecting) the scheduler looks again every second.
    pub fn sees_changes(&self) -> bool {
        match self {
            Backend::Sqlite(_) => true,
            Backend::Postgres(p) => p.listening(),
        }
    }
}
