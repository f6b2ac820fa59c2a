//! Where a test's servers keep their store: a root directory with the SQLite file, or that
//! root plus a private PostgreSQL (a fresh cluster on a Unix socket per test; skipped where
//! PostgreSQL is not installed, required under CI=true). Servers of one test share the store.

#![allow(dead_code)] // each test file uses part of it

use std::path::Path;

use kitbag_testkit::pg::PgServer;
use kitbag_testkit::{Era, McpClient};

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-cron"))
}

pub struct Backend {
    pub dir: tempfile::TempDir,
    pub pg: Option<PgServer>,
}

impl Backend {
    pub fn sqlite() -> Backend {
        Backend {
            dir: tempfile::tempdir().expect("tmp"),
            pg: None,
        }
    }

    pub fn postgres() -> Option<Backend> {
        let pg = PgServer::start()?;
        pg.database("cron");
        Some(Backend {
            dir: tempfile::tempdir().expect("tmp"),
            pg: Some(pg),
        })
    }

    /// `--root` and, on PostgreSQL, `--database-url`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--root".to_string(),
            self.dir.path().to_str().expect("utf-8 path").to_string(),
        ];
        if let Some(pg) = &self.pg {
            args.push("--database-url".into());
            args.push(pg.url_of("cron"));
        }
        args
    }

    pub fn spawn(&self, era: Era, extra: &[&str]) -> McpClient {
        let mut args = self.args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        McpClient::spawn_with_env(bin(), &args, self.dir.path(), era, &[("TZ", "UTC")])
    }

    /// One SQL query's rows (PostgreSQL only).
    pub fn sql(&self, q: &str) -> String {
        self.pg
            .as_ref()
            .expect("a PostgreSQL backend")
            .psql_in("cron", q)
            .unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    /// Every stored row (id, entry JSON, and the error of one kept as written) and the id
    /// counter, read straight from the database: the same lines on both backends.
    pub fn dump(&self) -> Vec<String> {
        match &self.pg {
            Some(_) => {
                let mut rows: Vec<String> = self
                    .sql(
                        "SELECT coalesce(id, '') || ' ' || body || ' ' || coalesce(error, '')
                         FROM cron_entries ORDER BY seq",
                    )
                    .lines()
                    .map(str::to_string)
                    .collect();
                rows.push(format!(
                    "next_id {}",
                    self.sql("SELECT next_id FROM cron_meta")
                ));
                rows
            }
            None => dump_sqlite(self.dir.path()),
        }
    }

    /// Nothing was ever stored (SQLite: not even a database file was made).
    pub fn stored_nothing(&self) -> bool {
        match &self.pg {
            Some(_) => self.sql("SELECT count(*) FROM cron_entries") == "0",
            None => {
                !self.dir.path().join(".kitbag/cron.json").exists()
                    && !self.dir.path().join(".kitbag/cron.db").exists()
            }
        }
    }
}

pub fn dump_sqlite(dir: &Path) -> Vec<String> {
    let db = rusqlite::Connection::open_with_flags(
        dir.join(".kitbag/cron.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open store");
    let mut st = db
        .prepare("SELECT coalesce(id, ''), body, coalesce(error, '') FROM entries ORDER BY seq")
        .expect("query");
    let mut rows: Vec<String> = st
        .query_map([], |r| {
            Ok(format!(
                "{} {} {}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?
            ))
        })
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    let next: i64 = db
        .query_row("SELECT v FROM meta WHERE k = 'next_id'", [], |r| r.get(0))
        .expect("next_id");
    rows.push(format!("next_id {next}"));
    rows
}
