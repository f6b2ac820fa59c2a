//! MCP Streamable HTTP, end to end through real binaries on loopback: both protocol eras,
//! the byte-level path, sessions, the Host/Origin guard, the bearer token, the body cap,
//! Unix sockets and shutdown.

use std::path::Path;

use kitbag_testkit::http::{HttpServer, Session, modern_headers, modern_request};
use serde_json::{Value, json};

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hello over http\n").expect("write");
    dir
}

fn legacy(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

fn initialize() -> Value {
    legacy(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "http-test", "version": "1"}}),
    )
}

fn structured(response: &Value) -> &Value {
    &response["result"]["structuredContent"]
}

#[test]
fn the_host_serves_both_eras_over_http_and_forwards_plain_calls_as_bytes() {
    let dir = project();
    let server = HttpServer::start(
        kitbag(),
        &["serve", "--http", "127.0.0.1:0"],
        dir.path(),
        &[],
    );
    let mut conn = server.connect();

    // Handshake era, stateless: initialize answers without a session.
    let r = conn.post_mcp(&initialize(), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("mcp-session-id"), None, "stateless by default");
    let init = r.response_to(&json!(1));
    assert_eq!(init["result"]["serverInfo"]["name"], "kitbag");

    let r = conn.post_mcp(&legacy(2, "tools/list", json!({})), &[LEGACY]);
    let tools = r.response_to(&json!(2))["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"file_read") && names.contains(&"host_status"),
        "{names:?}"
    );

    let read = legacy(
        3,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
    );
    let r = conn.post_mcp(&read, &[LEGACY]);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let answer = r.response_to(&json!(3));
    assert!(answer.to_string().contains("hello over http"), "{answer}");

    // A typed error arrives as a result, its code in structuredContent.
    let missing = legacy(
        4,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "nope.txt"}}),
    );
    let answer = conn.post_mcp(&missing, &[LEGACY]).response_to(&json!(4));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        structured(&answer)["error"]["code"],
        "file_not_found",
        "{answer}"
    );

    // 2026-07-28: discover, then a call with its routing headers; results carry resultType.
    let discover = modern_request(5, "server/discover", json!({}));
    let r = conn.post_mcp(&discover, &modern_headers("server/discover", None));
    let found = r.response_to(&json!(5));
    assert!(
        found["result"]["capabilities"]["tools"].is_object(),
        "{found}"
    );
    let call = modern_request(
        6,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
    );
    let r = conn.post_mcp(&call, &modern_headers("tools/call", Some("file_read")));
    let answer = r.response_to(&json!(6));
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert!(answer.to_string().contains("hello over http"));

    // A mismatched routing header is refused (by rmcp's checks, not the byte path).
    let r = conn.post_mcp(&call, &modern_headers("tools/call", Some("file_write")));
    assert_eq!(r.status, 400, "{}", r.text());

    // Both plain calls above took the byte path.
    let status = legacy(
        7,
        "tools/call",
        json!({"name": "host_status", "arguments": {}}),
    );
    let answer = conn.post_mcp(&status, &[LEGACY]).response_to(&json!(7));
    let forwarded = structured(&answer)["byte_level_calls"]
        .as_u64()
        .expect("count");
    assert!(forwarded >= 3, "byte-level calls: {forwarded}");

    let children = kitbag_testkit::child_pids(server.child.id());
    assert!(!children.is_empty(), "the host runs children");
    let status = server.stop().expect("exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let left: Vec<u32> = children
        .into_iter()
        .filter(|p| kitbag_testkit::process_alive(*p))
        .collect();
    assert!(left.is_empty(), "children outlived the host: {left:?}");
}

#[test]
fn hosts_origins_paths_and_the_body_cap_are_checked() {
    let dir = project();
    let server = HttpServer::start(
        kitbag(),
        &[
            "server",
            "files",
            "--http",
            "127.0.0.1:0",
            "--max-request-bytes",
            "2000",
        ],
        dir.path(),
        &[],
    );
    let mut conn = server.connect();
    let init = initialize().to_string();
    let post = |conn: &mut kitbag_testkit::http::HttpConn, extra: &[(&str, &str)], body: &[u8]| {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        headers.extend_from_slice(extra);
        conn.send("POST", "/mcp", &headers, body).expect("post")
    };

    // DNS rebinding: a foreign Host or Origin is refused before MCP sees the request.
    let r = post(&mut conn, &[("host", "evil.example:8080")], init.as_bytes());
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("evil.example"), "{}", r.text());
    let r = post(
        &mut conn,
        &[("origin", "http://evil.example")],
        init.as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = post(
        &mut conn,
        &[("origin", "http://localhost:6274")],
        init.as_bytes(),
    );
    assert_eq!(r.status, 200, "a local page may call: {}", r.text());

    // The body cap: announced or not, a body past it gets 413 and nothing runs.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"file_write","arguments":{{"path":"big.txt","content":"{}"}}}}}}"#,
        "x".repeat(4000)
    );
    let r = post(&mut conn, &[], big.as_bytes());
    assert_eq!(r.status, 413, "{}", r.text());
    // Chunked, so the size is only found while reading.
    let mut chunked = server.connect();
    let body = format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    let r = post(
        &mut chunked,
        &[("transfer-encoding", "chunked")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(!dir.path().join("big.txt").exists());
    let mut conn = server.connect();

    // Only /mcp (and the probe) exist; stateless serving has no GET stream.
    let r = conn.send("GET", "/elsewhere", &[], b"").expect("get");
    assert_eq!(r.status, 404);
    let r = conn.send("GET", "/healthz", &[], b"").expect("health");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    let r = conn
        .send("GET", "/mcp", &[("accept", "text/event-stream")], b"")
        .expect("get mcp");
    assert_eq!(r.status, 405, "{}", r.text());

    // A single server answers calls over HTTP too (through rmcp: no byte path there).
    let write = legacy(
        10,
        "tools/call",
        json!({"name": "file_write", "arguments": {"path": "w.txt", "content": "ok"}}),
    );
    let r = conn.post_mcp(&write, &[LEGACY]);
    assert_eq!(
        r.response_to(&json!(10))["result"]["isError"],
        false,
        "{}",
        r.text()
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("w.txt")).expect("w"),
        "ok"
    );
}

#[test]
fn a_bearer_token_is_required_when_configured_and_beyond_loopback() {
    let dir = project();
    let token_file = dir.path().join("token");
    // Beyond loopback without a token: refused before anything starts.
    let out = std::process::Command::new(kitbag())
        .args(["server", "files", "--http", "0.0.0.0:0"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--auth-token-file"), "{err}");

    let token_arg = token_file.to_str().expect("utf-8");
    let server = HttpServer::start(
        kitbag(),
        &[
            "serve",
            "--http",
            "0.0.0.0:0",
            "--auth-token-file",
            token_arg,
            "--generate-auth-token",
        ],
        dir.path(),
        &[],
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).expect("token");
    let port = match &server.endpoint {
        kitbag_testkit::http::Endpoint::Tcp(a) => a.rsplit(':').next().expect("port").to_string(),
        other => panic!("{other:?}"),
    };
    let endpoint = kitbag_testkit::http::Endpoint::Tcp(format!("127.0.0.1:{port}"));
    let mut conn = kitbag_testkit::http::HttpConn::open(&endpoint).expect("connect");
    let r = conn.post_mcp(&initialize(), &[]);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"kitbag\"")
    );
    let r = conn.post_mcp(
        &initialize(),
        &[("authorization", "Bearer wrong-token-0123456789")],
    );
    assert_eq!(r.status, 401);
    let bearer = format!("Bearer {}", token.trim());
    let r = conn.post_mcp(&initialize(), &[("authorization", &bearer)]);
    assert_eq!(r.status, 200, "{}", r.text());
    let call = legacy(
        2,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
    );
    let r = conn.post_mcp(&call, &[("authorization", &bearer), LEGACY]);
    assert!(r.text().contains("hello over http"), "{}", r.text());
}

#[test]
fn sessions_when_asked_get_an_id_a_stream_and_an_end() {
    let dir = project();
    let server = HttpServer::start(
        kitbag(),
        &["serve", "--http", "127.0.0.1:0", "--http-sessions"],
        dir.path(),
        &[],
    );
    let mut conn = server.connect();
    let r = conn.post_mcp(&initialize(), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let with = [("mcp-session-id", session.as_str()), LEGACY];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(conn.post_mcp(&note, &with).status, 202);
    let call = legacy(
        2,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
    );
    let r = conn.post_mcp(&call, &with);
    assert!(r.text().contains("hello over http"), "{}", r.text());

    // The server-to-client stream opens on a second connection.
    let mut stream = server.connect();
    stream
        .write_request(
            "GET",
            "/mcp",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                LEGACY,
            ],
            b"",
        )
        .expect("get");
    let head = stream.read_head().expect("head");
    assert_eq!(head.status, 200);
    assert!(
        head.header("content-type")
            .unwrap_or("")
            .starts_with("text/event-stream")
    );
    drop(stream);

    let r = conn
        .send(
            "DELETE",
            "/mcp",
            &[("mcp-session-id", &session), LEGACY],
            b"",
        )
        .expect("delete");
    assert!(
        [200, 202, 204].contains(&r.status),
        "{} {}",
        r.status,
        r.text()
    );
    let r = conn.post_mcp(&call, &with);
    assert_eq!(r.status, 404, "an ended session is gone: {}", r.text());
}

#[test]
fn a_unix_socket_is_private_and_serves_mcp() {
    use std::os::unix::fs::PermissionsExt;
    let dir = project();
    let socket = dir.path().join("kitbag.sock");
    let server = HttpServer::start(
        kitbag(),
        &["serve", "--unix", socket.to_str().expect("utf-8")],
        dir.path(),
        &[],
    );
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut conn = server.connect();
    let call = modern_request(
        1,
        "tools/call",
        json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
    );
    let r = conn.post_mcp(&call, &modern_headers("tools/call", Some("file_read")));
    assert!(r.text().contains("hello over http"), "{}", r.text());
    assert!(server.stop().is_some_and(|s| s.success()));
    assert!(!socket.exists(), "the socket file is removed at exit");
}

/// One parsed sample: name, labels, value.
type Sample = (String, serde_json::Map<String, Value>, f64);

/// The Prometheus parser (prometheus-client, pinned in testkit/py) reads `/metrics`: every
/// sample as (name, labels, value). None when it is not installed (a loud skip elsewhere
/// than under CI=true).
fn parse_metrics(text: &str) -> Option<Vec<Sample>> {
    use std::io::Write;
    let py = kitbag_testkit::clients::testkit_dir(env!("CARGO_MANIFEST_DIR"))
        .join("py/.venv/bin/python");
    let have = py.exists()
        && std::process::Command::new(&py)
            .args(["-c", "import prometheus_client"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !kitbag_testkit::clients::require(
        have,
        "prometheus-client is not installed in testkit/py/.venv (run scripts/test)",
    ) {
        return None;
    }
    let script = "import sys, json\nfrom prometheus_client.parser import text_string_to_metric_families\nout = []\nfor f in text_string_to_metric_families(sys.stdin.read()):\n    for s in f.samples:\n        out.append([s.name, s.labels, s.value])\nprint(json.dumps(out))\n";
    let mut child = std::process::Command::new(&py)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "the Prometheus parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Sample> = serde_json::from_slice(&out.stdout).expect("samples");
    Some(samples)
}

fn sample(
    samples: &[(String, serde_json::Map<String, Value>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).and_then(Value::as_str) == Some(v))
        })
        .map(|(_, _, v)| *v)
        .unwrap_or(0.0)
}

/// `/metrics` on the host (tool calls answered at the byte level, and through rmcp with a
/// progress token) and on a single server (rmcp's path): behind the token, counting
/// requests, refusals, each tool's calls by outcome and latency, and the host's children.
#[test]
fn metrics_count_requests_refusals_and_tool_calls() {
    let dir = project();
    for args in [["serve"].as_slice(), ["server", "files"].as_slice()] {
        let token_file = dir.path().join(format!("token-{}", args.len()));
        let token_arg = token_file.to_str().expect("utf-8");
        let mut full: Vec<&str> = args.to_vec();
        full.extend([
            "--http",
            "127.0.0.1:0",
            "--auth-token-file",
            token_arg,
            "--generate-auth-token",
        ]);
        let server = HttpServer::start(kitbag(), &full, dir.path(), &[]);
        let token = std::fs::read_to_string(&token_file).expect("token");
        let bearer = format!("Bearer {}", token.trim());
        let auth = [("authorization", bearer.as_str())];
        let mut conn = server.connect();
        // Without the token: refused like /mcp, and counted.
        let r = conn.send("GET", "/metrics", &[], b"").expect("GET");
        assert_eq!(r.status, 401);
        let r = conn.post_mcp(&initialize(), &auth);
        assert_eq!(r.status, 200, "{}", r.text());
        for id in 2..5 {
            let call = legacy(
                id,
                "tools/call",
                json!({"name": "file_read", "arguments": {"path": "hello.txt"}}),
            );
            let r = conn.post_mcp(&call, &[auth[0], LEGACY]);
            assert!(r.text().contains("hello over http"), "{}", r.text());
        }
        // An error result on the byte path, one on rmcp's (a progress token).
        for (id, progress) in [(5, false), (6, true)] {
            let mut params = json!({"name": "file_read", "arguments": {"path": "missing.txt"}});
            if progress {
                params["_meta"] = json!({"progressToken": "p"});
            }
            let call = legacy(id, "tools/call", params);
            let r = conn.post_mcp(&call, &[auth[0], LEGACY]);
            assert!(r.text().contains("file_not_found"), "{}", r.text());
        }
        let r = conn.send("GET", "/metrics", &auth, b"").expect("GET");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = r.text();
        let Some(samples) = parse_metrics(&text) else {
            return;
        };
        let what = format!("{args:?}:\n{text}");
        assert_eq!(
            sample(
                &samples,
                "kitbag_tool_calls_total",
                &[("tool", "file_read"), ("outcome", "ok")]
            ),
            3.0,
            "{what}"
        );
        assert_eq!(
            sample(
                &samples,
                "kitbag_tool_calls_total",
                &[("tool", "file_read"), ("outcome", "file_not_found")]
            ),
            2.0,
            "{what}"
        );
        assert_eq!(
            sample(
                &samples,
                "kitbag_tool_call_duration_seconds_count",
                &[("tool", "file_read")]
            ),
            5.0,
            "{what}"
        );
        assert_eq!(
            sample(
                &samples,
                "kitbag_tool_call_duration_seconds_bucket",
                &[("tool", "file_read"), ("le", "+Inf")]
            ),
            5.0,
            "{what}"
        );
        if args[0] == "serve" {
            // The host's own series: its children, and the calls it took as bytes.
            assert_eq!(
                sample(&samples, "kitbag_child_up", &[("server", "files")]),
                1.0,
                "{what}"
            );
            assert!(
                samples
                    .iter()
                    .any(|(n, l, v)| n == "kitbag_child_restarts_total"
                        && l.get("server").and_then(Value::as_str) == Some("files")
                        && *v == 0.0),
                "{what}"
            );
            assert!(
                sample(&samples, "kitbag_byte_path_calls_total", &[]) >= 4.0,
                "{what}"
            );
        } else {
            assert!(!text.contains("kitbag_child_up"), "{what}");
        }
        assert!(
            sample(
                &samples,
                "kitbag_tool_call_duration_seconds_sum",
                &[("tool", "file_read")]
            ) > 0.0,
            "{what}"
        );
        assert!(
            sample(
                &samples,
                "kitbag_http_requests_total",
                &[("path", "/mcp"), ("status", "200")]
            ) >= 4.0,
            "{what}"
        );
        assert_eq!(
            sample(
                &samples,
                "kitbag_http_requests_total",
                &[("path", "/metrics"), ("status", "401")]
            ),
            1.0,
            "{what}"
        );
        assert!(
            sample(
                &samples,
                "kitbag_http_refusals_total",
                &[("reason", "unauthorized")]
            ) >= 1.0,
            "{what}"
        );
        assert!(
            sample(&samples, "process_resident_memory_bytes", &[]) > 0.0,
            "{what}"
        );
        // This very request is in flight while the page is rendered.
        assert_eq!(
            sample(&samples, "kitbag_http_requests_in_flight", &[]),
            1.0,
            "{what}"
        );
    }
}

/// Over HTTP each session is a client of its own: it hears about the URIs it subscribed to
/// and no others, and every session hears of list changes (not only the latest one).
#[test]
fn each_http_session_gets_its_own_subscriptions_and_every_list_change() {
    let dir = project();
    let root = dir.path().to_str().expect("utf8");
    let issues = json!({"command": kitbag(),
        "args": ["server", "issues", "--root", root, "--project", "test"]});
    let config = dir.path().join("agent.json");
    std::fs::write(&config, json!({"mcp": {"issues": issues}}).to_string()).expect("write");
    let server = HttpServer::start(
        kitbag(),
        &[
            "--config",
            config.to_str().expect("utf8"),
            "serve",
            "--http",
            "127.0.0.1:0",
            "--http-sessions",
        ],
        dir.path(),
        &[],
    );
    let mut a = Session::open(&server);
    let mut b = Session::open(&server);
    for title in ["one", "two"] {
        let r = a.request(
            "tools/call",
            json!({"name": "issue_create", "arguments": {"title": title, "body": ""}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    assert!(a.request("resources/subscribe", json!({"uri": "issues://1"}))["result"].is_object());
    assert!(b.request("resources/subscribe", json!({"uri": "issues://2"}))["result"].is_object());
    let comment = |s: &mut Session, n: i64| {
        let r = s.request(
            "tools/call",
            json!({"name": "issue_comment", "arguments": {"number": n, "body": "news"}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
    };
    // #1 changes, then #2: B (whose request came last) sees only #2, A only #1.
    comment(&mut b, 1);
    comment(&mut a, 2);
    assert_eq!(b.updates_until("issues://2"), ["issues://2"]);
    assert_eq!(a.updates_until("issues://1"), ["issues://1"]);
    comment(&mut b, 1);
    assert_eq!(
        a.updates_until("issues://1"),
        ["issues://1"],
        "A never hears of #2"
    );

    // A reload that changes the tool list reaches both sessions.
    let memory = json!({"command": kitbag(), "args": ["server", "memory", "--root", root]});
    std::fs::write(
        &config,
        json!({"mcp": {"issues": issues, "memory": memory}}).to_string(),
    )
    .expect("write");
    let r = b.request(
        "tools/call",
        json!({"name": "host_reload", "arguments": {}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    for s in [&mut a, &mut b] {
        let changed = s
            .stream
            .read_event(|v| v["method"] == "notifications/tools/list_changed");
        assert!(
            changed.is_some(),
            "session {} missed tools/list_changed",
            s.id
        );
    }
}
