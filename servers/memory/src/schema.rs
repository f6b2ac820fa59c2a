//! Where memories live and how each layout became the current one: the SQLite file of one
//! machine (WAL, an FTS5 index kept by triggers, versions by `PRAGMA user_version`) or a shared
//! PostgreSQL (`--database-url`: a generated, stemmed `tsvector` with a GIN index, a kept row
//! count; versions in kitbag-shared's `kitbag_migrations`). Both open through kitbag-shared's
//! one sequence (`state::schema`, `state::pg`).

use std::path::Path;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::pg::PgConn;
use kitbag_shared::state::schema::{self, Layout, PrepareError, Step};
use kitbag_shared::state::sql::{Family, Store};
use rusqlite::{Connection, params};

use crate::record::content_hash;

/// The memory store: errors say "memory database"; every PostgreSQL write takes this lock, so
/// the duplicate check, the capacity check and the insert are one step across processes.
pub const FAMILY: Family = Family {
    name: "memory",
    write_lock: 0x6b69_7462_6167_0002,
};

/// The SQLite layouts: v1 (the first release, or a file from before versions were kept), then
/// v2 (usage tracking, the dedupe hash, the FTS5 index).
static LAYOUT: Layout = Layout {
    family: "memory",
    steps: &[Step::Run(create_v1), Step::Run(v1_to_v2)],
    adopt: &["memories"],
    tables: &["memories", "memories_fts"],
};

/// Open (creating when missing) the SQLite store at `path`. Its directory is held by
/// descriptor (walked beneath the root without links when it is inside the root): a program
/// renaming `.kitbag` away and planting a link cannot redirect it (issue #22).
pub fn open_sqlite(policy: &PathPolicy, path: &Path) -> anyhow::Result<Store> {
    match schema::open_store(policy, path, &LAYOUT) {
        Ok(db) => Ok(Store::sqlite(FAMILY, db)),
        Err(PrepareError::Open(e)) => Err(anyhow::anyhow!("memory database: {e}")),
        Err(e) => Err(anyhow::anyhow!("memory database {} is {e}", path.display())),
    }
}

/// Connect to PostgreSQL at `url` and bring the schema up to date.
pub fn open_postgres(url: &str) -> anyhow::Result<Store> {
    let conn = PgConn::open(url, "memory", "memory", &[PG_V1])?;
    Ok(Store::postgres(FAMILY, conn))
}

/// Open a SQLite file without checks or migrations (tests build old layouts with it).
pub fn open_raw(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open(path)
}

fn create_v1(conn: &Connection) -> rusqlite::Result<()> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='memories'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        conn.execute_batch(V1_SCHEMA)?;
    }
    Ok(())
}

fn v1_to_v2(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE memories ADD COLUMN last_used_at TEXT;
         ALTER TABLE memories ADD COLUMN use_count INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE memories ADD COLUMN content_hash TEXT;
         UPDATE memories SET last_used_at = created_at WHERE last_used_at IS NULL;",
    )?;
    let mut rows = conn.prepare("SELECT id, content, scope, session FROM memories")?;
    let all: Vec<(String, String, String, Option<String>)> = rows
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    for (id, content, scope, session) in all {
        conn.execute(
            "UPDATE memories SET content_hash = ?1 WHERE id = ?2",
            params![content_hash(&content, &scope, session.as_deref()), id],
        )?;
    }
    conn.execute_batch(V2_ADDITIONS)
}

/// The first released schema (kept so its migration stays tested).
pub const V1_SCHEMA: &str = "
CREATE TABLE memories (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    scope TEXT NOT NULL,
    session TEXT,
    created_at TEXT NOT NULL
);
PRAGMA user_version = 1;
";

const V2_ADDITIONS: &str = "
CREATE UNIQUE INDEX IF NOT EXISTS memories_hash ON memories(content_hash);
CREATE INDEX IF NOT EXISTS memories_created ON memories(created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, tags, content='memories', content_rowid='rowid', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, tags) VALUES (new.rowid, new.content, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags) VALUES ('delete', old.rowid, old.content, old.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF content, tags ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags) VALUES ('delete', old.rowid, old.content, old.tags);
    INSERT INTO memories_fts(rowid, content, tags) VALUES (new.rowid, new.content, new.tags);
END;
INSERT INTO memories_fts(memories_fts) VALUES ('rebuild');
";

const PG_V1: &str = "
CREATE TABLE memories (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    scope TEXT NOT NULL,
    session TEXT,
    created_at TEXT NOT NULL,
    last_used_at TEXT NOT NULL,
    use_count BIGINT NOT NULL DEFAULT 0,
    content_hash TEXT NOT NULL UNIQUE,
    search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', content), 'A') ||
        setweight(to_tsvector('english', tags), 'B')
    ) STORED
);
CREATE INDEX memories_search ON memories USING GIN (search);
CREATE INDEX memories_created ON memories (created_at);
-- The number of memories, kept by every write under the write lock: count(*) reads the whole
-- table (15 ms at 100k rows), and the capacity check runs on every store.
CREATE TABLE memory_count (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), n BIGINT NOT NULL);
INSERT INTO memory_count (n) VALUES (0);
";
