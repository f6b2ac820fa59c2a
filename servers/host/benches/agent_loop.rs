//! The agent loop's own cost per tool step (issue #18's target: p50 ≤ 1 ms): `kitbag run`
//! against a loopback model that asks for `file_read` (a real kitbag-files child) at every
//! step. Per step: the time from the end of the model's tool_use stream to the next request
//! arriving, minus the tool call's own time (from the audit log) — decoding the stream,
//! appending to the session, dispatching, building and sending the next request. Printed side
//! by side with the tool's own time, for both providers.
//!
//! Run: `cargo bench -p kitbag --bench agent_loop`. Nothing here asserts on time.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kitbag_testkit::llm_mock::{MockLlm, Reply};
use serde_json::{Value, json};

const STEPS: usize = 90;

fn anthropic_step(i: usize) -> String {
    let events = [
        json!({"type":"message_start","message":{"id":format!("msg_{i}"),"type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":100,"cache_read_input_tokens":900,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":format!("toolu_{i}"),"name":"file_read","input":{}}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a.txt\"}"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}),
        json!({"type":"message_stop"}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

fn openai_step(i: usize) -> String {
    let chunks = [
        json!({"id":format!("c{i}"),"object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":format!("call_{i}"),"type":"function","function":{"name":"file_read","arguments":"{\"path\": \"a.txt\"}"}}]},"finish_reason":null}]}),
        json!({"id":format!("c{i}"),"object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        json!({"id":format!("c{i}"),"object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20}}),
    ];
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn us(d: Duration) -> String {
    format!("{:>7.0} µs", d.as_secs_f64() * 1e6)
}

fn run(provider: &str) {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    let cfg = json!({"mcp": {"files": {"command": bin, "args": ["server", "files", "--root", d.path()]}}});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    let (step, last): (fn(usize) -> String, &str) = match provider {
        "anthropic" => (
            anthropic_step,
            include_str!("../../../llm/tests/fixtures/anthropic/text.sse"),
        ),
        _ => (
            openai_step,
            include_str!("../../../llm/tests/fixtures/openai/text.sse"),
        ),
    };
    // Each stream in one write: what is measured starts when the model's last byte is out.
    let mut replies: Vec<Reply> = (0..STEPS - 1)
        .map(|i| {
            let mut r = Reply::sse(step(i));
            r.piece = usize::MAX;
            r
        })
        .collect();
    replies.push(Reply::sse(last));
    let mock = MockLlm::start(replies);
    let audit = d.path().join("audit.jsonl");
    let mut cmd = Command::new(bin);
    cmd.current_dir(d.path())
        .args(["--audit-log", audit.to_str().expect("utf-8")])
        .args(["run", "--session", "bench", "go"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG");
    match provider {
        "anthropic" => cmd
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", mock.url())
            .env("KITBAG_MODEL", "anthropic/m"),
        _ => cmd
            .env("OPENAI_API_KEY", "k")
            .env("OPENAI_BASE_URL", format!("{}/v1", mock.url()))
            .env("KITBAG_MODEL", "openai/m"),
    };
    let out = cmd.output().expect("kitbag run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received = mock.received();
    let replied = mock.replied();
    let tool_ms: Vec<f64> = std::fs::read_to_string(&audit)
        .expect("audit")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "tool.call")
        .filter_map(|e| e["duration_ms"].as_f64())
        .collect();
    assert_eq!(tool_ms.len(), STEPS - 1, "one tool call per step");
    let mut overhead = Vec::new();
    let mut tool = Vec::new();
    for i in 0..STEPS - 1 {
        let gap = received[i + 1].at.saturating_duration_since(replied[i]);
        let t = Duration::from_secs_f64(tool_ms[i] / 1000.0);
        overhead.push(gap.saturating_sub(t));
        tool.push(t);
    }
    let (o50, o99) = (pct(&mut overhead, 0.5), pct(&mut overhead, 0.99));
    let (t50, t99) = (pct(&mut tool, 0.5), pct(&mut tool, 0.99));
    println!(
        "{provider:<10} loop overhead per step p50 {} p99 {}   file_read through the hub p50 {} p99 {}   ({} steps; the last request carried {} messages)",
        us(o50),
        us(o99),
        us(t50),
        us(t99),
        STEPS - 1,
        received[STEPS - 1].body["messages"]
            .as_array()
            .map_or(0, Vec::len)
    );
}

fn main() {
    for provider in ["anthropic", "openai"] {
        run(provider);
    }
}
