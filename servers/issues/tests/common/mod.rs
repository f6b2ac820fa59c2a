//! Helpers shared by the integration tests: spawn the real binary on a temp database.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient, ToolCall};
use serde_json::Value;

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

pub fn ok(c: &mut McpClient, tool: &str, args: Value) -> ToolCall {
    let r = c.call(tool, args.clone());
    assert!(!r.is_error, "{tool} {args}: {}", r.text);
    assert!(r.structured.is_object(), "{tool}: no structuredContent");
    r
}

pub fn err(
    c: &mut McpClient,
    tool: &str,
    args: Value,
    code: &str,
    field: Option<&str>,
) -> ToolCall {
    let r = c.call(tool, args.clone());
    assert!(r.is_error, "{tool} {args} should fail: {}", r.text);
    assert_eq!(r.error_code(), Some(code), "{tool} {args}: {}", r.text);
    if let Some(f) = field {
        assert_eq!(
            r.structured["error"]["detail"]["field"], f,
            "{tool} {args}: {}",
            r.text
        );
    }
    r
}

pub fn create(c: &mut McpClient, title: &str, body: &str) -> i64 {
    ok(
        c,
        "issue_create",
        serde_json::json!({"title": title, "body": body}),
    )
    .structured["number"]
        .as_i64()
        .expect("number")
}
