//! The HTTP listener's limits, each tested as the attack it stops (issue #42, findings
//! N5–N8, N14, N15), on `kitbag-files --http` over loopback with raw sockets: a body that
//! stalls, a client that stops reading, bodies that together pass the in-flight byte budget,
//! connections past the cap, a session flood, another caller's token on a session, two `Host`
//! headers, an absolute-form target, malformed JSON. Limits are configured small so each test
//! takes seconds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kitbag_testkit::http::{Endpoint, HttpConn, HttpResponse, HttpServer};
use kitbag_testkit::oauth::{Alg, Issuer, Key};
use serde_json::{Value, json};

const RESOURCE: &str = "https://kitbag.test/mcp";
const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

fn files() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

fn start(dir: &Path, extra: &[&str]) -> HttpServer {
    let mut args = vec!["--http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    HttpServer::start(files(), &args, dir, &[])
}

fn address(server: &HttpServer) -> String {
    match &server.endpoint {
        Endpoint::Tcp(a) => a.clone(),
        Endpoint::Unix(p) => panic!("{} is not TCP", p.display()),
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "limits-test", "version": "1"}}})
}

fn ping(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// A request head for `/mcp` announcing `length` body bytes (the connection closed after the
/// answer, so reading to the end reads the answer).
fn head(address: &str, length: usize) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
    )
}

/// Everything the server sends until it closes the connection (or `limit` passes: then
/// None), while `tick` runs every 200 ms.
fn read_until_closed(
    stream: &mut TcpStream,
    limit: Duration,
    mut tick: impl FnMut(&mut TcpStream),
) -> Option<Vec<u8>> {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                tick(stream)
            }
            Err(_) => return Some(got), // reset: closed too
        }
    }
    None
}

fn status_of(response: &[u8]) -> Option<u16> {
    std::str::from_utf8(response.get(..12)?)
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Peak resident memory of a process, in bytes.
fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// N5: headers complete, then a body that never comes or comes a byte at a time, is cut
/// (408) when the body timeout passes; before, the connection stayed open for good.
#[test]
fn a_slow_body_is_cut_within_the_body_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(dir.path(), &["--http-body-timeout-secs", "1"]);
    let at = address(&server);
    for trickle in [false, true] {
        let mut s = TcpStream::connect(&at).expect("connect");
        s.write_all(format!("{}{{", head(&at, 1000)).as_bytes())
            .expect("head");
        let started = Instant::now();
        let answer = read_until_closed(&mut s, Duration::from_secs(15), |s| {
            if trickle {
                let _ = s.write_all(b" ");
            }
        })
        .unwrap_or_else(|| panic!("still open after 15 s (trickle: {trickle})"));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            status_of(&answer),
            Some(408),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    // A body sent in time is answered as ever.
    let r = server.connect().post_mcp(&ping(2), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// N8: concurrent large bodies past the in-flight byte budget are answered 503 with
/// `Retry-After` when announced, before they are sent, and the process's peak memory grows
/// by a bounded amount instead of with every body.
#[test]
fn concurrent_large_bodies_past_the_in_flight_budget_get_503_and_memory_stays_bounded() {
    const BODY: usize = 3 << 20;
    const CLIENTS: usize = 40;
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(
        dir.path(),
        &[
            "--max-request-bytes",
            "4194304",
            "--http-max-inflight-bytes",
            "8388608",
        ],
    );
    let at = address(&server);
    let pid = server.child.id();
    assert_eq!(server.connect().post_mcp(&ping(1), &[]).status, 200);
    let before = vm_hwm(pid);

    // A ping padded to BODY bytes.
    let prefix = r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":""#;
    let suffix = r#""}}"#;
    let mut body = prefix.as_bytes().to_vec();
    body.resize(BODY - suffix.len(), b'x');
    body.extend_from_slice(suffix.as_bytes());
    let body = Arc::new(body);
    // Every client sends its head and all its body but the last byte; then, all together,
    // the last byte: every admitted body is held by the server at once.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (at, body, barrier) = (at.clone(), body.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&at).expect("connect");
                s.write_all(head(&at, BODY).as_bytes()).expect("head");
                // A refusal comes at once, from the head alone.
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .expect("timeout");
                let mut early = vec![0u8; 4096];
                let refused = match s.read(&mut early) {
                    Ok(n) if n > 0 => Some(early[..n].to_vec()),
                    _ => None,
                };
                if refused.is_none() {
                    let _ = s.write_all(&body[..BODY - 1]);
                }
                barrier.wait();
                if let Some(answer) = refused {
                    return answer;
                }
                let _ = s.write_all(&body[BODY - 1..]);
                read_until_closed(&mut s, Duration::from_secs(30), |_| {}).unwrap_or_default()
            })
        })
        .collect();
    let answers: Vec<Vec<u8>> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let after = vm_hwm(pid);
    let statuses: Vec<Option<u16>> = answers.iter().map(|a| status_of(a)).collect();
    let busy: Vec<&Vec<u8>> = answers
        .iter()
        .filter(|a| status_of(a) == Some(503))
        .collect();
    let served = statuses.iter().filter(|s| **s == Some(200)).count();
    eprintln!(
        "{CLIENTS} × {BODY} B bodies, budget 8 MiB: {served} served, {} answered 503; VmHWM {} → {} MiB",
        busy.len(),
        before >> 20,
        after >> 20
    );
    // 8 MiB holds two 3 MiB bodies.
    assert!((1..=2).contains(&served), "{statuses:?}");
    assert_eq!(served + busy.len(), CLIENTS, "{statuses:?}");
    for answer in busy {
        let text = String::from_utf8_lossy(answer).to_ascii_lowercase();
        assert!(text.contains("\r\nretry-after: "), "{text}");
    }
    // Each admitted body costs a few times its size on its way through (the read, rmcp's copy,
    // the parsed message): two of them grew the peak by about 16 MiB here; forty unbounded, by
    // about 100 MiB.
    assert!(
        after.saturating_sub(before) < 40 << 20,
        "peak memory grew by {} MiB",
        (after - before) >> 20
    );
    // The budget is given back.
    let r = server.connect().post_mcp(&ping(3), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// N5: connections past the cap are answered 503 with `Retry-After` and closed, not held;
/// a slot frees when a connection ends.
#[test]
fn connections_past_the_cap_get_503_with_retry_after() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(dir.path(), &["--http-max-connections", "4"]);
    let at = address(&server);
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&at).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut conn = server.connect();
    let r = conn.send("GET", "/healthz", &[], b"").expect("healthz");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r =
            HttpConn::open(&server.endpoint).and_then(|mut c| c.send("GET", "/healthz", &[], b""));
        if r.as_ref().is_ok_and(|r| r.status == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// N5: a client that stops reading its answers is dropped once its writes have stalled for the
/// idle timeout, and its connection slot comes back (before, hyper waited for it for good).
#[test]
fn a_client_that_stops_reading_is_dropped_after_the_idle_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(
        dir.path(),
        &[
            "--http-max-connections",
            "1",
            "--http-idle-timeout-secs",
            "1",
        ],
    );
    let at = address(&server);
    // Pipelined tools/list requests (a few KiB of answer each), the answers never read: the
    // socket buffers fill and the server's writes stall.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {at}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stalled = TcpStream::connect(&at).expect("connect");
    let writer = std::thread::spawn(move || {
        // Ends when the server closes the connection (or after far more than fills any buffer).
        for _ in 0..20_000 {
            if stalled.write_all(request.as_bytes()).is_err() {
                return true;
            }
        }
        false
    });
    std::thread::sleep(Duration::from_millis(300));
    let healthz = || {
        HttpConn::open(&server.endpoint)
            .and_then(|mut c| c.send("GET", "/healthz", &[], b""))
            .map(|r| r.status)
    };
    assert_eq!(
        healthz().ok(),
        Some(503),
        "the one slot is the stalled client's"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while healthz().ok() != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the stalled client kept its slot"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(writer.join().expect("writer"), "the server closed it");
}

/// A loopback issuer, and tokens for a subject (None: a token naming none).
struct Tokens {
    signer: Key,
    issuer: Issuer,
    _keys: tempfile::TempDir,
}

impl Tokens {
    fn new() -> Tokens {
        let keys = tempfile::tempdir().expect("keys");
        let signer = Key::generate(keys.path(), Alg::Es256, "ec-1");
        let issuer = Issuer::start(&[&signer]);
        Tokens {
            signer,
            issuer,
            _keys: keys,
        }
    }

    fn bearer(&self, subject: Option<&str>) -> String {
        let mut claims = self.issuer.claims(RESOURCE, "read write exec external");
        let map = claims.as_object_mut().expect("claims");
        match subject {
            Some(s) => {
                map.insert("sub".into(), json!(s));
            }
            None => {
                map.remove("sub");
                map.remove("client_id");
            }
        }
        format!("Bearer {}", self.signer.sign(&claims))
    }

    fn server(&self, dir: &Path, extra: &[&str]) -> HttpServer {
        let mut args = vec![
            "--oauth-issuer",
            &self.issuer.url,
            "--oauth-resource",
            RESOURCE,
            "--http-sessions",
        ];
        args.extend_from_slice(extra);
        start(dir, &args)
    }
}

fn post(server: &HttpServer, bearer: &str, session: Option<&str>, message: &Value) -> HttpResponse {
    let mut headers = vec![("authorization", bearer), LEGACY];
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    server.connect().post_mcp(message, &headers)
}

/// N6: bob's valid token on alice's session — a request in it, its GET stream, its DELETE —
/// is refused (403) and alice's session goes on; a token naming no subject gets no session.
#[test]
fn another_callers_token_is_refused_on_a_session() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("a.txt"), "alice's\n").expect("write");
    let tokens = Tokens::new();
    let server = tokens.server(dir.path(), &[]);
    let (alice, bob) = (tokens.bearer(Some("alice")), tokens.bearer(Some("bob")));

    let r = post(&server, &alice, None, &initialize());
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r.header("mcp-session-id").expect("session").to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&server, &alice, Some(&session), &note).status, 202);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    let r = post(&server, &bob, Some(&session), &list);
    assert_eq!(r.status, 403, "bob's POST: {}", r.text());
    assert_eq!(r.messages()[0]["error"]["code"], -32001, "{}", r.text());
    for method in ["GET", "DELETE"] {
        let headers = [
            ("authorization", bob.as_str()),
            ("mcp-session-id", session.as_str()),
            ("accept", "text/event-stream"),
            LEGACY,
        ];
        let r = server
            .connect()
            .send(method, "/mcp", &headers, b"")
            .expect(method);
        assert_eq!(r.status, 403, "bob's {method}: {}", r.text());
    }

    let r = post(&server, &alice, Some(&session), &list);
    assert_eq!(r.status, 200, "alice's session goes on: {}", r.text());
    let headers = [
        ("authorization", alice.as_str()),
        ("mcp-session-id", session.as_str()),
        LEGACY,
    ];
    let r = server
        .connect()
        .send("DELETE", "/mcp", &headers, b"")
        .expect("DELETE");
    assert!([200, 202, 204].contains(&r.status), "{}", r.status);
    assert_eq!(post(&server, &alice, Some(&session), &list).status, 404);

    // Every token without `sub` (and `client_id`) is the same nobody: no session for it.
    let r = post(&server, &tokens.bearer(None), None, &initialize());
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("no subject"), "{}", r.text());
    assert_eq!(r.header("mcp-session-id"), None);
}

/// A refusal made before the body is read (no token: 401) keeps the connection usable for
/// the next request when the body follows the head in a write of its own, as httpx sends it
/// (the Python SDK's OAuth client then retries on the same connection); a body too large to
/// read through is not read, and the connection is closed with `Connection: close`.
#[test]
fn a_refused_request_leaves_its_connection_usable() {
    let dir = tempfile::tempdir().expect("tmp");
    let tokens = Tokens::new();
    let server = tokens.server(dir.path(), &[]);
    let alice = tokens.bearer(Some("alice"));
    let body = initialize().to_string();
    let mcp = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        LEGACY,
    ];
    let mut conn = server.connect();
    for round in 0..3 {
        conn.write_request_split(
            "POST",
            "/mcp",
            &mcp,
            body.as_bytes(),
            Duration::from_millis(150),
        )
        .expect("write");
        let refused = conn.read_response().expect("the 401");
        assert_eq!(refused.status, 401, "round {round}: {}", refused.text());
        assert_eq!(refused.header("connection"), None, "{:?}", refused.headers);
    }
    let mut with_token = mcp.to_vec();
    with_token.push(("authorization", alice.as_str()));
    let r = conn
        .send("POST", "/mcp", &with_token, body.as_bytes())
        .expect("the same connection takes the next request");
    assert_eq!(r.status, 200, "{}", r.text());

    // 100 KB announced, 1 KB sent: answered without reading it, and the connection closed.
    let mut conn = server.connect();
    let mut big = mcp.to_vec();
    big.push(("content-length", "102400"));
    conn.write_request("POST", "/mcp", &big, &[b' '; 1024])
        .expect("write");
    let refused = conn.read_response().expect("the 401");
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.header("connection"),
        Some("close"),
        "{:?}",
        refused.headers
    );
    assert!(
        conn.send("POST", "/mcp", &with_token, body.as_bytes())
            .is_err(),
        "the connection is closed"
    );
}

/// N7: sessions are capped per caller and in total (503, `Retry-After`, a JSON-RPC error
/// answering the `initialize`); idle sessions still end and free their slots.
#[test]
fn a_session_flood_hits_the_caps_and_idle_sessions_still_expire() {
    let dir = tempfile::tempdir().expect("tmp");
    let tokens = Tokens::new();
    let server = tokens.server(
        dir.path(),
        &[
            "--http-max-sessions",
            "3",
            "--http-max-sessions-per-caller",
            "2",
            "--http-session-idle-secs",
            "2",
        ],
    );
    let (alice, bob) = (tokens.bearer(Some("alice")), tokens.bearer(Some("bob")));
    let refused = |r: &HttpResponse, why: &str| {
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
        assert_eq!(r.header("mcp-session-id"), None);
        let error = &r.messages()[0];
        assert_eq!(error["id"], 1, "{error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(why),
            "{error}"
        );
    };
    for _ in 0..2 {
        let r = post(&server, &alice, None, &initialize());
        assert_eq!(r.status, 200, "{}", r.text());
    }
    refused(&post(&server, &alice, None, &initialize()), "caller");
    assert_eq!(post(&server, &bob, None, &initialize()).status, 200);
    // The flood goes on: every further one is refused, none kept.
    for _ in 0..20 {
        refused(&post(&server, &bob, None, &initialize()), "server");
    }

    // Idle sessions end (2 s here) and their slots come back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = post(&server, &alice, None, &initialize());
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no session ever expired");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// N7 without authentication: only the total cap applies, and a flood stops at it.
#[test]
fn a_session_flood_without_authentication_stops_at_the_total_cap() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(
        dir.path(),
        &["--http-sessions", "--http-max-sessions", "10"],
    );
    let mut conn = server.connect();
    let statuses: Vec<u16> = (0..40)
        .map(|_| conn.post_mcp(&initialize(), &[]).status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        30,
        "{statuses:?}"
    );
}

/// N14: two `Host` headers (in either order) and an absolute-form target are refused (400);
/// only the first Host was checked, and `POST http://evil.example/mcp` was served.
#[test]
fn two_host_headers_and_absolute_form_targets_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(dir.path(), &[]);
    let at = address(&server);
    let body = ping(1).to_string();
    let send = |path: &str, hosts: &[&str]| {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        headers.extend(hosts.iter().map(|h| ("host", *h)));
        server
            .connect()
            .send("POST", path, &headers, body.as_bytes())
            .expect("send")
    };
    for hosts in [[at.as_str(), "evil.example"], ["evil.example", at.as_str()]] {
        let r = send("/mcp", &hosts);
        assert_eq!(r.status, 400, "{hosts:?}: {}", r.text());
    }
    let r = send("/mcp", &[at.as_str(), at.as_str()]);
    assert_eq!(r.status, 400, "one Host only: {}", r.text());
    for target in ["http://evil.example/mcp", &format!("http://{at}/mcp")] {
        let r = send(target, &[at.as_str()]);
        assert_eq!(r.status, 400, "{target}: {}", r.text());
    }
    assert_eq!(send("/mcp", &[at.as_str()]).status, 200);
}

/// N15: a body that is not JSON (or JSON the decoder cannot represent) is answered 400 with a
/// JSON-RPC parse error (-32700); JSON that is no JSON-RPC message, 400 with -32600 — the
/// errors stdio answers with. It was 415, as if the media type were wrong.
#[test]
fn malformed_json_is_a_400_parse_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(dir.path(), &[]);
    let mut conn = server.connect();
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    // Past the size kept for this answer while rmcp reads the body.
    let big_broken = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"ping","params":{{"pad":"{}"}}"#,
        "x".repeat(100_000)
    );
    let big_array = format!("[{}1]", "1,".repeat(50_000));
    // (body, code, id): the id is echoed when one can be read, as on stdio.
    let cases: [(&[u8], i64, Value); 11] = [
        (b"{", -32700, Value::Null),
        (b"", -32700, Value::Null),
        (b"\x00\x01\xfe binary", -32700, Value::Null),
        // Cut short: no whole object to read an id from.
        (
            br#"{"jsonrpc":"2.0","id":3,"method":"ping""#,
            -32700,
            Value::Null,
        ),
        // Valid JSON the decoder cannot represent.
        (
            br#"{"jsonrpc":"2.0","id":4,"method":"ping","params":{"s":"\ud800"}}"#,
            -32700,
            json!(4),
        ),
        (
            br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"n":1e400}}"#,
            -32700,
            json!(5),
        ),
        (deep.as_bytes(), -32700, Value::Null),
        (big_broken.as_bytes(), -32700, Value::Null),
        (big_array.as_bytes(), -32600, Value::Null),
        (b"42", -32600, Value::Null),
        (
            br#"{"jsonrpc":"2.0","id":{"no":1},"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
    ];
    for (body, code, id) in cases {
        let r = conn.send("POST", "/mcp", &headers, body).expect("post");
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert_eq!(r.status, 400, "{shown}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let error = &r.messages()[0];
        assert_eq!(error["error"]["code"], code, "{shown}: {error}");
        assert_eq!(error["id"], id, "{shown}: {error}");
    }
    // The media type is still the media type's error.
    let r = conn
        .send(
            "POST",
            "/mcp",
            &[
                ("content-type", "text/plain"),
                ("accept", "application/json, text/event-stream"),
            ],
            b"{}",
        )
        .expect("post");
    assert_eq!(r.status, 415, "{}", r.text());
}
