//! The official TypeScript SDK (1.32, what Inspector v1 and most Node clients are built on)
//! against `kitbag serve` and single servers: the tool list is accepted (it used to be
//! rejected whole because of one bare `true` property schema) and a failing call comes back as
//! a result with its typed code (it used to be thrown away as -32602).
//!
//! Over stdio and over Streamable HTTP (`--http 127.0.0.1:0`, the SDK's
//! `StreamableHTTPClientTransport`).
//!
//! Needs Node and `testkit/js/node_modules` (installed by `scripts/test`). Under `CI=true`
//! their absence fails the test; elsewhere it skips loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::http::HttpServer;
use kitbag_testkit::{sibling_binary, workspace_root};
use serde_json::Value;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn js_dir() -> PathBuf {
    workspace_root(env!("CARGO_MANIFEST_DIR")).join("testkit/js")
}

fn sdk_ready() -> bool {
    let installed = js_dir()
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .exists();
    let node = Command::new("node").arg("--version").output().is_ok();
    if installed && node {
        return true;
    }
    let why = "the TypeScript SDK is not installed (run scripts/test, or npm ci in testkit/js)";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("SKIPPED: {why}");
    false
}

fn check(cwd: &Path, command: &Path, args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(js_dir().join("ts_sdk_check.mjs"))
        .arg(cwd)
        .arg(command)
        .args(args)
        .env_remove("KITBAG_HOST_DEPTH")
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no report: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        out.status.success(),
        "{} {args:?}: {report:#}",
        command.display()
    );
    report
}

#[test]
fn the_ts_sdk_lists_calls_and_keeps_typed_errors() {
    if !sdk_ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    let host = check(d.path(), bin(), &["serve"]);
    assert!(host["tools"].as_u64().unwrap_or(0) >= 38, "{host}");
    assert_eq!(host["error"]["code"], "file_not_found", "{host}");
    assert!(
        host["error"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("file_not_found")),
        "{host}"
    );
    // The debug server alone (its schema used to break the whole list).
    let dap = check(d.path(), bin(), &["server", "dap"]);
    assert_eq!(dap["tools"], 1, "{dap}");
    assert_eq!(dap["error"]["code"], "invalid_params", "{dap}");
    // A single server binary, as users install it.
    let files = sibling_binary("kitbag-files");
    if files.exists() {
        let r = check(d.path(), &files, &[]);
        assert_eq!(r["error"]["code"], "file_not_found", "{r}");
    } else {
        eprintln!("SKIPPED kitbag-files binary: build the workspace (cargo test --workspace)");
    }
}

#[test]
fn the_ts_sdk_over_streamable_http_lists_calls_and_keeps_typed_errors() {
    if !sdk_ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    let host = HttpServer::start(bin(), &["serve", "--http", "127.0.0.1:0"], d.path(), &[]);
    let r = check(d.path(), Path::new(&host.url()), &[]);
    assert_eq!(r["transport"], "http", "{r}");
    assert!(r["tools"].as_u64().unwrap_or(0) >= 38, "{r}");
    assert_eq!(r["success"]["isError"], false, "{r}");
    assert_eq!(r["error"]["code"], "file_not_found", "{r}");
    let files = HttpServer::start(
        bin(),
        &["server", "files", "--http", "127.0.0.1:0"],
        d.path(),
        &[],
    );
    let r = check(d.path(), Path::new(&files.url()), &[]);
    assert_eq!(r["tools"], 7, "{r}");
    assert_eq!(r["success"]["isError"], false, "{r}");
    assert_eq!(r["error"]["code"], "file_not_found", "{r}");
}
