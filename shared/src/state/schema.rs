//! The one way a family's SQLite store is opened and brought up to date (memory, issues,
//! cron): the busy timeout, write-ahead logging, an integrity check, the pragmas, then the
//! versioned migrations of its [`Layout`] under `PRAGMA user_version`.
//!
//! Several server processes may start on one file at once, so every step is safe to race:
//! switching a new file to WAL is retried while another process holds it, and the migrations
//! run in one IMMEDIATE transaction that re-reads the version once it holds the write lock.
//! (PostgreSQL's counterpart is [`super::pg::migrate`].)

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior};

use super::sqlite::{OpenError, StateDb, read_write_create};
use crate::paths::PathPolicy;

/// How long a store waits for another process's write before answering busy.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a family's store holds, and how each older layout becomes the current one.
pub struct Layout {
    /// The family (`issues` names a `kitbag-issues` store in messages).
    pub family: &'static str,
    /// `steps[i]` takes `user_version` `i` to `i + 1`; the current version is their count.
    pub steps: &'static [Step],
    /// Tables a file without a version may already hold: a layout from before versions were
    /// kept, which the first step adopts. Any other table means the file is not this store.
    pub adopt: &'static [&'static str],
    /// Tables every current store has: a file at the current version without them is not ours.
    pub tables: &'static [&'static str],
}

/// One migration step.
pub enum Step {
    /// Statements run as one batch.
    Sql(&'static str),
    /// Code, for a step SQL alone cannot take (rows rewritten, a table that may exist).
    Run(fn(&Connection) -> rusqlite::Result<()>),
}

impl Layout {
    /// The version a current store has.
    pub fn version(&self) -> i64 {
        self.steps.len() as i64
    }
}

/// Why a store could not be prepared. The caller names the file and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("{0}")]
    Open(#[from] OpenError),
    #[error("not a usable SQLite database ({0})")]
    Unusable(rusqlite::Error),
    #[error("corrupted ({0})")]
    Corrupt(String),
    #[error("schema version {found} is newer than this kitbag-{family} understands ({known})")]
    Newer {
        family: &'static str,
        found: i64,
        known: i64,
    },
    #[error("not a kitbag-{family} database: {why}")]
    Foreign { family: &'static str, why: String },
    #[error("held by another process for more than {} s", BUSY_TIMEOUT.as_secs())]
    Busy(rusqlite::Error),
    #[error("{0}")]
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for PrepareError {
    fn from(e: rusqlite::Error) -> Self {
        if is_busy(&e) {
            PrepareError::Busy(e)
        } else {
            PrepareError::Sql(e)
        }
    }
}

/// Whether `e` is another process holding the database (busy or locked).
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Open the store file `path` read-write (created when missing; its directory held by
/// descriptor, see [`StateDb::open_path`]) and [`prepare`] it.
pub fn open_store(
    policy: &PathPolicy,
    path: &Path,
    layout: &Layout,
) -> Result<StateDb, PrepareError> {
    let conn = StateDb::open_path(policy, path, read_write_create())?;
    prepare(&conn, layout)?;
    Ok(conn)
}

/// The opening sequence on a connection just opened read-write: busy timeout, WAL, an
/// integrity check (the first read, so a file that is not a database fails here), the
/// pragmas, then [`migrate`].
pub fn prepare(conn: &Connection, layout: &Layout) -> Result<(), PrepareError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(PrepareError::Unusable)?;
    // Switching a new file to WAL takes an exclusive lock that SQLite does not wait for (the
    // busy timeout is not consulted): a server starting beside another retries briefly.
    let check = crate::lock::retry_while_busy(BUSY_TIMEOUT, is_busy, || {
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
        conn.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
    });
    match check {
        Ok(s) if s == "ok" => {}
        Ok(s) => return Err(PrepareError::Corrupt(s)),
        Err(e) if is_busy(&e) => return Err(PrepareError::Busy(e)),
        Err(e) => return Err(PrepareError::Unusable(e)),
    }
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
    migrate(conn, layout)
}

fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Bring the store to `layout`'s version, one process at a time; a store already current is
/// checked to be this family's.
pub fn migrate(conn: &Connection, layout: &Layout) -> Result<(), PrepareError> {
    let known = layout.version();
    let found = version(conn)?;
    if found > known {
        return Err(PrepareError::Newer {
            family: layout.family,
            found,
            known,
        });
    }
    if found == known {
        return check_tables(conn, layout);
    }
    // IMMEDIATE: two servers starting on a new store must not both migrate it, and a deferred
    // transaction that reads, then writes, fails at once with "database is locked" when the
    // other holds the write lock (the busy timeout does not cover that upgrade).
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    // The other may have finished meanwhile.
    let found = version(&tx)?;
    if found == 0 {
        refuse_foreign(&tx, layout)?;
    }
    for step in layout.steps.iter().skip(found as usize) {
        match step {
            Step::Sql(sql) => tx.execute_batch(sql)?,
            Step::Run(run) => run(&tx)?,
        }
    }
    if found != known {
        tx.execute_batch(&format!("PRAGMA user_version = {known};"))?;
    }
    tx.commit()?;
    Ok(())
}

/// The names of the file's own tables (not SQLite's).
fn table_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )?;
    stmt.query_map([], |r| r.get(0))?.collect()
}

/// A file without a version holds nothing, or only the tables `layout` adopts.
fn refuse_foreign(conn: &Connection, layout: &Layout) -> Result<(), PrepareError> {
    let names = table_names(conn)?;
    if let Some(other) = names.iter().find(|n| !layout.adopt.contains(&n.as_str())) {
        return Err(PrepareError::Foreign {
            family: layout.family,
            why: format!("it holds other tables ({other})"),
        });
    }
    Ok(())
}

/// A current store has every table of `layout` (a foreign file may carry a matching
/// `user_version`).
fn check_tables(conn: &Connection, layout: &Layout) -> Result<(), PrepareError> {
    let names = table_names(conn)?;
    if let Some(missing) = layout
        .tables
        .iter()
        .find(|t| !names.iter().any(|n| n == *t))
    {
        return Err(PrepareError::Foreign {
            family: layout.family,
            why: format!("it lacks the table {missing}"),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const V1: &str = "CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT NOT NULL);";
    const V2: &str = "ALTER TABLE things ADD COLUMN size INTEGER NOT NULL DEFAULT 0;";

    fn add_log(conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch("CREATE TABLE log (n INTEGER); INSERT INTO log SELECT id FROM things;")
    }

    static LAYOUT: Layout = Layout {
        family: "test",
        steps: &[Step::Sql(V1), Step::Sql(V2), Step::Run(add_log)],
        adopt: &["things"],
        tables: &["things", "log"],
    };

    fn policy(root: &Path) -> PathPolicy {
        PathPolicy::new(root, &[], false).unwrap()
    }

    #[test]
    fn a_new_store_gets_every_step_and_the_version() {
        let d = tempfile::tempdir().unwrap();
        let conn = open_store(&policy(d.path()), &d.path().join("s/t.db"), &LAYOUT).unwrap();
        assert_eq!(version(&conn).unwrap(), 3);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.execute("INSERT INTO things (name, size) VALUES ('a', 2)", [])
            .unwrap();
        drop(conn);
        // Opened again: current, checked, nothing re-run.
        let conn = open_store(&policy(d.path()), &d.path().join("s/t.db"), &LAYOUT).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM things", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn an_older_store_runs_only_the_steps_it_lacks() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("t.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(V1).unwrap();
        old.execute_batch("INSERT INTO things (name) VALUES ('kept'); PRAGMA user_version = 1;")
            .unwrap();
        drop(old);
        let conn = open_store(&policy(d.path()), &path, &LAYOUT).unwrap();
        let (name, size, logged): (String, i64, i64) = conn
            .query_row(
                "SELECT name, size, (SELECT count(*) FROM log) FROM things",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((name.as_str(), size, logged), ("kept", 0, 1));
    }

    #[test]
    fn foreign_newer_and_broken_files_are_refused_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = policy(d.path());
        let other = d.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = open_store(&p, &other, &LAYOUT).unwrap_err();
        assert!(matches!(e, PrepareError::Foreign { .. }), "{e}");
        assert!(e.to_string().contains("not a kitbag-test database"), "{e}");
        // The refused file is as it was: no table added, no version set.
        let c = Connection::open(&other).unwrap();
        assert_eq!(version(&c).unwrap(), 0);
        assert_eq!(table_names(&c).unwrap(), vec!["t".to_string()]);

        let newer = d.path().join("newer.db");
        Connection::open(&newer)
            .unwrap()
            .execute_batch("PRAGMA user_version = 9")
            .unwrap();
        let e = open_store(&p, &newer, &LAYOUT).unwrap_err();
        assert!(e.to_string().contains("version 9 is newer"), "{e}");

        let lying = d.path().join("lying.db");
        Connection::open(&lying)
            .unwrap()
            .execute_batch("CREATE TABLE things (x); PRAGMA user_version = 3")
            .unwrap();
        let e = open_store(&p, &lying, &LAYOUT).unwrap_err();
        assert!(e.to_string().contains("lacks the table log"), "{e}");

        let junk = d.path().join("junk.db");
        std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
        let e = open_store(&p, &junk, &LAYOUT).unwrap_err();
        assert!(matches!(e, PrepareError::Unusable(_)), "{e}");
        assert!(
            e.to_string().contains("not a usable SQLite database"),
            "{e}"
        );
    }

    #[test]
    fn servers_starting_together_migrate_once() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("t.db");
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (root, path) = (d.path().to_path_buf(), path.clone());
                std::thread::spawn(move || open_store(&policy(&root), &path, &LAYOUT).map(drop))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let c = Connection::open(&path).unwrap();
        assert_eq!(version(&c).unwrap(), 3);
    }
}
