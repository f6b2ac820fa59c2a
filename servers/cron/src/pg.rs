//! The cron store on PostgreSQL (`--database-url` / `KITBAG_DATABASE_URL`): several servers
//! (replicas) on one database share entries and run history, and each due fire is made by
//! exactly one of them.
//!
//! Entries are rows holding the same JSON bodies as the SQLite store, read and changed by the
//! same queries (`entries.rs`). A change is one transaction holding the family's write lock;
//! claiming a fire re-reads the entry in it and inserts the unique `(entry_id, scheduled_at)`
//! row of `cron_fires` with `ON CONFLICT DO NOTHING` in the same transaction that advances the
//! entry's `last_scheduled_at`: one insert wins, whatever the clocks of the replicas say. Every
//! committed change sends `NOTIFY kitbag_cron`; each server LISTENs on a connection of its
//! own, and a notification wakes its scheduler and drops its cached view of the entries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kitbag_shared::lock::LockExt;
use kitbag_shared::state::pg::Connector;
use kitbag_shared::state::sql::{self, Engine, Sql};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use tokio::sync::Notify;

use crate::entries::{self, Changes, Place};
use crate::history;
use crate::model::{Doc, RunRecord};
use crate::schema::{self, CHANNEL, FAMILY, PG_LOCK_WAIT, PgOpenError};

pub struct PgStore {
    db: Mutex<sql::Store>,
    /// Opens the LISTEN connection (and opens it again after it was lost).
    connector: Connector,
    place: Place,
    writable: bool,
    runs_keep_bytes: i64,
    /// Who claims, in `cron_fires` (`host:pid`).
    pub replica: String,
    /// Bumped by every change this process commits and every notification: the cached view
    /// is good while it is unchanged.
    generation: AtomicU64,
    listening: AtomicBool,
    cache: Mutex<Option<(u64, Arc<Doc>)>>,
}

/// Connect to `url` and bring the schema up to date.
pub fn open(url: &str, writable: bool, history_max_bytes: u64) -> Result<PgStore, PgOpenError> {
    let conn = schema::open_postgres(url)?;
    let location = conn.redacted_url();
    let connector = Connector::new(url).map_err(|source| PgOpenError::Tls {
        url: location.clone(),
        source,
    })?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    Ok(PgStore {
        db: Mutex::new(sql::Store::postgres(FAMILY, conn)),
        connector,
        place: Place::new(Engine::Postgres, location),
        writable,
        runs_keep_bytes: (history_max_bytes.max(1024) as i64).saturating_mul(3),
        replica: format!("{}:{}", host.trim(), std::process::id()),
        generation: AtomicU64::new(0),
        listening: AtomicBool::new(false),
        cache: Mutex::new(None),
    })
}

impl PgStore {
    /// The database URL without credentials.
    pub fn location(&self) -> String {
        self.place.location.clone()
    }

    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    /// Change the store in one transaction; `f` returning an error changes nothing. A
    /// change is announced to every server on commit.
    pub fn write<T>(&self, f: impl FnOnce(&mut Changes<'_>) -> ToolResult<T>) -> ToolResult<T> {
        if !self.writable {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("the cron store {} is read-only", self.location()),
            ));
        }
        let mut db = self.db.locked();
        // A lock another server holds (the write lock, an entry's row) is waited for this
        // long, then `file_busy`. Set on every write: the connection may be a new one.
        db.exec(&format!("SET lock_timeout = '{PG_LOCK_WAIT}'"), &[])
            .map_err(|e| self.place.err(e))?;
        let (out, changed) = entries::commit(&mut db, &self.place, &self.replica, f)?;
        if changed {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        Ok(out)
    }

    /// Every row, in creation order.
    pub fn load(&self) -> ToolResult<Doc> {
        entries::load(&mut *self.db.locked(), &self.place)
    }

    /// Like [`PgStore::load`], reused while no change was committed since. Without a
    /// listener (it is reconnecting) nothing is reused: other servers' changes would be
    /// missed.
    pub fn load_cached(&self) -> ToolResult<Arc<Doc>> {
        let generation = self.generation.load(Ordering::SeqCst);
        if self.listening()
            && let Some((g, doc)) = &*self.cache.locked()
            && *g == generation
        {
            return Ok(doc.clone());
        }
        let doc = Arc::new(self.load()?);
        // Keyed by the generation read before the query: a change announced meanwhile
        // makes the next call read again.
        *self.cache.locked() = Some((generation, doc.clone()));
        Ok(doc)
    }

    /// Add a run to the shared history; now and then trim it (records beyond 3 x
    /// `--history-max-bytes`, the JSONL's live file and two rotations) and `cron_fires`.
    pub fn record_run(&self, rec: &RunRecord) -> ToolResult<()> {
        history::record_row(&mut *self.db.locked(), rec, self.runs_keep_bytes)
            .map_err(|e| self.place.err(e))
    }

    /// Runs newest first, optionally for one entry: `(page, total matching)`.
    pub fn read_runs(
        &self,
        id: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> ToolResult<(Vec<RunRecord>, usize)> {
        history::read_rows(&mut *self.db.locked(), id, offset, limit).map_err(|e| self.place.err(e))
    }

    /// Listen for changes on a connection of its own (a thread, for the server's life):
    /// each notification drops the cached view and wakes the scheduler. A lost connection
    /// is retried every second; meanwhile nothing is cached.
    pub fn listen(self: &Arc<Self>, wake: Arc<Notify>) {
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("cron-listen".into())
            .spawn(move || {
                loop {
                    if let Err(e) = store.listen_once(&wake) {
                        tracing::warn!(
                            "cron database {}: listener: {e}; retrying",
                            store.location()
                        );
                    }
                    store.listening.store(false, Ordering::SeqCst);
                    store.generation.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the change listener: {e}");
        }
    }

    fn listen_once(&self, wake: &Notify) -> Result<(), postgres::Error> {
        use postgres::fallible_iterator::FallibleIterator;
        let mut client = self.connector.connect()?;
        client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        self.listening.store(true, Ordering::SeqCst);
        // Changes made while no one listened are covered by this bump.
        self.generation.fetch_add(1, Ordering::SeqCst);
        wake.notify_one();
        let mut notifications = client.notifications();
        let mut it = notifications.blocking_iter();
        while it.next()?.is_some() {
            self.generation.fetch_add(1, Ordering::SeqCst);
            wake.notify_one();
        }
        Ok(())
    }
}
