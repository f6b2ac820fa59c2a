//! OpenAI Codex (`@openai/codex`, pinned in testkit/codex) driving kitbag through
//! `codex app-server`, with no API key: a thread starts the MCP servers configured in
//! `CODEX_HOME/config.toml` — `kitbag serve` and `kitbag server files` over stdio, and
//! `kitbag serve --http` by URL — then `mcpServerStatus/list` lists each one's tools and
//! `mcpServer/tool/call` calls `file_read` (a success, a typed error) and an unknown tool
//! directly, without a model turn.
//!
//! Needs `testkit/codex/node_modules` (installed by `scripts/test` where npm has Codex's
//! native binary: Linux and macOS on x86_64 and arm64). Under `CI=true` on those platforms
//! its absence fails the test; elsewhere it skips loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::clients::{json_report, project, require, testkit_dir};
use kitbag_testkit::http::HttpServer;
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn codex_dir() -> PathBuf {
    testkit_dir(env!("CARGO_MANIFEST_DIR")).join("codex")
}

/// Where npm installs Codex's native binary.
const CODEX_PLATFORM: bool = cfg!(all(
    any(target_os = "linux", target_os = "macos"),
    any(target_arch = "x86_64", target_arch = "aarch64")
));

fn codex() -> Option<PathBuf> {
    let bin = codex_dir().join("node_modules/.bin/codex");
    let works = bin.exists()
        && Command::new(&bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if works {
        return Some(bin);
    }
    let why = "Codex is not installed in testkit/codex (run scripts/test, or npm ci there)";
    if CODEX_PLATFORM {
        require(false, why);
    } else {
        eprintln!("\n*** SKIPPED: {why}; npm has no Codex binary for this platform ***\n");
    }
    None
}

/// TOML basic string.
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("json string")
}

#[test]
fn codex_app_server_lists_and_calls_kitbag_tools_without_an_api_key() {
    let Some(codex) = codex() else {
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let root = project(&d.path().join("project"));
    let home = d.path().join("codex-home");
    std::fs::create_dir_all(&home).expect("home");
    let http = HttpServer::start(bin(), &["serve", "--http", "127.0.0.1:0"], &root, &[]);
    let kitbag = toml_str(bin().to_str().expect("utf8"));
    let config = format!(
        "[mcp_servers.kitbag]\ncommand = {kitbag}\nargs = [\"serve\"]\n\n\
         [mcp_servers.kb_files]\ncommand = {kitbag}\nargs = [\"server\", \"files\"]\n\n\
         [mcp_servers.kb_http]\nurl = {}\n",
        toml_str(&http.url())
    );
    std::fs::write(home.join("config.toml"), config).expect("config.toml");

    let (out, reports) = json_report(
        Command::new("python3")
            .arg(codex_dir().join("codex_check.py"))
            .arg(&codex)
            .arg(&home)
            .arg(&root)
            .args(["kitbag", "kb_files", "kb_http"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (name, tools) in [("kitbag", 38), ("kb_files", 7), ("kb_http", 38)] {
        let r = &reports[name];
        assert_eq!(r["failures"], json!([]), "{name}: {r:#}\n{stderr}");
        assert!(r["tools"].as_u64().unwrap_or(0) >= tools, "{name}: {r}");
        assert_eq!(r["toolsError"], json!(null), "{name}: {r}");
        assert_eq!(r["success"]["sawContent"], true, "{name}: {r}");
        assert_eq!(r["error"]["isError"], true, "{name}: {r}");
        assert_eq!(r["error"]["code"], "file_not_found", "{name}: {r}");
        assert_eq!(r["unknown_tool"]["code"], -32602, "{name}: {r}");
    }
    assert!(out.status.success(), "{reports:#}\n{stderr}");
}
