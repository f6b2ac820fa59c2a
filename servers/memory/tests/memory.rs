//! kitbag-memory over stdio: storing, ranking, filters, limits, concurrency, migration — every
//! store-level test runs twice, on a SQLite file and on a private PostgreSQL (a fresh cluster on
//! a Unix socket per test; skipped where PostgreSQL is not installed, required under CI=true).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use kitbag_testkit::on_both_backends;
use kitbag_testkit::pg::PgServer;
use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-memory"))
}

/// Where a test's servers keep memories. `store` names one store: servers given the same
/// name share it, different names are separate stores (files, or databases of one cluster).
struct Backend {
    dir: tempfile::TempDir,
    pg: Option<PgServer>,
    made: Mutex<HashSet<String>>,
}

impl Backend {
    fn sqlite() -> Backend {
        Backend {
            dir: tempfile::tempdir().expect("tmp"),
            pg: None,
            made: Mutex::new(HashSet::new()),
        }
    }

    fn postgres() -> Option<Backend> {
        Some(Backend {
            dir: tempfile::tempdir().expect("tmp"),
            pg: Some(PgServer::start()?),
            made: Mutex::new(HashSet::new()),
        })
    }

    fn args(&self, store: &str) -> Vec<String> {
        match &self.pg {
            None => {
                let db = self.dir.path().join(store).join("memory.db");
                std::fs::create_dir_all(db.parent().expect("dir")).expect("mkdir");
                vec!["--db".into(), db.to_str().expect("utf8").into()]
            }
            Some(server) => {
                let name = format!("mem_{store}");
                let mut made = self.made.lock().expect("lock");
                if made.insert(name.clone()) {
                    server.database(&name);
                }
                let url = server.url_of(&name);
                vec!["--database-url".into(), url]
            }
        }
    }

    fn client(&self, store: &str, extra: &[&str], era: Era) -> McpClient {
        let mut args = self.args(store);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        McpClient::spawn(bin(), &args, self.dir.path(), era)
    }

    /// `kitbag-memory … export` of `store`.
    fn export(&self, store: &str) -> String {
        export(&self.args(store), self.dir.path())
    }
}

/// `kitbag-memory ARGS export`, run in `dir`: the JSON lines.
fn export(args: &[String], dir: &Path) -> String {
    let out = Command::new(bin())
        .args(args)
        .arg("export")
        .current_dir(dir)
        .output()
        .expect("export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn client(b: &Backend, extra: &[&str]) -> McpClient {
    b.client("main", extra, Era::Handshake)
}

/// The SQLite-only tests' database file.
fn db_in(d: &tempfile::TempDir) -> PathBuf {
    d.path().join("mem/memory.db")
}

fn sqlite_client(db: &Path, extra: &[&str]) -> McpClient {
    std::fs::create_dir_all(db.parent().expect("dir")).expect("mkdir");
    let mut args = vec!["--db", db.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    McpClient::spawn(bin(), &args, db.parent().expect("dir"), Era::Handshake)
}

on_both_backends!(
    eras_prompt_and_catalog,
    store_search_delete_dedupe_and_filters,
    ranking_puts_the_relevant_memory_first_and_recency_breaks_ties,
    eviction_and_full_store,
    secrets_are_refused_without_echo,
    bad_input_is_typed,
    two_processes_lose_nothing,
    export_import_round_trips,
    servers_starting_together_on_a_new_store_all_start,
    search_pages_at_the_result_budget,
    search_pages_say_when_they_are_cut,
);

fn eras_prompt_and_catalog(b: &Backend) {
    for era in [Era::Handshake, Era::Modern] {
        let mut c = b.client("main", &[], era);
        c.call_ok(
            "memory_store",
            json!({"content": format!("era test note {era:?}")}),
        );
        let r = c.call_ok("memory_search", json!({"query": "era test"}));
        assert!(r.structured["count"].as_u64().expect("n") >= 1);
        let prompts = c.request("prompts/list", json!({}));
        assert_eq!(
            prompts["result"]["prompts"][0]["name"], "memory_context",
            "{prompts}"
        );
        let p = c.request(
            "prompts/get",
            json!({"name": "memory_context", "arguments": {"query": "era test"}}),
        );
        let text = p["result"]["messages"][0]["content"]["text"]
            .as_str()
            .expect("prompt text")
            .to_string();
        assert!(text.contains("era test note"), "{text}");
        if era == Era::Handshake {
            assert_catalog_matches(
                &mut c,
                &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/memory/tools.json"),
            );
        }
    }
}

fn store_search_delete_dedupe_and_filters(b: &Backend) {
    let mut c = client(b, &[]);
    let a = c.call_ok("memory_store", json!({"content": "The staging database is reset every Sunday.", "tags": ["staging", "DB"]}));
    let id = a.structured["id"].as_str().expect("id").to_string();
    assert_eq!(a.structured["duplicate"], false);
    let again = c.call_ok(
        "memory_store",
        json!({"content": "  The staging database is reset every Sunday.  "}),
    );
    assert_eq!(again.structured["duplicate"], true);
    assert_eq!(again.structured["id"], id.as_str());
    // Same content in another scope is a separate memory.
    let user = c.call_ok(
        "memory_store",
        json!({"content": "The staging database is reset every Sunday.", "scope": "user"}),
    );
    assert_eq!(user.structured["duplicate"], false);
    c.call_ok(
        "memory_store",
        json!({"content": "Session note about the database", "scope": "session", "session": "s-1"}),
    );
    let r = c.call_ok(
        "memory_search",
        json!({"query": "database", "scope": "session", "session": "s-1"}),
    );
    assert_eq!(r.structured["count"], 1);
    let r = c.call_ok(
        "memory_search",
        json!({"query": "database", "tags": ["db"]}),
    );
    assert_eq!(r.structured["count"], 1);
    assert_eq!(
        r.structured["memories"][0]["tags"],
        json!(["staging", "db"])
    );
    let r = c.call_ok(
        "memory_search",
        json!({"query": "database", "scope": "user"}),
    );
    assert_eq!(r.structured["count"], 1);
    let r = c.call_ok("memory_search", json!({}));
    assert_eq!(
        r.structured["count"], 3,
        "empty query lists the most recent"
    );
    let r = c.call_ok(
        "memory_delete",
        json!({"ids": [id, "01NOPE00000000000000000000"]}),
    );
    assert_eq!(r.structured["deleted"], json!([id]));
    assert_eq!(
        r.structured["unknown"],
        json!(["01NOPE00000000000000000000"])
    );
    assert_eq!(r.structured["truncated"], false);
    let r = c.call_ok("memory_search", json!({"query": "staging", "tags": ["db"]}));
    assert_eq!(r.structured["count"], 0);
    // 1,000 unknown ids of 64 bytes were echoed whole (~67 KB): the lists now fit the budget,
    // the counts say how many there were.
    let ids: Vec<String> = (0..1000).map(|i| format!("{i:064}")).collect();
    let r = c.call_ok("memory_delete", json!({ "ids": ids }));
    let size = kitbag_shared::limits::json_len(&r.structured);
    assert!(size < kitbag_shared::limits::RESULT_BUDGET_BYTES, "{size}");
    assert_eq!(r.structured["unknown_count"], 1000);
    assert_eq!(r.structured["deleted_count"], 0);
    assert_eq!(r.structured["truncated"], true);
    assert!(r.structured["unknown"].as_array().expect("unknown").len() > 400);
}

fn ranking_puts_the_relevant_memory_first_and_recency_breaks_ties(b: &Backend) {
    let mut c = client(b, &[]);
    let topics = [
        "frontend build",
        "python packaging",
        "kubernetes deploys",
        "invoice emails",
        "search indexing",
        "auth tokens",
        "log rotation",
        "benchmarks",
        "code review",
        "release notes",
    ];
    for i in 0..97 {
        let t = topics[i % topics.len()];
        c.call_ok("memory_store", json!({"content": format!("Note {i} about {t}: remember to check the {t} checklist before Friday.")}));
    }
    let target = c.call_ok("memory_store", json!({"content": "The Postgres replica lags during the nightly vacuum; run heavy reports after 06:00.", "tags": ["postgres"]}));
    c.call_ok(
        "memory_store",
        json!({"content": "Postgres connection pool size is 20 in production."}),
    );
    c.call_ok(
        "memory_store",
        json!({"content": "Reports are emailed to finance every Monday."}),
    );
    let r = c.call_ok(
        "memory_search",
        json!({"query": "why is the postgres replica lagging at night?", "limit": 5}),
    );
    assert_eq!(
        r.structured["memories"][0]["id"], target.structured["id"],
        "{}",
        r.text
    );
    assert!(
        r.structured["memories"][0]["score"]
            .as_f64()
            .expect("score")
            > r.structured["memories"][1]["score"]
                .as_f64()
                .expect("score")
    );
    // Two equally relevant memories: the newer one ranks first.
    let old = c.call_ok(
        "memory_store",
        json!({"content": "zebra migration checklist alpha"}),
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let new = c.call_ok(
        "memory_store",
        json!({"content": "zebra migration checklist omega"}),
    );
    let r = c.call_ok("memory_search", json!({"query": "zebra migration"}));
    assert_eq!(r.structured["memories"][0]["id"], new.structured["id"]);
    assert_eq!(r.structured["memories"][1]["id"], old.structured["id"]);
    // The context block for the latest turn.
    let r = c.call_ok(
        "memory_context",
        json!({"query": "the postgres replica is slow", "max_inject_count": 2}),
    );
    assert_eq!(r.structured["ids"][0], target.structured["id"]);
    assert!(
        r.structured["block"]
            .as_str()
            .expect("b")
            .starts_with("<memories>")
    );
    let r = c.call_ok(
        "memory_context",
        json!({"query": "postgres", "max_inject_chars": 200}),
    );
    assert!(r.structured["block"].as_str().expect("b").chars().count() <= 200);
    let r = c.call_ok(
        "memory_context",
        json!({"query": "postgres", "mode": "off"}),
    );
    assert_eq!(r.structured["block"], "");
    let r = c.call_ok(
        "memory_context",
        json!({"mode": "recent_only", "max_inject_count": 1}),
    );
    assert_eq!(r.structured["ids"], json!([new.structured["id"]]));
}

fn eviction_and_full_store(b: &Backend) {
    let mut c = client(b, &["--max-total", "3"]);
    let first = c.call_ok("memory_store", json!({"content": "one"}));
    c.call_ok("memory_store", json!({"content": "two"}));
    c.call_ok("memory_store", json!({"content": "three"}));
    // Recall "one": it becomes more valuable than "two".
    c.call_ok("memory_search", json!({"query": "one"}));
    let r = c.call_ok("memory_store", json!({"content": "four"}));
    let evicted = r.structured["evicted"]
        .as_str()
        .expect("evicted")
        .to_string();
    assert_ne!(
        evicted,
        first.structured["id"].as_str().expect("id"),
        "the recalled memory is kept"
    );
    assert!(r.text.contains("evicted"));
    let mut rej = b.client(
        "other",
        &["--max-total", "1", "--on-full", "reject"],
        Era::Handshake,
    );
    rej.call_ok("memory_store", json!({"content": "only"}));
    rej.call_err("memory_store", json!({"content": "another"}), "memory_full");
}

fn secrets_are_refused_without_echo(b: &Backend) {
    let mut c = client(b, &[]);
    let key = "ghp_0123456789abcdefghijABCDEFGHIJklmnop";
    let r = c
        .call_err(
            "memory_store",
            json!({"content": format!("CI token is {key}")}),
            "secret_detected",
        )
        .expect_field("content");
    assert_eq!(r.structured["error"]["detail"]["rule"], "github_token");
    assert!(
        !r.text.contains(key) && !r.raw.to_string().contains(key),
        "never echo the secret"
    );
    let r = c.call_ok("memory_search", json!({}));
    assert_eq!(r.structured["count"], 0, "nothing stored");
}

fn bad_input_is_typed(b: &Backend) {
    let mut c = client(b, &[]);
    c.call_err("memory_store", json!({"content": "  "}), "invalid_params")
        .expect_field("content");
    c.call_err(
        "memory_store",
        json!({"content": "x".repeat(4097)}),
        "invalid_params",
    )
    .expect_field("content");
    c.call_err(
        "memory_store",
        json!({"content": "x", "scope": "galaxy"}),
        "invalid_params",
    )
    .expect_field("scope");
    c.call_err(
        "memory_store",
        json!({"content": "x", "scope": "session"}),
        "invalid_params",
    )
    .expect_field("session");
    c.call_err(
        "memory_store",
        json!({"content": "x", "session": "s"}),
        "invalid_params",
    )
    .expect_field("session");
    c.call_err("memory_search", json!({"limit": 0}), "invalid_params")
        .expect_field("limit");
    c.call_err("memory_search", json!({"limit": 101}), "invalid_params")
        .expect_field("limit");
    c.call_err("memory_delete", json!({}), "invalid_params")
        .expect_field("ids");
    // Unknown ids are echoed back: one no memory can have is refused, not echoed (20 MB in
    // used to mean 40 MB out).
    let huge = "x".repeat(20 << 20);
    let r = c
        .call_err("memory_delete", json!({"id": huge}), "invalid_params")
        .expect_field("id");
    assert!(r.raw.to_string().len() < 1000);
    let r = c
        .call_err("memory_search", json!({"tags": [huge]}), "invalid_params")
        .expect_field("tags");
    assert!(r.raw.to_string().len() < 1000);
    c.call_err("memory_context", json!({"mode": "loud"}), "invalid_params")
        .expect_field("mode");
    let r = c.call_ok("memory_search", json!({}));
    assert_eq!(r.structured["count"], 0);
}

fn two_processes_lose_nothing(b: &Backend) {
    // Create the schema once so both writers start from the same store.
    drop(client(b, &[]));
    std::thread::scope(|scope| {
        for w in 0..2 {
            scope.spawn(move || {
                let mut c = client(b, &["--max-total", "5000"]);
                for i in 0..500 {
                    let r = c.call(
                        "memory_store",
                        json!({"content": format!("writer {w} entry {i}")}),
                    );
                    assert!(!r.is_error, "{}", r.text);
                }
            });
        }
    });
    assert_eq!(b.export("main").lines().count(), 1000);
}

/// Export, import into an empty store, export again: the same bytes.
fn export_import_round_trips(b: &Backend) {
    let mut c = client(b, &[]);
    for (i, tags) in [json!([]), json!(["ops", "db"]), json!(["x"])]
        .iter()
        .enumerate()
    {
        c.call_ok(
            "memory_store",
            json!({"content": format!("round trip note {i}"), "tags": tags}),
        );
    }
    c.call_ok("memory_search", json!({"query": "round trip"}));
    drop(c);
    let first = b.export("main");
    assert_eq!(first.lines().count(), 3);
    let file = b.dir.path().join("dump.jsonl");
    std::fs::write(&file, &first).expect("w");
    let st = Command::new(bin())
        .args(b.args("copy"))
        .arg("import")
        .arg(&file)
        .current_dir(b.dir.path())
        .status()
        .expect("import");
    assert!(st.success());
    assert_eq!(b.export("copy"), first, "export → import → export is exact");
}

#[test]
fn older_schema_migrates_and_export_import_round_trips() {
    let d = tempfile::tempdir().expect("tmp");
    let db = db_in(&d);
    std::fs::create_dir_all(db.parent().expect("p")).expect("mkdir");
    {
        let conn = rusqlite_like_v1(&db);
        assert!(conn, "could not write the v1 fixture");
    }
    let mut c = sqlite_client(&db, &[]);
    let r = c.call_ok("memory_search", json!({"query": "legacy deploy"}));
    assert_eq!(
        r.structured["count"], 1,
        "v1 rows are searchable after migration: {}",
        r.text
    );
    assert_eq!(
        r.structured["memories"][0]["id"],
        "01HZZZLEGACY0000000000000A"
    );
    c.call_ok(
        "memory_store",
        json!({"content": "new after migration", "tags": ["x"]}),
    );
    drop(c);
    let export_db = |db: &Path| export(&["--db".into(), db.to_str().expect("u").into()], d.path());
    let first = export_db(&db);
    let file = d.path().join("dump.jsonl");
    std::fs::write(&file, &first).expect("w");
    let copy = d.path().join("copy/memory.db");
    let st = Command::new(bin())
        .args([
            "--db",
            copy.to_str().expect("u"),
            "import",
            file.to_str().expect("u"),
        ])
        .status()
        .expect("import");
    assert!(st.success());
    assert_eq!(export_db(&copy), first, "export → import → export is exact");
}

/// Write a database in the v1 layout using the server's own schema text, through sqlite3.
fn rusqlite_like_v1(db: &Path) -> bool {
    let sql = format!(
        "{}\nINSERT INTO memories (id, content, tags, scope, session, created_at) VALUES ('01HZZZLEGACY0000000000000A', 'legacy deploy runbook lives in the wiki', '[\"ops\"]', 'project', NULL, '2025-01-01T00:00:00.000Z');",
        kitbag_memory::schema::V1_SCHEMA
    );
    let conn = kitbag_memory::schema::open_raw(db).expect("open");
    conn.execute_batch(&sql).is_ok()
}

#[test]
fn corrupted_database_is_a_clear_start_up_error() {
    let d = tempfile::tempdir().expect("tmp");
    let db = d.path().join("memory.db");
    std::fs::write(&db, vec![0x42u8; 8192]).expect("garbage");
    let out = Command::new(bin())
        .args(["--db", db.to_str().expect("u")])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("memory database") && stderr.contains("memory.db"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// Several servers starting at once on a new store (a host and a client each starting one, or
/// two hosts): one migrates it, the others wait and find it done — none fails with "database
/// is locked" (a deferred migration transaction used to).
fn servers_starting_together_on_a_new_store_all_start(b: &Backend) {
    for round in 0..3 {
        let store = format!("fresh{round}");
        // The database exists (PostgreSQL) or its directory does (SQLite); the schema does not.
        let args = b.args(&store);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let args = args.clone();
                scope.spawn(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let mut c = McpClient::spawn(bin(), &args, b.dir.path(), Era::Handshake);
                    c.call_ok("memory_search", json!({"query": "x"}));
                });
            }
        });
    }
}

/// The test's PostgreSQL leaves nothing behind: the postmaster and its workers are gone once
/// the server value drops (they share its process group).
#[test]
fn the_test_postgres_is_gone_after_the_test() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let pid = server.pid().expect("pid");
    let workers = kitbag_testkit::pids_with_cmdline("postgres: ");
    assert!(kitbag_testkit::process_alive(pid));
    drop(server);
    assert!(
        !kitbag_testkit::process_alive(pid),
        "postmaster {pid} outlived its test"
    );
    let left: Vec<u32> = workers
        .into_iter()
        .filter(|p| {
            kitbag_testkit::process_alive(*p)
                && std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.split_whitespace().nth(4) == Some(&pid.to_string()))
        })
        .collect();
    assert!(left.is_empty(), "workers of {pid} left: {left:?}");
}

/// The database drops the server's connection (a restart, a failover): at most the call that
/// meets it fails, and the server reconnects for the next.
#[test]
fn a_dropped_database_connection_is_reopened() {
    let Some(b) = Backend::postgres() else {
        return;
    };
    let mut c = client(&b, &[]);
    c.call_ok("memory_store", json!({"content": "before the drop"}));
    let server = b.pg.as_ref().expect("pg");
    let killed = server
        .psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'mem_main'")
        .expect("terminate");
    assert_eq!(killed, "1", "the server's one connection");
    // pg_terminate_backend only signals the backend: wait until it is gone, so that the next
    // call is the one that meets the drop (under load the first call could still be answered
    // and the second meet it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server
        .psql("SELECT count(*) FROM pg_stat_activity WHERE datname = 'mem_main'")
        .expect("count")
        != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the backend did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let first = c.call("memory_search", json!({"query": "drop"}));
    if first.is_error {
        assert_eq!(
            first.error_code(),
            Some("backend_unavailable"),
            "{}",
            first.text
        );
        assert!(
            first.text.contains("the next call reconnects"),
            "{}",
            first.text
        );
    }
    let r = c.call_ok("memory_search", json!({"query": "drop"}));
    assert_eq!(r.structured["count"], 1, "{}", r.text);
    c.call_ok("memory_store", json!({"content": "after the drop"}));
}

/// A database reached over TCP needs TLS (a managed database): the server connects with
/// `sslmode=verify-full&sslrootcert=CA`, verifies the certificate chain and name, and works;
/// the cluster rejects plain TCP, so the answers prove the connection was encrypted; a
/// certificate the roots do not vouch for stops the start with a clear error.
#[test]
fn the_database_is_reached_over_verified_tls() {
    let Some(server) = PgServer::start_tls() else {
        return;
    };
    let ca = server.tls_ca();
    let url = server.tls_url(
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin(), &["--database-url", &url], dir.path(), Era::Handshake);
    c.call_ok(
        "memory_store",
        json!({"content": "the team database requires TLS"}),
    );
    let r = c.call_ok("memory_search", json!({"query": "requires TLS"}));
    assert_eq!(r.structured["count"], 1, "{}", r.text);
    let encrypted = server
        .psql("SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE ssl AND client_addr IS NOT NULL")
        .expect("pg_stat_ssl");
    assert_eq!(encrypted, "1", "the server's one connection is TLS");
    assert_eq!(c.shutdown(), Some(0));

    let start = |url: &str| {
        Command::new(bin())
            .args(["--database-url", url])
            .current_dir(dir.path())
            .env_remove("PGSSLROOTCERT")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run")
    };
    // Plain TCP: the cluster refuses it.
    let out = start(&server.tls_url("postgres", "sslmode=disable"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memory database"), "{err}");
    // The system's roots do not vouch for the test CA: no connection, and the reason.
    let out = start(&server.tls_url("postgres", "sslmode=require"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("without the CA: {err}");
    assert!(
        err.contains("certificate") || err.contains("no trusted roots"),
        "{err}"
    );
}

/// Issue #37: ten 4 KB memories of quotes and newlines (~8 KB of JSON each) made a default
/// `memory_search` ~80 KB; now it stops under 40 KB and `next_offset` resumes exactly there.
fn search_pages_at_the_result_budget(b: &Backend) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let mut c = client(b, &[]);
    for i in 0..30 {
        let content = format!("note {i:02} deploy {}", "\"\n".repeat(2040));
        assert!(content.len() <= 4096);
        c.call_ok("memory_store", json!({"content": content}));
    }
    for query in [json!({}), json!({"query": "deploy"})] {
        let mut args = query.clone();
        let mut seen: Vec<String> = Vec::new();
        loop {
            let r = c.call_ok("memory_search", args.clone()).structured;
            assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
            let page = r["memories"].as_array().expect("memories");
            assert!(!page.is_empty());
            assert_eq!(r["count"], page.len());
            seen.extend(
                page.iter()
                    .map(|m| m["id"].as_str().expect("id").to_string()),
            );
            if seen.len() == page.len() {
                assert_eq!(r["truncated"], true, "the first page was cut");
            }
            match r["next_offset"].as_u64() {
                Some(n) => {
                    assert_eq!(n as usize, seen.len(), "resumes where it stopped");
                    args = query.clone();
                    args["offset"] = json!(n);
                }
                None => {
                    assert_eq!(r["truncated"], false);
                    break;
                }
            }
        }
        assert_eq!(seen.len(), 30, "every memory, over pages");
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), 30, "nothing repeated: {seen:?}");
    }
}

/// Issue #41: a page says whether more follow (`truncated`, `next_offset`) and how many match
/// (`total`, a lower bound while `total_exact` is false); following `next_offset` walks every
/// match once, in rank order.
fn search_pages_say_when_they_are_cut(b: &Backend) {
    let mut c = client(b, &[]);
    for i in 0..12 {
        c.call_ok(
            "memory_store",
            json!({"content": format!("note {i} about deploy")}),
        );
    }
    c.call_ok(
        "memory_store",
        json!({"content": "unrelated cooking recipe"}),
    );
    for (query, matching) in [(json!({"query": "deploy"}), 12), (json!({}), 13)] {
        let mut whole = query.clone();
        whole["limit"] = json!(100);
        let whole = c.call_ok("memory_search", whole).structured;
        assert_eq!(whole["total"], matching, "{whole}");
        assert_eq!(whole["total_exact"], true);
        assert_eq!(whole["truncated"], false);
        let ids = |r: &serde_json::Value| -> Vec<String> {
            r["memories"]
                .as_array()
                .expect("memories")
                .iter()
                .map(|m| m["id"].as_str().expect("id").to_string())
                .collect()
        };
        let mut paged = Vec::new();
        let mut offset = 0u64;
        loop {
            let mut a = query.clone();
            a["limit"] = json!(5);
            a["offset"] = json!(offset);
            let r = c.call_ok("memory_search", a).structured;
            let page = ids(&r);
            assert_eq!(page.len() as u64, (matching - offset).min(5), "{r}");
            paged.extend(page);
            if r["truncated"] == false {
                assert_eq!(r["total"], matching);
                assert_eq!(r["total_exact"], true);
                assert!(r.get("next_offset").is_none(), "{r}");
                break;
            }
            // Counted one past the page: at least that many.
            assert_eq!(r["total"], offset + 6, "{r}");
            assert_eq!(r["total_exact"], false);
            assert_eq!(r["next_offset"], offset + 5);
            offset += 5;
        }
        assert_eq!(paged, ids(&whole), "{query}: no overlap, no gap");
    }
    c.call_err("memory_search", json!({"offset": 10_001}), "invalid_params")
        .expect_field("offset");
    c.call_err("memory_search", json!({"offset": -1}), "invalid_params")
        .expect_field("offset");
}
