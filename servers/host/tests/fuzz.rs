//! A bounded, deterministic fuzz run through `kitbag serve` (every embedded server behind it):
//! malformed JSON, wrong types for every parameter of every tool, lone surrogates, numbers
//! beyond f64, deep nesting, forbidden ids and an over-long line — with a canary call every
//! 50 messages. Nothing may die, stdout must stay JSON-RPC, every valid id gets exactly one
//! answer, and the host's peak RSS stays bounded.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

mod common;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// A value of a different JSON type than `schema` asks for (several per type).
fn wrong_values(schema: &Value) -> Vec<Value> {
    let ty = schema["type"].as_str().unwrap_or("");
    let mut out = match ty {
        "string" => vec![json!(12345), json!(["a"]), json!({"a": 1}), json!(true)],
        "integer" | "number" => vec![json!("x"), json!(1.5e300), json!([1]), json!(-1)],
        "boolean" => vec![json!("yes"), json!(1), json!(null)],
        "array" => vec![json!("a"), json!({"x": 1}), json!(3)],
        "object" => vec![json!("a"), json!([1, 2]), json!(7)],
        _ => vec![json!({"nested": [1, {"b": null}]}), json!(-0.0)],
    };
    if schema.get("enum").is_some() {
        out.push(json!("not-one-of-the-values"));
    }
    out
}

/// Deterministic pseudo-random numbers (xorshift), so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn the_host_survives_malformed_and_mistyped_input_and_answers_every_id() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    // The tool list, from the CLI (the same servers the session runs).
    let listed = Command::new(bin())
        .args(["tools", "--json"])
        .current_dir(d.path())
        .env_remove("KITBAG_CONFIG")
        .output()
        .expect("tools");
    let tools: Value = serde_json::from_slice(&listed.stdout).expect("json");
    let tools = tools["tools"].as_array().expect("tools").clone();
    assert!(
        tools.len() >= 38,
        "{} tools: {}",
        tools.len(),
        String::from_utf8_lossy(&listed.stderr)
    );

    let mut child = common::serve_piped(d.path());
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (last_tx, last_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"id\":\"last\"") {
                let _ = last_tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    let send = |stdin: &mut std::process::ChildStdin, line: &str| {
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
    };
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}).to_string(),
    );
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    );
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut expected: HashMap<String, &'static str> = HashMap::new();
    let mut n = 0u64;
    let mut request = |stdin: &mut std::process::ChildStdin,
                       expected: &mut HashMap<String, &'static str>,
                       method: &str,
                       params: Value,
                       kind: &'static str| {
        n += 1;
        let id = format!("f{n}");
        send(
            stdin,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        expected.insert(format!("\"{id}\""), kind);
        if n.is_multiple_of(50) {
            let canary = format!("canary{n}");
            send(
                stdin,
                &json!({"jsonrpc": "2.0", "id": canary, "method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "a.txt"}}}).to_string(),
            );
            expected.insert(format!("\"{canary}\""), "canary");
        }
    };
    // Wrong types for every parameter of every tool (and a missing-everything call).
    for t in &tools {
        let name = t["name"].as_str().expect("name");
        if name == "host_reload" {
            continue;
        }
        request(
            &mut stdin,
            &mut expected,
            "tools/call",
            json!({"name": name, "arguments": {}}),
            "call",
        );
        let props = t["inputSchema"]["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (prop, schema) in props {
            for bad in wrong_values(&schema) {
                request(
                    &mut stdin,
                    &mut expected,
                    "tools/call",
                    json!({"name": name, "arguments": {prop.clone(): bad}}),
                    "call",
                );
            }
        }
        request(
            &mut stdin,
            &mut expected,
            "tools/call",
            json!({"name": name, "arguments": {"unknown_field_xyz": 1}}),
            "call",
        );
    }
    // Raw lines the decoder refuses, with ids that must still be answered.
    let mut raw = |stdin: &mut std::process::ChildStdin, line: String, id: Option<String>| {
        send(stdin, &line);
        if let Some(id) = id {
            expected.insert(id, "raw");
        }
    };
    for i in 0..40 {
        let pick = rng.next() % 6;
        let id = format!("\"r{i}\"");
        let line = match pick {
            0 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"file_read","arguments":{{"path":"\ud800"}}}}}}"#
            ),
            1 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"search_grep","arguments":{{"pattern":"a","head_limit":1e400}}}}}}"#
            ),
            2 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"file_read","arguments":{{"path":{}1{}}}}}}}"#,
                "[".repeat(3000),
                "]".repeat(3000)
            ),
            3 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"file_read","arguments":"a.txt"}}}}"#
            ),
            4 => {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such/method","params":{{}}}}"#)
            }
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"no_such_tool","arguments":{{}}}}}}"#
            ),
        };
        raw(&mut stdin, line, Some(id));
        // Garbage with no id: nothing to answer, nothing may break.
        let junk = match rng.next() % 4 {
            0 => "this is not json".to_string(),
            1 => "{\"jsonrpc\":\"2.0\",\"method\":".to_string(),
            2 => "[1,2,3]".to_string(),
            _ => "\u{feff}{}".to_string(),
        };
        raw(&mut stdin, junk, None);
    }
    // Forbidden ids: answered with id null (counted separately).
    for id in ["true", "{}", "1.5", "[1]"] {
        send(
            &mut stdin,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"file_read","arguments":{{"path":"a.txt"}}}}}}"#
            ),
        );
    }
    // One line past the 32 MiB cap, its id early: refused by id, the session goes on.
    let mut huge = String::from(
        r#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"file_write","arguments":{"path":"h.txt","content":""#,
    );
    huge.push_str(&"x".repeat(33 << 20));
    huge.push_str(r#""}}}"#);
    send(&mut stdin, &huge);
    drop(huge);
    expected.insert("\"huge\"".into(), "huge");
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": "last", "method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "a.txt"}}}).to_string(),
    );
    expected.insert("\"last\"".into(), "canary");
    // The last request's answer has come: note the peak, then close — the host finishes what
    // is still in flight and exits.
    last_rx
        .recv_timeout(std::time::Duration::from_secs(180))
        .expect("the last request was answered");
    let peak = common::peak_rss_mb(pid);
    drop(stdin);
    let lines = reader.join().expect("reader");
    let status = child.wait().expect("wait");
    assert!(status.success(), "the host died: {status}");
    let mut answered: HashMap<String, usize> = HashMap::new();
    let mut null_ids = 0;
    for line in &lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|_| panic!("stdout carried a non-JSON line: {line:.200}"));
        if v.get("id").is_some_and(Value::is_null) {
            null_ids += 1;
            continue;
        }
        if let Some(id) = v.get("id") {
            *answered.entry(id.to_string()).or_default() += 1;
            if expected.get(&id.to_string()) == Some(&"canary") {
                assert_eq!(v["result"]["isError"], false, "canary failed: {line:.300}");
            }
        }
    }
    for (id, kind) in &expected {
        assert_eq!(
            answered.get(id),
            Some(&1),
            "{kind} request {id} answered {:?} times",
            answered.get(id)
        );
    }
    assert_eq!(null_ids, 4, "one id-null refusal per forbidden id");
    eprintln!(
        "fuzz: {} requests answered, host peak RSS {peak} MB",
        expected.len()
    );
    assert!(peak < 400, "host peak RSS {peak} MB");
}
