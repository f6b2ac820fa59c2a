//! Helpers shared by the integration tests: spawn the real binary on a temp store — a SQLite
//! file, or a database in a throwaway PostgreSQL — and run each test once per engine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kitbag_testkit::pg::PgServer;
use kitbag_testkit::{Era, McpClient};

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-issues"))
}

/// A root directory and a store: `--db <dir>/data/issues.db`, or `--database-url` of a
/// database of its own in a PostgreSQL cluster.
pub struct Env {
    pub dir: tempfile::TempDir,
    pg: Option<(Arc<PgServer>, String)>,
}

static DATABASES: AtomicUsize = AtomicUsize::new(0);

impl Env {
    pub fn new() -> Self {
        Env {
            dir: tempfile::tempdir().expect("tmp"),
            pg: None,
        }
    }

    /// On SQLite (for `kitbag_testkit::on_both_backends!`).
    pub fn sqlite() -> Self {
        Self::new()
    }

    /// On PostgreSQL; `None` (the test skips) only where PostgreSQL is not installed.
    pub fn postgres() -> Option<Self> {
        let server = Arc::new(PgServer::start()?);
        Some(Env::on(server))
    }

    fn on(server: Arc<PgServer>) -> Env {
        let name = format!("issues_{}", DATABASES.fetch_add(1, Ordering::SeqCst));
        let url = server.database(&name);
        Env {
            dir: tempfile::tempdir().expect("tmp"),
            pg: Some((server, url)),
        }
    }

    /// Another, empty store on the same engine (on PostgreSQL: the same cluster).
    pub fn sibling(&self) -> Env {
        match &self.pg {
            None => Env::new(),
            Some((server, _)) => Env::on(server.clone()),
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    /// A `psql` session on this store's database (PostgreSQL only).
    pub fn psql_session(&self) -> Option<kitbag_testkit::pg::PsqlSession> {
        self.pg.as_ref().map(|(server, url)| server.session(url))
    }

    pub fn server(&self) -> Option<&PgServer> {
        self.pg.as_ref().map(|(s, _)| &**s)
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("data/issues.db")
    }

    /// The flags that name this store.
    pub fn store_args(&self) -> Vec<String> {
        match &self.pg {
            None => vec!["--db".into(), self.db().to_str().expect("utf8").into()],
            Some((_, url)) => vec!["--database-url".into(), url.clone()],
        }
    }

    pub fn spawn(&self, extra: &[&str]) -> McpClient {
        self.spawn_era(Era::Handshake, extra)
    }

    pub fn spawn_era(&self, era: Era, extra: &[&str]) -> McpClient {
        self.spawn_project(era, "test", extra)
    }

    pub fn spawn_project(&self, era: Era, project: &str, extra: &[&str]) -> McpClient {
        let mut args = self.store_args();
        args.extend(["--project".to_string(), project.to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        McpClient::spawn(bin(), &args, self.dir.path(), era)
    }

    /// `kitbag-issues <store flags> ARGS…` run to its end.
    pub fn command(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(bin())
            .args(self.store_args())
            .args(args)
            .output()
            .expect("run kitbag-issues")
    }
}

pub fn create(c: &mut McpClient, title: &str, body: &str) -> i64 {
    c.call_ok(
        "issue_create",
        serde_json::json!({"title": title, "body": body}),
    )
    .structured["number"]
        .as_i64()
        .expect("number")
}
