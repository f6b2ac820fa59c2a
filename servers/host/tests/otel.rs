//! OpenTelemetry, end to end on loopback: a real `kitbag serve` (over HTTP and over stdio)
//! with a real kitbag-files child exports its spans to a loopback OTLP sink
//! (`kitbag_testkit::otlp`); what the sink received is parsed by the official
//! opentelemetry-proto classes (testkit/otel-py, installed by scripts/test) and checked:
//! span names and attributes as the MCP semantic conventions give them, the parent of each
//! span (the client's `traceparent`, in `_meta` or the HTTP header), `error.type` of error
//! results and protocol errors, and the child's own span, whose parent is the host's span —
//! the context reached the child in its request's `_meta`, on the byte path and rmcp's.

use std::path::Path;

use kitbag_testkit::http::{HttpServer, modern_headers, modern_request};
use kitbag_testkit::otlp::{Received, Sink};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// A project with one file, and a config whose only server is kitbag-files on it.
fn project() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hello.txt"), "hello traced\n").expect("write");
    let root = dir.path().to_str().expect("utf-8").to_string();
    let files = json!({"command": kitbag(), "args": ["server", "files", "--root", root]});
    let config = dir.path().join("agent.json");
    std::fs::write(&config, json!({"mcp": {"files": files}}).to_string()).expect("write");
    let config = config.to_str().expect("utf-8").to_string();
    (dir, config)
}

/// The exporter pointed at the sink, quick batches, and no stray OTEL_* setting of the
/// environment the tests run in (an empty value counts as unset).
fn otel_env(sink: &Sink) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", String::new()),
        ("OTEL_SERVICE_NAME", String::new()),
        ("OTEL_RESOURCE_ATTRIBUTES", String::new()),
        ("OTEL_TRACES_SAMPLER", String::new()),
        ("OTEL_SDK_DISABLED", String::new()),
        ("OTEL_TRACES_EXPORTER", String::new()),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Every span the sink received, as the official classes read them; None when they are not
/// installed (a loud skip, or a failure under CI=true).
fn parse_spans(received: &[Received]) -> Option<Vec<Value>> {
    use std::io::Write;
    let otel_py = kitbag_testkit::clients::testkit_dir(env!("CARGO_MANIFEST_DIR")).join("otel-py");
    let py = otel_py.join(".venv/bin/python");
    let have = py.exists()
        && std::process::Command::new(&py)
            .args(["-c", "import opentelemetry.proto, google.protobuf"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !kitbag_testkit::clients::require(
        have,
        "opentelemetry-proto is not installed in testkit/otel-py/.venv (run scripts/test)",
    ) {
        return None;
    }
    for r in received {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let bodies: Vec<String> = received
        .iter()
        .map(|r| String::from_utf8(r.body.clone()).expect("utf-8 body"))
        .collect();
    let mut child = std::process::Command::new(&py)
        .arg(otel_py.join("otlp_check.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(serde_json::to_string(&bodies).expect("json").as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "opentelemetry-proto refused an export: {}\n{bodies:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("report");
    // A batch sent again (after a 503) is the same spans: each counted once.
    let mut seen = std::collections::HashSet::new();
    Some(
        report["spans"]
            .as_array()
            .expect("spans")
            .iter()
            .filter(|s| seen.insert(s["span_id"].as_str().unwrap_or("").to_string()))
            .cloned()
            .collect(),
    )
}

/// The host's span of the request with this JSON-RPC id.
fn host_span<'a>(spans: &'a [Value], id: &str) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|s| s["service"] == "kitbag" && s["attributes"]["jsonrpc.request.id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "one host span for request {id}: {spans:#?}");
    found[0]
}

/// The child's span that continues `parent` (same trace, parent span = the host's).
fn child_of<'a>(spans: &'a [Value], parent: &Value) -> &'a Value {
    spans
        .iter()
        .find(|s| {
            s["service"] == "kitbag-files"
                && s["trace_id"] == parent["trace_id"]
                && s["parent_span_id"] == parent["span_id"]
        })
        .unwrap_or_else(|| {
            panic!(
                "no kitbag-files span under {} — the child did not get the context: {spans:#?}",
                parent["name"]
            )
        })
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");
/// W3C's own example contexts, and two more.
const HEADER_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const META_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const RMCP_PARENT: &str = "00-11111111111111111111111111111111-2222222222222222-01";
const MODERN_PARENT: &str = "00-55555555555555555555555555555555-6666666666666666-01";
const UNSAMPLED: &str = "00-33333333333333333333333333333333-4444444444444444-00";

fn trace_of(traceparent: &str) -> &str {
    &traceparent[3..35]
}

fn span_of(traceparent: &str) -> &str {
    &traceparent[36..52]
}

fn legacy(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn read(path: &str) -> Value {
    json!({"name": "file_read", "arguments": {"path": path}})
}

fn with_meta(mut params: Value, meta: Value) -> Value {
    params["_meta"] = meta;
    params
}

#[test]
fn http_requests_become_spans_and_the_child_continues_them() {
    let sink = Sink::start();
    let (dir, config) = project();
    let env = otel_env(&sink);
    let server = HttpServer::start(
        kitbag(),
        &["--config", &config, "serve", "--http", "127.0.0.1:0"],
        dir.path(),
        &env_refs(&env),
    );
    let mut conn = server.connect();
    let init = legacy(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "otel-test", "version": "1"}}),
    );
    assert_eq!(conn.post_mcp(&init, &[]).status, 200);
    conn.post_mcp(&legacy(2, "tools/list", json!({})), &[LEGACY]);
    // The byte path, the parent in the HTTP header.
    let r = conn.post_mcp(
        &legacy(3, "tools/call", read("hello.txt")),
        &[LEGACY, ("traceparent", HEADER_PARENT)],
    );
    assert!(r.text().contains("hello traced"), "{}", r.text());
    // The byte path, the parent in `_meta` (the header's context is linked).
    let params = with_meta(
        read("hello.txt"),
        json!({"traceparent": META_PARENT, "tracestate": "kb=1"}),
    );
    let r = conn.post_mcp(
        &legacy(4, "tools/call", params),
        &[LEGACY, ("traceparent", HEADER_PARENT)],
    );
    assert!(r.text().contains("hello traced"), "{}", r.text());
    // rmcp's path (a progress token), the parent in `_meta`.
    let params = with_meta(
        read("hello.txt"),
        json!({"progressToken": "p5", "traceparent": RMCP_PARENT}),
    );
    let r = conn.post_mcp(&legacy(5, "tools/call", params), &[LEGACY]);
    assert!(r.text().contains("hello traced"), "{}", r.text());
    // Error results on both paths, and a protocol error.
    let r = conn.post_mcp(&legacy(6, "tools/call", read("missing.txt")), &[LEGACY]);
    assert!(r.text().contains("file_not_found"), "{}", r.text());
    let params = with_meta(read("missing.txt"), json!({"progressToken": "p7"}));
    let r = conn.post_mcp(&legacy(7, "tools/call", params), &[LEGACY]);
    assert!(r.text().contains("file_not_found"), "{}", r.text());
    let r = conn.post_mcp(
        &legacy(
            8,
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        ),
        &[LEGACY],
    );
    let rpc_code = r.response_to(&json!(8))["error"]["code"]
        .as_i64()
        .expect("a JSON-RPC error");
    // 2026-07-28 on the byte path.
    let mut modern = modern_request(9, "tools/call", read("hello.txt"));
    modern["params"]["_meta"]["traceparent"] = json!(MODERN_PARENT);
    let r = conn.post_mcp(&modern, &modern_headers("tools/call", Some("file_read")));
    assert!(r.text().contains("hello traced"), "{}", r.text());
    drop(conn);
    assert!(server.stop().is_some_and(|s| s.success()));
    // Host and child flushed before they exited; the sink may still be storing the last.
    let received = sink.wait_for(5, |r| !r.is_empty());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let received = sink.received().max_by_len(received);
    let Some(spans) = parse_spans(&received) else {
        return;
    };

    let initialize = host_span(&spans, "1");
    assert_eq!(initialize["name"], "initialize");
    assert_eq!(initialize["kind"], "SPAN_KIND_SERVER");
    assert_eq!(initialize["scope"], "kitbag");
    assert_eq!(
        initialize["parent_span_id"], "",
        "a root: no parent was sent"
    );
    assert_eq!(attr(initialize, "mcp.method.name"), "initialize");
    assert_eq!(attr(initialize, "network.transport"), "tcp");
    assert_eq!(attr(initialize, "network.protocol.name"), "http");
    assert_eq!(attr(initialize, "network.protocol.version"), "1.1");
    assert_eq!(attr(initialize, "client.address"), "127.0.0.1");
    assert!(
        attr(initialize, "client.port")
            .as_i64()
            .is_some_and(|p| p > 0)
    );
    assert_eq!(initialize["resource"]["telemetry.sdk.language"], "rust");
    assert_eq!(host_span(&spans, "2")["name"], "tools/list");

    let header = host_span(&spans, "3");
    assert_eq!(header["name"], "tools/call file_read");
    assert_eq!(attr(header, "mcp.method.name"), "tools/call");
    assert_eq!(attr(header, "gen_ai.tool.name"), "file_read");
    assert_eq!(attr(header, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(header, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(header["trace_id"], trace_of(HEADER_PARENT));
    assert_eq!(header["parent_span_id"], span_of(HEADER_PARENT));
    assert_eq!(header["status"], "STATUS_CODE_UNSET");
    assert!(attr(header, "error.type").is_null());

    let meta = host_span(&spans, "4");
    assert_eq!(meta["trace_id"], trace_of(META_PARENT));
    assert_eq!(meta["parent_span_id"], span_of(META_PARENT));
    assert_eq!(meta["trace_state"], "kb=1");
    assert_eq!(
        meta["links"],
        json!([{"trace_id": trace_of(HEADER_PARENT), "span_id": span_of(HEADER_PARENT)}])
    );

    let rmcp = host_span(&spans, "5");
    assert_eq!(rmcp["name"], "tools/call file_read");
    assert_eq!(rmcp["trace_id"], trace_of(RMCP_PARENT));
    assert_eq!(rmcp["parent_span_id"], span_of(RMCP_PARENT));

    for id in ["6", "7"] {
        let failed = host_span(&spans, id);
        assert_eq!(attr(failed, "error.type"), "file_not_found", "{failed:#}");
        assert_eq!(failed["status"], "STATUS_CODE_ERROR");
        let child = child_of(&spans, failed);
        assert_eq!(attr(child, "error.type"), "file_not_found", "{child:#}");
    }

    let unknown = host_span(&spans, "8");
    assert_eq!(unknown["name"], "tools/call no_such_tool");
    assert_eq!(attr(unknown, "error.type"), &json!(rpc_code.to_string()));
    assert_eq!(
        attr(unknown, "rpc.response.status_code"),
        &json!(rpc_code.to_string())
    );
    assert_eq!(unknown["status"], "STATUS_CODE_ERROR");
    assert!(
        unknown["status_message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_tool")),
        "{unknown:#}"
    );

    let modern = host_span(&spans, "9");
    assert_eq!(attr(modern, "mcp.protocol.version"), "2026-07-28");
    assert_eq!(modern["parent_span_id"], span_of(MODERN_PARENT));

    // The child continued every call: byte path (3, 4, 6, 9) and rmcp's (5, 7).
    for id in ["3", "4", "5", "9"] {
        let host = host_span(&spans, id);
        let child = child_of(&spans, host);
        assert_eq!(child["name"], "tools/call file_read");
        assert_eq!(child["kind"], "SPAN_KIND_SERVER");
        assert_eq!(attr(child, "network.transport"), "pipe");
        assert_eq!(attr(child, "mcp.protocol.version"), "2025-11-25");
        assert!(
            child["start"].as_u64() >= host["start"].as_u64(),
            "{child:#}"
        );
        assert!(child["end"].as_u64() <= host["end"].as_u64(), "{child:#}");
    }
    // The tracestate travels with the context.
    assert_eq!(child_of(&spans, meta)["trace_state"], "kb=1");
}

#[test]
fn stdio_calls_become_spans_on_both_paths_and_an_unsampled_parent_records_none() {
    let sink = Sink::start();
    // The collector is down for the first export: the batch is sent again.
    sink.fail_next(1);
    let (dir, config) = project();
    let env = otel_env(&sink);
    let mut client = McpClient::spawn_with_env(
        kitbag(),
        &["--config", &config, "serve"],
        dir.path(),
        Era::Handshake,
        &env_refs(&env),
    );
    let byte = client.send_request(
        "tools/call",
        with_meta(read("hello.txt"), json!({"traceparent": META_PARENT})),
    );
    let r = client.wait_response(byte);
    assert!(r.to_string().contains("hello traced"), "{r}");
    let rmcp = client.send_request(
        "tools/call",
        with_meta(
            read("hello.txt"),
            json!({"progressToken": "p", "traceparent": RMCP_PARENT}),
        ),
    );
    let r = client.wait_response(rmcp);
    assert!(r.to_string().contains("hello traced"), "{r}");
    let failed = client.send_request("tools/call", read("missing.txt"));
    let r = client.wait_response(failed);
    assert!(r.to_string().contains("file_not_found"), "{r}");
    let unsampled = client.send_request(
        "tools/call",
        with_meta(read("hello.txt"), json!({"traceparent": UNSAMPLED})),
    );
    let r = client.wait_response(unsampled);
    assert!(r.to_string().contains("hello traced"), "{r}");
    assert_eq!(client.shutdown(), Some(0));
    let received = sink.wait_for(5, |r| r.len() >= 2);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let received = sink.received().max_by_len(received);
    assert!(
        received
            .iter()
            .filter(|r| r.body == received[0].body)
            .count()
            >= 2,
        "the batch refused with 503 is sent again, the same"
    );
    let Some(spans) = parse_spans(&received) else {
        return;
    };
    let byte = host_span(&spans, &byte.to_string());
    assert_eq!(byte["name"], "tools/call file_read");
    assert_eq!(attr(byte, "network.transport"), "pipe");
    assert!(attr(byte, "network.protocol.name").is_null());
    assert!(attr(byte, "client.address").is_null());
    // The version the handshake agreed on, learnt by the rmcp side, also on the byte path.
    assert_eq!(attr(byte, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(byte["parent_span_id"], span_of(META_PARENT));
    assert_eq!(attr(child_of(&spans, byte), "network.transport"), "pipe");

    let rmcp = host_span(&spans, &rmcp.to_string());
    assert_eq!(rmcp["trace_id"], trace_of(RMCP_PARENT));
    assert_eq!(attr(rmcp, "mcp.protocol.version"), "2025-11-25");
    child_of(&spans, rmcp);

    let failed = host_span(&spans, &failed.to_string());
    assert_eq!(attr(failed, "error.type"), "file_not_found");
    assert_eq!(failed["parent_span_id"], "");
    child_of(&spans, failed);

    // Not sampled upstream: recorded nowhere (the child got the flag too).
    assert!(
        !spans.iter().any(|s| s["trace_id"] == trace_of(UNSAMPLED)),
        "{spans:#?}"
    );
    // The handshake itself is a span too.
    assert!(
        spans
            .iter()
            .any(|s| s["service"] == "kitbag" && s["name"] == "initialize")
    );
}

/// The longer of two snapshots of what the sink received.
trait Longer {
    fn max_by_len(self, other: Self) -> Self;
}

impl Longer for Vec<Received> {
    fn max_by_len(self, other: Self) -> Self {
        if self.len() >= other.len() {
            self
        } else {
            other
        }
    }
}
