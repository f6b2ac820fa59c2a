//! Sealed sessions (`--sealed-sessions`): three `kitbag serve --http` replicas sharing a key
//! file behind a round-robin relay, OAuth tokens from a loopback issuer. A handshake-era client
//! initializes once and every later request — each on a new connection, so on the next
//! replica — is answered in its session; the session is refused with another caller's token
//! (403), altered, sealed by another deployment or expired (404, so clients initialize again).

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::http::{Endpoint, HttpConn, HttpResponse, HttpServer};
use kitbag_testkit::oauth::{Alg, Issuer, Key};
use kitbag_testkit::relay::Relay;
use serde_json::{Value, json};

const RESOURCE: &str = "https://kitbag.test/mcp";
const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn legacy(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize() -> Value {
    legacy(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
               "clientInfo": {"name": "sealed-test", "version": "1"}}),
    )
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hello from any replica\n").expect("write");
    let bin = kitbag().to_str().expect("utf-8");
    let config = json!({
        "mcp": {"files": {"command": bin, "args": ["server", "files", "--root", "."]}},
        "agents": {"reviewer": {"allow": ["file_read", "host_status"]}},
    });
    std::fs::write(dir.path().join("agent.json"), config.to_string()).expect("config");
    dir
}

fn replica(dir: &Path, issuer: &Issuer, keys: &Path, extra: &[&str]) -> HttpServer {
    let mut args = vec![
        "serve",
        "--http",
        "127.0.0.1:0",
        "--oauth-issuer",
        &issuer.url,
        "--oauth-resource",
        RESOURCE,
        "--sealed-sessions",
        "--session-key-file",
        keys.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    HttpServer::start(kitbag(), &args, dir, &[])
}

fn address(server: &HttpServer) -> String {
    let url = server.url();
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

/// One POST on a new connection to `to` (through the relay: the next replica).
fn post(to: &str, token: &str, session: Option<&str>, message: &Value) -> HttpResponse {
    let mut conn = HttpConn::open(&Endpoint::Tcp(to.to_string())).expect("connect");
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("authorization", bearer.as_str()), LEGACY];
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    conn.post_mcp(message, &headers)
}

fn send(to: &str, method: &str, token: &str, session: &str) -> HttpResponse {
    let mut conn = HttpConn::open(&Endpoint::Tcp(to.to_string())).expect("connect");
    let bearer = format!("Bearer {token}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("mcp-session-id", session),
        ("accept", "text/event-stream"),
        LEGACY,
    ];
    conn.send(method, "/mcp", &headers, b"").expect(method)
}

fn key_file(dir: &Path, name: &str, secrets: &[&str]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, secrets.join("\n")).expect("keys");
    path
}

#[test]
fn a_sealed_session_opens_on_every_replica_and_only_for_its_caller() {
    let keys = tempfile::tempdir().expect("keys");
    let signer = Key::generate(keys.path(), Alg::Es256, "ec-1");
    let issuer = Issuer::start(&[&signer]);
    let token_of = |sub: &str, agent: Option<&str>| {
        let mut claims = issuer.claims(RESOURCE, "read write exec external");
        claims["sub"] = json!(sub);
        if let Some(a) = agent {
            claims["kitbag_agent"] = json!(a);
        }
        signer.sign(&claims)
    };
    let (alice, bob) = (token_of("alice", None), token_of("bob", None));
    let shared = key_file(
        keys.path(),
        "session-keys",
        &[
            "# current",
            &"a1".repeat(32),
            "# previous",
            &"b2".repeat(32),
        ],
    );
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| project()).collect();
    let replicas: Vec<HttpServer> = dirs
        .iter()
        .map(|d| replica(d.path(), &issuer, &shared, &[]))
        .collect();
    let relay = Relay::start(replicas.iter().map(address).collect());
    let at = relay.address.clone();

    // initialize through the relay: the answer carries a sealed session id.
    let r = post(&at, &alice, None, &initialize());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.response_to(&json!(1))["result"]["protocolVersion"],
        "2025-11-25"
    );
    let session = r.header("mcp-session-id").expect("session id").to_string();
    assert!(session.starts_with("ks1."), "{session}");
    let r = post(
        &at,
        &alice,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());

    // 300 requests, each on a new connection (replica 0, 1, 2, 0, …), all in the session.
    let mut failures = Vec::new();
    for i in 0..300u64 {
        let id = 100 + i;
        let message = if i % 3 == 0 {
            legacy(id, "tools/list", json!({}))
        } else {
            legacy(
                id,
                "tools/call",
                json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
            )
        };
        let r = post(&at, &alice, Some(&session), &message);
        let answer = r.response_to(&json!(id));
        let ok = r.status == 200
            && answer.get("error").is_none()
            && answer["result"]["isError"] != true
            && (i % 3 == 0 || answer.to_string().contains("hello from any replica"));
        if !ok {
            failures.push(format!("#{i}: HTTP {} {}", r.status, r.text()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );

    // Another caller's token — another subject, or the same subject as another agent — is
    // refused on every replica; so are altered ids. Sessions stay optional.
    let as_reviewer = token_of("alice", Some("reviewer"));
    let list = legacy(7, "tools/list", json!({}));
    let mut altered = session.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).expect("ascii");
    for server in &replicas {
        let direct = address(server);
        for (who, token) in [("bob", &bob), ("alice as reviewer", &as_reviewer)] {
            let r = post(&direct, token, Some(&session), &list);
            assert_eq!(r.status, 403, "{who}: {}", r.text());
            assert!(r.text().contains("another caller"), "{}", r.text());
        }
        let r = post(&direct, &alice, Some(&altered), &list);
        assert_eq!(r.status, 404, "{}", r.text());
        assert!(
            r.text().contains("initialize a new session"),
            "{}",
            r.text()
        );
        assert_eq!(post(&direct, &bob, None, &list).status, 200);
        // No session state to stream from or to end: 405, as the transport allows.
        assert_eq!(send(&direct, "GET", &alice, &session).status, 405);
        assert_eq!(send(&direct, "DELETE", &alice, &session).status, 405);
    }

    // A session sealed by a deployment with other keys does not open here — nor the other
    // way round; one sealed with a rotated-out key stops opening once the key is dropped.
    let elsewhere_keys = key_file(keys.path(), "elsewhere", &[&"c3".repeat(32)]);
    let elsewhere_dir = project();
    let elsewhere = replica(elsewhere_dir.path(), &issuer, &elsewhere_keys, &[]);
    let theirs = post(&address(&elsewhere), &alice, None, &initialize());
    let theirs = theirs
        .header("mcp-session-id")
        .expect("session")
        .to_string();
    assert_eq!(post(&at, &alice, Some(&theirs), &list).status, 404);
    let r = post(&address(&elsewhere), &alice, Some(&session), &list);
    assert_eq!(r.status, 404, "{}", r.text());

    // A short lifetime: the session ends.
    let brief_dir = project();
    let brief = replica(
        brief_dir.path(),
        &issuer,
        &shared,
        &["--session-ttl-secs", "1"],
    );
    // Expiry is kept in whole seconds: start just after a second begins, so the first use
    // comes well inside the session's one second, however loaded the machine.
    let into_second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_millis();
    std::thread::sleep(Duration::from_millis(u64::from(1000 - into_second) + 20));
    let r = post(&address(&brief), &alice, None, &initialize());
    let short = r.header("mcp-session-id").expect("session").to_string();
    assert_eq!(
        post(&address(&brief), &alice, Some(&short), &list).status,
        200
    );
    std::thread::sleep(Duration::from_millis(2100));
    let r = post(&address(&brief), &alice, Some(&short), &list);
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("expired"), "{}", r.text());
}

#[test]
fn session_flags_are_checked_before_anything_starts() {
    let dir = project();
    let keys = key_file(dir.path(), "keys", &["too-short"]);
    let out = std::process::Command::new(kitbag())
        .args(["serve", "--http", "127.0.0.1:0", "--sealed-sessions"])
        .arg("--session-key-file")
        .arg(&keys)
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--session-key-file") && err.contains("32"),
        "{err}"
    );
    let out = std::process::Command::new(kitbag())
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--sealed-sessions",
            "--http-sessions",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be used with"), "{err}");
}
