//! `kitbag run` end to end: a real host with a real kitbag-files child, a loopback model server
//! replaying recorded streams (the fixtures the official SDKs parse in llm/tests/wire.rs), and
//! the session file checked record by record.

mod agent_common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Received, Reply};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

#[test]
fn anthropic_a_prompt_reads_a_file_through_the_hub_and_answers() {
    let d = project();
    let mock = MockLlm::start(vec![Reply::sse(A_TOOL_USE), Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "t1", "What is in a.txt?"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello — wörld! 👋\n");
    assert!(
        stderr.contains("[tool] file_read {\"path\":\"a.txt\"}"),
        "{stderr}"
    );
    assert!(stderr.contains("[tool] file_read ok"), "{stderr}");

    let sent = mock.received();
    assert_eq!(sent.len(), 2);
    let first = &sent[0].body;
    assert_eq!(sent[0].path, "/v1/messages");
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["stream"], true);
    assert_eq!(
        first["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "What is in a.txt?"}]}])
    );
    let names = tool_names(&sent[0]);
    assert!(names.iter().any(|n| n == "file_read"), "{names:?}");
    assert!(names.iter().any(|n| n == "host_status"), "{names:?}");
    // The second call carries the model's tool call and the real file's content.
    let second = &sent[1].body["messages"];
    assert_eq!(second.as_array().expect("messages").len(), 3);
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
    assert_eq!(
        second[1]["content"][1]["id"],
        "toolu_01A09q90qw90lq917835lq9"
    );
    let result = &second[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01A09q90qw90lq917835lq9");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .expect("text")
            .contains("alpha"),
        "{result}"
    );
    assert!(result.get("is_error").is_none(), "{result}");

    let records = session(d.path(), "t1");
    assert_eq!(
        roles(&records),
        [
            "user",
            "assistant",
            "usage",
            "tool_result",
            "assistant",
            "usage"
        ]
    );
    assert_eq!(records[1]["stop"], "tool_use");
    assert_eq!(records[1]["model"], "claude-sonnet-4-5-20250929");
    let usage = |r: &Value| {
        json!([
            r["input_tokens"],
            r["output_tokens"],
            r["cache_read"],
            r["cache_creation"]
        ])
    };
    assert_eq!(usage(&records[2]), json!([812, 37, 640, 0]));
    assert_eq!(usage(&records[5]), json!([25, 12, 0, 0]));
    assert_eq!(records[4]["content"][0]["text"], "Hello — wörld! 👋");

    // `kitbag sessions` lists it with its totals; `kitbag sessions t1` shows it.
    let out = kitbag(d.path(), &[], &["sessions"]);
    let (list, _) = text(&out);
    assert!(list.starts_with("t1 "), "{list}");
    assert!(
        list.contains("1 turns") && list.contains("2 model calls"),
        "{list}"
    );
    assert!(
        list.contains("in       837") && list.contains("out       49"),
        "{list}"
    );
    // host_status carries the same totals.
    let out = kitbag(d.path(), &[], &["call", "host_status"]);
    let (status, _) = text(&out);
    assert!(
        status.contains(
            "session t1: 1 turns, 2 model calls, tokens in 837 (cache read 640, write 0) out 49"
        ),
        "{status}"
    );
    let out = kitbag(d.path(), &[], &["sessions", "t1"]);
    let (shown, _) = text(&out);
    assert!(
        shown.contains("→ file_read {\"path\":\"a.txt\"}"),
        "{shown}"
    );
    assert!(shown.contains("← ") && shown.contains("alpha"), "{shown}");
}

#[test]
fn openai_the_same_turn_with_tool_messages_and_cached_tokens() {
    let d = project();
    let mock = MockLlm::start(vec![Reply::sse(O_TOOL_CALLS), Reply::sse(O_TEXT)]);
    let out = kitbag(
        d.path(),
        &openai_env(&mock),
        &["run", "--session", "o", "What is in a.txt?"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello — wörld! 👋\n");
    let sent = mock.received();
    assert_eq!(sent[0].path, "/v1/chat/completions");
    assert_eq!(sent[0].header("authorization"), Some("Bearer test-key"));
    assert_eq!(
        sent[0].body["stream_options"],
        json!({"include_usage": true})
    );
    let m = &sent[1].body["messages"];
    assert_eq!(m[0]["role"], "system");
    assert_eq!(m[2]["tool_calls"][0]["id"], "call_abc123");
    assert_eq!(m[3]["role"], "tool");
    assert_eq!(m[3]["tool_call_id"], "call_abc123");
    assert!(
        m[3]["content"].as_str().expect("text").contains("alpha"),
        "{m}"
    );
    let records = session(d.path(), "o");
    // prompt_tokens 900 of which 640 cached: 260 uncached.
    assert_eq!(records[2]["input_tokens"], 260);
    assert_eq!(records[2]["cache_read"], 640);
    assert_eq!(records[2]["output_tokens"], 21);
}

#[test]
fn parallel_calls_run_and_answer_in_the_order_asked_errors_included() {
    let d = project();
    let mock = MockLlm::start(vec![Reply::sse(A_PARALLEL), Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "p", "Look around"],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sent = mock.received();
    let results = sent[1].body["messages"][2]["content"]
        .as_array()
        .expect("results")
        .clone();
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["tool_use_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["toolu_01First", "toolu_01Second", "toolu_01Third"]);
    // src/main.rs does not exist; search_grep is not offered by this host; host_status works.
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("not_found"),
        "{results:?}"
    );
    assert_eq!(results[1]["is_error"], true);
    assert!(
        results[1]["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("unknown tool `search_grep`"),
        "{results:?}"
    );
    assert!(results[2].get("is_error").is_none(), "{results:?}");
    assert!(
        results[2]["content"][0]["text"]
            .as_str()
            .expect("t")
            // The parallel file_read starts the files server (it waits for its first call):
            // host_status may see it ready or still starting.
            .contains(", 11 tools, 0 restarts"),
        "{results:?}"
    );
}

#[test]
fn a_session_resumes_and_a_call_cut_off_by_a_crash_is_answered() {
    let d = project();
    let mock = MockLlm::start(vec![
        Reply::sse(A_TOOL_USE),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let env = anthropic_env(&mock);
    let out = kitbag(d.path(), &env, &["run", "--session", "r", "first"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let out = kitbag(d.path(), &env, &["run", "--session", "r", "second"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let third = &mock.received()[2].body["messages"];
    let texts: Vec<String> = third
        .as_array()
        .expect("m")
        .iter()
        .map(|m| m["role"].as_str().expect("role").to_owned())
        .collect();
    assert_eq!(texts, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(third[4]["content"][0]["text"], "second");

    // A crash while a tool ran: the session ends with the call and no result, plus a torn line.
    let dir = d.path().join(".kitbag/sessions");
    let crashed = [
        json!({"role": "user", "content": [{"type": "text", "text": "go"}], "ts": "2026-11-25T00:00:00.000Z"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_X", "name": "file_write", "input": {"path": "b.txt", "content": "x"}}], "stop": "tool_use", "model": "m", "ts": "2026-11-25T00:00:01.000Z"}),
    ];
    let mut body: String = crashed.iter().map(|r| format!("{r}\n")).collect();
    body.push_str("{\"role\":\"usage\",\"input_tok");
    std::fs::write(dir.join("c.jsonl"), body).expect("w");
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "c", "what happened?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let m = &mock.received()[0].body["messages"];
    assert_eq!(m[2]["content"][0]["tool_use_id"], "toolu_X");
    assert_eq!(m[2]["content"][0]["is_error"], true);
    assert_eq!(m[3]["content"][0]["text"], "what happened?");
}

#[test]
fn failures_exit_non_zero_with_a_message_to_act_on() {
    let d = project();
    // No model and no key.
    let out = kitbag(d.path(), &[], &["run", "hello"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("KITBAG_MODEL") && stderr.contains("ANTHROPIC_API_KEY"),
        "{stderr}"
    );
    // A refused key: one request, the variable named, exit 1.
    let mock = MockLlm::start(vec![Reply::error(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    )]);
    let out = kitbag(d.path(), &anthropic_env(&mock), &["run", "hello"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("ANTHROPIC_API_KEY") && stderr.contains("HTTP 401"),
        "{stderr}"
    );
    assert_eq!(mock.received().len(), 1);
    // A bad session name changes nothing.
    let out = kitbag(d.path(), &[], &["run", "--session", "../x", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("session: \"../x\""),
        "{}",
        text(&out).1
    );
    assert!(!d.path().join(".kitbag/x.jsonl").exists());
}

#[test]
fn a_long_session_is_summarized_once_reused_and_resummarized_when_history_changes() {
    let d = project();
    write_history(d.path(), "long", 10);
    let mut env_base = vec![("KITBAG_CONTEXT_TURNS", "4".to_string())];
    // Run 1: 11 turns with a window of 4 drop 7 (> 5): one summary call, then the answer.
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT), Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.append(&mut env_base.clone());
    let out = kitbag(d.path(), &env, &["run", "--session", "long", "next"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("turns were summarized"), "{stderr}");
    let sent = mock.received();
    assert_eq!(sent.len(), 2);
    let ask = sent[0].body["messages"][0]["content"][0]["text"]
        .as_str()
        .expect("summary prompt")
        .to_owned();
    assert!(
        ask.contains("question 0") && ask.contains("answer 8"),
        "{ask}"
    );
    assert!(ask.ends_with("Focus on decisions made, files modified, and current task state."));
    assert!(sent[0].body.get("tools").is_none());
    assert!(
        system_text(&sent[1])
            .ends_with("[Context summary from earlier in this conversation: Hello — wörld! 👋]"),
        "{}",
        system_text(&sent[1])
    );
    // Down to half the window: the answer call sees turns 9 and 10 ("next").
    let m = sent[1].body["messages"].as_array().expect("m");
    assert_eq!(m.len(), 3);
    assert_eq!(m[0]["content"][0]["text"], "question 9");
    let records = session(d.path(), "long");
    let compactions: Vec<&Value> = records
        .iter()
        .filter(|r| r["role"] == "compaction")
        .collect();
    assert_eq!(compactions.len(), 1);
    assert_eq!(
        compactions[0]["covers_through_ts"],
        "2026-11-25T00:08:30.000Z"
    );
    assert_eq!(
        compactions[0]["source_hash"].as_str().expect("hash").len(),
        64
    );
    let purposes: Vec<&Value> = records
        .iter()
        .filter(|r| r["role"] == "usage")
        .map(|r| &r["purpose"])
        .collect();
    assert_eq!(purposes, [&json!("compaction"), &Value::Null]);

    // Run 2: the summary is reused, no second summary call.
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.append(&mut env_base.clone());
    let out = kitbag(d.path(), &env, &["run", "--session", "long", "again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 1);
    assert!(system_text(&sent[0]).contains("[Context summary from earlier"));
    let count = |d: &Path| {
        session(d, "long")
            .iter()
            .filter(|r| r["role"] == "compaction")
            .count()
    };
    assert_eq!(count(d.path()), 1);

    // The covered history changes (an early line edited): the stale summary is not used; a
    // new one is made.
    let file = d.path().join(".kitbag/sessions/long.jsonl");
    let edited =
        std::fs::read_to_string(&file)
            .expect("r")
            .replacen("question 3", "question three", 1);
    std::fs::write(&file, edited).expect("w");
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT), Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.append(&mut env_base);
    let out = kitbag(d.path(), &env, &["run", "--session", "long", "third"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 2, "a new summary call, then the answer");
    assert!(
        sent[0].body["messages"][0]["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("question three")
    );
    assert_eq!(count(d.path()), 2);
}

/// A project whose agent.json runs kitbag-files and kitbag-memory, with a `memory` block.
fn memory_project(memory: Value) -> tempfile::TempDir {
    let d = project();
    let cfg = json!({
        "mcp": {
            "files": {"command": bin(), "args": ["server", "files", "--root", d.path()]},
            "memory": {"command": bin(), "args": ["server", "memory", "--root", d.path()]}
        },
        "memory": memory
    });
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    d
}

fn store(dir: &Path, content: &str) {
    let out = kitbag(
        dir,
        &[],
        &[
            "call",
            "memory_store",
            &json!({"content": content}).to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn memories_are_injected_in_each_mode_and_the_memory_block_configures_the_store() {
    let d =
        memory_project(json!({"inject_mode": "relevant", "max_inject_count": 2, "max_total": 3}));
    store(d.path(), "The staging database is reset every Sunday.");
    store(d.path(), "Deploys go out from the release branch only.");
    store(
        d.path(),
        "The Postgres replica lags during the nightly vacuum.",
    );
    // max_total 3 from agent.json reached kitbag-memory: a fourth evicts the oldest.
    store(d.path(), "Lunch is at noon.");
    let run = |env_extra: &[(&'static str, String)], prompt: &str| {
        let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
        let mut env = anthropic_env(&mock);
        env.extend_from_slice(env_extra);
        let out = kitbag(d.path(), &env, &["run", "--session", "m", prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
        system_text(&mock.received()[0])
    };
    let relevant = run(&[], "Why is the Postgres replica slow at night?");
    assert!(relevant.contains("<memories>"), "{relevant}");
    assert!(relevant.contains("replica lags"), "{relevant}");
    assert!(
        !relevant.contains("staging database"),
        "evicted by max_total: {relevant}"
    );
    assert!(
        relevant.matches("\n- [").count() <= 2,
        "max_inject_count: {relevant}"
    );

    // Every memory kept, newest first: three, the oldest gone.
    let recent = run(
        &[
            ("KITBAG_MEMORY_INJECT_MODE", "recent_only".into()),
            ("KITBAG_MEMORY_MAX_INJECT_COUNT", "10".into()),
        ],
        "Why is the Postgres replica slow at night?",
    );
    assert!(recent.contains("Lunch is at noon"), "{recent}");
    assert_eq!(recent.matches("\n- [").count(), 3, "{recent}");
    assert!(!recent.contains("staging database"), "{recent}");

    let off = run(
        &[("KITBAG_MEMORY_INJECT_MODE", "off".into())],
        "Why is the Postgres replica slow at night?",
    );
    assert!(!off.contains("<memories>"), "{off}");

    let bad = kitbag(
        d.path(),
        &[("KITBAG_MEMORY_INJECT_MODE", "always".into())],
        &["run", "x"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad).1.contains(
            "KITBAG_MEMORY_INJECT_MODE=always: must be one of relevant, recent_only, off"
        ),
        "{}",
        text(&bad).1
    );
    let d2 = memory_project(json!({"inject_mode": "sometimes"}));
    let out = kitbag(d2.path(), &[], &["doctor"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("memory.inject_mode"),
        "{}",
        text(&out).1
    );
}

#[test]
fn an_agent_pack_limits_tools_spends_its_budget_then_answers() {
    let d = project();
    write(
        d.path(),
        ".kitbag/agents/reader.md",
        "---\nname: reader\ntemperature: 0.3\ntools: [file_read, host_*]\nmax_tool_calls: 1\n---\nYou only read files.\n",
    );
    write(
        d.path(),
        ".kitbag/prompt.md",
        "This repository is a test fixture.",
    );
    // OpenAI: the temperature reaches it. One call spends the budget; the next request offers
    // the tools with tool_choice none and gets the answer.
    let mock = MockLlm::start(vec![Reply::sse(O_TOOL_CALLS), Reply::sse(O_TEXT)]);
    let audit = d.path().join("audit.jsonl");
    let out = kitbag(
        d.path(),
        &openai_env(&mock),
        &[
            "--audit-log",
            audit.to_str().expect("utf-8"),
            "--agent",
            "reader",
            "run",
            "What is in a.txt?",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello — wörld! 👋\n");
    let sent = mock.received();
    assert_eq!(sent.len(), 2);
    let mut names = tool_names(&sent[0]);
    names.sort();
    assert_eq!(
        names,
        ["file_read", "host_reload", "host_status"],
        "only the pack's tools"
    );
    assert_eq!(sent[0].body["temperature"], json!(0.3));
    let system = sent[0].body["messages"][0]["content"]
        .as_str()
        .expect("system");
    let core = system
        .find("You are a capable software agent")
        .expect("core prompt");
    let pack = system.find("You only read files.").expect("pack prompt");
    let workspace = system
        .find("This repository is a test fixture.")
        .expect("workspace prompt");
    assert!(
        core < pack && pack < workspace,
        "seed 002's order: {system}"
    );
    assert!(sent[0].body.get("tool_choice").is_none());
    assert_eq!(sent[1].body["tool_choice"], "none");
    assert!(
        sent[1].body["messages"][0]["content"]
            .as_str()
            .expect("system")
            .contains("tool-call budget of this agent (1 calls) is spent")
    );
    // Seed 002's events: llm.request per model call, tool.call and tool.result per tool call,
    // perf.first_token, perf.complete once.
    let events = audit_events(&audit);
    let kinds = |k: &str| events.iter().filter(|e| e["event"] == k).count();
    assert_eq!(kinds("llm.request"), 2, "{events:?}");
    assert_eq!(kinds("tool.call"), 1);
    assert_eq!(kinds("tool.result"), 1);
    assert_eq!(kinds("perf.first_token"), 2);
    assert_eq!(kinds("perf.complete"), 1);
    let llm = events
        .iter()
        .find(|e| e["event"] == "llm.request")
        .expect("llm.request");
    assert_eq!(llm["agent"], "reader");
    assert_eq!(llm["usage"]["cache_read"], 640);
    let result = events
        .iter()
        .find(|e| e["event"] == "tool.result")
        .expect("tool.result");
    assert_eq!(result["ok"], true);
    assert!(
        result["summary"].as_str().expect("s").contains("alpha"),
        "{result}"
    );
}

#[test]
fn a_call_outside_the_pack_is_refused_and_auto_routes_by_the_seed_rules() {
    let d = project();
    write(
        d.path(),
        ".kitbag/agents/chat.quick.md",
        "---\ntools: [host_status]\n---\nBe brief.\n",
    );
    // The model asks for file_read, which the pack does not offer: refused, not run.
    let mock = MockLlm::start(vec![Reply::sse(A_TOOL_USE), Reply::sse(A_TEXT)]);
    let audit = d.path().join("audit.jsonl");
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "--audit-log",
            audit.to_str().expect("u"),
            "--agent",
            "auto",
            "run",
            "hi there",
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("[router] chat.quick (short and conversational)"),
        "{stderr}"
    );
    let result = &mock.received()[1].body["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("capability_denied"),
        "{result}"
    );
    let events = audit_events(&audit);
    let decision = audit_event(&audit, "router.decision");
    assert_eq!(decision["agent"], "chat.quick");
    assert!(
        events.iter().all(|e| e["event"] != "tool.call"),
        "nothing ran: {events:?}"
    );
    // An unknown pack (and no such profile) stops before any server starts.
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["--agent", "nope", "run", "hi"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("no pack"), "{}", text(&out).1);
    // A broken pack names its file and key.
    write(
        d.path(),
        ".kitbag/agents/bad.md",
        "---\nmax_tool_calls: lots\n---\n",
    );
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["--agent", "bad", "run", "hi"],
    );
    assert!(
        text(&out).1.contains("bad.md: `max_tool_calls`"),
        "{}",
        text(&out).1
    );
}

#[test]
fn relevant_skills_are_injected_and_others_load_by_name() {
    let d = project();
    write(
        d.path(),
        ".kitbag/skills/release.md",
        "---\nname: release\ndescription: Cut a release, bump versions and publish the crates\n---\nRun cargo publish for each crate in dependency order.\n",
    );
    write(
        d.path(),
        ".kitbag/skills/triage.md",
        "---\nname: triage\ndescription: Triage a failing CI run\n---\nRead the log tail first.\n",
    );
    let load = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_s\",\"name\":\"skill_load\",\"input\":{}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"name\\\": \\\"triage\\\"}\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let mock = MockLlm::start(vec![Reply::sse(load), Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "Publish the crates for the new release"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    let system = system_text(&sent[0]);
    assert!(system.contains("- release: Cut a release"), "{system}");
    assert!(
        system.contains("- triage: Triage a failing CI run"),
        "{system}"
    );
    assert!(
        system.contains("<skill name=\"release\">\nRun cargo publish"),
        "{system}"
    );
    assert!(!system.contains("Read the log tail first."), "{system}");
    assert!(tool_names(&sent[0]).iter().any(|n| n == "skill_load"));
    let result = &sent[1].body["messages"][2]["content"][0];
    assert!(
        result["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("Read the log tail first."),
        "{result}"
    );
}

#[test]
fn the_daemon_turns_cron_firings_into_turns_in_their_sessions() {
    let d = project();
    // kitbag-cron on a test clock: a minute passes every real second.
    let cfg = json!({"mcp": {
        "files": {"command": bin(), "args": ["server", "files", "--root", d.path()]},
        "cron": {"command": bin(), "args": ["server", "cron", "--root", d.path(),
            "--test-clock-start", "2026-03-08T06:58:58Z", "--test-clock-rate", "60"]}
    }});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    let out = kitbag(
        d.path(),
        &[],
        &[
            "call",
            "cron_create",
            &json!({"schedule": "* * * * *", "message": "check the logs", "session": "nightly", "catch_up": false}).to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let mock = MockLlm::start((0..20).map(|_| Reply::sse(A_TEXT)).collect());
    let daemon = spawn_daemon(d.path(), &anthropic_env(&mock));
    let file = d.path().join(".kitbag/sessions/nightly.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let answered = loop {
        let records: Vec<Value> = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if records.iter().any(|r| r["role"] == "assistant") || std::time::Instant::now() > deadline
        {
            break records;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (status, stderr) = stop_daemon(daemon);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("fired into session nightly"), "{stderr}");
    assert_eq!(answered[0]["role"], "user", "{answered:?}\n{stderr}");
    assert_eq!(answered[0]["origin"], "cron:cron-1");
    assert_eq!(answered[0]["content"][0]["text"], "check the logs");
    let reply = answered
        .iter()
        .find(|r| r["role"] == "assistant")
        .expect("an answer");
    assert_eq!(reply["content"][0]["text"], "Hello — wörld! 👋");
    assert_eq!(
        mock.received()[0].body["messages"][0]["content"][0]["text"],
        "check the logs"
    );
    // Nothing the daemon started outlives it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let needle = d.path().to_string_lossy().to_string();
    while !processes_mentioning(&needle).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(processes_mentioning(&needle), Vec::<String>::new());
}

#[test]
fn ctrl_c_cancels_the_turn_and_leaves_no_tool_running() {
    let d = project();
    let cfg = json!({"mcp": {
        "shell": {"command": bin(), "args": ["server", "shell", "--root", d.path()]}
    }});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    let marker = format!("sleep 31.{}", std::process::id());
    let call = A_TOOL_USE
        .replace("file_read", "shell_bash")
        .replace(
            r#"{\"path\": \"a."#,
            &format!(r#"{{\"command\": \"{marker}"#),
        )
        .replace(r#"txt\"}"#, r#"\"}"#);
    let mock = MockLlm::start(vec![Reply::sse(call), Reply::sse(A_TEXT)]);
    let mut cmd = Command::new(bin());
    cmd.current_dir(d.path())
        .args(["run", "--session", "cancel", "sleep please"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in anthropic_env(&mock) {
        cmd.env(k, v);
    }
    let run = cmd.spawn().expect("run");
    // Wait for the command to be running, then Ctrl-C.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while processes_mentioning(&marker).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !processes_mentioning(&marker).is_empty(),
        "the tool never started"
    );
    let started = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let out = run.wait_with_output().expect("wait");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // The model was not asked again, and the command is gone.
    assert_eq!(mock.received().len(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !processes_mentioning(&marker).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(processes_mentioning(&marker), Vec::<String>::new());
    // The session keeps the call and its (cancelled) result: the next run resumes from it.
    let records = session(d.path(), "cancel");
    assert_eq!(
        roles(&records),
        ["user", "assistant", "usage", "tool_result"]
    );
    assert_eq!(records[3]["content"][0]["is_error"], true);
}

#[test]
fn chat_runs_a_turn_per_line_in_one_session() {
    let d = project();
    let mock = MockLlm::start(vec![
        Reply::sse(A_TOOL_USE),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let mut cmd = Command::new(bin());
    cmd.current_dir(d.path())
        .args(["chat", "--session", "talk"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in anthropic_env(&mock) {
        cmd.env(k, v);
    }
    let mut chat = cmd.spawn().expect("chat");
    {
        let mut stdin = chat.stdin.take().expect("stdin");
        std::io::Write::write_all(
            &mut stdin,
            b"What is in a.txt?\n\n   \nAnd now?\n/exit\nnever sent\n",
        )
        .expect("write");
    }
    let out = chat.wait_with_output().expect("wait");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello — wörld! 👋\nHello — wörld! 👋\n");
    assert!(stderr.contains("[tool] file_read"), "{stderr}");
    assert_eq!(mock.received().len(), 3);
    // The second turn sees the first.
    assert_eq!(
        mock.received()[2].body["messages"]
            .as_array()
            .expect("m")
            .len(),
        5
    );
    let records = session(d.path(), "talk");
    let users: Vec<&Value> = records.iter().filter(|r| r["role"] == "user").collect();
    assert_eq!(users.len(), 2);
    assert_eq!(users[1]["content"][0]["text"], "And now?");
}

#[test]
fn the_agent_edits_its_config_reloads_and_the_next_step_has_the_new_tools() {
    let d = project();
    let new_cfg = json!({"mcp": {
        "files": {"command": bin(), "args": ["server", "files", "--root", d.path()]},
        "shell": {"command": bin(), "args": ["server", "shell", "--root", d.path()]}
    }})
    .to_string();
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse(
            "t1",
            "file_read",
            &json!({"path": "agent.json"}),
        )),
        Reply::sse(tool_call_sse(
            "t2",
            "file_write",
            &json!({"path": "agent.json", "content": new_cfg}),
        )),
        Reply::sse(tool_call_sse("t3", "host_reload", &json!({}))),
        Reply::sse(A_TEXT),
    ]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "run",
            "--session",
            "self",
            "add a shell server to your config",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 4);
    let has_shell = |i: usize| tool_names(&sent[i]).iter().any(|n| n == "shell_bash");
    assert!(!has_shell(0) && !has_shell(2), "no shell before the reload");
    assert!(
        has_shell(3),
        "the step after host_reload sees the new server's tools"
    );
    let reload = &sent[3].body["messages"][6]["content"][0];
    assert!(
        reload["content"][0]["text"]
            .as_str()
            .expect("t")
            .contains("started [shell]"),
        "{reload}"
    );
    // The session went on intact: one turn, every step in it.
    let records = session(d.path(), "self");
    assert_eq!(records.iter().filter(|r| r["role"] == "user").count(), 1);
    assert_eq!(
        records
            .iter()
            .filter(|r| r["role"] == "tool_result")
            .count(),
        3
    );
}

/// Seed 004's `self_restart` under `kitbag run`: kitbag-vm answers, then SIGHUPs the host,
/// which reloads its config instead of dying; the turn goes on and a later step has the new
/// server's tools. (Before, the SIGHUP ended the agent mid-turn: no handler outside `serve`.)
#[test]
fn self_restart_inside_a_run_reloads_and_the_turn_goes_on() {
    let d = project();
    let server =
        |family: &str| json!({"command": bin(), "args": ["server", family, "--root", d.path()]});
    std::fs::write(
        d.path().join("agent.json"),
        json!({"mcp": {"files": server("files"), "vm": server("vm")}}).to_string(),
    )
    .expect("agent.json");
    let new_cfg =
        json!({"mcp": {"files": server("files"), "vm": server("vm"), "shell": server("shell")}})
            .to_string();
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse(
            "t1",
            "file_read",
            &json!({"path": "agent.json"}),
        )),
        Reply::sse(tool_call_sse(
            "t2",
            "file_write",
            &json!({"path": "agent.json", "content": new_cfg}),
        )),
        Reply::sse(tool_call_sse(
            "t3",
            "self_restart",
            &json!({"reason": "new shell server"}),
        )),
        // The model thinks a while: the host's SIGHUP (250 ms after the answer) and its
        // reload happen meanwhile.
        Reply::sse(tool_call_sse(
            "t4",
            "file_read",
            &json!({"path": "agent.json"}),
        ))
        .after(std::time::Duration::from_millis(1500)),
        Reply::sse(tool_call_sse(
            "t5",
            "shell_bash",
            &json!({"command": "echo restarted"}),
        )),
        Reply::sse(A_TEXT),
    ]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "run",
            "--session",
            "restart",
            "add a shell server and restart",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 6, "every step ran");
    let has_shell = |i: usize| tool_names(&sent[i]).iter().any(|n| n == "shell_bash");
    assert!(
        !has_shell(0) && !has_shell(2),
        "no shell before the restart"
    );
    assert!(
        has_shell(4),
        "a step after the restart has the new server's tools"
    );
    let records = session(d.path(), "restart");
    let results: Vec<&Value> = records
        .iter()
        .filter(|r| r["role"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 5, "{records:#?}");
    assert!(
        results[4].to_string().contains("restarted"),
        "the new tool answered: {}",
        results[4]
    );
}

/// A history of `turns` turns, each with a tool call whose result is `result_chars` long, and
/// a last usage record of `last_tokens` prompt tokens.
fn write_heavy_history(
    dir: &Path,
    name: &str,
    turns: usize,
    result_chars: usize,
    last_tokens: u64,
) {
    let d = dir.join(".kitbag/sessions");
    std::fs::create_dir_all(&d).expect("mkdir");
    let mut body = String::new();
    for i in 0..turns {
        let ts = |s: u32| format!("2026-11-25T01:{i:02}:{s:02}.000Z");
        for r in [
            json!({"role": "user", "content": [{"type": "text", "text": format!("question {i}")}], "ts": ts(0)}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "file_read", "input": {"path": "a.txt"}}], "stop": "tool_use", "model": "m", "ts": ts(1)}),
            json!({"role": "tool_result", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": [{"type": "text", "text": format!("result {i} {}", "x".repeat(result_chars))}]}], "ts": ts(2)}),
            json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}], "stop": "end_turn", "model": "m", "ts": ts(3)}),
        ] {
            body.push_str(&format!("{r}\n"));
        }
    }
    body.push_str(&format!(
        "{}\n",
        json!({"role": "usage", "input_tokens": last_tokens, "output_tokens": 10, "cache_read": 0, "cache_creation": 0, "model": "m", "ts": "2026-11-25T02:00:00.000Z"})
    ));
    std::fs::write(d.join(format!("{name}.jsonl")), body).expect("w");
}

fn result_texts(r: &Received) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .expect("m")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            b["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(20)
                .collect()
        })
        .collect()
}

#[test]
fn near_the_token_window_old_tool_outputs_are_cleared_then_earlier_turns_summarized() {
    let d = project();
    let env_extra = [
        ("KITBAG_CONTEXT_WINDOW", "10000".to_string()),
        ("KITBAG_MAX_TOKENS", "1000".to_string()),
        ("KITBAG_CONTEXT_CHARS", "1000000".to_string()),
    ];
    // 9,500 tokens used against a limit of 9,000 (more than the ~7,700 the request measures,
    // so the reported use is the pressure): clearing the oldest of three 8,000-character
    // results (~2,000 tokens) is enough — no summary call.
    write_heavy_history(d.path(), "heavy", 3, 8000, 9500);
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.extend_from_slice(&env_extra);
    let out = kitbag(d.path(), &env, &["run", "--session", "heavy", "next"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the last call used 9510 tokens")
            && stderr.contains("old tool outputs cleared"),
        "{stderr}"
    );
    let sent = mock.received();
    assert_eq!(sent.len(), 1, "no summary call");
    assert_eq!(
        result_texts(&sent[0]),
        [
            "[Old tool result con",
            "result 1 xxxxxxxxxxx",
            "result 2 xxxxxxxxxxx"
        ]
    );
    // The file keeps every result whole.
    assert!(
        std::fs::read_to_string(d.path().join(".kitbag/sessions/heavy.jsonl"))
            .expect("r")
            .contains("result 0 xxxx")
    );

    // 50,000 tokens: clearing is not enough, the earlier turns are summarized and the call
    // carries the current turn with the summary.
    write_heavy_history(d.path(), "full", 3, 100, 50_000);
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT), Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.extend_from_slice(&env_extra);
    let out = kitbag(d.path(), &env, &["run", "--session", "full", "next"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 2, "a summary call, then the answer");
    assert!(sent[0].body.get("tools").is_none());
    assert!(system_text(&sent[1]).contains("[Context summary from earlier in this conversation:"));
    let m = sent[1].body["messages"].as_array().expect("m");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["content"][0]["text"], "next");
    let records = session(d.path(), "full");
    assert_eq!(
        records.iter().filter(|r| r["role"] == "compaction").count(),
        1
    );
}

/// `kitbag run --issue N` (seed 004's amendment of 2026-06-05): the session keeps its issue, the
/// loop binds it in kitbag-issues at every turn (the model never calls issue_bind), and while
/// the issue has open todos every model request ends with them — except right after a `todo`
/// result, and never in the session itself.
#[test]
fn a_run_bound_to_an_issue_binds_it_and_shows_the_open_todos_at_each_step() {
    let d = project();
    let server = |family: &str, extra: &[&str]| family_server(d.path(), family, extra);
    let cfg = json!({"mcp": {"files": server("files", &[]), "issues": server("issues", &["--project", "t"])}});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("agent.json");
    let made = kitbag(
        d.path(),
        &[],
        &[
            "call",
            "issue_create",
            r#"{"title": "Ship", "body": "ship it"}"#,
        ],
    );
    assert_eq!(made.status.code(), Some(0), "{}", text(&made).1);

    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse(
            "t1",
            "todo",
            &json!({"action": "add", "items": ["Write the code", "Test it"]}),
        )),
        Reply::sse(tool_call_sse("t2", "file_read", &json!({"path": "a.txt"}))),
        Reply::sse(A_TEXT),
    ]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "s", "--issue", "1", "ship it"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert_eq!(sent.len(), 3);
    // The tail of each request: the last message's text blocks.
    let tail = |r: &Received| -> String {
        let messages = r.body["messages"].as_array().expect("messages");
        let last = messages.last().expect("a message");
        last["content"]
            .as_array()
            .expect("blocks")
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    // No todos yet; then the todo result itself; then the reminder.
    assert!(!tail(&sent[0]).contains("Open todos"), "{}", tail(&sent[0]));
    assert!(!tail(&sent[1]).contains("Open todos"), "{}", tail(&sent[1]));
    // The todo call worked without the model binding anything: the loop bound issue #1.
    assert!(
        !sent[1].body.to_string().contains("no_bound_issue"),
        "{}",
        sent[1].body
    );
    assert_eq!(
        tail(&sent[2]),
        "Open todos of issue #1 (the `todo` tool updates them):\n- [ ] Write the code\n- [ ] Test it"
    );
    let records = session(d.path(), "s");
    assert!(
        records
            .iter()
            .any(|r| r["role"] == "issue_bound" && r["number"] == 1),
        "{records:?}"
    );
    assert!(
        !Value::Array(records).to_string().contains("Open todos"),
        "the reminder is not kept in the session"
    );

    // A later run of the session, without --issue: still bound, still reminded.
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &["run", "--session", "s", "what is left?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let sent = mock.received();
    assert!(
        tail(&sent[0]).contains("- [ ] Test it"),
        "{}",
        tail(&sent[0])
    );
    assert!(
        tail(&sent[0]).starts_with("what is left?"),
        "{}",
        tail(&sent[0])
    );
}

/// Seed 002's prompt includes: `{file:…}` in the workspace prompt and a pack reaches the model
/// as the file's text; `{cmd:…}` runs only an allowlisted command and is logged; a path out of
/// the root becomes a visible note, not the file.
#[test]
fn prompt_includes_bring_files_and_allowed_commands_into_the_prompt() {
    let d = project();
    write(d.path(), "docs/rules.md", "Never push on Fridays.\n");
    write(
        d.path(),
        ".kitbag/agents/careful.md",
        "---\nname: careful\n---\nRules: {file:docs/rules.md}\n",
    );
    write(
        d.path(),
        ".kitbag/prompt.md",
        "Docs: {cmd:ls docs}. Secret: {file:../outside.txt}. Off: {cmd:cat a.txt}",
    );
    let mock = MockLlm::start(vec![Reply::sse(A_TEXT)]);
    let mut env = anthropic_env(&mock);
    env.push(("KITBAG_PROMPT_INCLUDES_CMD", "true".into()));
    env.push(("KITBAG_PROMPT_INCLUDES_CMD_ALLOW", "ls".into()));
    let out = kitbag(d.path(), &env, &["--agent", "careful", "run", "hello"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sent = mock.received();
    let system = sent[0].body["system"].to_string();
    assert!(system.contains("Rules: Never push on Fridays."), "{system}");
    assert!(system.contains("Docs: rules.md."), "{system}");
    assert!(!system.contains("OUTSIDE"), "{system}");
    assert!(
        system.contains("[include {file:../outside.txt}: the path must be relative"),
        "{system}"
    );
    assert!(
        system.contains("[include {cmd:cat a.txt}: not allowed"),
        "{system}"
    );
    assert!(
        stderr.contains("ran {cmd:ls docs} in") && stderr.contains("exit 0, stdout 9 bytes"),
        "the run is logged: {stderr}"
    );
}

/// Workflows through `kitbag serve` (issue #39 §3): declared in agent.json (seed 004's input
/// form) and in `.kitbag/workflows/`; `workflow_trigger` checks the inputs field by field and
/// returns at once; the run's tool, shell and agent steps go through the host with the inputs
/// put in (quoted for the shell: an input never becomes a command); `workflow_status` follows
/// it to the end; a run a gone host left `running` reads `interrupted`.
#[test]
fn workflows_run_tool_shell_and_agent_steps_through_serve() {
    let d = project();
    let root = d.path();
    let server = |family: &str| family_server(root, family, &[]);
    let cfg = json!({
        "mcp": {"files": server("files"), "shell": server("shell")},
        "workflows": {
            "release": {
                "description": "Cut a release.",
                "inputs": {
                    "version": {"type": "string", "required": true, "description": "e.g. 1.2"},
                    "notes": {"type": "string", "required": false, "default": "none"}
                },
                "steps": [
                    {"tool": "file_write", "args": {"path": "release/{inputs.version}.txt", "content": "notes: {inputs.notes}\n"}},
                    {"shell": "cat release/{inputs.version}.txt && echo shipped {inputs.version}"},
                    {"prompt": "Summarize release {inputs.version}."}
                ]
            },
            "broken": {"steps": [{"shell": "echo before; exit 3"}, {"shell": "echo never"}]},
            "upload": {"inputs": {"cv": {"type": "file", "required": true}}, "steps": [{"shell": "true"}]}
        }
    });
    std::fs::write(root.join("agent.json"), cfg.to_string()).expect("agent.json");
    std::fs::create_dir_all(root.join(".kitbag/workflows")).expect("mkdir");
    std::fs::write(
        root.join(".kitbag/workflows/lint.json"),
        r#"{"description": "Lint.", "steps": [{"shell": "echo lint ok"}]}"#,
    )
    .expect("lint.json");
    // A run its host (a pid that cannot exist) left running.
    std::fs::create_dir_all(root.join(".kitbag/workflow-runs")).expect("mkdir");
    std::fs::write(
        root.join(".kitbag/workflow-runs/wr-orphan.json"),
        json!({"run_id": "wr-orphan", "workflow_name": "lint", "status": "running", "inputs": {},
            "invoked_by": {"type": "operator", "id": "agent:primary"}, "session": "workflow-wr-orphan",
            "created_at": 1, "completed_at": null, "duration_ms": null, "current_step": 0,
            "steps_total": 1, "steps": [], "host_pid": 4194305, "host_started": 1})
        .to_string(),
    )
    .expect("orphan");
    let mock = MockLlm::start(vec![
        Reply::sse(text_sse("Release 1.2 is out.")),
        Reply::sse(text_sse("Release x is out.")),
    ]);
    let env = anthropic_env(&mock);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = McpClient::spawn_with_env(bin(), &["serve"], root, Era::Handshake, &env);
    c.timeout = Duration::from_secs(60);

    let l = c.call_ok("workflow_list", json!({}));
    let names: Vec<&str> = l.structured["workflows"]
        .as_array()
        .expect("workflows")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["broken", "release", "upload", "lint"]);
    assert_eq!(
        l.structured["workflows"][1]["inputs"]["required"],
        json!(["version"])
    );
    let g = c.call_ok("workflow_list", json!({"invokable_by": "guest"}));
    assert_eq!(g.structured["count"], 0);
    let orphan = c.call_ok("workflow_status", json!({"run_id": "wr-orphan"}));
    assert_eq!(
        orphan.structured["status"], "interrupted",
        "{}",
        orphan.structured
    );

    let wait = |c: &mut McpClient, run_id: &str| -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let s = c
                .call_ok("workflow_status", json!({"run_id": run_id}))
                .structured;
            if s["status"] != "running" {
                return s;
            }
            assert!(
                s["completed_at"].is_null() && s["duration_ms"].is_null(),
                "{s}"
            );
            assert!(std::time::Instant::now() < deadline, "still running: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let t = c.call_ok(
        "workflow_trigger",
        json!({"name": "release", "inputs": {"version": "1.2"}}),
    );
    assert_eq!(t.structured["status"], "running");
    assert_eq!(t.structured["workflow_name"], "release");
    let run = wait(&mut c, t.structured["run_id"].as_str().expect("run_id"));
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["inputs"], json!({"version": "1.2", "notes": "none"}));
    assert_eq!(
        run["invoked_by"],
        json!({"type": "operator", "id": "agent:primary"})
    );
    let out = run["steps"][1]["output"].as_str().expect("shell output");
    assert!(
        out.contains("notes: none") && out.contains("shipped 1.2"),
        "{run}"
    );
    assert_eq!(run["output"], "Release 1.2 is out.");
    assert!(
        run["duration_ms"].is_u64() && run["completed_at"].is_u64(),
        "{run}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("release/1.2.txt")).expect("written"),
        "notes: none\n"
    );
    let prompt = &mock.received()[0].body["messages"];
    assert!(
        prompt.to_string().contains("Summarize release 1.2."),
        "{prompt}"
    );

    // An input is data to the shell, never a command.
    let t = c.call_ok(
        "workflow_trigger",
        json!({"name": "release", "inputs": {"version": "x; touch pwned"}}),
    );
    let run = wait(&mut c, t.structured["run_id"].as_str().expect("run_id"));
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(!root.join("pwned").exists(), "an input ran as a command");

    let t = c.call_ok("workflow_trigger", json!({"name": "broken"}));
    let run = wait(&mut c, t.structured["run_id"].as_str().expect("run_id"));
    assert_eq!(run["status"], "failed");
    assert_eq!(run["steps"].as_array().map(Vec::len), Some(1), "{run}");
    assert!(
        run["failure"]
            .as_str()
            .is_some_and(|e| e.contains("step 0 failed: exit code 3")),
        "{run}"
    );

    let e = c.call_err(
        "workflow_trigger",
        json!({"name": "release", "inputs": {}}),
        "invalid_params",
    );
    assert_eq!(e.structured["error"]["detail"]["field"], "inputs.version");
    c.call_err(
        "workflow_trigger",
        json!({"name": "nope", "inputs": {}}),
        "workflow_not_found",
    );
    c.call_err(
        "workflow_trigger",
        json!({"name": "upload", "inputs": {}}),
        "file_input_not_supported",
    );
    c.call_err(
        "workflow_status",
        json!({"run_id": "wr-nope"}),
        "run_not_found",
    );
    // Seed 004's names resolve.
    let l = c.call_ok("kaged.workflow.list", json!({}));
    assert_eq!(l.structured["count"], 4);
    c.shutdown();

    // From the command line (what a cron entry's `command` calls): the run goes to its end
    // in that process, and the exit code says how it ended.
    let env = anthropic_env(&mock);
    let out = kitbag(root, &env, &["workflow", "run", "lint"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let run: Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(run["status"], "succeeded");
    assert!(
        run["output"]
            .as_str()
            .is_some_and(|o| o.contains("lint ok")),
        "{run}"
    );
    let out = kitbag(root, &env, &["workflow", "run", "broken"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    let id = run["run_id"].as_str().expect("run_id");
    let out = kitbag(root, &env, &["workflow", "status", id]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).0.contains("\"succeeded\""));
    let out = kitbag(root, &env, &["workflow", "list"]);
    assert!(text(&out).0.contains("Cut a release."), "{}", text(&out).0);
    let out = kitbag(root, &env, &["workflow", "run", "release", "{}"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("inputs.version"), "{}", text(&out).1);
}

/// A cron entry triggers a workflow (issue #39 §3): its command is `kitbag workflow run NAME`,
/// which runs the workflow to its end in that process and exits 0 when it succeeded; the
/// firing's record carries that exit code, and the run is recorded like any other.
#[test]
fn a_cron_entry_triggers_a_workflow_through_kitbag_workflow_run() {
    let d = project();
    let root = d.path();
    let server = |family: &str| family_server(root, family, &[]);
    let cfg = json!({"mcp": {"shell": server("shell")}});
    std::fs::write(root.join("agent.json"), cfg.to_string()).expect("agent.json");
    std::fs::create_dir_all(root.join(".kitbag/workflows")).expect("mkdir");
    std::fs::write(
        root.join(".kitbag/workflows/nightly.json"),
        r#"{"steps": [{"shell": "echo checked > nightly.out"}]}"#,
    )
    .expect("nightly.json");
    let root_arg = root.to_string_lossy().to_string();
    let mut c = McpClient::spawn(
        bin(),
        &[
            "server",
            "cron",
            "--root",
            &root_arg,
            "--test-clock-start",
            "2026-07-01T12:00:58Z",
            "--test-clock-rate",
            "20",
        ],
        root,
        Era::Handshake,
    );
    c.call_ok(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "nightly ran", "recurring": false,
            "timezone": "UTC", "command_timeout_secs": 120,
            "command": format!("'{}' workflow run nightly", bin().display())}),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let r = c.call_ok("cron_runs", json!({})).structured;
        let done = r["runs"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|x| x["command"]["exit_code"].is_i64()));
        if done {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no firing: {r}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let fired = &runs["runs"][0];
    assert_eq!(fired["command"]["exit_code"], 0, "{runs}");
    assert_eq!(
        std::fs::read_to_string(root.join("nightly.out")).expect("the step ran"),
        "checked\n"
    );
    let recorded: Vec<Value> = std::fs::read_dir(root.join(".kitbag/workflow-runs"))
        .expect("runs dir")
        .map(|e| {
            serde_json::from_str(&std::fs::read_to_string(e.expect("entry").path()).expect("r"))
                .expect("json")
        })
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["workflow_name"], "nightly");
    assert_eq!(recorded[0]["status"], "succeeded");
    c.shutdown();
}

/// With a `kitbag daemon` running in the project, a client's `workflow_trigger` is queued for
/// it and the daemon runs it: the run outlives the client that triggered it (issue #39 §3).
#[test]
fn a_running_daemon_takes_the_workflow_runs_clients_trigger() {
    let d = project();
    let root = d.path();
    let cfg = json!({
        "mcp": {"shell": family_server(root, "shell", &[])},
        "workflows": {"slow": {"steps": [{"shell": "sleep 1; echo done > slow.out"}]}}
    });
    std::fs::write(root.join("agent.json"), cfg.to_string()).expect("agent.json");
    let mock = MockLlm::start(vec![]);
    let env = anthropic_env(&mock);
    let daemon = spawn_daemon(root, &env);
    let daemon_pid = daemon.id();
    // The daemon holds the project's run queue once its lock is taken.
    let lock = root.join(".kitbag/workflow-runs/daemon.lock");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let held = std::fs::File::open(&lock).is_ok_and(|f| {
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock).is_err()
        });
        if held {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never took the queue"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = McpClient::spawn_with_env(bin(), &["serve"], root, Era::Handshake, &env_refs);
    let t = c.call_ok("workflow_trigger", json!({"name": "slow"}));
    assert_eq!(t.structured["status"], "queued", "{}", t.structured);
    assert!(
        t.text.contains("queued for this project's kitbag daemon"),
        "{}",
        t.text
    );
    let run_id = t.structured["run_id"].as_str().expect("run_id").to_string();
    // The client goes at once; the run goes on in the daemon.
    c.shutdown();
    let record = root.join(format!(".kitbag/workflow-runs/{run_id}.json"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let run: Value = loop {
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(&record).expect("record")).expect("json");
        if run["status"] != "queued" && run["status"] != "running" {
            break run;
        }
        assert!(std::time::Instant::now() < deadline, "never ended: {run}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["host_pid"], daemon_pid, "the daemon ran it: {run}");
    assert_eq!(
        std::fs::read_to_string(root.join("slow.out")).expect("ran"),
        "done\n"
    );
    let (status, stderr) = stop_daemon(daemon);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("takes the workflow runs clients trigger")
            && stderr.contains("started 1 queued workflow run(s)"),
        "{stderr}"
    );
}
