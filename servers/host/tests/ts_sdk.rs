//! The official TypeScript SDK (1.32, what Inspector v1 and most Node clients are built on)
//! against `kitbag serve` and single servers over Streamable HTTP (`--http 127.0.0.1:0`, the
//! SDK's `StreamableHTTPClientTransport`): the tool list is accepted and a failing call comes
//! back as a result with its typed code. Over stdio, every tool of every server goes through
//! the SDK in `sweep.rs`.
//!
//! Needs Node and `testkit/js/node_modules` (installed by `scripts/test`). Under `CI=true`
//! their absence fails the test; elsewhere it skips loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::catalog_tool_count;
use kitbag_testkit::clients::ts_sdk_ready;
use kitbag_testkit::http::HttpServer;
use kitbag_testkit::workspace_root;
use serde_json::Value;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn js_dir() -> PathBuf {
    workspace_root(env!("CARGO_MANIFEST_DIR")).join("testkit/js")
}

fn sdk_ready() -> bool {
    ts_sdk_ready(env!("CARGO_MANIFEST_DIR"))
}

fn check(cwd: &Path, command: &Path, args: &[&str]) -> Value {
    run_script("ts_sdk_check.mjs", cwd, command, args)
}

fn run_script(script: &str, cwd: &Path, command: &Path, args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(js_dir().join(script))
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
    assert_eq!(r["tools"], catalog_tool_count("files"), "{r}");
    assert_eq!(r["success"]["isError"], false, "{r}");
    assert_eq!(r["error"]["code"], "file_not_found", "{r}");
}

/// `ask` and `form` answered by the TypeScript SDK's `elicitation/create` handler (issue #39):
/// a single `kitbag server issues` and `kitbag serve` over stdio, and `kitbag serve` over
/// Streamable HTTP with a session (which the host can ask back on). The answers and a
/// refusal come back as the tools' typed results.
#[test]
fn the_ts_sdks_elicitation_handler_answers_ask_and_form() {
    if !sdk_ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let script = "ts_elicit_check.mjs";
    let single = run_script(script, d.path(), bin(), &["server", "issues"]);
    let host = run_script(script, d.path(), bin(), &["serve"]);
    let server = HttpServer::start(
        bin(),
        &["serve", "--http", "127.0.0.1:0", "--http-sessions"],
        d.path(),
        &[],
    );
    let http = run_script(script, d.path(), Path::new(&server.url()), &[]);
    for r in [single, host, http] {
        assert_eq!(r["failures"], serde_json::json!([]), "{r:#}");
        assert_eq!(r["ask"]["answers"]["target"], "staging", "{r:#}");
        assert_eq!(r["declined"]["action"], "decline", "{r:#}");
    }
}
