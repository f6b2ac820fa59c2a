//! Every request to the host gets an answer: forbidden ids, undecodable JSON, non-object
//! arguments, a duplicate id in flight, and calls still in flight when stdin closes.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

mod common;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// Run the host with a config of one files server, write `lines` then close stdin, and
/// return every line it wrote (it must exit by itself).
fn converse(lines: &[String]) -> Vec<String> {
    converse_logged(lines).0
}

/// [`converse`], with what the host wrote on stderr.
fn converse_logged(lines: &[String]) -> (Vec<String>, String) {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    let cfg = d.path().join("agent.json");
    std::fs::write(
        &cfg,
        json!({"mcp": {
            "files": {"command": bin(), "args": ["server", "files", "--root", d.path()]},
            "shell": {"command": bin(), "args": ["server", "shell", "--root", d.path()]}
        }})
        .to_string(),
    )
    .expect("w");
    let mut child = Command::new(bin())
        .args(["--config", cfg.to_str().expect("utf8"), "serve"])
        .current_dir(d.path())
        .env_remove("KITBAG_HOST_DEPTH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stderr = child.stderr.take().expect("stderr");
    let logged = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut all = String::new();
    for l in lines {
        all.push_str(l);
        all.push('\n');
    }
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(all.as_bytes());
        // Dropping stdin here: EOF with whatever is still in flight.
    });
    let out: Vec<String> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok)
        .collect();
    writer.join().expect("writer");
    let status = child.wait().expect("wait");
    assert!(status.success(), "the host exits cleanly at EOF: {status}");
    (out, logged.join().expect("stderr reader"))
}

fn init() -> Vec<String> {
    vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    ]
}

fn by_raw_id<'a>(out: &'a [String], raw_id: &str) -> Vec<&'a String> {
    let needle = format!("\"id\":{raw_id},");
    out.iter().filter(|l| l.contains(&needle)).collect()
}

/// A client's ordinary mistakes are answers, not server events: nothing on stderr at the
/// default level (rmcp logged each error answer as a WARN line that clients show).
#[test]
fn a_clients_mistakes_are_answered_not_logged() {
    let mut lines = init();
    let calls = [
        json!({"method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}),
        json!({"method": "tools/call", "params": {"name": "file_read", "arguments": {"pathx": 1}}}),
        json!({"method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "missing.txt"}}}),
        json!({"method": "no/such/method", "params": {}}),
        json!({"method": "prompts/get", "params": {"name": "no_such_prompt"}}),
        json!({"method": "resources/read", "params": {"uri": "kitbag://nothing"}}),
    ];
    for (i, c) in calls.iter().enumerate() {
        let mut c = c.clone();
        c["jsonrpc"] = json!("2.0");
        c["id"] = json!(i + 1);
        lines.push(c.to_string());
    }
    let (out, logged) = converse_logged(&lines);
    for i in 1..=calls.len() {
        assert_eq!(
            by_raw_id(&out, &i.to_string()).len(),
            1,
            "call {i}: {out:#?}"
        );
    }
    assert!(
        !logged.contains("WARN") && !logged.contains("ERROR"),
        "the host logged a client's mistakes:\n{logged}"
    );
}

#[test]
fn calls_in_flight_at_stdin_eof_are_all_answered() {
    let mut lines = init();
    for i in 1..=300 {
        lines.push(
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "a.txt"}}})
                .to_string(),
        );
    }
    let out = converse(&lines);
    for i in 1..=300 {
        let answers = by_raw_id(&out, &i.to_string());
        assert_eq!(answers.len(), 1, "call {i}: {answers:?}");
        let v: Value = serde_json::from_str(answers[0]).expect("json");
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
}

#[test]
fn bad_ids_bad_arguments_and_undecodable_requests_are_answered() {
    let big = "123456789012345678901234567890";
    let mut lines = init();
    for id in ["true", "{}", "1.5", "1e400"] {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"file_read","arguments":{{"path":"a.txt"}}}}}}"#
        ));
    }
    lines.push(format!(
        r#"{{"jsonrpc":"2.0","id":{big},"method":"tools/call","params":{{"name":"file_read","arguments":{{"path":"a.txt"}}}}}}"#
    ));
    lines.push(
        r#"{"jsonrpc":"2.0","id":"args","method":"tools/call","params":{"name":"file_read","arguments":"a.txt"}}"#
            .into(),
    );
    lines.push(
        r#"{"jsonrpc":"2.0","id":"surrogate","method":"tools/call","params":{"name":"file_read","arguments":{"path":"\ud800"}}}"#
            .into(),
    );
    lines.push(format!(
        r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{{"name":"file_read","arguments":{{"path":{}"a"{}}}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    ));
    let out = converse(&lines);
    let nulls: Vec<&String> = out.iter().filter(|l| l.contains("\"id\":null")).collect();
    assert_eq!(nulls.len(), 4, "one refusal per forbidden id: {out:#?}");
    for l in nulls {
        let v: Value = serde_json::from_str(l).expect("json");
        assert_eq!(v["error"]["code"], -32600, "{v}");
    }
    // An id beyond i64 comes back exactly as sent, with a real answer.
    let big_answer = by_raw_id(&out, big);
    assert_eq!(big_answer.len(), 1, "{out:#?}");
    assert!(big_answer[0].contains("\"result\""), "{}", big_answer[0]);
    let args = by_raw_id(&out, "\"args\"");
    assert!(args[0].contains("-32602"), "{args:?}");
    for id in ["\"surrogate\"", "\"deep\""] {
        let a = by_raw_id(&out, id);
        assert_eq!(a.len(), 1, "{id}: {out:#?}");
        assert!(a[0].contains("-32700"), "{}", a[0]);
    }
}

#[test]
fn a_second_request_with_an_id_in_flight_is_refused() {
    let mut lines = init();
    // Two calls with one id while the first is still running: two answers with one id could
    // not be told apart, so the second is refused; the first completes.
    for _ in 0..2 {
        lines.push(
            json!({"jsonrpc": "2.0", "id": "same", "method": "tools/call", "params": {"name": "shell_bash", "arguments": {"command": "sleep 1; echo done"}}})
                .to_string(),
        );
    }
    let out = converse(&lines);
    let answers = by_raw_id(&out, "\"same\"");
    assert_eq!(answers.len(), 2, "{out:#?}");
    assert!(answers[0].contains("still in progress"), "{}", answers[0]);
    assert!(answers[1].contains("done"), "{}", answers[1]);
}

#[test]
fn pipelined_requests_are_bounded_by_backpressure() {
    const CALLS: usize = 20_000;
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n".repeat(200)).expect("w");
    let mut child = common::serve_piped(d.path());
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut answered = 0;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"result\"") {
                answered += 1;
                if answered == CALLS + 1 {
                    let _ = done_tx.send(());
                }
            }
        }
        answered
    });
    let mut all = String::new();
    for l in init() {
        all.push_str(&l);
        all.push('\n');
    }
    for i in 1..=CALLS {
        all.push_str(
            &json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "a.txt"}}})
                .to_string(),
        );
        all.push('\n');
    }
    stdin.write_all(all.as_bytes()).expect("write");
    done_rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("every call answered");
    let peak_mb = kitbag_testkit::fuzz::peak_rss_mb(pid);
    drop(stdin);
    assert_eq!(reader.join().expect("reader"), CALLS + 1);
    let _ = child.wait();
    eprintln!("host peak RSS with {CALLS} pipelined calls: {peak_mb} MB");
    // Unbounded, the host held every queued request (~10 KB each here: ~200 MB for 20,000).
    assert!(peak_mb < 100, "host peak RSS {peak_mb} MB");
}
