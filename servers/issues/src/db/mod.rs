//! The store: SQLite (WAL, busy timeout, an FTS5 index) on one machine, or PostgreSQL
//! (`--database-url`, a generated `tsvector` with a GIN index) shared by replicas.
//!
//! Several server processes may share one database. Every write runs in one serialised
//! transaction (SQLite's IMMEDIATE, PostgreSQL's advisory write lock), so reading the next
//! number and inserting the issue are one step: numbers stay sequential and unique per
//! project. Every change also appends to `change_log`, which each process watches to send
//! `notifications/resources/updated` (PostgreSQL also NOTIFYs the other replicas).
//!
//! The two engines sit behind kitbag-shared's one store interface (`state::sql`), so each
//! query below is written once. `schema`: the SQLite file, the PostgreSQL schema, their migrations; `issues`: issue rows,
//! updates and status changes; `todos`: an issue's checklist; `transfer`: export and import.
//! The helpers every query uses (errors, the change log) are here.

mod issues;
mod schema;
mod todos;
mod transfer;
mod watch;

use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::json;

pub use issues::*;
pub use kitbag_shared::state::sql::{Engine, Sql, Store, Tx};
pub use schema::{FAMILY, open, open_postgres};
pub use todos::*;
pub use transfer::{export, import};
pub use watch::{listen, reopen};

/// change_log rows kept (watchers only need the recent tail).
const CHANGE_LOG_KEEP: i64 = 10_000;

/// The channel PostgreSQL replicas are told of changes on (the payload is the project).
pub const NOTIFY_CHANNEL: &str = "kitbag_issues";

/// Unix seconds now.
pub fn now() -> i64 {
    i64::try_from(kitbag_shared::clock::unix_secs()).unwrap_or(i64::MAX)
}

pub fn new_id() -> String {
    ulid::Ulid::generate().to_string()
}

fn not_found(number: i64) -> ToolError {
    ToolError::new(
        ErrorCode::IssueNotFound,
        format!("there is no issue #{number} in this project; issue_list shows the issues"),
    )
    .with_detail(json!({ "number": number, "field": "number" }))
}

fn log_change(tx: &mut Tx<'_>, project: &str, number: i64) -> ToolResult<()> {
    let last = tx.int(
        "INSERT INTO change_log (project, number) VALUES (?1, ?2) RETURNING seq",
        &[&project, &number],
    )?;
    if last % 1000 == 0 {
        tx.exec(
            "DELETE FROM change_log WHERE seq <= ?1",
            &[&(last - CHANGE_LOG_KEEP)],
        )?;
    }
    if tx.engine() == Engine::Postgres {
        // Delivered at commit, to every replica that listens.
        tx.exec("SELECT pg_notify(?1, ?2)", &[&NOTIFY_CHANNEL, &project])?;
    }
    Ok(())
}

/// The newest change_log entry (0 when empty).
pub fn last_change(conn: &mut impl Sql) -> ToolResult<i64> {
    conn.int("SELECT coalesce(max(seq), 0) FROM change_log", &[])
}

/// Every change_log entry after `since` (all projects, so the reader sees each sequence
/// number): `(seq, number, ours)` where `ours` says it is `project`'s. One statement, so one
/// snapshot: a change committing meanwhile is either in it or read next time.
pub fn changes_since(
    conn: &mut impl Sql,
    project: &str,
    since: i64,
) -> ToolResult<Vec<(i64, i64, bool)>> {
    let rows = conn.rows(
        "SELECT seq, number, CASE WHEN project = ?2 THEN 1 ELSE 0 END FROM change_log \
         WHERE seq > ?1 ORDER BY seq",
        &[&since, &project],
    )?;
    rows.iter()
        .map(|row| Ok((row.int(0)?, row.int(1)?, row.int(2)? == 1)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use kitbag_shared::paths::PathPolicy;

    use super::*;

    fn policy(root: &Path) -> PathPolicy {
        PathPolicy::new(root, &[], false).unwrap()
    }

    fn db() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let c = open(&policy(d.path()), &d.path().join("x/issues.db")).unwrap();
        (d, Store::sqlite(FAMILY, c))
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
        let (hits, total) = list(&mut c, "p", StatusFilter::All, Some("palette"), 25, 0).unwrap();
        assert_eq!((hits.len(), total), (1, 1));
        assert_eq!(hits[0].title, "Dark mode");
        // Punctuation that is FTS5 syntax falls back to quoted words.
        let (hits, _) = list(&mut c, "p", StatusFilter::All, Some("crash: \"on"), 25, 0).unwrap();
        assert_eq!(hits.len(), 1);
        // Title edits reach the index.
        let edit = Edit {
            title: Some("Night theme"),
            ..Default::default()
        };
        update(&mut c, "p", "me", 1, &edit).unwrap();
        assert_eq!(
            list(&mut c, "p", StatusFilter::All, Some("night"), 25, 0)
                .unwrap()
                .1,
            1
        );
        assert_eq!(
            list(&mut c, "p", StatusFilter::All, Some("dark"), 25, 0)
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
        rusqlite::Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = open(&policy(d.path()), &other).unwrap_err().to_string();
        assert!(e.contains("not a kitbag-issues database"), "{e}");
    }

    #[test]
    fn casual_queries_become_safe_tsqueries() {
        assert_eq!(tsquery("dark mode"), "'dark' & 'mode'");
        assert_eq!(tsquery("dark OR night"), "'dark' | 'night'");
        assert_eq!(tsquery("crash NOT login"), "'crash' & !'login'");
        assert_eq!(tsquery("crash -login"), "'crash' & !'login'");
        assert_eq!(tsquery("pal*"), "'pal':*");
        assert_eq!(
            tsquery("\"empty password\" crash"),
            "'empty password' & 'crash'"
        );
        // Punctuation and quotes stay inside a quoted lexeme.
        assert_eq!(tsquery("crash: 'on \\"), "'crash:' & '''on' & '\\\\'");
        assert_eq!(tsquery("  "), "");
    }
}
