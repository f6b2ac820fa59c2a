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
//!
//! The `agent_framework_*` tests drive three agent frameworks the same way, each from its venv
//! (`testkit/langchain-py`, `testkit/agents-py`, `testkit/fastmcp-py`): LangChain's MCP adapters,
//! the OpenAI Agents SDK and FastMCP (client and proxy), over stdio against `kitbag serve` and
//! `kitbag server files`: every tool's schema through their converters, and real calls.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::catalog_tool_count;
use kitbag_testkit::clients::{json_report, project, require, testkit_dir, venv_python};
use kitbag_testkit::http::HttpServer;
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn py_dir() -> PathBuf {
    testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py")
}

/// The venv's python, when the pinned SDK is installed in it; else `None` after saying so
/// (a failure under `CI=true`).
fn python() -> Option<PathBuf> {
    let python = venv_python(&py_dir(), "mcp");
    require(
        python.is_some(),
        "the Python MCP SDK is not installed in testkit/py/.venv (run scripts/test)",
    );
    python
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

/// `script` of testkit/py run by the SDK's python on `runs`: its output and its report.
fn drive(python: &Path, script: &str, runs: &[Value]) -> (std::process::Output, Value) {
    json_report(
        Command::new(python)
            .arg(py_dir().join(script))
            .arg(Value::Array(runs.to_vec()).to_string()),
    )
}

#[test]
fn the_python_sdk_lists_calls_keeps_typed_errors_and_listens_in_both_eras() {
    let Some(python) = python() else {
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

    let (out, reports) = drive(&python, "client_check.py", &runs);
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
        let files = catalog_tool_count("files");
        if name.starts_with("files") {
            assert_eq!(tools, files, "{name}: {r}");
        } else if name.starts_with("all") {
            assert!(tools >= 38, "{name}: {r}");
        } else {
            // files' tools + the host's own (host_status, host_reload, agent_delegate; not its
            // three job tools, which need a model); memory's 4 more after the reload.
            let own = catalog_tool_count("host") - 3;
            assert_eq!(tools, files + own, "{name}: {r}");
            assert_eq!(
                r["listen"]["toolsAfter"],
                files + own + catalog_tool_count("memory"),
                "{name}: {r}"
            );
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

/// The runs of the agent frameworks' checks: `kitbag serve` (the default config, every family,
/// started in a project holding a.txt) and one single server (`kitbag server files --root`,
/// started elsewhere), both over stdio.
fn framework_runs(d: &Path) -> Value {
    let kitbag = bin().to_str().expect("utf8");
    let host = project(&d.join("host"));
    let files = project(&d.join("files"));
    json!([
        {"name": "host", "cwd": host, "target": [kitbag, "serve"]},
        {"name": "files", "cwd": d, "target": [kitbag, "server", "files", "--root", files]},
    ])
}

/// Runs `testkit/<folder>/<script>` (with the venv pinning `package`) over `framework_runs`;
/// each run's report, with no failed check, and the tool count it saw (`kitbag serve`: every
/// family, at least 38 tools; the files server: 7). `None` when the venv is missing (skipped).
fn run_framework(folder: &str, package: &str, script: &str) -> Option<Vec<(String, Value)>> {
    let dir = testkit_dir(env!("CARGO_MANIFEST_DIR")).join(folder);
    let Some(python) = venv_python(&dir, package) else {
        require(
            false,
            &format!("{package} is not installed in testkit/{folder}/.venv (run scripts/test)"),
        );
        return None;
    };
    let d = tempfile::tempdir().expect("tmp");
    let runs = framework_runs(d.path());
    let (out, reports) = json_report(
        Command::new(&python)
            .arg(dir.join(script))
            .arg(runs.to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut seen = Vec::new();
    for run in runs.as_array().expect("runs") {
        let name = run["name"].as_str().expect("name");
        let r = &reports[name];
        assert_eq!(
            r["failures"],
            json!([]),
            "{package}, {name}: {r:#}\n{stderr}"
        );
        let tools = r["tools"].as_u64().unwrap_or(0);
        if name == "files" {
            assert_eq!(tools, catalog_tool_count("files"), "{package}, {name}: {r}");
        } else {
            assert!(tools >= 38, "{package}, {name}: {r}");
        }
        seen.push((name.to_string(), r.clone()));
    }
    assert!(out.status.success(), "{package}: {reports:#}\n{stderr}");
    Some(seen)
}

/// LangChain's MCP adapters (langchain-mcp-adapters 0.3.2, pinned in
/// testkit/langchain-py/requirements.txt), against `kitbag serve` and `kitbag server files`:
/// `MultiServerMCPClient.get_tools()` over stdio, then `.args` of every tool (it reads
/// `inputSchema["properties"]`: a schema without `properties` raised KeyError),
/// `render_text_description_and_args` over the whole list, `convert_to_openai_tool` of every
/// tool (what `bind_tools` sends), one `file_read` ("alpha" comes back) and one of a missing
/// file (an error ToolMessage naming `file_not_found`).
#[test]
fn agent_framework_langchain_converts_every_tool_and_calls() {
    let Some(runs) = run_framework(
        "langchain-py",
        "langchain-mcp-adapters",
        "langchain_check.py",
    ) else {
        return;
    };
    for (name, r) in runs {
        assert_eq!(r["args"]["ok"], r["tools"], "{name}: {r}");
        assert_eq!(r["convert_to_openai_tool"]["ok"], r["tools"], "{name}: {r}");
        assert_eq!(r["success"]["sawContent"], true, "{name}: {r}");
        assert_eq!(r["error"]["status"], "error", "{name}: {r}");
    }
}

/// The OpenAI Agents SDK (openai-agents 0.24.0, pinned in testkit/agents-py/requirements.txt),
/// with no model and no API key, against `kitbag serve` and `kitbag server files`:
/// `MCPServerStdio` connects, lists, turns every tool into the SDK's function tool and calls
/// `file_read` ("alpha" comes back). How many input schemas
/// `agents.strict_schema.ensure_strict_json_schema` converts, and which it refuses (maps:
/// `additionalProperties: {...}`, which strict mode cannot express), is printed, not asserted:
/// kitbag's schemas are not reshaped for strict mode.
#[test]
fn agent_framework_openai_agents_lists_calls_and_reports_strict_schemas() {
    let Some(runs) = run_framework("agents-py", "openai-agents", "agents_check.py") else {
        return;
    };
    for (name, r) in runs {
        assert_eq!(r["success"]["sawContent"], true, "{name}: {r}");
        let strict = &r["strict"];
        let refused = strict["refused"].as_array().expect("refused");
        let converted = strict["converted"].as_u64().expect("converted");
        assert_eq!(
            converted + refused.len() as u64,
            r["tools"].as_u64().unwrap_or(0),
            "{name}: {r}"
        );
        eprintln!(
            "openai-agents, {name}: ensure_strict_json_schema converted {converted} of {} \
             tools, refused {}; the SDK sends {} as strict",
            r["tools"],
            refused.len(),
            strict["sdkStrict"]
        );
        for x in refused {
            eprintln!(
                "  refused {}: {} (at {})",
                x["tool"].as_str().unwrap_or("?"),
                x["reason"].as_str().unwrap_or("?"),
                x["at"]
            );
        }
    }
}

/// FastMCP 4.2.3 (pinned in testkit/fastmcp-py/requirements.txt), against `kitbag serve` and
/// `kitbag server files`: its `Client` over stdio lists the tools, converts every outputSchema
/// into the type it parses results into (`json_schema_to_type_adapter`), calls `file_read`
/// (`.data` holds "alpha") and one of a missing file (a `ToolError` naming `file_not_found`);
/// then `create_proxy` in front of kitbag, through an in-memory `Client(proxy)`: the same tools,
/// the same call and error.
#[test]
fn agent_framework_fastmcp_client_and_proxy_list_call_and_keep_typed_errors() {
    let Some(runs) = run_framework("fastmcp-py", "fastmcp", "fastmcp_check.py") else {
        return;
    };
    for (name, r) in runs {
        assert_eq!(r["outputSchemas"]["refused"], json!([]), "{name}: {r}");
        assert_eq!(r["proxy"]["tools"], r["tools"], "{name}: {r}");
        for via in [&r["direct"], &r["proxy"]] {
            assert_eq!(via["success"]["sawData"], true, "{name}: {r}");
            assert_eq!(via["error"]["raised"], "ToolError", "{name}: {r}");
        }
    }
}

/// `ask` and `form` answered by the Python SDK's `elicitation_callback` (issue #39), in both
/// eras: a single `kitbag server issues` over stdio, `kitbag serve` over stdio, and
/// `kitbag serve` over HTTP (2026-07-28 through the host's `InputRequiredResult`; the legacy
/// era over an HTTP session, which can be asked back). Answers and a refusal come back typed.
#[test]
fn the_python_sdks_elicitation_callback_answers_ask_and_form() {
    let Some(python) = python() else {
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let kitbag = bin().to_str().expect("utf8");
    let root = project(d.path());
    let http = HttpServer::start(
        bin(),
        &["serve", "--http", "127.0.0.1:0", "--http-sessions"],
        &root,
        &[],
    );
    let mut runs = Vec::new();
    for mode in MODES {
        runs.push(
            json!({"name": format!("issues stdio {mode}"), "mode": mode, "cwd": root,
            "target": [kitbag, "server", "issues"]}),
        );
        runs.push(
            json!({"name": format!("host stdio {mode}"), "mode": mode, "cwd": root,
            "target": [kitbag, "serve"]}),
        );
        runs.push(
            json!({"name": format!("host http {mode}"), "mode": mode, "cwd": root,
            "target": http.url()}),
        );
    }
    let (out, reports) = drive(&python, "elicit_check.py", &runs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for run in &runs {
        let name = run["name"].as_str().expect("name");
        let r = &reports[name];
        assert_eq!(r["failures"], json!([]), "{name}: {r:#}\n{stderr}");
        assert_eq!(r["forms_seen"], 3, "{name}: {r:#}");
    }
    assert!(out.status.success(), "{reports:#}\n{stderr}");
}
