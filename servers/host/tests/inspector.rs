//! The MCP Inspector 2.12 CLI (`--cli`, pinned in testkit/inspector, run with Node 22) against
//! `kitbag serve` and a single server (`kitbag server files`), over stdio and Streamable HTTP,
//! in both protocol eras (`--protocol-era legacy|modern`): `tools/list --strict` exits 0 with
//! zero error-severity schema problems (portability warnings are allowed and counted), and
//! `tools/call` succeeds (exit 0) or reports the tool's typed error (exit 5, `tool_is_error`,
//! the result with `structuredContent.error.code`).
//!
//! Needs `testkit/inspector/node_modules` and `testkit/node22` (installed by `scripts/test`).
//! Under `CI=true` their absence fails the test; elsewhere it skips loudly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kitbag_testkit::clients::{node22, project, require, testkit_dir};
use kitbag_testkit::http::HttpServer;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn inspector() -> PathBuf {
    testkit_dir(env!("CARGO_MANIFEST_DIR")).join(
        "inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
    )
}

fn ready() -> bool {
    let node = node22(env!("CARGO_MANIFEST_DIR"));
    require(
        inspector().exists() && node.exists(),
        "the MCP Inspector CLI or Node 22 is not installed (run scripts/test, or npm ci in \
         testkit/inspector and testkit/node22)",
    )
}

/// One Inspector CLI run; `target` is a URL or a command and its arguments.
fn inspect(cwd: &Path, era: &str, method_args: &[&str], target: &[&str]) -> Output {
    let home = cwd.join(".inspector-home");
    std::fs::create_dir_all(&home).expect("home");
    Command::new(node22(env!("CARGO_MANIFEST_DIR")))
        .arg(inspector())
        .args(["--cli", "--format", "json", "--protocol-era", era])
        .args(method_args)
        .args(target)
        .current_dir(cwd)
        .env("HOME", &home)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .output()
        .expect("node")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// list (strict), a successful call and a failing one, in both eras.
fn check(cwd: &Path, target: &[&str], min_tools: usize) {
    for era in ["legacy", "modern"] {
        let what = format!("{target:?} ({era})");
        let out = inspect(cwd, era, &["--strict", "--method", "tools/list"], target);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{what}: tools/list --strict: {}\n{stderr}",
            out.status
        );
        assert!(
            !stderr.lines().any(|l| l.starts_with("Error")),
            "{what}: error-severity schema problems:\n{stderr}"
        );
        // Nullable values are spelled as anyOf branches (kitbag_shared::schema), never as a
        // type list: the portability warning the Inspector gives for that is gone.
        assert!(
            !stderr.contains("`type` is an array"),
            "{what}: a type list is back:\n{stderr}"
        );
        let summary = stderr
            .lines()
            .find(|l| l.contains(" across "))
            .unwrap_or("no problems");
        assert!(
            summary == "no problems" || summary.starts_with("0 errors"),
            "{what}: {summary}"
        );
        eprintln!("inspector --strict {what}: {summary}");
        let listed: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{what}: tools/list output: {e}: {stdout}"));
        let tools = listed["result"]["tools"]
            .as_array()
            .or(listed["tools"].as_array())
            .unwrap_or_else(|| panic!("{what}: no tools: {stdout}"));
        assert!(tools.len() >= min_tools, "{what}: {} tools", tools.len());

        let call = |path: &str| {
            let args = format!(r#"{{"path":"{path}"}}"#);
            let method = [
                "--method",
                "tools/call",
                "--tool-name",
                "file_read",
                "--tool-args-json",
                &args,
            ];
            inspect(cwd, era, &method, target)
        };
        let out = call("a.txt");
        assert!(
            out.status.success() && text(&out.stdout).contains("alpha"),
            "{what}: file_read a.txt: {}\n{}\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        let out = call("no/such.txt");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(5), "{what}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("tool_is_error") && stdout.contains(r#""code":"file_not_found""#),
            "{what}: the typed error: {stdout}\n{stderr}"
        );
    }
}

#[test]
fn inspector_cli_strict_on_the_host_over_stdio() {
    if !ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let root = project(d.path());
    check(&root, &[bin().to_str().expect("utf8"), "serve"], 38);
}

#[test]
fn inspector_cli_strict_on_a_single_server_over_stdio() {
    if !ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let root = project(d.path());
    check(
        &root,
        &[bin().to_str().expect("utf8"), "server", "files"],
        7,
    );
}

#[test]
fn inspector_cli_strict_over_streamable_http() {
    if !ready() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let root = project(d.path());
    let host = HttpServer::start(bin(), &["serve", "--http", "127.0.0.1:0"], &root, &[]);
    check(&root, &[host.url().as_str()], 38);
    let files = HttpServer::start(
        bin(),
        &["server", "files", "--http", "127.0.0.1:0"],
        &root,
        &[],
    );
    check(&root, &[files.url().as_str()], 7);
}
