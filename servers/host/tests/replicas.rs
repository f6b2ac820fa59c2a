//! Several `kitbag serve --http` replicas on one PostgreSQL, behind a round-robin relay (what a
//! Kubernetes Service without session affinity does: each new connection to the next replica):
//! both protocol eras work call after call with no session to lose, a memory stored through
//! one replica is found through another, and a replica killed mid-run fails only the calls it
//! was answering. Each test starts its own PostgreSQL (skipped where it is not installed,
//! required under CI=true).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kitbag_testkit::http::{HttpConn, HttpServer, Session, modern_headers, modern_request};
use kitbag_testkit::pg::PgServer;
use kitbag_testkit::relay::Relay;
use serde_json::{Value, json};

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

fn legacy(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A host serving only kitbag-memory (itself), over HTTP, on the shared database.
fn replica(dir: &Path, database_url: &str) -> HttpServer {
    replica_of(dir, database_url, &["memory"], &[])
}

/// A host serving `families` (itself, as `kitbag server FAMILY`; issues in project `team`,
/// the same on every replica), over HTTP with `extra` serve flags, on the shared database.
fn replica_of(dir: &Path, database_url: &str, families: &[&str], extra: &[&str]) -> HttpServer {
    let cfg = dir.join("agent.json");
    let exe = kitbag().to_str().expect("utf8");
    let mut mcp = serde_json::Map::new();
    for family in families {
        let mut args = vec!["server", family, "--root", "."];
        if *family == "issues" {
            args.extend(["--project", "team"]);
        }
        mcp.insert(family.to_string(), json!({"command": exe, "args": args}));
    }
    std::fs::write(&cfg, json!({ "mcp": mcp }).to_string()).expect("config");
    let mut args = vec![
        "--config",
        cfg.to_str().expect("utf8"),
        "serve",
        "--http",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    HttpServer::start(
        kitbag(),
        &args,
        dir,
        &[("KITBAG_DATABASE_URL", database_url)],
    )
}

fn address(server: &HttpServer) -> String {
    server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

/// One call on a new connection through the relay (so each lands on the next replica):
/// the JSON-RPC answer, or why there was none.
fn call_once(
    relay: &str,
    id: u64,
    modern: bool,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let endpoint = kitbag_testkit::http::Endpoint::Tcp(relay.to_string());
    let mut conn = HttpConn::open(&endpoint).map_err(|e| e.to_string())?;
    let name = params["name"].as_str().map(str::to_string);
    let response = if modern {
        let headers = modern_headers(method, name.as_deref());
        conn.try_post_mcp(&modern_request(id, method, params), &headers)
    } else {
        conn.try_post_mcp(&legacy(id, method, params), &[LEGACY])
    }
    .map_err(|e| e.to_string())?;
    if response.status != 200 {
        return Err(format!("HTTP {}: {}", response.status, response.text()));
    }
    let answer = response.response_to(&json!(id));
    if answer.is_null() {
        return Err(format!("no answer: {}", response.text()));
    }
    Ok(answer)
}

/// A call's outcome as text, for counting failures and reading them.
fn outcome(answer: &Result<Value, String>) -> Option<String> {
    match answer {
        Err(e) => Some(e.clone()),
        Ok(a) if a.get("error").is_some() => Some(a["error"].to_string()),
        Ok(a) if a["result"]["isError"] == true => Some(a["result"].to_string()),
        Ok(_) => None,
    }
}

struct Cluster {
    pg: PgServer,
    _dirs: Vec<tempfile::TempDir>,
    replicas: Vec<Option<HttpServer>>,
    relay: Relay,
}

fn cluster(n: usize) -> Option<Cluster> {
    let pg = PgServer::start()?;
    let url = pg.database("team");
    let dirs: Vec<tempfile::TempDir> = (0..n).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let replicas: Vec<Option<HttpServer>> =
        dirs.iter().map(|d| Some(replica(d.path(), &url))).collect();
    let relay = Relay::start(replicas.iter().flatten().map(address).collect());
    Some(Cluster {
        pg,
        _dirs: dirs,
        replicas,
        relay,
    })
}

#[test]
fn three_replicas_on_one_database_answer_both_eras_without_sessions() {
    let Some(c) = cluster(3) else { return };
    let relay = c.relay.address.clone();
    // Stored through replica 0, found through replica 2 (direct connections).
    let direct = |i: usize| c.replicas[i].as_ref().expect("replica");
    let stored = direct(0).connect().post_mcp(
        &legacy(1, "tools/call", json!({"name": "memory_store", "arguments": {"content": "the shared replica note about vacuum windows"}})),
        &[LEGACY],
    );
    let id = stored.response_to(&json!(1))["result"]["structuredContent"]["id"].clone();
    assert!(id.is_string(), "{}", stored.text());
    let found = direct(2).connect().post_mcp(
        &legacy(
            2,
            "tools/call",
            json!({"name": "memory_search", "arguments": {"query": "vacuum windows"}}),
        ),
        &[LEGACY],
    );
    let found = found.response_to(&json!(2));
    assert_eq!(
        found["result"]["structuredContent"]["memories"][0]["id"], id,
        "{found}"
    );

    // 500 mixed calls per era through the relay, each on a new connection: every one answered.
    let mut failures = Vec::new();
    for modern in [false, true] {
        for i in 0..500u64 {
            let id = 1000 + i;
            let answer = match i % 5 {
                0 => call_once(&relay, id, modern, "tools/list", json!({})),
                1 | 2 => call_once(
                    &relay,
                    id,
                    modern,
                    "tools/call",
                    json!({"name": "memory_store", "arguments": {"content": format!("relay note {i} era {modern}")}}),
                ),
                _ => call_once(
                    &relay,
                    id,
                    modern,
                    "tools/call",
                    json!({"name": "memory_search", "arguments": {"query": format!("relay note {}", i - 1)}}),
                ),
            };
            if let Some(why) = outcome(&answer) {
                failures.push(format!("{modern} #{i}: {why}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every store landed once in the one database, whichever replica took it.
    let r = call_once(
        &relay,
        9,
        false,
        "tools/call",
        json!({"name": "memory_search", "arguments": {"query": "relay note", "limit": 100}}),
    )
    .expect("search");
    assert_eq!(r["result"]["structuredContent"]["count"], 100, "{r}");
    let all = stored_count(&c);
    assert_eq!(all, 1 + 2 * 200, "one shared store: {all} memories");
}

/// Memories in the shared database, counted by `kitbag server memory … export`.
fn stored_count(c: &Cluster) -> usize {
    let url = c.pg.url_of("team");
    let out = std::process::Command::new(kitbag())
        .args(["server", "memory", "--database-url", &url, "export"])
        .output()
        .expect("export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_replica_killed_mid_run_fails_only_its_in_flight_calls() {
    let Some(mut c) = cluster(3) else { return };
    let relay = c.relay.address.clone();
    let workers = 4;
    let done = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (relay, done) = (relay.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0usize, Vec::new());
                let mut i = 0u64;
                while !done.load(Ordering::SeqCst) {
                    i += 1;
                    let answer = call_once(
                        &relay,
                        i,
                        i.is_multiple_of(2),
                        "tools/call",
                        json!({"name": "memory_store", "arguments": {"content": format!("worker {w} call {i}")}}),
                    );
                    match outcome(&answer) {
                        None => ok += 1,
                        Some(why) => failed.push(why),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    // SIGKILL: no drain, its open connections break.
    let mut victim = c.replicas[1].take().expect("replica");
    victim.child.kill().expect("kill");
    let _ = victim.child.wait();
    std::thread::sleep(Duration::from_secs(3));
    done.store(true, Ordering::SeqCst);
    let (mut ok, mut failed) = (0, Vec::new());
    for h in handles {
        let (o, f) = h.join().expect("worker");
        ok += o;
        failed.extend(f);
    }
    assert!(ok > 50, "calls went through: {ok}");
    // At most one call per worker can be inside the killed replica when it dies.
    assert!(
        failed.len() <= workers,
        "{} failed: {failed:#?}",
        failed.len()
    );
    // After the kill every call lands on the two live replicas.
    for i in 0..20 {
        let r = call_once(&relay, 5000 + i, false, "tools/list", json!({}));
        assert!(outcome(&r).is_none(), "{r:?}");
    }
}

/// Issues on the shared database: an issue created through one replica is read through the
/// other, and a client subscribed on replica 0 hears at once of a change made through replica
/// 1 — the issues servers behind the two hosts tell each other by NOTIFY (their change-log
/// poll runs only every 30 s on PostgreSQL).
#[test]
fn an_issue_changed_through_one_replica_reaches_a_subscriber_of_the_other() {
    let Some(pg) = PgServer::start() else { return };
    let url = pg.database("team");
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let watched = replica_of(dirs[0].path(), &url, &["issues"], &["--http-sessions"]);
    let other = replica_of(dirs[1].path(), &url, &["issues"], &[]);
    let call = |server: &HttpServer, id: u64, tool: &str, arguments: Value| {
        let r = server.connect().post_mcp(
            &legacy(
                id,
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
            ),
            &[LEGACY],
        );
        let answer = r.response_to(&json!(id));
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        answer["result"]["structuredContent"].clone()
    };
    let created = call(
        &other,
        1,
        "issue_create",
        json!({"title": "Replica lag", "body": "seen at night"}),
    );
    assert_eq!(created["number"], 1);
    let read = call(&watched, 2, "issue_get", json!({"number": 1}));
    assert_eq!(read["title"], "Replica lag", "{read}");

    let mut session = Session::open(&watched);
    let subscribed = session.request("resources/subscribe", json!({"uri": "issues://1"}));
    assert!(subscribed["result"].is_object(), "{subscribed}");
    let started = std::time::Instant::now();
    call(
        &other,
        3,
        "issue_comment",
        json!({"number": 1, "body": "from the other replica"}),
    );
    assert_eq!(session.updates_until("issues://1"), ["issues://1"]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "announced after {:?}: not by NOTIFY",
        started.elapsed()
    );
}
