//! What the agent loop lets through (issue #42), each test written as the attack: a session
//! file whose last line a crash tore.

mod agent_common;

use std::path::{Path, PathBuf};

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Reply};
use serde_json::Value;

fn session_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(".kitbag/sessions").join(format!("{name}.jsonl"))
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
