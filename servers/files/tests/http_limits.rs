//! The HTTP listener refuses what no client of ours sends, each tested as the attack (issue
//! #42, findings N14, N15), on `kitbag-files --http` over loopback: two `Host` headers, an
//! absolute-form target, malformed JSON.

use std::path::Path;

use kitbag_testkit::http::{Endpoint, HttpServer};
use serde_json::{Value, json};

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

fn ping(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
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

/// N15: a body that is not JSON is answered 400 with a JSON-RPC parse error (-32700); JSON
/// that is no JSON-RPC message, 400 with -32600 (it was 415, as if the media type were wrong).
#[test]
fn malformed_json_is_a_400_parse_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = start(dir.path(), &[]);
    let mut conn = server.connect();
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let cases: [(&[u8], i64); 6] = [
        (b"{", -32700),
        (b"", -32700),
        (b"\x00\x01\xfe binary", -32700),
        (br#"{"jsonrpc":"2.0","id":1,"method":"ping""#, -32700),
        (b"42", -32600),
        (
            br#"{"jsonrpc":"2.0","id":{"no":1},"method":"ping"}"#,
            -32600,
        ),
    ];
    for (body, code) in cases {
        let r = conn.send("POST", "/mcp", &headers, body).expect("post");
        let shown = String::from_utf8_lossy(body);
        assert_eq!(r.status, 400, "{shown}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let error = &r.messages()[0];
        assert_eq!(error["error"]["code"], code, "{shown}: {error}");
        assert_eq!(error["id"], Value::Null, "{shown}: {error}");
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
