//! The official Python SDK (`mcp` 2.3, pinned in testkit/py/requirements.txt) against
//! `kitbag serve` and a single server (`kitbag server files`), over stdio and Streamable HTTP,
//! in both eras it speaks: `legacy` (the initialize handshake, 2025-11-25) and `2026-07-28`.
//! Each run lists the tools, calls one successfully, one that fails (the typed code must reach
//! the client), an unknown tool (-32602), and listens: on the host, a `host_reload` that adds a
//! server must reach the client as tools list_changed (a `subscriptions/listen` event in
//! 2026-07-28, a notification in legacy); a single server acknowledges a listen stream.
//!
//! Needs `testkit/py/.venv` with the SDK (made by `scripts/test`). Under `CI=true` its absence
//! fails the test; elsewhere it skips loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::clients::{json_report, project, require, testkit_dir};
use kitbag_testkit::http::HttpServer;
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn py_dir() -> PathBuf {
    testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py")
}

/// The venv's python, when the pinned SDK is installed in it.
fn python() -> Option<PathBuf> {
    let venv = py_dir().join(".venv");
    let python = venv.join("bin/python");
    let pinned = std::fs::read_to_string(py_dir().join("requirements.txt")).ok()?;
    let version = pinned
        .lines()
        .find_map(|l| l.trim().strip_prefix("mcp=="))?;
    let installed = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .any(|d| {
            d.path()
                .join(format!("site-packages/mcp-{version}.dist-info"))
                .exists()
        });
    (installed && python.exists()).then_some(python)
}

/// A host project whose agent.json runs the files server (the runs add memory to it).
fn host_project(dir: &Path) -> (PathBuf, PathBuf) {
    let root = project(dir);
    let cfg = root.join("agent.json");
    let files = json!({"command": bin(), "args": ["server", "files"]});
    std::fs::write(&cfg, json!({"mcp": {"files": files}}).to_string()).expect("agent.json");
    (root, cfg)
}

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

#[test]
fn the_python_sdk_lists_calls_keeps_typed_errors_and_listens_in_both_eras() {
    let Some(python) = python() else {
        require(
            false,
            "the Python MCP SDK is not installed in testkit/py/.venv (run scripts/test)",
        );
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let kitbag = bin().to_str().expect("utf8");
    let mut runs = Vec::new();
    let mut servers = Vec::new();
    for mode in MODES {
        // `kitbag serve` over stdio, with a config to reload.
        let (root, cfg) = host_project(&d.path().join(format!("host-stdio-{mode}")));
        let cfg = cfg.to_str().expect("utf8");
        runs.push(
            json!({"name": format!("host stdio {mode}"), "mode": mode, "cwd": root,
                         "target": [kitbag, "--config", cfg, "serve"], "reload": cfg}),
        );
        // `kitbag serve` over HTTP.
        let (root, cfg) = host_project(&d.path().join(format!("host-http-{mode}")));
        let cfg_s = cfg.to_str().expect("utf8");
        let server = HttpServer::start(
            bin(),
            &["--config", cfg_s, "serve", "--http", "127.0.0.1:0"],
            &root,
            &[],
        );
        runs.push(
            json!({"name": format!("host http {mode}"), "mode": mode, "cwd": root,
                         "target": server.url(), "reload": cfg_s}),
        );
        servers.push(server);
        // A single server over stdio.
        let root = project(&d.path().join(format!("files-stdio-{mode}")));
        runs.push(
            json!({"name": format!("files stdio {mode}"), "mode": mode, "cwd": root,
                         "target": [kitbag, "server", "files"]}),
        );
    }
    // The whole embedded suite, no config (every server rooted at the working directory).
    let root = project(&d.path().join("all"));
    runs.push(
        json!({"name": "all stdio 2026-07-28", "mode": "2026-07-28", "cwd": root,
                     "target": [kitbag, "serve"]}),
    );
    // A single server over HTTP, both eras against one process (stateless).
    let root = project(&d.path().join("files-http"));
    let files = HttpServer::start(
        bin(),
        &["server", "files", "--http", "127.0.0.1:0"],
        &root,
        &[],
    );
    for mode in MODES {
        runs.push(
            json!({"name": format!("files http {mode}"), "mode": mode, "cwd": root,
                         "target": files.url()}),
        );
    }
    // Sealed sessions: the SDK keeps the sealed Mcp-Session-Id, and its GET stream gets 405.
    let sealed = HttpServer::start(
        bin(),
        &[
            "server",
            "files",
            "--http",
            "127.0.0.1:0",
            "--sealed-sessions",
        ],
        &root,
        &[],
    );
    runs.push(
        json!({"name": "files http sealed legacy", "mode": "legacy", "cwd": root,
                     "target": sealed.url()}),
    );

    let (out, reports) = json_report(
        Command::new(&python)
            .arg(py_dir().join("client_check.py"))
            .arg(Value::Array(runs.clone()).to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for run in &runs {
        let name = run["name"].as_str().expect("name");
        let r = &reports[name];
        let mode = run["mode"].as_str().expect("mode");
        assert_eq!(r["failures"], json!([]), "{name}: {r:#}\n{stderr}");
        assert_eq!(
            r["protocol"],
            if mode == "legacy" { "2025-11-25" } else { mode },
            "{name}: {r}"
        );
        assert_eq!(r["success"]["sawContent"], true, "{name}: {r}");
        assert_eq!(r["error"]["isError"], true, "{name}: {r}");
        assert_eq!(r["error"]["code"], "file_not_found", "{name}: {r}");
        assert_eq!(r["unknown_tool"]["code"], -32602, "{name}: {r}");
        let tools = r["tools"].as_u64().unwrap_or(0);
        if name.starts_with("files") {
            assert_eq!(tools, 7, "{name}: {r}");
        } else if name.starts_with("all") {
            assert!(tools >= 38, "{name}: {r}");
        } else {
            // files' 7 + host_status + host_reload; memory's 4 more after the reload.
            assert_eq!(tools, 9, "{name}: {r}");
            assert_eq!(r["listen"]["toolsAfter"], 13, "{name}: {r}");
            if mode == "legacy" {
                assert_eq!(r["listen"]["toolsListChanged"], true, "{name}: {r}");
            } else {
                assert_eq!(r["listen"]["event"], "ToolsListChanged", "{name}: {r}");
                assert_eq!(
                    r["listen"]["honored"]["toolsListChanged"], true,
                    "{name}: {r}"
                );
            }
        }
        if mode != "legacy" {
            assert!(r["listen"]["honored"].is_object(), "{name}: {r}");
        }
    }
    drop(servers);
    drop(sealed);
}
