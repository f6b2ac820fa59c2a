//! The agent's sessions on a shared PostgreSQL (`KITBAG_DATABASE_URL`, issue #19): two
//! checkouts of one workspace (two machines of a team) continue one session; another
//! workspace's session of the same name stays apart; nothing is written to `.kitbag/sessions`.

mod agent_common;

use agent_common::*;
use kitbag_testkit::llm_mock::{MockLlm, Reply};
use kitbag_testkit::pg::PgServer;

#[test]
fn two_checkouts_of_one_workspace_continue_one_session_in_the_database() {
    let Some(pg) = PgServer::start() else { return };
    let url = pg.database("agents");
    let (laptop, runner) = (project(), project());
    let mock = MockLlm::start(vec![
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
        Reply::sse(A_TEXT),
    ]);
    let env = |workspace: &str| {
        let mut e = anthropic_env(&mock);
        e.push(("KITBAG_DATABASE_URL", url.clone()));
        e.push(("KITBAG_WORKSPACE", workspace.to_owned()));
        e
    };
    let run = |dir: &std::path::Path, workspace: &str, prompt: &str| {
        let out = kitbag(dir, &env(workspace), &["run", "--session", "s", prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    };
    run(laptop.path(), "team-repo", "first question");
    run(runner.path(), "team-repo", "second question");
    run(runner.path(), "other-repo", "third question");
    assert!(!laptop.path().join(".kitbag/sessions").exists());
    assert!(!runner.path().join(".kitbag/sessions").exists());
    let sent = mock.received();
    let users = |i: usize| -> Vec<String> {
        sent[i].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    // The runner's turn saw the laptop's: one session.
    assert_eq!(users(1), ["first question", "second question"]);
    assert_eq!(
        sent[1].body["messages"][1]["content"][0]["text"],
        "Hello — wörld! 👋"
    );
    // Another workspace's `s` is another session.
    assert_eq!(users(2), ["third question"]);

    let listed = kitbag(runner.path(), &env("team-repo"), &["sessions"]);
    let (stdout, stderr) = text(&listed);
    assert_eq!(listed.status.code(), Some(0), "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("s "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("2 turns") && line.contains("2 model calls"),
        "{line}"
    );
    let shown = text(&kitbag(
        runner.path(),
        &env("team-repo"),
        &["sessions", "s"],
    ))
    .0;
    assert!(
        shown.contains("first question") && shown.contains("second question"),
        "{shown}"
    );
    assert!(!shown.contains("third question"), "{shown}");
    let missing = kitbag(runner.path(), &env("team-repo"), &["sessions", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    // Rows as the files would hold them: user, assistant, usage per turn.
    let rows = pg
        .psql_in(
            "agents",
            "SELECT workspace || ':' || (record->>'role') FROM kitbag_agent_sessions ORDER BY seq",
        )
        .expect("psql");
    let rows: Vec<&str> = rows.split_whitespace().collect();
    assert_eq!(
        rows,
        [
            "team-repo:user",
            "team-repo:assistant",
            "team-repo:usage",
            "team-repo:user",
            "team-repo:assistant",
            "team-repo:usage",
            "other-repo:user",
            "other-repo:assistant",
            "other-repo:usage",
        ]
    );
}
