//! The operator inside kitbag's own agent loop (issue #39): a model that calls `ask` or
//! `form` in `kitbag chat` has the form asked on the terminal (here: the piped lines after the
//! prompt), each field checked as typed, and the answers reach the model as the tool's result.
//! In `kitbag run` nobody can be asked: the session stops at the question (exit code 3) and
//! `kitbag sessions answer` records the answer and finishes the turn; a `checkpoint` stops
//! it the same way, in state `checkpoint`.

mod agent_common;

use std::process::Command;

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Reply};
use serde_json::{Value, json};

fn ask_call() -> Value {
    json!({"questions": [
        {"id": "target", "title": "Deploy where?", "options": ["staging", "production"]},
        {"id": "why", "title": "Why now?"}
    ]})
}

/// A project whose agent.json runs the issues server (which offers `ask` and `form`) and
/// the files server.
fn operator_project() -> tempfile::TempDir {
    let d = project();
    let server = |family: &str| family_server(d.path(), family, &[]);
    let cfg = json!({"mcp": {"issues": server("issues"), "files": server("files")}});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("agent.json");
    d
}

/// The tool results the model was sent in its last request, as text.
fn last_results(mock: &MockLlm) -> Vec<String> {
    let received = mock.received();
    let last = received.last().expect("a request");
    last.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"][0]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// `kitbag ARGS` in `dir` with `env`, `input` on its stdin: its output, once it exited 0.
fn fed(
    dir: &std::path::Path,
    env: &[(&str, String)],
    args: &[&str],
    input: &str,
) -> (String, String) {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .args(args)
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("kitbag");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut stdin, input.as_bytes()).expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out).1);
    text(&out)
}

fn chat(dir: &std::path::Path, mock: &MockLlm, input: &str) -> (String, String) {
    fed(
        dir,
        &anthropic_env(mock),
        &["chat", "--session", "ops"],
        input,
    )
}

#[test]
fn chat_asks_the_operator_on_the_terminal_and_the_model_gets_the_answers() {
    let d = operator_project();
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse("toolu_1", "ask", &ask_call())),
        Reply::sse(text_sse("Deploying to production.")),
    ]);
    // The prompt, then the answers: an option that is not offered (asked again), its number,
    // and free text.
    let (stdout, stderr) = chat(
        d.path(),
        &mock,
        "Ship it?\n7\n2\nthe freeze ends today\n/exit\n",
    );
    assert_eq!(stdout.trim(), "Deploying to production.", "{stderr}");
    assert!(
        stderr.contains("[issues asks] The agent has 2 questions for you."),
        "{stderr}"
    );
    assert!(
        stderr.contains("Deploy where? (1 staging, 2 production)"),
        "{stderr}"
    );
    assert!(stderr.contains("\"7\" is not one of"), "{stderr}");
    let results = last_results(&mock);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("target: \"production\"")
            && results[0].contains("why: \"the freeze ends today\""),
        "{results:?}"
    );
}

#[test]
fn chat_declines_and_the_model_is_told_so() {
    let d = operator_project();
    let form = json!({"message": "Release", "fields": [
        {"name": "version", "label": "Version", "required": true}
    ]});
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse("toolu_1", "form", &form)),
        Reply::sse(text_sse("Understood.")),
    ]);
    let (stdout, stderr) = chat(d.path(), &mock, "Release?\n/decline\n/exit\n");
    assert_eq!(stdout.trim(), "Understood.", "{stderr}");
    let results = last_results(&mock);
    assert!(
        results[0].contains("declined"),
        "the tool result says the operator declined: {results:?}"
    );
}

/// One Anthropic stream asking for two tool calls at once.
fn two_calls_sse(first: (&str, &str, &Value), second: (&str, &str, &Value)) -> String {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}),
    ];
    for (i, (id, name, input)) in [first, second].into_iter().enumerate() {
        events.push(json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}));
        events.push(json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":input.to_string()}}));
        events.push(json!({"type":"content_block_stop","index":i}));
    }
    events.push(json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}));
    events.push(json!({"type":"message_stop"}));
    anthropic_stream(&events)
}

#[test]
fn run_stops_at_the_question_and_sessions_answer_finishes_the_turn() {
    let d = operator_project();
    let mock = MockLlm::start(vec![
        Reply::sse(two_calls_sse(
            ("toolu_r", "file_read", &json!({"path": "a.txt"})),
            ("toolu_a", "ask", &ask_call()),
        )),
        Reply::sse(text_sse("Deploying to staging.")),
    ]);
    let env = anthropic_env(&mock);
    // The run stops at the question: exit code 3, the question and how to answer on stdout.
    let out = kitbag(d.path(), &env, &["run", "--session", "s", "Ship it?"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "session s is waiting for the operator: issues asks: The agent has 2 questions for you."
        ) && stdout.contains("Deploy where? (1 staging, 2 production)")
            && stdout.contains("kitbag sessions answer s KEY=VALUE"),
        "{stdout}"
    );
    let records = session(d.path(), "s");
    let last = records.last().expect("records");
    assert_eq!(last["role"], "waiting", "{records:#?}");
    assert_eq!(
        last["pending"],
        json!(["toolu_a"]),
        "only the asking call runs again"
    );
    assert_eq!(last["done"][0]["tool_use_id"], "toolu_r");

    // A new prompt on a waiting session is refused, saying how to answer.
    let out = kitbag(d.path(), &env, &["run", "--session", "s", "Something else"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("is waiting for the operator"),
        "{}",
        text(&out).1
    );
    // An answer outside the form is refused and changes nothing.
    let out = kitbag(
        d.path(),
        &env,
        &["sessions", "answer", "s", "target=9", "why=x"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("\"9\" is not one of"),
        "{}",
        text(&out).1
    );
    assert_eq!(session(d.path(), "s").len(), records.len());
    assert_eq!(mock.received().len(), 1);

    // The answer resumes the turn: the asking call runs again and gets it; the other call's
    // result is the one kept from before.
    let out = kitbag(
        d.path(),
        &env,
        &["sessions", "answer", "s", "target=1", "why=the freeze ends"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "Deploying to staging.", "{stderr}");
    assert!(
        !stderr.contains("[tool] file_read"),
        "file_read ran again: {stderr}"
    );
    let results = last_results(&mock);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("alpha"), "{results:?}");
    assert!(
        results[1].contains("target: \"staging\"") && results[1].contains("the freeze ends"),
        "{results:?}"
    );
    let roles: Vec<String> = session(d.path(), "s")
        .iter()
        .map(|r| r["role"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        roles.ends_with(&[
            "waiting".into(),
            "answer".into(),
            "tool_result".into(),
            "assistant".into(),
            "usage".into()
        ]),
        "{roles:?}"
    );
}

/// A `checkpoint` in `kitbag run` (issue #39 §2): the session stops at the sign-off in state
/// `checkpoint`; `kitbag sessions answer` signs it off and the turn goes on — with one
/// checkpoint, not two (the resumed call finds the one it made).
#[test]
fn run_stops_at_a_checkpoint_and_the_sign_off_resumes_it() {
    let d = operator_project();
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse(
            "toolu_w",
            "file_write",
            &json!({"path": "draft.md", "content": "# Draft\n"}),
        )),
        Reply::sse(tool_call_sse(
            "toolu_c",
            "checkpoint",
            &json!({"reason": "first draft", "summary": "the outline"}),
        )),
        Reply::sse(text_sse("Draft signed off.")),
    ]);
    let env = anthropic_env(&mock);
    let out = kitbag(d.path(), &env, &["run", "--session", "s", "Write a draft"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("session s stopped at checkpoint 1 for the operator's sign-off")
            && stdout.contains("first draft")
            && stdout.contains("draft.md")
            && stdout.contains("kitbag sessions answer s KEY=VALUE"),
        "{stdout}"
    );
    let listed = text(&kitbag(d.path(), &env, &["sessions"])).0;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("s ") && l.contains(" checkpoint ")),
        "{listed}"
    );

    let out = kitbag(
        d.path(),
        &env,
        &[
            "sessions",
            "answer",
            "s",
            "decision=approve",
            "comment=ship it",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "Draft signed off.", "{stderr}");
    let results = last_results(&mock);
    assert!(
        results.iter().any(
            |r| r.contains("checkpoint 1 (1 file): the operator approved") && r.contains("ship it")
        ),
        "{results:?}"
    );
    let journal = std::fs::read_to_string(d.path().join(".kitbag/checkpoints/journal.jsonl"))
        .expect("journal");
    let lines: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "checkpoint").count(),
        1,
        "{journal}"
    );
    assert_eq!(
        lines.last().expect("lines")["decision"],
        "approve",
        "{journal}"
    );
    let listed = text(&kitbag(d.path(), &env, &["sessions"])).0;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("s ") && l.contains(" idle ")),
        "{listed}"
    );
}

#[test]
fn a_declined_question_resumes_with_the_refusal() {
    let d = operator_project();
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse("toolu_1", "ask", &ask_call())),
        Reply::sse(text_sse("Not deploying.")),
    ]);
    let env = anthropic_env(&mock);
    let out = kitbag(d.path(), &env, &["run", "--session", "s", "Ship it?"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).1);
    let out = kitbag(d.path(), &env, &["sessions", "answer", "s", "--decline"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert_eq!(text(&out).0.trim(), "Not deploying.");
    assert!(
        last_results(&mock)[0].contains("declined"),
        "{:?}",
        last_results(&mock)
    );
}

#[test]
fn the_daemon_stops_a_firing_at_the_question_and_answering_finishes_it() {
    let d = project();
    // kitbag-cron on a test clock: a minute passes every real second.
    let server = |family: &str, extra: &[&str]| family_server(d.path(), family, extra);
    let cfg = json!({"mcp": {
        "issues": server("issues", &[]),
        "cron": server("cron", &["--test-clock-start", "2026-03-08T06:58:58Z", "--test-clock-rate", "60"])
    }});
    std::fs::write(d.path().join("agent.json"), cfg.to_string()).expect("w");
    let entry = json!({"schedule": "* * * * *", "message": "ship?", "session": "nightly", "catch_up": false});
    let out = kitbag(d.path(), &[], &["call", "cron_create", &entry.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let mock = MockLlm::start(vec![
        Reply::sse(tool_call_sse("toolu_1", "ask", &ask_call())),
        Reply::sse(text_sse("Shipped to staging.")),
    ]);
    let daemon = spawn_daemon(d.path(), &anthropic_env(&mock));
    let file = d.path().join(".kitbag/sessions/nightly.jsonl");
    let waiting = || {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .is_some_and(|r| r["role"] == "waiting")
    };
    kitbag_testkit::wait_until("the firing's session waits", 20, waiting);
    // Later firings into the waiting session are refused without a model call.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (status, stderr) = stop_daemon(daemon);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .matches("session nightly is waiting for the operator")
            .count()
            >= 2,
        "the pause, then a refused firing: {stderr}"
    );
    assert_eq!(mock.received().len(), 1, "{stderr}");
    let out = kitbag(
        d.path(),
        &anthropic_env(&mock),
        &[
            "sessions",
            "answer",
            "nightly",
            "target=staging",
            "why=it is ready",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert_eq!(text(&out).0.trim(), "Shipped to staging.");
    assert!(last_results(&mock)[0].contains("target: \"staging\""));
}

#[test]
fn kitbag_call_asks_the_person_at_its_stdin() {
    let d = operator_project();
    let call = ask_call().to_string();
    let (stdout, stderr) = fed(
        d.path(),
        &[],
        &["call", "ask", &call],
        "production\nbecause\n",
    );
    assert!(
        stderr.contains("Deploy where? (1 staging, 2 production)"),
        "{stderr}"
    );
    assert!(
        stdout.contains("target: \"production\"") && stdout.contains("why: \"because\""),
        "{stdout}"
    );
}
