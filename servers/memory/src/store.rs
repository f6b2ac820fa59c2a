//! The memory store's queries, each written once for both engines (kitbag-shared's
//! `state::sql`): what differs — the full-text index and its score, the kept row count on
//! PostgreSQL — is asked of [`Engine`].
//!
//! Several server processes may share one store: every write is one transaction of the
//! family's write lock (SQLite's IMMEDIATE, PostgreSQL's advisory lock), so the duplicate
//! check, the capacity check and the insert are one step. Full-text search is FTS5 with BM25
//! on SQLite and a stemmed `tsvector` ranked with `ts_rank_cd` on PostgreSQL: the same words
//! match (porter stemming both), but the scores are on another scale and the order of
//! near-equal matches can differ.

use kitbag_shared::ToolResult;
use kitbag_shared::state::sql::{self, Cells, Engine, Param, Sql};

use crate::record::{Filter, Record, Stored, content_hash, now};

const COLUMNS: &str =
    "m.id, m.content, m.tags, m.scope, m.session, m.created_at, m.last_used_at, m.use_count";

/// The store the tools use: one connection, whichever the engine.
pub struct Store(sql::Store);

impl Store {
    pub fn new(store: sql::Store) -> Store {
        Store(store)
    }

    fn engine(&self) -> Engine {
        self.0.engine()
    }

    /// Insert a memory unless an identical one exists; make room or refuse when full.
    pub fn store(
        &mut self,
        content: &str,
        tags: &[String],
        scope: &str,
        session: Option<&str>,
        max_total: i64,
        evict_when_full: bool,
    ) -> ToolResult<Stored> {
        let engine = self.engine();
        let mut tx = self.0.write()?;
        let hash = content_hash(content, scope, session);
        if let Some(row) = tx.row(
            "SELECT id, created_at FROM memories WHERE content_hash = ?1",
            &[&hash],
        )? {
            let (id, created_at) = (row.text(0)?, row.text(1)?);
            tx.commit()?;
            return Ok(Stored::Duplicate { id, created_at });
        }
        let mut evicted = None;
        if count(&mut tx, engine)? >= max_total {
            if !evict_when_full {
                return Ok(Stored::Full);
            }
            // Least valuable: never or rarely recalled, then least recently used.
            let victim = tx.row(
                "SELECT id FROM memories ORDER BY use_count ASC, last_used_at ASC, created_at ASC LIMIT 1",
                &[],
            )?;
            if let Some(victim) = victim {
                let id = victim.text(0)?;
                tx.exec("DELETE FROM memories WHERE id = ?1", &[&id])?;
                evicted = Some(id);
            }
        }
        let id = ulid::Ulid::generate().to_string();
        let created_at = now();
        let tags_json = serde_json::to_string(tags).unwrap_or_else(|_| "[]".into());
        tx.exec(
            "INSERT INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, ?7)",
            &[&id, &content, &tags_json, &scope, &session, &created_at, &hash],
        )?;
        if evicted.is_none() {
            counted(&mut tx, engine, 1)?;
        }
        tx.commit()?;
        Ok(Stored::New {
            id,
            created_at,
            evicted,
        })
    }

    /// Full-text candidates for `words`, best first, with a relevance where higher is better;
    /// at most `want`. Memories holding every word come first: when there are enough of them,
    /// ranking only those is both the better answer and far cheaper than scoring every memory
    /// that holds any one common word. Otherwise any word. A word no memory holds would empty
    /// the AND query: it is left out.
    pub fn candidates(
        &mut self,
        words: &[String],
        filter: &Filter,
        limit: usize,
        want: usize,
    ) -> ToolResult<Vec<(Record, f64)>> {
        let present = self.present(words)?;
        if present.is_empty() {
            return Ok(Vec::new());
        }
        let (all, any) = match self.engine() {
            Engine::Sqlite => (" AND ", " OR "),
            Engine::Postgres => (" & ", " | "),
        };
        let mut found = Vec::new();
        if present.len() > 1 {
            found = self.ranked(&present.join(all), filter, want)?;
        }
        if found.len() < limit {
            found = self.ranked(&present.join(any), filter, want)?;
        }
        Ok(found)
    }

    /// The `words` some memory holds, in their order, as terms of the engine's query syntax
    /// (FTS5 phrases; `words` are runs of letters and digits, nothing in them is tsquery
    /// syntax) — one round trip for all of them. A word the dictionary drops (a stopword on
    /// PostgreSQL) is not held.
    fn present(&mut self, words: &[String]) -> ToolResult<Vec<String>> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        // Both engines name a VALUES list's columns column1, column2.
        let values: Vec<String> = (1..=words.len())
            .map(|i| format!("({i}, CAST(?{i} AS TEXT))"))
            .collect();
        let holds = match self.engine() {
            Engine::Sqlite => {
                "SELECT 1 FROM memories_fts WHERE memories_fts MATCH '\"' || w.column2 || '\"'"
            }
            Engine::Postgres => {
                "SELECT 1 FROM memories WHERE search @@ to_tsquery('english', w.column2)"
            }
        };
        let sql = format!(
            "SELECT w.column2 FROM (VALUES {}) AS w WHERE EXISTS ({holds}) ORDER BY w.column1",
            values.join(", ")
        );
        let args: Vec<&dyn Param> = words.iter().map(|w| w as &dyn Param).collect();
        let held = self.0.rows(&sql, &args)?;
        held.iter()
            .map(|row| {
                let w = row.text(0)?;
                Ok(match self.engine() {
                    Engine::Sqlite => format!("\"{w}\""),
                    Engine::Postgres => w,
                })
            })
            .collect()
    }

    /// Matches of `query` passing `filter`, best first, with a relevance (higher is better).
    fn ranked(
        &mut self,
        query: &str,
        filter: &Filter,
        limit: usize,
    ) -> ToolResult<Vec<(Record, f64)>> {
        let engine = self.engine();
        let (scope, session) = (&filter.scope, &filter.session);
        let limit_arg = limit as i64;
        let (sql, args): (String, Vec<&dyn Param>) = match engine {
            // Rank inside the FTS index first and join only the top rows: reading every
            // matching memory row before sorting is what made searches slow on large stores.
            Engine::Sqlite if filter.is_empty() => (
                format!(
                    "SELECT {COLUMNS}, f.rank FROM
                       (SELECT rowid, bm25(memories_fts, 1.0, 0.5) AS rank FROM memories_fts
                        WHERE memories_fts MATCH ?1 ORDER BY rank LIMIT ?2) f
                     JOIN memories m ON m.rowid = f.rowid ORDER BY f.rank"
                ),
                vec![&query, &limit_arg],
            ),
            // With a filter the best matches may all be filtered out, so the filter runs
            // before the limit: scope and session in SQL, tags on the rows as they stream by.
            Engine::Sqlite => (
                format!(
                    "SELECT {COLUMNS}, bm25(memories_fts, 1.0, 0.5) AS rank
                     FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid
                     WHERE memories_fts MATCH ?1 AND (?2 IS NULL OR m.scope = ?2)
                       AND (?3 IS NULL OR m.session = ?3)
                     ORDER BY rank"
                ),
                vec![&query, scope, session],
            ),
            Engine::Postgres => (
                format!(
                    "SELECT {COLUMNS}, ts_rank_cd(m.search, q, 1)::float8 AS rank
                     FROM memories m, to_tsquery('english', ?1) q
                     WHERE m.search @@ q AND (CAST(?2 AS TEXT) IS NULL OR m.scope = ?2)
                       AND (CAST(?3 AS TEXT) IS NULL OR m.session = ?3)
                     ORDER BY rank DESC, m.created_at DESC, m.id DESC"
                ),
                vec![&query, scope, session],
            ),
        };
        let mut out = Vec::new();
        self.0.each(&sql, &args, &mut |row| {
            let r = record(&row)?;
            if filter.keeps(&r) {
                let relevance = match engine {
                    // bm25() is negative, more negative = better.
                    Engine::Sqlite => -row.real(8)?,
                    // ts_rank_cd is a fraction; ×10 puts it near BM25's range for the blend.
                    Engine::Postgres => row.real(8)? * 10.0,
                };
                out.push((r, relevance));
            }
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// The most recent memories passing `filter`.
    pub fn recent(&mut self, filter: &Filter, limit: usize) -> ToolResult<Vec<Record>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM memories m
             WHERE (CAST(?1 AS TEXT) IS NULL OR m.scope = ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR m.session = ?2)
             ORDER BY m.created_at DESC, m.id DESC"
        );
        let mut out = Vec::new();
        self.0
            .each(&sql, &[&filter.scope, &filter.session], &mut |row| {
                let r = record(&row)?;
                if filter.keeps(&r) {
                    out.push(r);
                }
                Ok(out.len() < limit)
            })?;
        Ok(out)
    }

    /// Mark memories as recalled (feeds eviction: recalled memories are kept longer), in one
    /// transaction: one commit instead of one per memory.
    pub fn touch(&mut self, ids: &[String]) -> ToolResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = now();
        let mut tx = self.0.write()?;
        for id in ids {
            tx.exec(
                "UPDATE memories SET use_count = use_count + 1, last_used_at = ?1 WHERE id = ?2",
                &[&now, id],
            )?;
        }
        tx.commit()
    }

    /// Deleted ids and unknown ids, in the order given.
    pub fn delete(&mut self, ids: &[String]) -> ToolResult<(Vec<String>, Vec<String>)> {
        let engine = self.engine();
        let mut tx = self.0.write()?;
        let (mut deleted, mut unknown) = (Vec::new(), Vec::new());
        for id in ids {
            if tx.exec("DELETE FROM memories WHERE id = ?1", &[id])? > 0 {
                deleted.push(id.clone());
            } else {
                unknown.push(id.clone());
            }
        }
        counted(&mut tx, engine, -(deleted.len() as i64))?;
        tx.commit()?;
        Ok((deleted, unknown))
    }

    pub fn count(&mut self) -> ToolResult<i64> {
        let engine = self.engine();
        count(&mut self.0, engine)
    }

    pub fn export(&mut self) -> ToolResult<Vec<Record>> {
        let sql = format!("SELECT {COLUMNS} FROM memories m ORDER BY m.created_at, m.id");
        self.0.rows(&sql, &[])?.iter().map(record).collect()
    }

    /// Insert records as they are (ids, times and counts kept); ids (or contents) already
    /// present are skipped. How many were added.
    pub fn import(&mut self, records: &[Record]) -> ToolResult<usize> {
        let engine = self.engine();
        let mut tx = self.0.write()?;
        let mut added = 0;
        for r in records {
            let tags = serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into());
            let hash = content_hash(&r.content, &r.scope, r.session.as_deref());
            added += tx.exec(
                "INSERT INTO memories (id, content, tags, scope, session, created_at, last_used_at, use_count, content_hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
                &[&r.id, &r.content, &tags, &r.scope, &r.session, &r.created_at, &r.last_used_at, &r.use_count, &hash],
            )? as usize;
        }
        counted(&mut tx, engine, added as i64)?;
        tx.commit()?;
        if engine == Engine::Postgres {
            // A bulk load leaves the GIN index's pending list long and the planner without
            // statistics: both cost every search until autovacuum comes by.
            self.0.batch("VACUUM ANALYZE memories")?;
        }
        Ok(added)
    }
}

/// The number of memories. PostgreSQL keeps it in `memory_count` under the write lock:
/// count(*) reads the whole table there (15 ms at 100k rows), and the capacity check runs on
/// every store; SQLite counts its b-tree fast enough.
fn count(conn: &mut impl Sql, engine: Engine) -> ToolResult<i64> {
    match engine {
        Engine::Sqlite => conn.int("SELECT count(*) FROM memories", &[]),
        Engine::Postgres => conn.int("SELECT n FROM memory_count", &[]),
    }
}

/// Keep PostgreSQL's `memory_count` in step with a write that added `delta` memories.
fn counted(tx: &mut impl Sql, engine: Engine, delta: i64) -> ToolResult<()> {
    if engine == Engine::Postgres && delta != 0 {
        tx.exec("UPDATE memory_count SET n = n + ?1", &[&delta])?;
    }
    Ok(())
}

fn record(row: &Cells) -> ToolResult<Record> {
    Ok(Record {
        id: row.text(0)?,
        content: row.text(1)?,
        tags: serde_json::from_str(&row.text(2)?).unwrap_or_default(),
        scope: row.text(3)?,
        session: row.opt_text(4)?,
        created_at: row.text(5)?,
        last_used_at: row.text(6)?,
        use_count: row.int(7)?,
    })
}
