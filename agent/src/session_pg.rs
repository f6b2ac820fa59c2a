//! Agent sessions on PostgreSQL (`KITBAG_DATABASE_URL`, issue #19): the same append-only
//! records as the JSONL files, one row each, so that every replica and every machine of a team
//! continues one session. Sessions are kept per workspace (`KITBAG_WORKSPACE`, else the
//! project directory's path): two projects' `default` sessions stay apart.
//!
//! The `postgres` client blocks on a small runtime of its own, which cannot run on an async
//! runtime's thread: each call runs on a short-lived thread (a few per model step — nothing
//! next to a model call).

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use kitbag_shared::ToolResult;
use kitbag_shared::lock::LockExt;
use kitbag_shared::state::pg::{PgConn, PgError};
use kitbag_shared::state::sql::{self, Family, Sql, Store};

use super::record::{Record, SessionTotals};

/// Schema versions (`kitbag_migrations` row `agent_sessions`).
const MIGRATIONS: &[&str] = &["CREATE TABLE kitbag_agent_sessions (
        seq BIGSERIAL PRIMARY KEY,
        workspace TEXT NOT NULL,
        name TEXT NOT NULL,
        record JSONB NOT NULL,
        written TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE INDEX kitbag_agent_sessions_by_name ON kitbag_agent_sessions (workspace, name, seq);"];

/// The database the agent's sessions go to, when one is configured.
pub fn database_url() -> Option<String> {
    std::env::var("KITBAG_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// The workspace a project's sessions belong to.
pub fn workspace(root: &Path) -> String {
    std::env::var("KITBAG_WORKSPACE")
        .ok()
        .filter(|w| !w.trim().is_empty())
        .unwrap_or_else(|| {
            std::fs::canonicalize(root)
                .unwrap_or_else(|_| root.to_owned())
                .display()
                .to_string()
        })
}

/// The sessions store: errors say "sessions database"; appends take no write lock (each is
/// one row, ordered by its sequence number), so the lock key is only there to be unique.
const FAMILY: Family = Family {
    name: "sessions",
    write_lock: 0x6b69_7462_6167_0005,
};

/// One connection per process, opened (and the schema migrated) on first use.
pub struct PgSessions {
    store: Mutex<Store>,
}

static SHARED: OnceLock<Mutex<Option<Arc<PgSessions>>>> = OnceLock::new();

/// Run `f` on a thread of its own (see the module's note).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PgSessions {
    /// The process's store for `url` (connected once; a failed connection is tried again on
    /// the next use).
    pub fn shared(url: &str) -> Result<Arc<PgSessions>, PgError> {
        let slot = SHARED.get_or_init(|| Mutex::new(None));
        let mut slot = slot.locked();
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let conn = off_runtime(|| PgConn::open(url, "sessions", "agent_sessions", MIGRATIONS))?;
        let store = Arc::new(PgSessions {
            store: Mutex::new(Store::postgres(FAMILY, conn)),
        });
        *slot = Some(store.clone());
        Ok(store)
    }

    /// Run one database call off the runtime (a lost connection is reopened by the next).
    fn with<T: Send>(
        &self,
        f: impl FnOnce(&mut Store) -> ToolResult<T> + Send,
    ) -> anyhow::Result<T> {
        off_runtime(|| f(&mut self.store.locked())).map_err(|e| anyhow::anyhow!(e.message))
    }

    /// Every record of a session, in order, and how many rows could not be read.
    pub fn load(&self, workspace: &str, name: &str) -> anyhow::Result<(Vec<Record>, usize)> {
        let rows = self.with(|s| {
            s.rows(
                "SELECT record::text FROM kitbag_agent_sessions
                 WHERE workspace = ?1 AND name = ?2 ORDER BY seq",
                &[&workspace, &name],
            )
        })?;
        let mut records = Vec::with_capacity(rows.len());
        let mut skipped = 0;
        for row in rows {
            match row.text(0).ok().and_then(|t| serde_json::from_str(&t).ok()) {
                Some(r) => records.push(r),
                None => skipped += 1,
            }
        }
        Ok((records, skipped))
    }

    /// Append one record (one row; its sequence number orders it).
    pub fn append(&self, workspace: &str, name: &str, record: &Record) -> anyhow::Result<()> {
        let json = serde_json::to_string(record)?;
        self.with(|s| {
            s.exec(
                "INSERT INTO kitbag_agent_sessions (workspace, name, record)
                 VALUES (?1, ?2, CAST(?3 AS TEXT)::jsonb)",
                &[&workspace, &name, &json],
            )
        })?;
        Ok(())
    }

    /// Every session of the workspace with its turns and token totals, summed by the database.
    pub fn totals(&self, workspace: &str) -> anyhow::Result<Vec<SessionTotals>> {
        let rows = self.with(|s| {
            s.rows(
                "SELECT name,
                        count(*) FILTER (WHERE record->>'role' = 'user'),
                        count(*) FILTER (WHERE record->>'role' = 'usage'),
                        coalesce(sum((record->>'input_tokens')::bigint), 0)::bigint,
                        coalesce(sum((record->>'output_tokens')::bigint), 0)::bigint,
                        coalesce(sum((record->>'cache_read')::bigint), 0)::bigint,
                        coalesce(sum((record->>'cache_creation')::bigint), 0)::bigint
                 FROM kitbag_agent_sessions WHERE workspace = ?1
                 GROUP BY name ORDER BY name",
                &[&workspace],
            )
        })?;
        let count = |r: &sql::Cells, i| r.int(i).map(|n| n.max(0) as u64);
        rows.iter()
            .map(|r| {
                Ok(SessionTotals {
                    name: r.text(0)?,
                    turns: count(r, 1)? as usize,
                    model_calls: count(r, 2)? as usize,
                    input_tokens: count(r, 3)?,
                    output_tokens: count(r, 4)?,
                    cache_read: count(r, 5)?,
                    cache_creation: count(r, 6)?,
                })
            })
            .collect::<ToolResult<_>>()
            .map_err(|e| anyhow::anyhow!(e.message))
    }

    /// Whether the workspace has a session of this name.
    pub fn exists(&self, workspace: &str, name: &str) -> anyhow::Result<bool> {
        let found = self.with(|s| {
            s.int(
                "SELECT count(*) FROM (SELECT 1 FROM kitbag_agent_sessions
                  WHERE workspace = ?1 AND name = ?2 LIMIT 1) one",
                &[&workspace, &name],
            )
        })?;
        Ok(found > 0)
    }
}
