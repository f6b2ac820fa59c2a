//! The operator inside kitbag's own agent loop (issue #39): a model that calls `ask` or
//! `form` in `kitbag chat` has the form asked on the terminal (here: the piped lines after the
//! prompt), each field checked as typed, and the answers reach the model as the tool's result.

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

/// A project whose agent.json runs the issues server (which offers `ask` and `form`).
fn operator_project() -> tempfile::TempDir {
    let d = project();
    let issues = json!({"command": bin(), "args": ["server", "issues", "--root", d.path()]});
    let cfg = json!({"mcp": {"issues": issues}});
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

fn chat(dir: &std::path::Path, mock: &MockLlm, input: &str) -> (String, String) {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .args(["chat", "--session", "ops"])
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in anthropic_env(mock) {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("chat");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut stdin, input.as_bytes()).expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    text(&out)
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
