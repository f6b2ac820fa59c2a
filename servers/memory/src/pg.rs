//! The memory store on PostgreSQL (`--database-url` / `KITBAG_DATABASE_URL`), for many server
//! processes on many machines sharing one store.
//!
//! Same records and the same rules as the SQLite store (`db.rs`): a duplicate is found by its
//! content hash, a full store evicts the least used memory or refuses. Every write takes one
//! transaction-scoped advisory lock, so the duplicate check, the capacity check and the insert
//! are one step across all processes. Full-text search is a generated, stemmed `tsvector`
//! (content weighted above tags) with a GIN index, ranked with `ts_rank_cd`: the same words
//! match as with SQLite's FTS5 (porter stemming both), but the scores are on another scale and
//! the order of near-equal matches can differ.

use kitbag_shared::state::pg::{PgConn, PgError};
use postgres::{Client, Row, Transaction};

use crate::db::{Filter, Record, Stored, content_hash, now};

/// The write lock every process takes before changing memories (fixed: shared by every
/// process; the migration lock is kitbag-shared's).
const WRITE_LOCK: i64 = 0x6b69_7462_6167_0002;

const V1_SCHEMA: &str = "
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

const COLUMNS: &str = "id, content, tags, scope, session, created_at, last_used_at, use_count";

pub struct PgStore {
    conn: PgConn,
}

/// Connect to `url` and bring the schema up to date.
pub fn open(url: &str) -> Result<PgStore, PgError> {
    Ok(PgStore {
        conn: PgConn::open(url, "memory", "memory", &[V1_SCHEMA])?,
    })
}

fn record(r: &Row) -> Record {
    let tags: String = r.get(2);
    Record {
        id: r.get(0),
        content: r.get(1),
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        scope: r.get(3),
        session: r.get(4),
        created_at: r.get(5),
        last_used_at: r.get(6),
        use_count: r.get(7),
    }
}

/// The write lock every process takes before changing memories.
fn lock_writes(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
        .map(drop)
}

impl PgStore {
    fn client(&mut self) -> Result<&mut Client, postgres::Error> {
        self.conn.client()
    }

    /// Note a failed call (a lost connection is reopened on the next).
    pub fn failed(&mut self, e: &postgres::Error) {
        self.conn.failed(e);
    }

    pub fn store(
        &mut self,
        content: &str,
        tags: &[String],
        scope: &str,
        session: Option<&str>,
        max_total: i64,
        evict_when_full: bool,
    ) -> Result<Stored, postgres::Error> {
        let mut tx = self.client()?.transaction()?;
        lock_writes(&mut tx)?;
        let hash = content_hash(content, scope, session);
        if let Some(r) = tx.query_opt(
            "SELECT id, created_at FROM memories WHERE content_hash = $1",
            &[&hash],
        )? {
            tx.commit()?;
            return Ok(Stored::Duplicate {
                id: r.get(0),
                created_at: r.get(1),
            });
        }
        let count: i64 = tx.query_one("SELECT n FROM memory_count", &[])?.get(0);
        let mut evicted = None;
        if count >= max_total {
            if !evict_when_full {
                return Ok(Stored::Full);
            }
            // Least valuable: never or rarely recalled, then least recently used.
            evicted = tx
                .query_opt(
                    "DELETE FROM memories WHERE id = (SELECT id FROM memories
                       ORDER BY use_count ASC, last_used_at ASC, created_at ASC LIMIT 1)
                     RETURNING id",
                    &[],
                )?
                .map(|r| r.get(0));
        }
        let id = ulid::Ulid::generate().to_string();
        let created_at = now();
        let tags_json = serde_json::to_string(tags).unwrap_or_else(|_| "[]".into());
        tx.execute(
            "INSERT INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
             VALUES ($1, $2, $3, $4, $5, $6, $6, 0, $7)",
            &[&id, &content, &tags_json, &scope, &session, &created_at, &hash],
        )?;
        if evicted.is_none() {
            tx.execute("UPDATE memory_count SET n = n + 1", &[])?;
        }
        tx.commit()?;
        Ok(Stored::New {
            id,
            created_at,
            evicted,
        })
    }

    /// The `words` some memory holds, in their order — one round trip for all of them.
    fn present(&mut self, words: &[String]) -> Result<Vec<String>, postgres::Error> {
        let rows = self.client()?.query(
            "SELECT w FROM unnest($1::text[]) WITH ORDINALITY AS t(w, i)
             WHERE EXISTS (SELECT 1 FROM memories WHERE search @@ to_tsquery('english', w))
             ORDER BY i",
            &[&words],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Candidates for `words` passing `filter`, best first, with a relevance (higher is
    /// better): memories holding every word first, when there are enough of them; else any.
    pub fn candidates(
        &mut self,
        words: &[String],
        filter: &Filter,
        limit: usize,
        want: usize,
    ) -> Result<Vec<(Record, f64)>, postgres::Error> {
        // `words` are runs of letters and digits: nothing in them is tsquery syntax. A word the
        // dictionary drops (a stopword) or no memory holds would empty the AND.
        let present = self.present(words)?;
        if present.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        if present.len() > 1 {
            found = self.ranked(&present.join(" & "), filter, want)?;
        }
        if found.len() < limit {
            found = self.ranked(&present.join(" | "), filter, want)?;
        }
        Ok(found)
    }

    fn ranked(
        &mut self,
        q: &str,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<(Record, f64)>, postgres::Error> {
        // Scope and session in SQL; tags on the rows as they come (case-insensitive, like the
        // SQLite store), so the limit applies after every filter.
        let sql = format!(
            "SELECT {COLUMNS}, ts_rank_cd(search, q, 1)::float8 AS rank
             FROM memories, to_tsquery('english', $1) q
             WHERE search @@ q AND ($2::text IS NULL OR scope = $2)
               AND ($3::text IS NULL OR session = $3)
             ORDER BY rank DESC, created_at DESC, id DESC"
        );
        let client = self.client()?;
        let mut out = Vec::new();
        let params: [&(dyn postgres::types::ToSql + Sync); 3] =
            [&q, &filter.scope, &filter.session];
        let mut rows = client.query_raw(sql.as_str(), params)?;
        use postgres::fallible_iterator::FallibleIterator;
        while let Some(row) = rows.next()? {
            let r = record(&row);
            if filter.keeps(&r) {
                // ts_rank_cd is a fraction; ×10 puts it near BM25's range for the blend.
                out.push((r, row.get::<_, f64>(8) * 10.0));
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub fn recent(
        &mut self,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Record>, postgres::Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM memories
             WHERE ($1::text IS NULL OR scope = $1) AND ($2::text IS NULL OR session = $2)
             ORDER BY created_at DESC, id DESC"
        );
        let client = self.client()?;
        let params: [&(dyn postgres::types::ToSql + Sync); 2] = [&filter.scope, &filter.session];
        let mut rows = client.query_raw(sql.as_str(), params)?;
        use postgres::fallible_iterator::FallibleIterator;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let r = record(&row);
            if filter.keeps(&r) {
                out.push(r);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub fn touch(&mut self, ids: &[String]) -> Result<(), postgres::Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = now();
        self.client()?.execute(
            "UPDATE memories SET use_count = use_count + 1, last_used_at = $1 WHERE id = ANY($2)",
            &[&now, &ids],
        )?;
        Ok(())
    }

    pub fn delete(
        &mut self,
        ids: &[String],
    ) -> Result<(Vec<String>, Vec<String>), postgres::Error> {
        let mut tx = self.client()?.transaction()?;
        lock_writes(&mut tx)?;
        let gone: Vec<String> = tx
            .query(
                "DELETE FROM memories WHERE id = ANY($1) RETURNING id",
                &[&ids],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.execute(
            "UPDATE memory_count SET n = n - $1",
            &[&(gone.len() as i64)],
        )?;
        tx.commit()?;
        // In the order asked, like the SQLite store.
        let (deleted, unknown) = ids.iter().cloned().partition(|id| gone.contains(id));
        Ok((deleted, unknown))
    }

    pub fn count(&mut self) -> Result<i64, postgres::Error> {
        Ok(self
            .client()?
            .query_one("SELECT n FROM memory_count", &[])?
            .get(0))
    }

    pub fn export(&mut self) -> Result<Vec<Record>, postgres::Error> {
        let sql = format!("SELECT {COLUMNS} FROM memories ORDER BY created_at, id");
        Ok(self
            .client()?
            .query(sql.as_str(), &[])?
            .iter()
            .map(record)
            .collect())
    }

    /// Insert records as they are; ids (or contents) already present are skipped.
    pub fn import(&mut self, records: &[Record]) -> Result<usize, postgres::Error> {
        let mut tx = self.client()?.transaction()?;
        lock_writes(&mut tx)?;
        let mut added = 0;
        for r in records {
            let tags = serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into());
            let hash = content_hash(&r.content, &r.scope, r.session.as_deref());
            added += tx.execute(
                "INSERT INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                &[&r.id, &r.content, &tags, &r.scope, &r.session, &r.created_at, &r.last_used_at, &r.use_count, &hash],
            )? as usize;
        }
        tx.execute("UPDATE memory_count SET n = n + $1", &[&(added as i64)])?;
        tx.commit()?;
        // A bulk load leaves the GIN index's pending list long and the planner without
        // statistics: both cost every search until autovacuum comes by.
        self.client()?.batch_execute("VACUUM ANALYZE memories")?;
        Ok(added)
    }
}
