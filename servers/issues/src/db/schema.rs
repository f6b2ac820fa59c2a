//! The database file: opening, checking, the schema and its migrations (`PRAGMA user_version`).

use std::path::Path;
use std::time::Duration;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::sqlite::{self, StateDb};
use rusqlite::Connection;

pub const SCHEMA_VERSION: i64 = 1;
/// How long a writer waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE issues (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    project TEXT NOT NULL,
    number INTEGER NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    original_body TEXT,
    status TEXT NOT NULL,
    assignment TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    resolved_at INTEGER,
    resolved_by TEXT,
    UNIQUE (project, number)
);
CREATE INDEX issues_by_status ON issues (project, status, number);
CREATE TABLE issue_updates (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    issue_seq INTEGER NOT NULL REFERENCES issues (seq) ON DELETE CASCADE,
    author TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT,
    metadata TEXT,
    visibility TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX issue_updates_by_issue ON issue_updates (issue_seq, seq);
CREATE TABLE issue_todos (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    issue_seq INTEGER NOT NULL REFERENCES issues (seq) ON DELETE CASCADE,
    content TEXT NOT NULL,
    status TEXT NOT NULL,
    kind TEXT NOT NULL,
    phase TEXT,
    position INTEGER NOT NULL,
    notes TEXT NOT NULL DEFAULT '[]',
    origin_agent TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER
);
CREATE INDEX issue_todos_by_issue ON issue_todos (issue_seq, position, seq);
CREATE TABLE change_log (
    seq INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    number INTEGER NOT NULL
);
CREATE VIRTUAL TABLE issues_fts USING fts5 (
    title, body, content = 'issues', content_rowid = 'seq',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER issues_fts_insert AFTER INSERT ON issues BEGIN
    INSERT INTO issues_fts (rowid, title, body) VALUES (new.seq, new.title, new.body);
END;
CREATE TRIGGER issues_fts_delete AFTER DELETE ON issues BEGIN
    INSERT INTO issues_fts (issues_fts, rowid, title, body)
        VALUES ('delete', old.seq, old.title, old.body);
END;
CREATE TRIGGER issues_fts_update AFTER UPDATE OF title, body ON issues BEGIN
    INSERT INTO issues_fts (issues_fts, rowid, title, body)
        VALUES ('delete', old.seq, old.title, old.body);
    INSERT INTO issues_fts (rowid, title, body) VALUES (new.seq, new.title, new.body);
END;
";

/// Open (creating if needed), check, and migrate the database. A file that is not a
/// usable SQLite database is a clear error naming it.
///
/// The directory is held by descriptor (walked beneath the root without links when it is
/// inside the root): a program renaming `.kitbag` away and planting a link cannot redirect
/// the database or its journal files (issue #22).
pub fn open(policy: &PathPolicy, path: &Path) -> anyhow::Result<StateDb> {
    let conn = StateDb::open_path(policy, path, sqlite::read_write_create())
        .map_err(|e| anyhow::anyhow!("issues database: {e}"))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Switching a new file to WAL takes an exclusive lock that SQLite does not wait for (the
    // busy timeout is not consulted): a server starting beside another retries briefly.
    let check = kitbag_shared::lock::retry_while_busy(
        BUSY_TIMEOUT,
        |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy),
        || {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
            conn.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
        },
    );
    match check {
        Ok(s) if s == "ok" => {}
        Ok(s) => anyhow::bail!(
            "issues database {} is corrupted ({s}); restore it from a backup or an `export`, or start with a new --db",
            path.display()
        ),
        Err(e) => anyhow::bail!(
            "issues database {} is not a usable SQLite database ({e}); restore it from a backup or an `export`, or start with a new --db",
            path.display()
        ),
    }
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
    migrate(&conn).map_err(|e| {
        anyhow::anyhow!(
            "preparing issues database {}: {e}; restore it from a backup or an `export`",
            path.display()
        )
    })?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if v > SCHEMA_VERSION {
        anyhow::bail!(
            "schema version {v} is newer than this kitbag-issues understands ({SCHEMA_VERSION})"
        );
    }
    if v == SCHEMA_VERSION {
        // Make sure it really is ours (a foreign database with a matching user_version).
        let n: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('issues','issue_updates','issue_todos','change_log','issues_fts')",
            [],
            |r| r.get(0),
        )?;
        if n != 5 {
            anyhow::bail!("the database lacks the kitbag-issues tables");
        }
        return Ok(());
    }
    // IMMEDIATE: two processes starting on a new file must not both create the schema.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| -> anyhow::Result<()> {
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v == 0 {
            let foreign: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )?;
            if foreign > 0 {
                anyhow::bail!(
                    "the database holds other tables; it is not a kitbag-issues database"
                );
            }
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}
