//! Where entries and the run history live: the SQLite file under the root (`store.rs`, the
//! default) or a PostgreSQL shared by several servers (`pg.rs`, with `--database-url`). Tools
//! and the scheduler see one [`Backend`]. The entries' queries are the same on both
//! (`entries.rs`), and what is due, and whether a fire is owed, is decided the same way
//! (scheduler.rs); what differs is below: how the database is reached (a file opened on first
//! use, with a `cron.json` to import, or one shared connection), how a cached read learns of
//! other processes' commits (`data_version` and inotify, or NOTIFY), and where the run history
//! is kept (JSON lines beside the file, or a table).

use std::sync::Arc;

use kitbag_shared::ToolResult;

use crate::entries::Changes;
use crate::model::{Doc, RunRecord};
use crate::pg::PgStore;
use crate::store::Store;

// One per server, made once: the SQLite store's size is of no concern.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Sqlite(Store),
    Postgres(Arc<PgStore>),
}

impl Backend {
    /// Change the store in one transaction; `f` returning an error changes nothing.
    pub fn write<T>(&self, f: impl FnOnce(&mut Changes<'_>) -> ToolResult<T>) -> ToolResult<T> {
        match self {
            Backend::Sqlite(s) => s.write(f),
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
            Backend::Sqlite(s) => s.record_run(rec),
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
