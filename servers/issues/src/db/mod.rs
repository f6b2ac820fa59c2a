//! The store: SQLite (WAL, busy timeout) with an FTS5 index over titles and bodies.
//!
//! Several server processes may share one database. Every write runs in an IMMEDIATE
//! transaction, so reading the next number and inserting the issue are one step: numbers
//! stay sequential and unique per project. Every change also appends to `change_log`, which
//! each process watches to send `notifications/resources/updated`.
//!
//! `schema`: the file, its tables and migrations; `issues`: issue rows, updates and status
//! changes; `todos`: an issue's checklist; `transfer`: export and import. The helpers every
//! query uses (errors, write transactions, the change log) are here.

mod issues;
mod schema;
mod todos;
mod transfer;

use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use serde_json::json;

pub use issues::*;
pub use schema::{BUSY_TIMEOUT, SCHEMA_VERSION, open};
pub use todos::*;
pub use transfer::{export, import};

/// change_log rows kept (watchers only need the recent tail).
const CHANGE_LOG_KEEP: i64 = 10_000;

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn new_id() -> String {
    ulid::Ulid::generate().to_string()
}

/// A database failure as a tool error (busy is the one a caller can act on).
pub fn sql(e: rusqlite::Error) -> ToolError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    {
        return ToolError::new(
            ErrorCode::FileBusy,
            "the issues database stayed locked by another process for 10 s; try again",
        );
    }
    ToolError::internal(format!("issues database: {e}"))
}

fn write_tx(conn: &mut Connection) -> ToolResult<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql)
}

fn not_found(number: i64) -> ToolError {
    ToolError::new(
        ErrorCode::IssueNotFound,
        format!("there is no issue #{number} in this project; issue_list shows the issues"),
    )
    .with_detail(json!({ "number": number, "field": "number" }))
}

fn log_change(tx: &Transaction<'_>, project: &str, number: i64) -> ToolResult<()> {
    tx.execute(
        "INSERT INTO change_log (project, number) VALUES (?1, ?2)",
        params![project, number],
    )
    .map_err(sql)?;
    let last = tx.last_insert_rowid();
    if last % 1000 == 0 {
        tx.execute(
            "DELETE FROM change_log WHERE seq <= ?1",
            params![last - CHANGE_LOG_KEEP],
        )
        .map_err(sql)?;
    }
    Ok(())
}

/// The newest change_log entry (0 when empty).
pub fn last_change(conn: &Connection) -> ToolResult<i64> {
    conn.query_row("SELECT coalesce(max(seq), 0) FROM change_log", [], |r| {
        r.get(0)
    })
    .map_err(sql)
}

/// Issue numbers of `project` changed after change `since`, and the newest change seen.
pub fn changes_since(conn: &Connection, project: &str, since: i64) -> ToolResult<(Vec<i64>, i64)> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, number FROM change_log WHERE seq > ?1 AND project = ?2 ORDER BY seq",
        )
        .map_err(sql)?;
    let mut last = since;
    let mut numbers = Vec::new();
    let rows = stmt
        .query_map(params![since, project], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(sql)?;
    for row in rows {
        let (seq, n) = row.map_err(sql)?;
        last = last.max(seq);
        if !numbers.contains(&n) {
            numbers.push(n);
        }
    }
    // Other projects' changes advance the cursor too.
    last = last.max(last_change(conn)?);
    Ok((numbers, last))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use kitbag_shared::paths::PathPolicy;
    use kitbag_shared::state::sqlite::StateDb;

    use super::*;

    fn policy(root: &Path) -> PathPolicy {
        PathPolicy::new(root, &[], false).unwrap()
    }

    fn db() -> (tempfile::TempDir, StateDb) {
        let d = tempfile::tempdir().unwrap();
        let c = open(&policy(d.path()), &d.path().join("x/issues.db")).unwrap();
        (d, c)
    }

    #[test]
    fn numbers_are_per_project_and_sequential() {
        let (_d, mut c) = db();
        for want in 1..=3 {
            assert_eq!(create(&mut c, "a", "me", "t", "b").unwrap().number, want);
        }
        assert_eq!(create(&mut c, "b", "me", "t", "b").unwrap().number, 1);
        assert_eq!(create(&mut c, "a", "me", "t", "b").unwrap().number, 4);
    }

    #[test]
    fn fts_finds_body_words_and_survives_bad_syntax() {
        let (_d, mut c) = db();
        create(&mut c, "p", "me", "Dark mode", "The palette needs a toggle").unwrap();
        create(&mut c, "p", "me", "Login bug", "crash on submit").unwrap();
        let (hits, total) = list(&c, "p", StatusFilter::All, Some("palette"), 25, 0).unwrap();
        assert_eq!((hits.len(), total), (1, 1));
        assert_eq!(hits[0].title, "Dark mode");
        // Punctuation that is FTS5 syntax falls back to quoted words.
        let (hits, _) = list(&c, "p", StatusFilter::All, Some("crash: \"on"), 25, 0).unwrap();
        assert_eq!(hits.len(), 1);
        // Title edits reach the index.
        let edit = Edit {
            title: Some("Night theme"),
            ..Default::default()
        };
        update(&mut c, "p", "me", 1, &edit).unwrap();
        assert_eq!(
            list(&c, "p", StatusFilter::All, Some("night"), 25, 0)
                .unwrap()
                .1,
            1
        );
        assert_eq!(
            list(&c, "p", StatusFilter::All, Some("dark"), 25, 0)
                .unwrap()
                .1,
            0
        );
    }

    #[test]
    fn foreign_and_corrupt_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let junk = d.path().join("junk.db");
        std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
        let e = open(&policy(d.path()), &junk).unwrap_err().to_string();
        assert!(e.contains("not a usable SQLite database"), "{e}");
        let other = d.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = open(&policy(d.path()), &other).unwrap_err().to_string();
        assert!(e.contains("not a kitbag-issues database"), "{e}");
    }
}
