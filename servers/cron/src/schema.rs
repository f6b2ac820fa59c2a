//! The two layouts of the cron store and how each is opened.
//!
//! SQLite (`<root>/.kitbag/cron.db`, `PRAGMA user_version` 1) keeps `entries` and a key-value
//! `meta`; PostgreSQL (family `cron` in `kitbag_migrations`, version 1) keeps `cron_entries`,
//! a one-row `cron_meta`, and the tables only replicas need: `cron_fires` (the claims) and
//! `cron_runs` (the shared history). Both are kept exactly as existing stores have them; the
//! queries of `entries.rs` are written once over both.

use std::sync::Arc;

use kitbag_shared::state::StateDir;
use kitbag_shared::state::pg::{self, PgConn};
use kitbag_shared::state::schema::{self, Layout, PrepareError, Step};
use kitbag_shared::state::sql::Family;
use kitbag_shared::state::sqlite::{self, StateDb};
use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rusqlite::OpenFlags;

use crate::dir::DB;

/// The cron store: PostgreSQL writes take this advisory lock (one writer at a time, as
/// SQLite's IMMEDIATE transactions).
pub const FAMILY: Family = Family {
    name: "cron",
    write_lock: 0x6b69_7462_6167_0004,
};

/// The channel every committed change is announced on (PostgreSQL).
pub const CHANNEL: &str = "kitbag_cron";

/// How long a PostgreSQL write waits for a lock another server holds, then `file_busy` (as
/// SQLite's busy timeout).
pub const PG_LOCK_WAIT: &str = "10s";

/// One row per entry, in creation order. An entry that did not parse when it was imported
/// from a hand-written `cron.json` is kept as written (`id` NULL, `error` set), never dropped.
/// `meta` holds `next_id`, the row `count` (kept by triggers, so the entry cap costs no scan)
/// and `import`, the identity of the last imported `cron.json`.
const SQLITE_V1: &str = "
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

/// The SQLite layout: `user_version` 1, the schema above (the file has had one layout so far).
static LAYOUT: Layout = Layout {
    family: "cron",
    steps: &[Step::Sql(SQLITE_V1)],
    adopt: &[],
    tables: &["entries", "meta"],
};

/// Entries as JSON bodies (as the SQLite rows), the id counter, one row per handled (entry,
/// instant) — the claim, fired, made up, missed or skipped alike — and the shared run
/// history, newest by seq.
const PG_V1: &str = "
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

/// Open `cron.db` in `dir`. Writable: created when missing, then the one opening sequence
/// (busy timeout, WAL, integrity check, pragmas) and the migrations. Read-only: opened as it
/// is, never created or changed. `shown` names the file in messages.
pub fn open_sqlite(dir: StateDir, writable: bool, shown: &std::path::Path) -> ToolResult<StateDb> {
    let unusable = |e: &dyn std::fmt::Display| {
        ToolError::new(
            ErrorCode::IoError,
            format!(
                "{} is not a usable cron store ({e}); move it away to start a new one",
                shown.display()
            ),
        )
    };
    let dir = Arc::new(dir);
    if !writable {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = StateDb::open(dir, DB, flags).map_err(|e| unusable(&e))?;
        conn.busy_timeout(schema::BUSY_TIMEOUT)
            .map_err(|e| unusable(&e))?;
        return Ok(conn);
    }
    let conn = StateDb::open(dir, DB, sqlite::read_write_create()).map_err(|e| unusable(&e))?;
    let foreign = |why: &dyn std::fmt::Display| {
        ToolError::new(
            ErrorCode::IoError,
            format!(
                "{} is not a kitbag-cron store ({why}); move it away to start a new one",
                shown.display()
            ),
        )
    };
    schema::prepare(&conn, &LAYOUT).map_err(|e| match e {
        PrepareError::Busy(_) => ToolError::new(
            ErrorCode::FileBusy,
            format!(
                "{} is held by another process for more than {} s; try again",
                shown.display(),
                schema::BUSY_TIMEOUT.as_secs()
            ),
        ),
        PrepareError::Foreign { why, .. } => foreign(&why),
        PrepareError::Newer { found, .. } => foreign(&format_args!(
            "layout version {found} is newer than this kitbag-cron understands"
        )),
        PrepareError::Unusable(e) | PrepareError::Sql(e) => unusable(&e),
        PrepareError::Corrupt(s) => unusable(&format_args!("corrupted: {s}")),
        PrepareError::Open(e) => unusable(&e),
    })?;
    Ok(conn)
}

/// Why the PostgreSQL store could not be opened (the URL shown without its password).
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
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
        source: pg::MigrateError,
    },
}

/// Connect to `url` and bring the cron schema up to date (under the lock every family's
/// migration takes: servers starting together migrate once).
pub fn open_postgres(url: &str) -> Result<PgConn, PgOpenError> {
    let shown = kitbag_shared::audit::redact_url(url);
    PgConn::open(url, "cron", "cron", &[PG_V1]).map_err(|e| match e {
        pg::PgError::Connect { source, .. } => PgOpenError::Connect { url: shown, source },
        pg::PgError::Tls { source, .. } => PgOpenError::Tls { url: shown, source },
        pg::PgError::Migrate { source, .. } => PgOpenError::Migrate { url: shown, source },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::dir::StoreDir;
    use kitbag_shared::paths::PathPolicy;
    use rusqlite::Connection;

    fn open_in(root: &std::path::Path) -> ToolResult<StateDb> {
        let dir = StoreDir::new(&PathPolicy::new(root, &[], false).unwrap());
        open_sqlite(dir.made().unwrap(), true, &dir.shown(DB))
    }

    fn tables(c: &Connection) -> Vec<String> {
        let mut st = c
            .prepare(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') ORDER BY name",
            )
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn a_store_made_by_an_earlier_version_opens_unchanged() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".kitbag")).unwrap();
        let path = d.path().join(".kitbag").join(DB);
        let old = Connection::open(&path).unwrap();
        old.execute_batch(SQLITE_V1).unwrap();
        old.execute_batch(
            "INSERT INTO entries (id, body) VALUES ('cron-4', '{}');
             UPDATE meta SET v = 9 WHERE k = 'next_id';
             PRAGMA user_version = 1;",
        )
        .unwrap();
        let before = tables(&old);
        drop(old);
        let conn = open_in(d.path()).unwrap();
        let (version, next, count): (i64, i64, i64) = conn
            .query_row(
                "SELECT (SELECT user_version FROM pragma_user_version),
                        (SELECT v FROM meta WHERE k = 'next_id'),
                        (SELECT v FROM meta WHERE k = 'count')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((version, next, count), (1, 9, 1));
        assert_eq!(tables(&conn), before);
    }

    #[test]
    fn files_that_are_not_cron_stores_are_refused_in_crons_words() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".kitbag")).unwrap();
        let path = d.path().join(".kitbag").join(DB);
        let cases: [(&[u8], &str); 3] = [
            (
                b"CREATE TABLE t (x)",
                "is not a kitbag-cron store (it holds other tables (t)); move it away",
            ),
            (
                b"PRAGMA user_version = 9",
                "is not a kitbag-cron store (layout version 9 is newer",
            ),
            (&[0x42; 8192], "is not a usable cron store ("),
        ];
        for (content, words) in cases {
            let _ = std::fs::remove_file(&path);
            if content[0] == 0x42 {
                std::fs::write(&path, content).unwrap();
            } else {
                Connection::open(&path)
                    .unwrap()
                    .execute_batch(std::str::from_utf8(content).unwrap())
                    .unwrap();
            }
            let e = open_in(d.path()).err().unwrap();
            assert_eq!(e.code, ErrorCode::IoError);
            assert!(e.message.contains(words), "{}", e.message);
            assert!(e.message.contains("cron.db"), "{}", e.message);
        }
    }
}
