//! The memory store on one machine: SQLite (WAL, busy timeout) with an FTS5 index, versioned
//! migrations. (`pg.rs` is the same store on a shared PostgreSQL.)
//!
//! Several server processes may share one database: every write runs in an IMMEDIATE
//! transaction, so the duplicate check, the capacity check and the insert are one step.

use std::path::Path;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::sqlite::{self, StateDb};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: i64 = 2;

/// One memory as stored and as exported (one JSON line each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    pub id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub created_at: String,
    pub last_used_at: String,
    pub use_count: i64,
}

/// Open without checks or migrations (tests build old layouts with it).
pub fn open_raw(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open(path)
}

/// Open (creating when missing) the database at `path`. Its directory is held by descriptor
/// (walked beneath the root without links when it is inside the root): a program renaming
/// `.kitbag` away and planting a link cannot redirect it (issue #22).
pub fn open(policy: &PathPolicy, path: &Path) -> anyhow::Result<StateDb> {
    let conn = StateDb::open_path(policy, path, sqlite::read_write_create())
        .map_err(|e| anyhow::anyhow!("memory database: {e}"))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // Reading the schema is the first thing that fails on a file that is not a database.
    // Switching a new file to WAL takes an exclusive lock that SQLite does not wait for (the
    // busy timeout is not consulted): a server starting beside another retries briefly.
    let check = kitbag_shared::lock::retry_while_busy(
        std::time::Duration::from_secs(10),
        |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy),
        || {
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
            conn.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
        },
    );
    match check {
        Ok(s) if s == "ok" => {}
        Ok(s) => anyhow::bail!("memory database {} is corrupted: {s}", path.display()),
        Err(e) => anyhow::bail!(
            "memory database {} is not a usable SQLite database: {e}",
            path.display()
        ),
    }
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
    migrate(&conn)
        .map_err(|e| anyhow::anyhow!("migrating memory database {}: {e}", path.display()))?;
    Ok(conn)
}

fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Bring any older schema up to `SCHEMA_VERSION`, in one transaction.
pub fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let v = version(conn)?;
    if v > SCHEMA_VERSION {
        anyhow::bail!(
            "schema version {v} is newer than this kitbag-memory understands ({SCHEMA_VERSION})"
        );
    }
    if v == SCHEMA_VERSION {
        return Ok(());
    }
    // IMMEDIATE: two servers starting on a new store must not both migrate it, and a deferred
    // transaction that reads, then writes, fails at once with "database is locked" when the
    // other holds the write lock (the busy timeout does not cover that upgrade).
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    // The other may have finished meanwhile.
    let v = version(&tx)?;
    if v == SCHEMA_VERSION {
        return Ok(());
    }
    if v == 0 {
        let exists: bool = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='memories'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)?;
        if !exists {
            tx.execute_batch(V1_SCHEMA)?;
        }
    }
    // v1 → v2: usage tracking, dedupe hash, FTS5 index kept in sync by triggers.
    tx.execute_batch(
        "ALTER TABLE memories ADD COLUMN last_used_at TEXT;
         ALTER TABLE memories ADD COLUMN use_count INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE memories ADD COLUMN content_hash TEXT;
         UPDATE memories SET last_used_at = created_at WHERE last_used_at IS NULL;",
    )?;
    {
        let mut rows = tx.prepare("SELECT id, content, scope, session FROM memories")?;
        let all: Vec<(String, String, String, Option<String>)> = rows
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<Result<_, _>>()?;
        for (id, content, scope, session) in all {
            tx.execute(
                "UPDATE memories SET content_hash = ?1 WHERE id = ?2",
                params![content_hash(&content, &scope, session.as_deref()), id],
            )?;
        }
    }
    tx.execute_batch(V2_ADDITIONS)?;
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))?;
    tx.commit()?;
    Ok(())
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

pub fn content_hash(content: &str, scope: &str, session: Option<&str>) -> String {
    let key = format!(
        "{scope}\u{0}{}\u{0}{}",
        session.unwrap_or(""),
        content.trim()
    );
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(key.as_bytes()))
}

pub fn now() -> String {
    kitbag_shared::audit::now_rfc3339()
}

pub enum Stored {
    New {
        id: String,
        created_at: String,
        evicted: Option<String>,
    },
    Duplicate {
        id: String,
        created_at: String,
    },
    Full,
}

/// Insert a memory unless an identical one exists; make room or refuse when full.
pub fn store(
    conn: &mut Connection,
    content: &str,
    tags: &[String],
    scope: &str,
    session: Option<&str>,
    max_total: i64,
    evict_when_full: bool,
) -> rusqlite::Result<Stored> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let hash = content_hash(content, scope, session);
    let existing: Option<(String, String)> = tx
        .query_row(
            "SELECT id, created_at FROM memories WHERE content_hash = ?1",
            [&hash],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if let Some((id, created_at)) = existing {
        tx.commit()?;
        return Ok(Stored::Duplicate { id, created_at });
    }
    let count: i64 = tx.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
    let mut evicted = None;
    if count >= max_total {
        if !evict_when_full {
            return Ok(Stored::Full);
        }
        // Least valuable: never or rarely recalled, then least recently used.
        let victim: Option<String> = tx
            .query_row("SELECT id FROM memories ORDER BY use_count ASC, last_used_at ASC, created_at ASC LIMIT 1", [], |r| r.get(0))
            .optional()?;
        if let Some(v) = &victim {
            tx.execute("DELETE FROM memories WHERE id = ?1", [v])?;
        }
        evicted = victim;
    }
    let id = ulid::Ulid::generate().to_string();
    let created_at = now();
    let tags_json = serde_json::to_string(tags).unwrap_or_else(|_| "[]".into());
    tx.execute(
        "INSERT INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, ?7)",
        params![id, content, tags_json, scope, session, created_at, hash],
    )?;
    tx.commit()?;
    Ok(Stored::New {
        id,
        created_at,
        evicted,
    })
}

fn record(r: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    let tags: String = r.get(2)?;
    Ok(Record {
        id: r.get(0)?,
        content: r.get(1)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        scope: r.get(3)?,
        session: r.get(4)?,
        created_at: r.get(5)?,
        last_used_at: r.get(6)?,
        use_count: r.get(7)?,
    })
}

const COLUMNS: &str =
    "m.id, m.content, m.tags, m.scope, m.session, m.created_at, m.last_used_at, m.use_count";

/// Filters shared by search, recent and context.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub tags: Vec<String>,
    pub scope: Option<String>,
    pub session: Option<String>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.scope.is_none() && self.session.is_none()
    }

    pub(crate) fn keeps(&self, r: &Record) -> bool {
        self.scope.as_ref().is_none_or(|s| *s == r.scope)
            && self
                .session
                .as_ref()
                .is_none_or(|s| r.session.as_ref() == Some(s))
            && self
                .tags
                .iter()
                .all(|t| r.tags.iter().any(|x| x.eq_ignore_ascii_case(t)))
    }
}

/// FTS5 candidates for `words`, best first, relevance = −bm25 (higher is better). Memories
/// holding every word come first: when there are enough of them, ranking only those is both the
/// better answer and far cheaper than scoring every memory that holds any one common word.
/// Otherwise any word. A word no memory holds would empty the AND query: it is left out.
pub fn candidates(
    conn: &Connection,
    words: &[String],
    filter: &Filter,
    limit: usize,
    want: usize,
) -> rusqlite::Result<Vec<(Record, f64)>> {
    let mut present = Vec::with_capacity(words.len());
    for w in words {
        let quoted = format!("\"{w}\"");
        if fts_has(conn, &quoted)? {
            present.push(quoted);
        }
    }
    if present.is_empty() {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    if present.len() > 1 {
        found = fts_candidates(conn, &present.join(" AND "), filter, want)?;
    }
    if found.len() < limit {
        found = fts_candidates(conn, &present.join(" OR "), filter, want)?;
    }
    // bm25() is negative, more negative = better.
    Ok(found.into_iter().map(|(r, bm25)| (r, -bm25)).collect())
}

/// Whether any memory matches `fts_query` (cheap: stops at the first hit).
pub fn fts_has(conn: &Connection, fts_query: &str) -> rusqlite::Result<bool> {
    let mut stmt =
        conn.prepare_cached("SELECT 1 FROM memories_fts WHERE memories_fts MATCH ?1 LIMIT 1")?;
    stmt.exists(params![fts_query])
}

/// FTS5 candidates for `fts_query` passing `filter`, best first, with their bm25 rank
/// (lower is better).
pub fn fts_candidates(
    conn: &Connection,
    fts_query: &str,
    filter: &Filter,
    limit: usize,
) -> rusqlite::Result<Vec<(Record, f64)>> {
    if filter.is_empty() {
        // Rank inside the FTS index first and join only the top rows: reading every
        // matching memory row before sorting is what made searches slow on large stores.
        let sql = format!(
            "SELECT {COLUMNS}, f.rank FROM
               (SELECT rowid, bm25(memories_fts, 1.0, 0.5) AS rank FROM memories_fts
                WHERE memories_fts MATCH ?1 ORDER BY rank LIMIT ?2) f
             JOIN memories m ON m.rowid = f.rowid ORDER BY f.rank"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![fts_query, limit as i64], |r| {
            Ok((record(r)?, r.get::<_, f64>(8)?))
        })?;
        return rows.collect();
    }
    // With a filter the best matches may all be filtered out, so the filter runs before
    // the limit: scope and session in SQL, tags on the rows as they stream by.
    let sql = format!(
        "SELECT {COLUMNS}, bm25(memories_fts, 1.0, 0.5) AS rank
         FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid
         WHERE memories_fts MATCH ?1 AND (?2 IS NULL OR m.scope = ?2)
           AND (?3 IS NULL OR m.session = ?3)
         ORDER BY rank"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![fts_query, filter.scope, filter.session], |r| {
        Ok((record(r)?, r.get::<_, f64>(8)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (r, rank) = row?;
        if filter.keeps(&r) {
            out.push((r, rank));
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// Most recent memories passing `filter`.
pub fn recent(conn: &Connection, filter: &Filter, limit: usize) -> rusqlite::Result<Vec<Record>> {
    let sql = format!("SELECT {COLUMNS} FROM memories m ORDER BY m.created_at DESC, m.id DESC");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut out = Vec::new();
    for r in stmt.query_map([], record)? {
        let r = r?;
        if filter.keeps(&r) {
            out.push(r);
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// Mark memories as recalled (feeds eviction: recalled memories are kept longer).
pub fn touch(conn: &mut Connection, ids: &[String]) -> rusqlite::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    // One transaction for all of them: one WAL commit instead of one per memory.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now();
    {
        let mut stmt = tx.prepare_cached(
            "UPDATE memories SET use_count = use_count + 1, last_used_at = ?1 WHERE id = ?2",
        )?;
        for id in ids {
            stmt.execute(params![now, id])?;
        }
    }
    tx.commit()
}

pub fn delete(
    conn: &mut Connection,
    ids: &[String],
) -> rusqlite::Result<(Vec<String>, Vec<String>)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (mut deleted, mut unknown) = (Vec::new(), Vec::new());
    for id in ids {
        if tx.execute("DELETE FROM memories WHERE id = ?1", [id])? > 0 {
            deleted.push(id.clone());
        } else {
            unknown.push(id.clone());
        }
    }
    tx.commit()?;
    Ok((deleted, unknown))
}

pub fn count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))
}

pub fn export(conn: &Connection) -> rusqlite::Result<Vec<Record>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM memories m ORDER BY m.created_at, m.id"
    ))?;
    let rows = stmt.query_map([], record)?;
    rows.collect()
}

/// Insert records as they are (ids, times and counts kept); existing ids are skipped.
pub fn import(conn: &mut Connection, records: &[Record]) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut added = 0;
    for r in records {
        let tags = serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into());
        added += tx.execute(
            "INSERT OR IGNORE INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![r.id, r.content, tags, r.scope, r.session, r.created_at, r.last_used_at, r.use_count, content_hash(&r.content, &r.scope, r.session.as_deref())],
        )?;
    }
    tx.commit()?;
    Ok(added)
}
