//! Every tool of every server, called at least once successfully and once failing, through the
//! official Python SDK's client (both eras) and the TypeScript SDK's client (the handshake era,
//! the only one it speaks), against `kitbag serve` (stdio, and Streamable HTTP) and against each
//! single server (`kitbag server FAMILY` for Python, the installed binaries `kitbag-FAMILY` for
//! TypeScript): each validates every result it receives against the tool's own outputSchema,
//! error results included.
//!
//! The calls are the case table `testkit/sweep/cases.json`, read by both drivers
//! (`testkit/py/sweep.py`, `testkit/js/sweep.mjs`). A tool of the catalog (`manifests/`) without
//! a successful and a failing case fails this test before anything runs, so a new tool needs
//! its cases the day it lands; each run also fails on a listed tool the table does not call.
//!
//! Seed 004's JSON examples run the same way, verbatim (`testkit/sweep/seed004.json`): every
//! example's name and arguments as the seed writes them, through `kitbag serve` and through the
//! single server that owns the tool, each result held against the outputSchema of the tool the
//! seed's name resolves to and checked for the seed's fields.
//!
//! Needs `testkit/py/.venv` and `testkit/js/node_modules` (made by `scripts/test`). Under
//! `CI=true` their absence fails the test; elsewhere it skips loudly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_testkit::clients::{json_report, require, testkit_dir, ts_sdk_ready, venv_python};
use kitbag_testkit::http::HttpServer;
use kitbag_testkit::llm_mock::{MockLlm, Reply, anthropic_text};
use kitbag_testkit::{pids_with_cmdline, sibling_binary, wait_until, workspace_root};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn cases_path() -> PathBuf {
    testkit_dir(env!("CARGO_MANIFEST_DIR")).join("sweep/cases.json")
}

/// The catalog: each family's tool names, from `manifests/<family>/tools.json` (the host's own
/// tools under `host`).
fn catalog() -> BTreeMap<String, Vec<String>> {
    let dir = workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("manifests").flatten() {
        let family = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path().join("tools.json")).expect("tools.json");
        let tools: Value = serde_json::from_str(&text).expect("json");
        let names = tools["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        out.insert(family, names);
    }
    out
}

/// The arguments a family's server gets in the sweep: the web server may fetch the loopback
/// page the test serves; the issues server needs a project.
fn family_args(family: &str) -> Vec<String> {
    let mut args = vec!["server".to_string(), family.to_string()];
    match family {
        "web" => args.push("--allow-private".into()),
        "issues" => args.extend(["--project".into(), "sweep".into()]),
        _ => {}
    }
    args
}

/// The command line of the binary a user installs for `family` (`kitbag-files`, …) where the
/// build made it, else `kitbag server FAMILY`; with the sweep's arguments.
fn installed_single(family: &str) -> Value {
    let single = sibling_binary(&format!("kitbag-{family}"));
    let mut args = family_args(family);
    let mut target = vec![json!(bin())];
    if single.exists() {
        target = vec![json!(single)];
        args.drain(..2);
    }
    target.extend(args.into_iter().map(Value::from));
    Value::Array(target)
}

/// An agent.json running every family, each as the single-server runs start it.
fn host_config(dir: &Path, families: &[&String]) -> PathBuf {
    let mcp: serde_json::Map<String, Value> = families
        .iter()
        .map(|f| {
            (
                f.to_string(),
                json!({"command": bin(), "args": family_args(f)}),
            )
        })
        .collect();
    let cfg = dir.join("agent.json");
    std::fs::write(&cfg, json!({"mcp": mcp}).to_string()).expect("agent.json");
    cfg
}

/// A small page on loopback for `web_fetch`.
fn serve_page() -> String {
    let body = "<html><head><title>Sweep</title></head><body><h1>Sweep</h1>\
                <p>Every tool, once right and once wrong.</p></body></html>";
    let port = kitbag_testkit::http::serve_page(body.as_bytes().to_vec());
    format!("http://127.0.0.1:{port}/page")
}

/// The Python SDK's venv python, when it and the TypeScript SDK are installed (see
/// [`require`]: under `CI=true` a missing one fails the test).
fn both_sdks() -> Option<PathBuf> {
    let python = venv_python(&testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py"), "mcp");
    let ready = require(
        python.is_some(),
        "the Python MCP SDK is not installed in testkit/py/.venv (run scripts/test)",
    ) && ts_sdk_ready(env!("CARGO_MANIFEST_DIR"));
    python.filter(|_| ready)
}

/// Every catalog tool has a successful and a failing case.
fn missing_cases(cases: &Value, catalog: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let steps = cases["steps"].as_array().expect("steps");
    let has = |tool: &str, ok: bool| {
        steps
            .iter()
            .any(|s| s["tool"] == tool && ((s.get("expect").is_none_or(|e| e == "ok")) == ok))
    };
    let mut missing = Vec::new();
    for tool in catalog.values().flatten() {
        if !has(tool, true) {
            missing.push(format!("{tool}: no successful case"));
        }
        if !has(tool, false) {
            missing.push(format!("{tool}: no failing case"));
        }
    }
    missing
}

/// Checks one driver's reports: nothing failed, and each run called every tool it should.
fn check_reports(
    client: &str,
    runs: &[Value],
    reports: &Value,
    expected: &BTreeMap<String, usize>,
    stderr: &str,
) {
    for run in runs {
        let name = run["name"].as_str().expect("name");
        let r = &reports[name];
        assert_eq!(r["failures"], json!([]), "{client} {name}: {r:#}\n{stderr}");
        let tools = r["tools"].as_object().expect("tools");
        assert_eq!(
            r["listed"].as_u64(),
            Some(expected[name] as u64),
            "{client} {name}: {r:#}"
        );
        assert_eq!(tools.len(), expected[name], "{client} {name}: {r:#}");
        for (tool, tally) in tools {
            let ok = tally["ok"].as_u64() > Some(0) || tally["waived"].as_u64() > Some(0);
            assert!(
                ok && tally["failed"].as_u64() > Some(0),
                "{client} {name} {tool}: {tally}"
            );
        }
    }
}

#[test]
fn every_tool_succeeds_and_fails_typed_through_the_python_and_typescript_sdks() {
    let cases: Value =
        serde_json::from_str(&std::fs::read_to_string(cases_path()).expect("cases")).expect("json");
    let catalog = catalog();
    let missing = missing_cases(&cases, &catalog);
    assert!(
        missing.is_empty(),
        "testkit/sweep/cases.json lacks cases:\n{}",
        missing.join("\n")
    );
    let Some(python) = both_sdks() else {
        return;
    };
    let page = serve_page();
    // agent_delegate's `kitbag run` gets its model from the host's environment: a loopback
    // stand-in that answers every turn.
    let model = MockLlm::start(vec![Reply::sse(anthropic_text("Nothing to change.")); 40]);
    let model_env = [
        ("ANTHROPIC_API_KEY", "test-key".to_string()),
        ("ANTHROPIC_BASE_URL", model.url()),
        ("KITBAG_MODEL", "anthropic/claude-test".to_string()),
    ];
    let host_env: serde_json::Map<String, Value> = model_env
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let d = tempfile::tempdir().expect("tmp");
    let families: Vec<&String> = catalog.keys().filter(|f| *f != "host").collect();
    let all_tools: usize = catalog.values().map(Vec::len).sum();
    let kitbag = bin().to_str().expect("utf8");

    // Each run gets a directory of its own: the cases change files and stores.
    let dir = |name: &str| {
        let p = d.path().join(name.replace(' ', "-"));
        std::fs::create_dir_all(&p).expect("mkdir");
        p
    };
    let mut expected = BTreeMap::new();
    let mut run = |name: String, mode: &str, target: Value, cwd: &Path, tools: usize| {
        expected.insert(name.clone(), tools);
        // A single server runs alone: no host above it.
        let alone = tools < all_tools;
        let env = if alone { json!({}) } else { json!(host_env) };
        json!({"name": name, "mode": mode, "target": target, "cwd": cwd, "vars": {"page": page},
               "alone": alone, "env": env})
    };
    let mut py_runs = Vec::new();
    let mut ts_runs = Vec::new();
    let mut http = Vec::new();
    for mode in ["legacy", "2026-07-28"] {
        let cwd = dir(&format!("py host {mode}"));
        let cfg = host_config(&cwd, &families);
        let target = json!([kitbag, "--config", cfg, "serve"]);
        py_runs.push(run(
            format!("host stdio {mode}"),
            mode,
            target,
            &cwd,
            all_tools,
        ));
        for family in &families {
            let cwd = dir(&format!("py {family} {mode}"));
            let mut target = vec![json!(kitbag)];
            target.extend(family_args(family).into_iter().map(Value::from));
            let tools = catalog[*family].len();
            py_runs.push(run(
                format!("{family} {mode}"),
                mode,
                json!(target),
                &cwd,
                tools,
            ));
        }
    }
    // The host over Streamable HTTP (stateless), in the newer era.
    let cwd = dir("py host http");
    let cfg = host_config(&cwd, &families);
    let cfg_s = cfg.to_str().expect("utf8");
    let server = HttpServer::start(
        bin(),
        &["--config", cfg_s, "serve", "--http", "127.0.0.1:0"],
        &cwd,
        &model_env
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
    );
    py_runs.push(run(
        "host http 2026-07-28".into(),
        "2026-07-28",
        json!(server.url()),
        &cwd,
        all_tools,
    ));
    http.push(server);
    let cwd = dir("ts host");
    let cfg = host_config(&cwd, &families);
    let target = json!([kitbag, "--config", cfg, "serve"]);
    ts_runs.push(run(
        "ts host stdio".into(),
        "legacy",
        target,
        &cwd,
        all_tools,
    ));
    for family in &families {
        let cwd = dir(&format!("ts {family}"));
        // The TypeScript runs start the binaries users install (`kitbag-files`, …); the
        // Python runs start `kitbag server FAMILY`.
        let target = installed_single(family);
        let tools = catalog[*family].len();
        ts_runs.push(run(
            format!("ts {family}"),
            "legacy",
            json!(target),
            &cwd,
            tools,
        ));
    }

    // Both drivers at once (each runs a few of its runs at a time).
    let driver = |program: &Path, script: &str, runs: &[Value]| {
        json_report(
            Command::new(program)
                .arg(testkit_dir(env!("CARGO_MANIFEST_DIR")).join(script))
                .arg(cases_path())
                .arg(Value::Array(runs.to_vec()).to_string()),
        )
    };
    let ((py_out, py_reports), (ts_out, ts_reports)) = std::thread::scope(|s| {
        let ts = s.spawn(|| driver(Path::new("node"), "js/sweep.mjs", &ts_runs));
        let py = driver(&python, "py/sweep.py", &py_runs);
        (py, ts.join().expect("node driver"))
    });
    let stderr = String::from_utf8_lossy(&py_out.stderr);
    check_reports("python", &py_runs, &py_reports, &expected, &stderr);
    for r in &py_runs {
        let name = r["name"].as_str().expect("name");
        let want = if r["mode"] == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(py_reports[name]["protocol"], want, "{name}");
    }
    let stderr = String::from_utf8_lossy(&ts_out.stderr);
    check_reports("typescript", &ts_runs, &ts_reports, &expected, &stderr);

    // Nothing a run started outlives it: no host, server, sandbox or job of these directories.
    drop(http);
    let root = d.path().to_str().expect("utf8").to_string();
    wait_until("every sweep process gone", 10, || {
        pids_with_cmdline(&root).is_empty()
    });
}

/// Bun (`testkit/bun`, made by `scripts/test`) for the seed's `runtime: "bun"` examples, put
/// first on PATH for the servers and the programs a run starts.
fn path_with_bun() -> String {
    let bun =
        testkit_dir(env!("CARGO_MANIFEST_DIR")).join("bun/node_modules/@oven/bun-linux-x64/bin");
    format!(
        "{}:{}",
        bun.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn every_seed_004_example_runs_verbatim_through_the_host_and_its_single_server() {
    let table_path = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("sweep/seed004.json");
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(&table_path).expect("table")).expect("json");
    let Some(python) = both_sdks() else {
        return;
    };
    if !require(
        kitbag_testkit::clients::on_path("typescript-language-server"),
        "typescript-language-server is not installed (run scripts/test)",
    ) {
        return;
    }
    let seeds: Vec<&str> = table["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["seed"].as_str())
        .collect();
    let families = ["files", "search", "shell", "lsp", "dap", "issues"].map(String::from);
    let d = tempfile::tempdir().expect("tmp");
    let kitbag = bin().to_str().expect("utf8");
    let env = json!({"PATH": path_with_bun()});
    let host_dir = d.path().join("host");
    std::fs::create_dir_all(&host_dir).expect("mkdir");
    let cfg = host_config(&host_dir, &families.iter().collect::<Vec<_>>());
    let mut runs = vec![
        json!({"name": "host", "mode": "2026-07-28", "cwd": host_dir, "env": env,
                               "target": [kitbag, "--config", cfg, "serve"]}),
    ];
    for family in &families {
        let cwd = d.path().join(family);
        std::fs::create_dir_all(&cwd).expect("mkdir");
        let target = installed_single(family);
        runs.push(
            json!({"name": family, "mode": "legacy", "cwd": cwd, "env": env,
                         "target": target}),
        );
    }
    let (out, reports) = json_report(
        Command::new(&python)
            .arg(testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py/sweep.py"))
            .arg(&table_path)
            .arg(Value::Array(runs.clone()).to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for run in &runs {
        let name = run["name"].as_str().expect("name");
        assert_eq!(
            reports[name]["failures"],
            json!([]),
            "{name}: {:#}\n{stderr}",
            reports[name]
        );
    }
    // Every example ran through the host, and through exactly one single server.
    let ran = |name: &str| -> Vec<String> {
        reports[name]["seed_steps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(ran("host"), seeds, "{reports:#}");
    let mut singles: Vec<String> = families.iter().flat_map(|f| ran(f)).collect();
    singles.sort();
    let mut want: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(singles, want, "{reports:#}");
    let root = d.path().to_str().expect("utf8").to_string();
    wait_until("every seed-run process gone", 10, || {
        pids_with_cmdline(&root).is_empty()
    });
}

/// The drivers' schema checks are live: a server answering off its own outputSchema, in a
/// successful and in an error result, fails both calls in both SDKs.
#[test]
fn the_sweep_reports_results_off_their_schema_success_and_error() {
    let Some(python) = both_sdks() else {
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let cases = d.path().join("cases.json");
    let steps = json!({"steps": [
        {"tool": "shape", "args": {}},
        {"tool": "shape", "args": {"fail": true}, "expect": "boom"}
    ]});
    std::fs::write(&cases, steps.to_string()).expect("cases");
    let server = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("sweep/misshapen_server.py");
    let runs = json!([{"name": "misshapen", "mode": "legacy", "cwd": d.path(),
                       "target": ["python3", server]}]);
    let drivers = [
        (
            python,
            testkit_dir(env!("CARGO_MANIFEST_DIR")).join("py/sweep.py"),
            "Invalid structured content",
        ),
        (
            PathBuf::from("node"),
            testkit_dir(env!("CARGO_MANIFEST_DIR")).join("js/sweep.mjs"),
            "does not match the tool's output schema",
        ),
    ];
    for (program, script, says) in drivers {
        let (out, reports) = json_report(
            Command::new(program)
                .arg(&script)
                .arg(&cases)
                .arg(runs.to_string()),
        );
        assert!(!out.status.success(), "{}: {reports}", script.display());
        let failures = reports["misshapen"]["failures"]
            .as_array()
            .expect("failures");
        let off_schema = |args: &str| {
            failures.iter().any(|f| {
                let f = f.as_str().unwrap_or("");
                f.starts_with(&format!("shape {args}")) && f.contains(says)
            })
        };
        assert!(off_schema("{}"), "{}: {failures:#?}", script.display());
        assert!(
            off_schema("{\"fail\":") || off_schema("{\"fail\": "),
            "{}: {failures:#?}",
            script.display()
        );
    }
}
