//! The cron store on PostgreSQL (`--database-url` / `KITBAG_DATABASE_URL`): several servers
//! (replicas) on one database share entries and run history, and each due fire is made by
//! exactly one of them.
//!
//! Entries are rows holding the same JSON bodies as the SQLite store. A change is one
//! transaction that locks the rows it reads (`SELECT … FOR UPDATE`), so a read-modify-write
//! by two servers is serialised per entry. Claiming a fire re-reads the entry under that lock
//! and inserts the unique `(entry_id, scheduled_at)` row of `cron_fires` with `ON CONFLICT DO
//! NOTHING` in the same transaction that advances the entry's `last_scheduled_at`: one insert
//! wins, whatever the clocks of the replicas say. Every committed change sends `NOTIFY
//! kitbag_cron`; each server LISTENs on a connection of its own, and a notification wakes its
//! scheduler and drops its cached view of the entries.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use kitbag_shared::lock::LockExt;
use kitbag_shared::state::pg::Connector;
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use postgres::error::SqlState;
use postgres::{Client, Transaction};
use tokio::sync::Notify;

use crate::entry_tx::EntryTx;
use crate::store::{Doc, Entry, Outcome, RunRecord, Slot};

/// The channel every committed change is announced on.
pub const CHANNEL: &str = "kitbag_cron";
/// Fires kept in `cron_fires` (newest): far more than any entry's claims can race over.
pub const FIRES_KEPT: i64 = 100_000;
/// How long a change waits for a row another server holds, then `file_busy` (as SQLite's).
const LOCK_WAIT: &str = "10s";

const V1_SCHEMA: &str = "
CREATE TABLE cron_entries (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT UNIQUE,
    body TEXT NOT NULL,
    error TEXT
);
CREATE TABLE cron_meta (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    next_id BIGINT NOT NULL
);
INSERT INTO cron_meta (next_id) VALUES (1);
-- One row per handled (entry, instant): the claim. Fired, made up, missed or skipped alike.
CREATE TABLE cron_fires (
    seq BIGSERIAL PRIMARY KEY,
    entry_id TEXT NOT NULL REFERENCES cron_entries (id) ON DELETE CASCADE,
    scheduled_at TIMESTAMPTZ NOT NULL,
    fired_at TIMESTAMPTZ NOT NULL,
    outcome TEXT NOT NULL,
    replica TEXT NOT NULL,
    UNIQUE (entry_id, scheduled_at)
);
-- The shared run history, newest by seq; trimmed to 3 x --history-max-bytes of records.
CREATE TABLE cron_runs (
    seq BIGSERIAL PRIMARY KEY,
    entry_id TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX cron_runs_entry ON cron_runs (entry_id, seq);
";

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("cron database {url} (--database-url): {source}")]
    Connect {
        url: String,
        source: postgres::Error,
    },
    #[error("cron database {url} (--database-url): {source}")]
    Tls {
        url: String,
        source: kitbag_shared::state::pg_tls::TlsSetupError,
    },
    #[error("cron database {url} (--database-url): migrating the schema: {source}")]
    Migrate {
        url: String,
        source: kitbag_shared::state::pg::MigrateError,
    },
}

pub struct PgStore {
    url: String,
    connector: Connector,
    client: Mutex<Client>,
    /// The last call failed below SQL (I/O, a closed connection): reconnect before the next.
    broken: AtomicBool,
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

fn connect(connector: &Connector) -> Result<Client, postgres::Error> {
    let mut c = connector.connect()?;
    c.batch_execute(&format!("SET lock_timeout = '{LOCK_WAIT}'"))?;
    Ok(c)
}

/// Connect to `url` and bring the schema up to date.
pub fn open(url: &str, writable: bool, history_max_bytes: u64) -> Result<PgStore, PgError> {
    let shown = kitbag_shared::audit::redact_url(url);
    let connector = Connector::new(url).map_err(|source| PgError::Tls {
        url: shown.clone(),
        source,
    })?;
    let mut client = connect(&connector).map_err(|source| PgError::Connect {
        url: shown.clone(),
        source,
    })?;
    migrate(&mut client).map_err(|source| PgError::Migrate {
        url: shown.clone(),
        source,
    })?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    Ok(PgStore {
        url: url.to_owned(),
        connector,
        client: Mutex::new(client),
        broken: AtomicBool::new(false),
        writable,
        runs_keep_bytes: (history_max_bytes.max(1024) as i64).saturating_mul(3),
        replica: format!("{}:{}", host.trim(), std::process::id()),
        generation: AtomicU64::new(0),
        listening: AtomicBool::new(false),
        cache: Mutex::new(None),
    })
}

/// The cron schema's versions (kitbag-shared keeps them in the `cron` row of
/// `kitbag_migrations`, under the lock every family's migration takes).
fn migrate(client: &mut Client) -> Result<(), kitbag_shared::state::pg::MigrateError> {
    kitbag_shared::state::pg::migrate(client, "cron", &[V1_SCHEMA])
}

/// An instant as PostgreSQL reads it (the columns are `timestamptz`; the client is built
/// without chrono support, so instants travel as text).
fn pg_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl PgStore {
    /// The database URL without credentials.
    pub fn location(&self) -> String {
        kitbag_shared::audit::redact_url(&self.url)
    }

    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    fn err(&self, e: postgres::Error) -> ToolError {
        // An error the server did not answer with (I/O, a closed connection) means the
        // connection is not to be trusted again.
        if e.as_db_error().is_none() {
            self.broken.store(true, Ordering::SeqCst);
        }
        if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return ToolError::new(
                ErrorCode::FileBusy,
                format!(
                    "an entry in {} is held by another server for more than {LOCK_WAIT}; try again",
                    self.location()
                ),
            );
        }
        ToolError::new(
            ErrorCode::IoError,
            format!("cron database {}: {e}", self.location()),
        )
    }

    /// The connection, reconnected first when it was lost (a restart, a failover): at most
    /// one failed call, not a dead server.
    fn client(&self) -> ToolResult<std::sync::MutexGuard<'_, Client>> {
        let mut client = self.client.locked();
        if self.broken.load(Ordering::SeqCst) || client.is_closed() {
            *client = connect(&self.connector).map_err(|e| self.err(e))?;
            self.broken.store(false, Ordering::SeqCst);
        }
        Ok(client)
    }

    /// Change the store in one transaction; `f` returning an error changes nothing. A
    /// change is announced to every server on commit.
    pub fn write<T>(&self, f: impl FnOnce(&dyn EntryTx) -> ToolResult<T>) -> ToolResult<T> {
        if !self.writable {
            return Err(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("the cron store {} is read-only", self.location()),
            ));
        }
        let mut client = self.client()?;
        let tx = client.transaction().map_err(|e| self.err(e))?;
        let ptx = PgTx {
            tx: RefCell::new(tx),
            store: self,
            changed: Cell::new(false),
        };
        let out = f(&ptx)?;
        let changed = ptx.changed.get();
        let mut tx = ptx.tx.into_inner();
        if changed {
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &self.replica])
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        if changed {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        Ok(out)
    }

    /// Every row, in creation order.
    pub fn load(&self) -> ToolResult<Doc> {
        let mut client = self.client()?;
        let next_id: i64 = client
            .query_opt("SELECT next_id FROM cron_meta", &[])
            .map_err(|e| self.err(e))?
            .map_or(1, |r| r.get(0));
        let rows = client
            .query("SELECT body, error FROM cron_entries ORDER BY seq", &[])
            .map_err(|e| self.err(e))?;
        let slots = rows
            .iter()
            .map(|r| Slot::of_row(r.get::<_, &str>(0), r.get(1)))
            .collect();
        Ok(Doc {
            next_id: next_id.max(1) as u64,
            slots,
        })
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
        let line = serde_json::to_string(rec)
            .map_err(|e| ToolError::internal(format!("run encoding: {e}")))?;
        let mut client = self.client()?;
        let seq: i64 = client
            .query_one(
                "INSERT INTO cron_runs (entry_id, bytes, record) VALUES ($1, $2, $3) RETURNING seq",
                &[&rec.id, &(line.len() as i32), &line],
            )
            .map_err(|e| self.err(e))?
            .get(0);
        if seq % 64 == 0 {
            client
                .execute(
                    "DELETE FROM cron_runs WHERE seq <= (
                       SELECT seq FROM (SELECT seq, sum(bytes) OVER (ORDER BY seq DESC) AS kept
                                        FROM cron_runs) t
                       WHERE kept > $1 ORDER BY seq DESC LIMIT 1)",
                    &[&self.runs_keep_bytes],
                )
                .map_err(|e| self.err(e))?;
            client
                .execute(
                    "DELETE FROM cron_fires WHERE seq < (SELECT max(seq) FROM cron_fires) - $1",
                    &[&FIRES_KEPT],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Runs newest first, optionally for one entry: `(page, total matching)`.
    pub fn read_runs(
        &self,
        id: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> ToolResult<(Vec<RunRecord>, usize)> {
        let mut client = self.client()?;
        let (offset, limit) = (offset.min(i64::MAX as usize) as i64, limit as i64);
        let rows = client
            .query(
                "SELECT record FROM cron_runs WHERE ($1::text IS NULL OR entry_id = $1)
                 ORDER BY seq DESC OFFSET $2 LIMIT $3",
                &[&id, &offset, &limit],
            )
            .map_err(|e| self.err(e))?;
        let total: i64 = client
            .query_one(
                "SELECT count(*) FROM cron_runs WHERE ($1::text IS NULL OR entry_id = $1)",
                &[&id],
            )
            .map_err(|e| self.err(e))?
            .get(0);
        let page = rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(0)).ok())
            .collect();
        Ok((page, total.max(0) as usize))
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

/// A change in progress on PostgreSQL.
struct PgTx<'a> {
    tx: RefCell<Transaction<'a>>,
    store: &'a PgStore,
    changed: Cell<bool>,
}

impl PgTx<'_> {
    fn encode(e: &Entry) -> ToolResult<String> {
        serde_json::to_string(e)
            .map_err(|err| ToolError::internal(format!("entry encoding: {err}")))
    }

    fn execute(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> ToolResult<u64> {
        let n = self
            .tx
            .borrow_mut()
            .execute(sql, params)
            .map_err(|e| self.store.err(e))?;
        if n > 0 {
            self.changed.set(true);
        }
        Ok(n)
    }
}

impl EntryTx for PgTx<'_> {
    fn count(&self) -> ToolResult<usize> {
        let mut tx = self.tx.borrow_mut();
        // The counter row's lock makes the cap check and the insert one step across servers.
        tx.execute("SELECT 1 FROM cron_meta FOR UPDATE", &[])
            .map_err(|e| self.store.err(e))?;
        let n: i64 = tx
            .query_one("SELECT count(*) FROM cron_entries", &[])
            .map_err(|e| self.store.err(e))?
            .get(0);
        Ok(n.max(0) as usize)
    }

    fn get(&self, id: &str) -> ToolResult<Option<Entry>> {
        // Locked until this change ends: another server's claim or toggle waits for it.
        let row = self
            .tx
            .borrow_mut()
            .query_opt(
                "SELECT body FROM cron_entries WHERE id = $1 AND error IS NULL FOR UPDATE",
                &[&id],
            )
            .map_err(|e| self.store.err(e))?;
        Ok(row.and_then(|r| serde_json::from_str(r.get::<_, &str>(0)).ok()))
    }

    fn put(&self, e: &Entry) -> ToolResult<bool> {
        let body = Self::encode(e)?;
        Ok(self.execute(
            "UPDATE cron_entries SET body = $2, error = NULL WHERE id = $1",
            &[&e.id, &body],
        )? > 0)
    }

    fn insert(&self, e: &Entry) -> ToolResult<()> {
        let body = Self::encode(e)?;
        self.execute(
            "INSERT INTO cron_entries (id, body) VALUES ($1, $2)",
            &[&e.id, &body],
        )?;
        Ok(())
    }

    fn remove(&self, id: &str) -> ToolResult<bool> {
        Ok(self.execute("DELETE FROM cron_entries WHERE id = $1", &[&id])? > 0)
    }

    fn allocate_id(&self) -> ToolResult<String> {
        let mut tx = self.tx.borrow_mut();
        loop {
            let n: i64 = tx
                .query_one(
                    "UPDATE cron_meta SET next_id = next_id + 1 RETURNING next_id - 1",
                    &[],
                )
                .map_err(|e| self.store.err(e))?
                .get(0);
            let id = format!("cron-{n}");
            // An id written by hand into the table is skipped, never reused.
            let taken = tx
                .query_opt("SELECT 1 FROM cron_entries WHERE id = $1", &[&id])
                .map_err(|e| self.store.err(e))?
                .is_some();
            if !taken {
                self.changed.set(true);
                return Ok(id);
            }
        }
    }

    fn some_ids(&self, n: usize) -> ToolResult<Vec<String>> {
        let rows = self
            .tx
            .borrow_mut()
            .query(
                "SELECT id FROM cron_entries WHERE id IS NOT NULL AND error IS NULL
                 ORDER BY seq LIMIT $1",
                &[&(n as i64)],
            )
            .map_err(|e| self.store.err(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn claim_fire(
        &self,
        id: &str,
        scheduled_at: DateTime<Utc>,
        fired_at: DateTime<Utc>,
        outcome: Outcome,
    ) -> ToolResult<bool> {
        let won = self.execute(
            "INSERT INTO cron_fires (entry_id, scheduled_at, fired_at, outcome, replica)
             VALUES ($1, $2::text::timestamptz, $3::text::timestamptz, $4, $5)
             ON CONFLICT (entry_id, scheduled_at) DO NOTHING",
            &[
                &id,
                &pg_time(scheduled_at),
                &pg_time(fired_at),
                &outcome.as_str(),
                &self.store.replica,
            ],
        )?;
        Ok(won == 1)
    }
}
