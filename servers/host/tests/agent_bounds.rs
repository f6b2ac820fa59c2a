//! What the agent loop lets through (issue #42, findings N11 and N12), each test written as
//! the attack: a foreign MCP server answering with megabytes, a model that reports almost no
//! token use while its requests grow, and a session file whose last line a crash tore.

mod agent_common;

use std::path::{Path, PathBuf};

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Received, Reply};
use serde_json::{Value, json};

/// A foreign stdio MCP server (not one of kitbag's, which cap their own results): its one
/// tool `big_result` answers with `bytes` bytes of numbered lines tagged `tag`.
const BIG_SERVER: &str = r#"import json, sys

def body(tag, n):
    out, size, i = [], 0, 0
    while size < n:
        line = f"{tag} line {i:07}\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out)[:n]

TOOL = {"name": "big_result", "description": "Answers with as many bytes as asked.",
        "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}, "tag": {"type": "string"}}}}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg["method"]
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "big", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        text = body(args.get("tag", "x"), int(args.get("bytes", 0)))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

/// What `BIG_SERVER` answers for `tag` and `n`.
fn big_body(tag: &str, n: usize) -> String {
    let mut out = String::new();
    let mut i = 0;
    while out.len() < n {
        out.push_str(&format!("{tag} line {i:07}\n"));
        i += 1;
    }
    out.truncate(n);
    out
}

/// A project whose only server is `BIG_SERVER`.
fn big_project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    let script = d.path().join("big.py");
    std::fs::write(&script, BIG_SERVER).expect("w");
    let cfg = json!({"mcp": {"big": {"command": "python3", "args": [script]}}});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    d
}

/// One Anthropic stream asking for `big_result` once per `(id, tag)`, all in one answer. Its
/// usage says 10 tokens in, whatever it was sent.
fn big_calls_sse(calls: &[(&str, &str)], bytes: usize) -> String {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_big","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}),
    ];
    for (i, (id, tag)) in calls.iter().enumerate() {
        let input = json!({"bytes": bytes, "tag": tag});
        events.extend([
            json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":id,"name":"big_result","input":{}}}),
            json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":input.to_string()}}),
            json!({"type":"content_block_stop","index":i}),
        ]);
    }
    events.extend([
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}),
        json!({"type":"message_stop"}),
    ]);
    anthropic_stream(&events)
}

/// Every tool result's text in a request, by tool-use id.
fn results_by_id(r: &Received) -> Vec<(String, String)> {
    r.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let text = b["content"][0]["text"].as_str().unwrap_or("").to_owned();
            (b["tool_use_id"].as_str().unwrap_or("").to_owned(), text)
        })
        .collect()
}

fn session_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(".kitbag/sessions").join(format!("{name}.jsonl"))
}

/// N11: three 3 MiB results in one turn (two at once, then one) went to the model whole at
/// every later step — requests of 6 and 9 MiB — and whole into the session. Now each request
/// and the session stay within the three results' 64 KiB caps plus the rest of the request,
/// the model sees each result's beginning and end after a note naming the file with all of it,
/// and that file holds the result byte for byte.
#[test]
fn a_foreign_servers_multi_mib_results_are_cut_for_the_model_and_kept_whole() {
    const MIB3: usize = 3 << 20;
    const BOUND: usize = 256 << 10;
    let d = big_project();
    let mock = MockLlm::start(vec![
        Reply::sse(big_calls_sse(&[("c1", "A"), ("c2", "B")], MIB3)),
        Reply::sse(big_calls_sse(&[("c3", "C")], MIB3)),
        Reply::sse(text_sse("done")),
    ]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "big", "fetch"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "done");
    let sent = mock.received();
    assert_eq!(sent.len(), 3);
    for (i, r) in sent.iter().enumerate() {
        let size = r.body.to_string().len();
        assert!(size < BOUND, "request {i}: {size} bytes");
    }
    let session_size = std::fs::metadata(session_file(d.path(), "big"))
        .expect("session")
        .len();
    assert!(session_size < BOUND as u64, "session: {session_size} bytes");

    let results = results_by_id(&sent[2]);
    assert_eq!(results.len(), 3);
    for ((id, shown), tag) in results.iter().zip(["A", "B", "C"]) {
        let whole = big_body(tag, MIB3);
        let kept = d
            .path()
            .join(".kitbag/sessions/big.results")
            .join(format!("{id}.txt"));
        assert!(
            std::fs::read_to_string(&kept).expect("kept file") == whole,
            "{id}: the kept file is not the whole result"
        );
        assert!(
            shown.starts_with(&format!("[tool result cut: {MIB3} bytes of text")),
            "{id}: {}",
            &shown[..200]
        );
        assert!(shown.contains(&kept.display().to_string()), "{id}");
        assert!(shown.contains(&format!("{tag} line 0000000\n")), "{id}");
        assert!(shown.ends_with(&whole[whole.len() - 200..]), "{id}");
        assert!(shown.len() <= 64 << 10, "{id}: {} bytes shown", shown.len());
    }
    // The session has what the model saw.
    let records = session(d.path(), "big");
    let stored: Vec<&Value> = records
        .iter()
        .filter(|r| r["role"] == "tool_result")
        .flat_map(|r| r["content"].as_array().expect("content"))
        .collect();
    assert_eq!(stored.len(), 3);
    assert_eq!(
        stored[2]["content"][0]["text"].as_str(),
        Some(results[2].1.as_str())
    );
    assert!(stderr.contains("was cut for the model"), "{stderr}");
}

/// The settings a small context window gives: a limit of 15,000 tokens per call; every turn
/// in the window.
fn small_window_env(mock: &MockLlm) -> Vec<(&'static str, String)> {
    let mut env = anthropic_env(mock);
    env.extend([
        ("KITBAG_CONTEXT_WINDOW", "16000".to_string()),
        ("KITBAG_MAX_TOKENS", "1000".to_string()),
        ("KITBAG_CONTEXT_CHARS", "1000000".to_string()),
    ]);
    env
}

const CLEARED: &str = "[Old tool result content cleared]";

/// Compaction followed only the model's reported usage: a model (or proxy) reporting 10 tokens
/// never triggered it, however large the requests grew. Three 40,000-byte results (~10,000
/// tokens each, under the cap) against a limit of 15,000 tokens: by the fourth call of the turn
/// the oldest is cleared from the request; the next turn's first call summarizes the earlier
/// turn instead of sending it again.
#[test]
fn a_model_reporting_tiny_usage_still_gets_its_context_compacted() {
    const BYTES: usize = 40_000;
    let d = big_project();
    let mock = MockLlm::start(vec![
        Reply::sse(big_calls_sse(&[("c1", "A")], BYTES)),
        Reply::sse(big_calls_sse(&[("c2", "B")], BYTES)),
        Reply::sse(big_calls_sse(&[("c3", "C")], BYTES)),
        Reply::sse(text_sse("read them")),
    ]);
    let out = kitbag(
        d.path(),
        &small_window_env(&mock),
        &["run", "--session", "grow", "first"],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sent = mock.received();
    assert_eq!(sent.len(), 4);
    let last: Vec<String> = results_by_id(&sent[3]).into_iter().map(|r| r.1).collect();
    assert_eq!(last.len(), 3);
    // Compared as booleans: a failure prints a prefix, not 40,000 bytes.
    let prefix = |t: &str| t.chars().take(60).collect::<String>();
    assert!(last[0] == CLEARED, "not cleared: {}", prefix(&last[0]));
    assert!(
        last[2] == big_body("C", BYTES),
        "not whole: {}",
        prefix(&last[2])
    );
    assert!(stderr.contains("this call measures ~"), "{stderr}");

    let mock = MockLlm::start(vec![
        Reply::sse(text_sse(
            "The user asked for three results; they were read.",
        )),
        Reply::sse(text_sse("ok")),
    ]);
    let out = kitbag(
        d.path(),
        &small_window_env(&mock),
        &["run", "--session", "grow", "second"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 2, "a summary call, then the turn's call");
    assert!(sent[0].body.get("tools").is_none(), "the summary call");
    assert!(system_text(&sent[1]).contains("[Context summary from earlier in this conversation:"));
    let m = sent[1].body["messages"].as_array().expect("messages");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["content"][0]["text"], "second");
    let records = session(d.path(), "grow");
    assert_eq!(
        records.iter().filter(|r| r["role"] == "compaction").count(),
        1
    );
}

/// N12: after a crash tore the session's last line, the next run appended its `user` record to
/// that same line, where it was skipped as unreadable: the turn's prompt was gone from the
/// history. Now the record starts a line of its own, and the run after reads it back.
#[test]
fn a_torn_last_line_does_not_swallow_the_next_turns_prompt() {
    let d = project();
    write_history(d.path(), "torn", 1);
    let file = session_file(d.path(), "torn");
    let mut body = std::fs::read_to_string(&file).expect("r");
    body.push_str("{\"role\":\"assistant\",\"content\":[{\"ty");
    std::fs::write(&file, body).expect("w");

    let mock = MockLlm::start(vec![Reply::sse(A_TEXT), Reply::sse(A_TEXT)]);
    let env = anthropic_env(&mock);
    let out = kitbag(
        d.path(),
        &env,
        &["run", "--session", "torn", "second prompt"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let out = kitbag(d.path(), &env, &["run", "--session", "torn", "third"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);

    // The torn line is the only unreadable one, and the second run's prompt is on disk.
    let text_on_disk = std::fs::read_to_string(&file).expect("r");
    let (readable, unreadable): (Vec<_>, Vec<_>) = text_on_disk
        .lines()
        .filter(|l| !l.trim().is_empty())
        .partition(|l| serde_json::from_str::<Value>(l).is_ok());
    assert_eq!(unreadable, ["{\"role\":\"assistant\",\"content\":[{\"ty"]);
    let prompts: Vec<Value> = readable
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .filter(|r| r["role"] == "user")
        .map(|r| r["content"][0]["text"].clone())
        .collect();
    assert_eq!(prompts, ["question 0", "second prompt", "third"]);
    // And the third run's model call had it in its history.
    let third = &mock.received()[1].body["messages"];
    let users: Vec<&Value> = third
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| &m["content"][0]["text"])
        .collect();
    assert_eq!(users, ["question 0", "second prompt", "third"]);
}
