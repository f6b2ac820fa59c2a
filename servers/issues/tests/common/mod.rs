//! Helpers shared by the integration tests: spawn the real binary on a temp database.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient};

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-issues"))
}

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Env {
            dir: tempfile::tempdir().expect("tmp"),
        }
    }
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("data/issues.db")
    }
    pub fn spawn(&self, extra: &[&str]) -> McpClient {
        self.spawn_era(Era::Handshake, extra)
    }
    pub fn spawn_era(&self, era: Era, extra: &[&str]) -> McpClient {
        let db = self.db();
        let mut args = vec!["--db", db.to_str().expect("utf8"), "--project", "test"];
        args.extend_from_slice(extra);
        McpClient::spawn(bin(), &args, self.dir.path(), era)
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
