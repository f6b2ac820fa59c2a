//! The host with fixture servers behind it: dotted names, collisions, garbage, crashes.

use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient, sibling_binary};
use serde_json::{Value, json};

fn kitbag() -> PathBuf {
    let p = sibling_binary("kitbag");
    assert!(
        p.exists(),
        "{} missing: run `cargo test --workspace` (or build -p kitbag) first",
        p.display()
    );
    p
}

fn fixture() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-fixture-server"))
}

fn host(dir: &Path, mcp: Value) -> McpClient {
    let cfg = dir.join("agent.json");
    std::fs::write(&cfg, json!({ "mcp": mcp }).to_string()).expect("w");
    McpClient::spawn(
        &kitbag(),
        &["--config", cfg.to_str().expect("u"), "serve"],
        dir,
        Era::Handshake,
    )
}

fn names(c: &mut McpClient) -> Vec<String> {
    c.list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("n").to_string())
        .collect()
}

#[test]
fn dotted_names_are_offered_sanitized_and_both_spellings_work() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = host(d.path(), json!({"fx": {"command": fixture()}}));
    let list = names(&mut c);
    assert!(list.contains(&"fixture_echo".to_string()), "{list:?}");
    assert!(
        list.iter().all(|n| n
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')),
        "{list:?}"
    );
    let r = c.call("fixture_echo", json!({"x": 1}));
    assert_eq!(
        r.text, "fixture fixture.echo {\"x\":1}",
        "the child gets its own spelling"
    );
    let r = c.call("fixture.echo", json!({"x": 2}));
    assert_eq!(r.text, "fixture fixture.echo {\"x\":2}");
}

#[test]
fn collisions_between_fixtures_follow_config_order_and_prefix_resolves_them() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = host(
        d.path(),
        json!({
            "first": {"command": fixture(), "env": {"FIXTURE_NAME": "first"}},
            "second": {"command": fixture(), "env": {"FIXTURE_NAME": "second"}},
            "third": {"command": fixture(), "env": {"FIXTURE_NAME": "third"}, "prefix": "t_"}
        }),
    );
    let r = c.call("fixture_echo", json!({}));
    assert!(
        r.text.starts_with("first "),
        "the earlier server wins: {}",
        r.text
    );
    let r = c.call("t_fixture_echo", json!({}));
    assert!(r.text.starts_with("third "), "{}", r.text);
    let status = c.call("host_status", json!({}));
    let collisions = status.structured["collisions"]
        .as_array()
        .expect("c")
        .clone();
    assert!(
        collisions.iter().any(|c| c
            .as_str()
            .is_some_and(|s| s.starts_with("second.fixture.echo"))),
        "{collisions:?}"
    );
}

#[test]
fn a_child_that_crashes_mid_call_gives_an_error_not_a_hang() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = host(d.path(), json!({"fx": {"command": fixture()}}));
    let r = c.call("crash", json!({}));
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("exited") || r.text.contains("restarting"),
        "{}",
        r.text
    );
    assert!(
        names(&mut c).contains(&"fixture_echo".to_string()),
        "tools stay listed"
    );
}

#[test]
fn a_child_writing_garbage_does_not_take_the_host_down() {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\n").expect("w");
    let files = json!({"command": kitbag(), "args": ["server", "files", "--root", d.path()]});
    let mut c = host(
        d.path(),
        json!({"files": files, "noisy": {"command": fixture(), "env": {"FIXTURE_GARBAGE": "1"}, "prefix": "n_", "startup_timeout_sec": 5}}),
    );
    // Whatever the noisy child's fate, the host keeps serving the others.
    let r = c.call("file_read", json!({"path": "a.txt"}));
    assert!(!r.is_error, "{}", r.text);
    let status = c.call("host_status", json!({}));
    assert!(!status.is_error);
    assert!(
        c.stdout_garbage().is_empty(),
        "the child's garbage never reaches the host's stdout"
    );
}
