//! A bounded, deterministic fuzz of one MCP server process over stdio (issue #22): wrong
//! types for every parameter of every tool it lists, lone surrogates, numbers beyond f64,
//! deep nesting, unreadable params, unknown methods and tools, garbage lines, forbidden ids
//! and (optionally) one line past the 32 MiB cap — with a canary call every 50 requests, in
//! either protocol era. Nothing may die, stdout must carry only JSON-RPC, every request with
//! a valid id is answered exactly once, and the peak RSS stays under the caller's bound.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Era, HANDSHAKE_VERSION, MODERN_VERSION};

/// What to fuzz and what must hold.
pub struct Fuzz {
    /// The server, ready to spawn (arguments, directory, environment); stdio is set here.
    pub command: Command,
    pub era: Era,
    /// The tools it lists (`tools/list`), whose parameters are fuzzed.
    pub tools: Vec<Value>,
    /// Tools never called (e.g. `host_reload`).
    pub skip: Vec<&'static str>,
    /// A call answered every 50 requests, and last.
    pub canary: (&'static str, Value),
    /// Whether the canary must succeed (else any result will do).
    pub canary_succeeds: bool,
    /// Send one line past the 32 MiB line cap.
    pub huge_line: bool,
    /// Stated bound for the process's peak RSS.
    pub max_rss_mb: u64,
    pub seed: u64,
}

/// What a run saw.
#[derive(Debug)]
pub struct FuzzReport {
    pub requests: usize,
    pub peak_rss_mb: u64,
}

/// A value of a different JSON type than `schema` asks for (several per type).
pub fn wrong_values(schema: &Value) -> Vec<Value> {
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

/// Deterministic pseudo-random numbers (xorshift), so a failure — or a generated corpus —
/// replays exactly.
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `n` characters drawn from `alphabet`.
    pub fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let a: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| a[(self.next_u64() % a.len() as u64) as usize])
            .collect()
    }
}

/// Peak resident memory of a live process, from /proc, in MB.
pub fn peak_rss_mb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// The writer side: every request gets the era's `_meta` and an id of its kind.
struct Sender {
    stdin: ChildStdin,
    era: Era,
    expected: HashMap<String, &'static str>,
    n: u64,
    canary: (&'static str, Value),
}

impl Sender {
    fn line(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).expect("write");
        self.stdin.write_all(b"\n").expect("write");
    }

    fn meta(&self) -> Value {
        match self.era {
            Era::Handshake => json!({}),
            Era::Modern => json!({
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }),
        }
    }

    fn request(&mut self, id: String, method: &str, mut params: Value, kind: &'static str) {
        if self.era == Era::Modern
            && let Some(p) = params.as_object_mut()
        {
            p.insert("_meta".into(), self.meta());
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.line(&msg.to_string());
        self.expected.insert(format!("\"{id}\""), kind);
    }

    /// A fuzzed request; a canary after every 50th.
    fn fuzzed(&mut self, method: &str, params: Value) {
        self.n += 1;
        self.request(format!("f{}", self.n), method, params, "call");
        if self.n.is_multiple_of(50) {
            let (tool, args) = self.canary.clone();
            let params = json!({"name": tool, "arguments": args});
            self.request(format!("canary{}", self.n), "tools/call", params, "canary");
        }
    }

    /// A raw line; `id` (its JSON text) when it has one that must be answered.
    fn raw(&mut self, line: &str, id: Option<String>) {
        self.line(line);
        if let Some(id) = id {
            self.expected.insert(id, "raw");
        }
    }
}

/// Run the fuzz; panics when any rule is broken.
pub fn run(mut f: Fuzz) -> FuzzReport {
    let mut child = f
        .command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the server");
    let pid = child.id();
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
    let mut s = Sender {
        stdin: child.stdin.take().expect("stdin"),
        era: f.era,
        expected: HashMap::new(),
        n: 0,
        canary: f.canary.clone(),
    };
    if f.era == Era::Handshake {
        s.request(
            "init".into(),
            "initialize",
            json!({"protocolVersion": HANDSHAKE_VERSION, "capabilities": {},
                   "clientInfo": {"name": "fuzz", "version": "1"}}),
            "init",
        );
        s.line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    }
    fuzz_tools(&mut s, &f);
    fuzz_raw(&mut s, f.seed, f.canary.0);
    if f.huge_line {
        // Past the 32 MiB cap, its id early: refused by id, the session goes on.
        let mut huge = format!(
            r#"{{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{{"name":"{}","arguments":{{"x":""#,
            f.canary.0
        );
        huge.push_str(&"x".repeat(33 << 20));
        huge.push_str(r#""}}}"#);
        s.raw(&huge, Some("\"huge\"".into()));
    }
    let (tool, args) = f.canary.clone();
    s.request(
        "last".into(),
        "tools/call",
        json!({"name": tool, "arguments": args}),
        "canary",
    );
    last_rx
        .recv_timeout(Duration::from_secs(180))
        .expect("the last request was answered");
    let peak = peak_rss_mb(pid);
    let Sender {
        stdin, expected, ..
    } = s;
    drop(stdin);
    let lines = reader.join().expect("reader");
    let status = child.wait().expect("wait");
    assert!(status.success(), "the server died: {status}");
    check_answers(&lines, &expected, f.canary_succeeds);
    assert!(
        peak < f.max_rss_mb,
        "peak RSS {peak} MB over {} MB",
        f.max_rss_mb
    );
    FuzzReport {
        requests: expected.len(),
        peak_rss_mb: peak,
    }
}

/// Wrong types for every parameter of every tool; a call without arguments where that is
/// refused (a tool with no required parameter would act); an unknown field.
fn fuzz_tools(s: &mut Sender, f: &Fuzz) {
    for t in &f.tools {
        let name = t["name"].as_str().expect("name");
        if f.skip.contains(&name) {
            continue;
        }
        let required = t["inputSchema"]["required"]
            .as_array()
            .is_some_and(|r| !r.is_empty());
        if required {
            s.fuzzed("tools/call", json!({"name": name, "arguments": {}}));
        }
        let props = t["inputSchema"]["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (prop, schema) in props {
            for bad in wrong_values(&schema) {
                s.fuzzed(
                    "tools/call",
                    json!({"name": name, "arguments": {prop.clone(): bad}}),
                );
            }
        }
        s.fuzzed(
            "tools/call",
            json!({"name": name, "arguments": {"unknown_field_xyz": 1}}),
        );
    }
}

/// Lines the decoder refuses, with ids that must still be answered, garbage without ids,
/// and forbidden ids (answered with id null).
fn fuzz_raw(s: &mut Sender, seed: u64, tool: &str) {
    let mut rng = Xorshift(seed);
    for i in 0..40 {
        let id = format!("\"r{i}\"");
        let line = match rng.next_u64() % 6 {
            0 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"path":"\ud800"}}}}}}"#
            ),
            1 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"limit":1e400}}}}}}"#
            ),
            2 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":{}1{}}}}}}}"#,
                "[".repeat(3000),
                "]".repeat(3000)
            ),
            3 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":"a.txt"}}}}"#
            ),
            4 => {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such/method","params":{{}}}}"#)
            }
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"no_such_tool","arguments":{{}}}}}}"#
            ),
        };
        s.raw(&line, Some(id));
        let junk = match rng.next_u64() % 4 {
            0 => "this is not json",
            1 => "{\"jsonrpc\":\"2.0\",\"method\":",
            2 => "[1,2,3]",
            _ => "\u{feff}{}",
        };
        s.raw(junk, None);
    }
    for id in ["true", "{}", "1.5", "[1]"] {
        s.raw(
            &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#),
            None,
        );
    }
}

fn check_answers(lines: &[String], expected: &HashMap<String, &'static str>, canary_ok: bool) {
    let mut answered: HashMap<String, usize> = HashMap::new();
    let mut null_ids = 0;
    for line in lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|_| panic!("stdout carried a non-JSON line: {line:.200}"));
        assert_eq!(v["jsonrpc"], "2.0", "not JSON-RPC: {line:.200}");
        if v.get("id").is_some_and(Value::is_null) {
            null_ids += 1;
            continue;
        }
        if let Some(id) = v.get("id") {
            *answered.entry(id.to_string()).or_default() += 1;
            if canary_ok && expected.get(&id.to_string()) == Some(&"canary") {
                assert_eq!(v["result"]["isError"], false, "canary failed: {line:.300}");
            }
        }
    }
    for (id, kind) in expected {
        assert_eq!(
            answered.get(id),
            Some(&1),
            "{kind} request {id} answered {:?} times",
            answered.get(id)
        );
    }
    assert_eq!(null_ids, 4, "one id-null refusal per forbidden id");
}
