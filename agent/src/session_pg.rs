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

use kitbag_shared::lock::LockExt;
use kitbag_shared::state::pg::{PgConn, PgError};

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

/// One connection per process, opened (and the schema migrated) on first use.
pub struct PgSessions {
    conn: Mutex<PgConn>,
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
            conn: Mutex::new(conn),
        });
        *slot = Some(store.clone());
        Ok(store)
    }

    /// Run one database call, noting a lost connection so that the next call reconnects.
    fn with<T: Send>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error> + Send,
    ) -> anyhow::Result<T> {
        off_runtime(|| {
            let mut conn = self.conn.locked();
            let result = conn.client().and_then(f);
            if let Err(e) = &result {
                conn.failed(e);
            }
            result.map_err(|e| anyhow::anyhow!("sessions database {}: {e}", conn.redacted_url()))
        })
    }

    /// Every record of a session, in order, and how many rows could not be read.
    pub fn load(&self, workspace: &str, name: &str) -> anyhow::Result<(Vec<Record>, usize)> {
        let rows = self.with(|c| {
            c.query(
                "SELECT record::text FROM kitbag_agent_sessions
                 WHERE workspace = $1 AND name = $2 ORDER BY seq",
                &[&workspace, &name],
            )
        })?;
        let mut records = Vec::with_capacity(rows.len());
        let mut skipped = 0;
        for row in rows {
            let text: String = row.get(0);
            match serde_json::from_str(&text) {
                Ok(r) => records.push(r),
                Err(_) => skipped += 1,
            }
        }
        Ok((records, skipped))
    }

    /// Append one record (one row; its sequence number orders it).
    pub fn append(&self, workspace: &str, name: &str, record: &Record) -> anyhow::Result<()> {
        let json = serde_json::to_string(record)?;
        self.with(|c| {
            c.execute(
                "INSERT INTO kitbag_agent_sessions (workspace, name, record)
                 VALUES ($1, $2, $3::text::jsonb)",
                &[&workspace, &name, &json],
            )
        })?;
        Ok(())
    }

    /// Every session of the workspace with its turns and token totals, summed by the database.
    pub fn totals(&self, workspace: &str) -> anyhow::Result<Vec<SessionTotals>> {
        let rows = self.with(|c| {
            c.query(
                "SELECT name,
                        count(*) FILTER (WHERE record->>'role' = 'user'),
                        count(*) FILTER (WHERE record->>'role' = 'usage'),
                        coalesce(sum((record->>'input_tokens')::bigint), 0)::bigint,
                        coalesce(sum((record->>'output_tokens')::bigint), 0)::bigint,
                        coalesce(sum((record->>'cache_read')::bigint), 0)::bigint,
                        coalesce(sum((record->>'cache_creation')::bigint), 0)::bigint
                 FROM kitbag_agent_sessions WHERE workspace = $1
                 GROUP BY name ORDER BY name",
                &[&workspace],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| SessionTotals {
                name: r.get(0),
                turns: r.get::<_, i64>(1) as usize,
                model_calls: r.get::<_, i64>(2) as usize,
                input_tokens: r.get::<_, i64>(3) as u64,
                output_tokens: r.get::<_, i64>(4) as u64,
                cache_read: r.get::<_, i64>(5) as u64,
                cache_creation: r.get::<_, i64>(6) as u64,
            })
            .collect())
    }

    /// Whether the workspace has a session of this name.
    pub fn exists(&self, workspace: &str, name: &str) -> anyhow::Result<bool> {
        let row = self.with(|c| {
            c.query_one(
                "SELECT EXISTS (SELECT 1 FROM kitbag_agent_sessions WHERE workspace = $1 AND name = $2)",
                &[&workspace, &name],
            )
        })?;
        Ok(row.get(0))
    }
}
