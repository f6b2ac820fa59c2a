//! Drive the real `kitbag-cron` binary over stdio: tools in both eras, bad input, the
//! catalog, and real firings delivered as notifications (with a scaled test clock). Every
//! store-level test runs on both backends (`sqlite::name`, `postgres::name`) with the same
//! assertions; the catalog, capabilities, the `cron.json` import (a file of the SQLite store)
//! and command containment (no store involved) run once, on SQLite.

mod common;
use common::Backend;

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::on_both_backends;
use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::{Value, json};

use common::bin;

fn spawn(dir: &Path, era: Era, extra: &[&str]) -> McpClient {
    let mut args = vec!["--root", dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    McpClient::spawn_with_env(bin(), &args, dir, era, &[("TZ", "UTC")])
}

/// Collect notifications with `method` until `pred` holds on them (or panic after `secs`).
fn wait_for(
    c: &McpClient,
    seen: &mut Vec<Value>,
    method: &str,
    secs: u64,
    pred: impl Fn(&[Value]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        seen.extend(
            c.take_notifications()
                .into_iter()
                .filter(|n| n["method"] == method),
        );
        if pred(seen) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {method}; got {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

on_both_backends!(
    tools_handshake_era,
    tools_modern_era,
    bad_input_is_typed_and_changes_nothing,
    fires_and_delivers_handshake_era,
    fires_and_delivers_modern_era,
    restart_makes_up_one_missed_run_only,
    two_processes_never_fire_the_same_run_twice,
    one_shot_disables_itself_and_disabled_entries_do_not_fire,
    command_action_is_recorded_and_killed_with_its_children_on_timeout,
    no_commands_flag_refuses_command_entries,
    read_only_server_changes_nothing,
    list_and_create_hold_the_result_budget,
);

fn runs(c: &mut McpClient, id: &str) -> Vec<Value> {
    let r = c.call("cron_runs", json!({"id": id, "limit": 500}));
    assert!(!r.is_error, "{:?}", r.raw);
    r.structured["runs"].as_array().expect("runs").clone()
}

fn tools_in_era(b: &Backend, era: Era) {
    let mut c = b.spawn(era, &[]);
    assert_eq!(c.server_info["name"], "kitbag-cron");
    let names: Vec<String> = c
        .list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(
        names,
        [
            "cron_create",
            "cron_delete",
            "cron_disable",
            "cron_enable",
            "cron_list",
            "cron_runs",
            "cron_status"
        ]
    );
    let r = c.call(
        "cron_create",
        json!({"schedule": "*/5 * * * *", "message": "Check the web server", "session": "health-check", "timezone": "Europe/Berlin"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let e = &r.structured["entry"];
    assert_eq!(e["id"], "cron-1");
    assert_eq!(e["session"], "health-check");
    assert_eq!(e["timezone"], "Europe/Berlin");
    assert!(e["next_fire"].as_str().expect("next").contains('+'), "{e}");
    assert!(r.text.starts_with("created cron-1"), "{}", r.text);

    let r = c.call(
        "cron_create",
        json!({"schedule": "@daily", "message": "digest", "enabled": false}),
    );
    assert_eq!(r.structured["entry"]["id"], "cron-2");
    assert_eq!(
        r.structured["entry"]["session"], "cron-2",
        "session defaults to the id"
    );
    assert_eq!(
        r.structured["entry"]["timezone"], "UTC",
        "the machine's zone (TZ)"
    );
    assert!(r.structured["entry"].get("next_fire").is_none());

    // Each stored entry is the seed's shape (one JSON row in `.kitbag/cron.db`).
    let rows = b.dump();
    let first = rows[0].strip_prefix("cron-1 ").expect("cron-1 first");
    let stored: Value = serde_json::Deserializer::from_str(first)
        .into_iter::<Value>()
        .next()
        .expect("a row")
        .expect("json");
    assert_eq!(stored["id"], "cron-1");
    assert_eq!(stored["schedule"], "*/5 * * * *");
    assert_eq!(stored["message"], "Check the web server");
    assert_eq!(stored["enabled"], true);

    let r = c.call("cron_list", json!({}));
    assert_eq!(r.structured["total"], 2);
    assert!(
        r.text.contains("cron-1 [on]") && r.text.contains("cron-2 [off]"),
        "{}",
        r.text
    );
    let r = c.call("cron_list", json!({"enabled_only": true}));
    assert_eq!(r.structured["total"], 1);
    let r = c.call("cron_list", json!({"limit": 1}));
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["next_offset"], 1);

    let s = c.call("cron_status", json!({}));
    assert_eq!(s.structured["enabled_entries"], 1);
    assert_eq!(s.structured["keepalive_needed"], true);
    assert_eq!(s.structured["next_id"], "cron-1");
    assert_eq!(s.structured["client_connected"], true);

    let r = c.call("cron_disable", json!({"id": "cron-1"}));
    assert_eq!(r.structured["changed"], true);
    assert_eq!(r.structured["entry"]["enabled"], false);
    let r = c.call("cron_disable", json!({"id": "cron-1"}));
    assert_eq!(r.structured["changed"], false);
    let s = c.call("cron_status", json!({}));
    assert_eq!(s.structured["keepalive_needed"], false);
    let r = c.call("cron_enable", json!({"id": "cron-2"}));
    assert_eq!(r.structured["entry"]["enabled"], true);
    assert!(r.structured["entry"]["next_fire"].is_string());

    let r = c.call("cron_delete", json!({"id": "cron-1"}));
    assert_eq!(r.structured["deleted"], "cron-1");
    let r = c.call("cron_delete", json!({"id": "cron-1"}));
    assert_eq!(r.error_code(), Some("not_found"));
    assert_eq!(r.structured["error"]["detail"]["field"], "id");
    let r = c.call(
        "cron_create",
        json!({"schedule": "@hourly", "message": "x"}),
    );
    assert_eq!(r.structured["entry"]["id"], "cron-3", "ids are not reused");

    let r = c.call("cron_runs", json!({}));
    assert!(!r.is_error);
    assert_eq!(r.structured["total"], 0);
    assert!(
        c.stdout_garbage().is_empty(),
        "stdout must carry only JSON-RPC"
    );
    assert_eq!(c.shutdown(), Some(0));
}

fn tools_handshake_era(b: &Backend) {
    tools_in_era(b, Era::Handshake);
}

fn tools_modern_era(b: &Backend) {
    tools_in_era(b, Era::Modern);
}

fn bad_input_is_typed_and_changes_nothing(b: &Backend) {
    let mut c = b.spawn(Era::Handshake, &[]);
    // Disabled: an enabled entry fires when the test crosses its hour, and the store changes
    // for that (seen at 20:00:00 in CI), not for the bad input.
    let r = c.call(
        "cron_create",
        json!({"schedule": "@hourly", "message": "keep", "enabled": false}),
    );
    assert!(!r.is_error);
    let before = b.dump();
    for (tool, args, field) in [
        (
            "cron_create",
            json!({"schedule": "0 */5 * * * *", "message": "m"}),
            "schedule",
        ),
        (
            "cron_create",
            json!({"schedule": "*/0 * * * *", "message": "m"}),
            "schedule",
        ),
        (
            "cron_create",
            json!({"schedule": "61 * * * *", "message": "m"}),
            "schedule",
        ),
        (
            "cron_create",
            json!({"schedule": "* 25 * * *", "message": "m"}),
            "schedule",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * 13 *", "message": "m"}),
            "schedule",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "m", "timezone": "Nowhere/Special"}),
            "timezone",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "   "}),
            "message",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "m", "session": "a b"}),
            "session",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "m", "command_timeout_secs": 5}),
            "command_timeout_secs",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "m", "command": "true", "command_timeout_secs": 0}),
            "command_timeout_secs",
        ),
        (
            "cron_create",
            json!({"schedule": "* * * * *", "message": "m", "sched": 1}),
            "sched",
        ),
        ("cron_create", json!({"message": "m"}), "schedule"),
        ("cron_list", json!({"limit": 0}), "limit"),
        ("cron_runs", json!({"limit": 100000}), "limit"),
        ("cron_enable", json!({"id": "cron-99"}), "id"),
        ("cron_disable", json!({"id": "nope"}), "id"),
        ("cron_delete", json!({"id": "cron-42"}), "id"),
        ("cron_runs", json!({"id": "cron-42"}), "id"),
    ] {
        let r = c.call(tool, args.clone());
        assert!(r.is_error, "{tool} {args} was accepted");
        let code = r.error_code().expect("code");
        assert!(
            code == "invalid_params" || code == "not_found",
            "{tool} {args}: {code}"
        );
        assert_eq!(
            r.structured["error"]["detail"]["field"], field,
            "{tool} {args}: {}",
            r.text
        );
        assert_eq!(b.dump(), before, "{tool} {args} changed the store");
    }
}

#[test]
fn catalog() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = spawn(d.path(), Era::Handshake, &[]);
    let path = workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/cron/tools.json");
    assert_catalog_matches(&mut c, &path);
}

fn initialize_capabilities(c: &mut McpClient) -> Value {
    let r = c.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    r["result"]["capabilities"].clone()
}

#[test]
fn capabilities_declare_the_notifications() {
    let d = tempfile::tempdir().expect("tmp");
    // A second initialize on a live session is refused by rmcp, so read the capabilities
    // through server/discover (modern era) instead.
    let mut c = spawn(d.path(), Era::Modern, &["--claude-channel"]);
    let r = c.request("server/discover", json!({}));
    let caps = if r["result"]["capabilities"].is_object() {
        r["result"]["capabilities"].clone()
    } else {
        initialize_capabilities(&mut c)
    };
    assert_eq!(
        caps["experimental"]["kitbag/cron"]["notification"], "notifications/kitbag/cron_fired",
        "{caps}"
    );
    assert!(caps["experimental"]["claude/channel"].is_object(), "{caps}");
    let mut plain = spawn(d.path(), Era::Modern, &[]);
    let r = plain.request("server/discover", json!({}));
    assert!(
        r["result"]["capabilities"]["experimental"]["claude/channel"].is_null(),
        "{r}"
    );
}

/// An every-minute entry on a clock running 20× fast fires and reaches the client.
fn fires_in_era(b: &Backend, era: Era) {
    let mut c = b.spawn(
        era,
        &[
            "--claude-channel",
            "--test-clock-start",
            "2026-03-08T06:58:56Z",
            "--test-clock-rate",
            "20",
        ],
    );
    let r = c.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "tick", "session": "ticks", "timezone": "America/New_York"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let mut fired = Vec::new();
    wait_for(&c, &mut fired, "notifications/kitbag/cron_fired", 30, |n| {
        n.len() >= 2
    });
    let p = &fired[0]["params"];
    assert_eq!(p["id"], "cron-1");
    assert_eq!(p["session"], "ticks");
    assert_eq!(p["message"], "tick");
    assert_eq!(p["scheduled_at"], "2026-03-08T06:59:00+00:00");
    assert_eq!(p["outcome"], "fired");
    assert!(p["fired_at"].as_str().expect("fired_at") >= "2026-03-08T06:59:00");
    assert_eq!(
        fired[1]["params"]["scheduled_at"],
        "2026-03-08T07:00:00+00:00"
    );
    let mut channel = Vec::new();
    wait_for(&c, &mut channel, "notifications/claude/channel", 10, |n| {
        !n.is_empty()
    });
    assert_eq!(channel[0]["params"]["content"], "tick");
    assert_eq!(channel[0]["params"]["meta"]["cron_id"], "cron-1");
    assert_eq!(channel[0]["params"]["meta"]["session"], "ticks");
    let list = c.call("cron_list", json!({}));
    assert!(list.structured["entries"][0]["last_run"]["outcome"] == "fired");
    let history = runs(&mut c, "cron-1");
    assert!(history.len() >= 2);
    assert!(
        history
            .iter()
            .all(|r| r["delivered"] == true && r["outcome"] == "fired")
    );
    assert!(c.stdout_garbage().is_empty());
}

fn fires_and_delivers_handshake_era(b: &Backend) {
    fires_in_era(b, Era::Handshake);
}

fn fires_and_delivers_modern_era(b: &Backend) {
    fires_in_era(b, Era::Modern);
}

fn restart_makes_up_one_missed_run_only(be: &Backend) {
    let mut a = be.spawn(
        Era::Handshake,
        &["--test-clock-start", "2026-01-01T10:00:30Z"],
    );
    let r = a.call(
        "cron_create",
        json!({"schedule": "0 * * * *", "message": "hourly", "timezone": "UTC"}),
    );
    assert_eq!(r.structured["entry"]["id"], "cron-1");
    let r = a.call(
        "cron_create",
        json!({"schedule": "0 * * * *", "message": "no catch-up", "timezone": "UTC", "catch_up": false}),
    );
    assert_eq!(r.structured["entry"]["id"], "cron-2");
    assert_eq!(a.shutdown(), Some(0));

    // Down from 10:00:30 to 13:30: 11:00, 12:00 and 13:00 were missed.
    let mut b = be.spawn(
        Era::Handshake,
        &["--test-clock-start", "2026-01-01T13:30:00Z"],
    );
    let mut fired = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (one, two) = loop {
        let one = runs(&mut b, "cron-1");
        let two = runs(&mut b, "cron-2");
        if !one.is_empty() && !two.is_empty() {
            break (one, two);
        }
        assert!(Instant::now() < deadline, "no start-up run recorded");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500));
    let one_again = runs(&mut b, "cron-1");
    assert_eq!(
        one_again.len(),
        1,
        "exactly one made-up run, not a burst: {one_again:?}"
    );
    assert_eq!(one[0]["outcome"], "caught_up");
    assert_eq!(one[0]["scheduled_at"], "2026-01-01T13:00:00Z");
    assert_eq!(two.len(), 1);
    assert_eq!(two[0]["outcome"], "missed");
    assert_eq!(two[0]["delivered"], false);
    assert_eq!(
        one[0]["delivered"], true,
        "the start-up pass waits for the client"
    );
    wait_for(&b, &mut fired, "notifications/kitbag/cron_fired", 10, |n| {
        !n.is_empty()
    });
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["params"]["id"], "cron-1");
    assert_eq!(fired[0]["params"]["outcome"], "caught_up");
    // A third start does not make it up again.
    assert_eq!(b.shutdown(), Some(0));
    let mut c = be.spawn(
        Era::Handshake,
        &["--test-clock-start", "2026-01-01T13:40:00Z"],
    );
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(runs(&mut c, "cron-1").len(), 1);
}

fn two_processes_never_fire_the_same_run_twice(be: &Backend) {
    let clock = [
        "--test-clock-start",
        "2026-05-01T08:00:50Z",
        "--test-clock-rate",
        "30",
    ];
    let mut a = be.spawn(Era::Handshake, &clock);
    let mut b = be.spawn(Era::Handshake, &clock);
    // Both clients connected (tool calls keep the peer) before anything is due.
    b.call("cron_status", json!({}));
    let r = a.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "once per minute", "timezone": "UTC"}),
    );
    assert!(!r.is_error);
    std::thread::sleep(Duration::from_secs(8)); // ≈ 4 virtual minutes
    let got_a: Vec<Value> = a
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/kitbag/cron_fired")
        .collect();
    let got_b: Vec<Value> = b
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/kitbag/cron_fired")
        .collect();
    let mut scheduled: Vec<String> = got_a
        .iter()
        .chain(&got_b)
        .map(|n| n["params"]["scheduled_at"].as_str().expect("s").to_string())
        .collect();
    let total = scheduled.len();
    scheduled.sort();
    scheduled.dedup();
    assert!(total >= 3, "expected several firings, got {total}");
    assert_eq!(
        scheduled.len(),
        total,
        "a run was delivered twice: {got_a:?} {got_b:?}"
    );
    let history = runs(&mut a, "cron-1");
    let mut hs: Vec<&str> = history
        .iter()
        .map(|r| r["scheduled_at"].as_str().expect("s"))
        .collect();
    let n = hs.len();
    hs.sort();
    hs.dedup();
    assert_eq!(hs.len(), n, "a run was recorded twice");
}

fn one_shot_disables_itself_and_disabled_entries_do_not_fire(b: &Backend) {
    let mut c = b.spawn(
        Era::Handshake,
        &[
            "--test-clock-start",
            "2026-02-28T23:58:57Z",
            "--test-clock-rate",
            "20",
        ],
    );
    c.call("cron_create", json!({"schedule": "* * * * *", "message": "just once", "recurring": false, "timezone": "UTC"}));
    c.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "paused", "enabled": false, "timezone": "UTC"}),
    );
    let mut fired = Vec::new();
    wait_for(&c, &mut fired, "notifications/kitbag/cron_fired", 20, |n| {
        !n.is_empty()
    });
    std::thread::sleep(Duration::from_secs(7)); // two more virtual minutes
    fired.extend(
        c.take_notifications()
            .into_iter()
            .filter(|n| n["method"] == "notifications/kitbag/cron_fired"),
    );
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["params"]["id"], "cron-1");
    let l = c.call("cron_list", json!({}));
    assert_eq!(
        l.structured["entries"][0]["enabled"], false,
        "the one-shot disabled itself"
    );
    assert!(runs(&mut c, "cron-2").is_empty());
    // Enabling the paused entry makes it fire from its next minute on.
    c.call("cron_enable", json!({"id": "cron-2"}));
    let mut more = Vec::new();
    wait_for(&c, &mut more, "notifications/kitbag/cron_fired", 20, |n| {
        !n.is_empty()
    });
    assert_eq!(more[0]["params"]["id"], "cron-2");
    assert_eq!(
        more[0]["params"]["outcome"], "fired",
        "no make-up run for time spent disabled"
    );
}

/// A `cron.json` written by hand (the seed's shape, as earlier versions kept their store) is
/// imported at once — unparsable entries kept as written — and kept as `cron.json.bak`.
#[test]
fn hand_written_cron_json_is_imported() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = spawn(
        d.path(),
        Era::Handshake,
        &[
            "--test-clock-start",
            "2026-07-01T12:00:10Z",
            "--test-clock-rate",
            "20",
        ],
    );
    c.call("cron_status", json!({}));
    std::fs::create_dir_all(d.path().join(".kitbag")).expect("dir");
    // The seed's entry shape, written by hand (a bare array), plus an entry that does not parse.
    let text = r#"[{"id": "cron-1", "schedule": "* * * * *", "message": "by hand", "session": "manual", "enabled": true},
            {"schedule": "broken"}]"#;
    std::fs::write(d.path().join(".kitbag/cron.json"), text).expect("write");
    let mut fired = Vec::new();
    wait_for(&c, &mut fired, "notifications/kitbag/cron_fired", 20, |n| {
        !n.is_empty()
    });
    assert_eq!(fired[0]["params"]["message"], "by hand");
    assert_eq!(fired[0]["params"]["session"], "manual");
    let l = c.call("cron_list", json!({}));
    assert_eq!(l.structured["total"], 1);
    assert_eq!(l.structured["problems"][0]["index"], 1);
    // The unparsable entry is kept as written; the file itself is kept as a backup.
    let rows = common::dump_sqlite(d.path());
    assert!(rows[1].contains(r#"{"schedule":"broken"}"#), "{rows:?}");
    assert!(!d.path().join(".kitbag/cron.json").exists());
    assert_eq!(
        std::fs::read_to_string(d.path().join(".kitbag/cron.json.bak")).expect("backup"),
        text
    );
}

/// Seed 001's cron entry, exactly as the seed prints it.
const SEED_001_ENTRY: &str = r#"{
  "id": "cron-1",
  "schedule": "*/5 * * * *",
  "message": "Check if the web server at http://localhost:8080 is responding. If not, restart it.",
  "session": "health-check",
  "enabled": true
}"#;

/// The seed's entry written alone into `.kitbag/cron.json` (one object, not an array) is
/// imported as one entry with its id; a file that holds no entries kitbag can read stays
/// where it is and every tool, `cron_status` included, names it and says what to write.
#[test]
fn seed_cron_entry_as_one_object_in_cron_json_is_imported() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = spawn(d.path(), Era::Handshake, &[]);
    std::fs::create_dir_all(d.path().join(".kitbag")).expect("dir");
    let file = d.path().join(".kitbag/cron.json");
    std::fs::write(&file, SEED_001_ENTRY).expect("write");
    let l = c.call("cron_list", json!({}));
    assert!(!l.is_error, "{}", l.text);
    assert_eq!(l.structured["total"], 1, "{}", l.text);
    let e = &l.structured["entries"][0];
    assert_eq!(e["id"], "cron-1");
    assert_eq!(e["session"], "health-check");
    assert_eq!(e["schedule"], "*/5 * * * *");
    assert!(!file.exists());
    assert_eq!(
        std::fs::read_to_string(d.path().join(".kitbag/cron.json.bak")).expect("backup"),
        SEED_001_ENTRY
    );
    // The next created entry does not take the imported id.
    let r = c.call(
        "cron_create",
        json!({"schedule": "@daily", "message": "digest"}),
    );
    assert_eq!(r.structured["entry"]["id"], "cron-2", "{}", r.text);

    // Something that is neither a store nor an entry is not imported, not moved, and reported.
    let odd = r#"{"jobs": [{"every": "5m", "say": "hi"}]}"#;
    std::fs::write(&file, odd).expect("write");
    let s = c.call("cron_status", json!({}));
    assert_eq!(s.error_code(), Some("io_error"), "{}", s.text);
    assert!(
        s.text.contains("cron.json")
            && s.text.contains("one entry object")
            && s.text.contains("not imported"),
        "{}",
        s.text
    );
    assert_eq!(std::fs::read_to_string(&file).expect("kept in place"), odd);
    assert!(!d.path().join(".kitbag/cron.json.bak.2").exists());
    std::fs::remove_file(&file).expect("rm");

    // An entry without an id is kept as written and reported, with what to write.
    std::fs::write(&file, r#"[{"schedule": "@hourly", "message": "no id"}]"#).expect("write");
    let s = c.call("cron_status", json!({}));
    assert!(!s.is_error, "{}", s.text);
    assert_eq!(s.structured["unparsable_entries"], 1, "{}", s.text);
    assert!(s.text.contains("1 unparsable entries"), "{}", s.text);
    let l = c.call("cron_list", json!({}));
    let problem = l.structured["problems"][0]["error"]
        .as_str()
        .expect("problem");
    assert!(
        problem.contains("`id` is missing") && problem.contains("\"cron-7\""),
        "{problem}"
    );
}

/// Seed 001's entry as `cron_create` arguments: its `id` is kept; a taken or malformed id is
/// refused with what to write instead.
#[test]
fn seed_cron_entry_with_id_is_created_with_that_id() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = spawn(d.path(), Era::Handshake, &[]);
    let seed: Value = serde_json::from_str(SEED_001_ENTRY).expect("seed json");
    let r = c.call("cron_create", seed.clone());
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["entry"]["id"], "cron-1");
    assert_eq!(r.structured["entry"]["session"], "health-check");
    let again = c.call("cron_create", seed);
    assert_eq!(again.error_code(), Some("invalid_params"), "{}", again.text);
    assert_eq!(again.structured["error"]["detail"]["field"], "id");
    assert!(
        again.text.contains("exists already") && again.text.contains("omit `id`"),
        "{}",
        again.text
    );
    let bad = c.call(
        "cron_create",
        json!({"id": "cron 2", "schedule": "@daily", "message": "m"}),
    );
    assert_eq!(
        bad.structured["error"]["detail"]["field"], "id",
        "{}",
        bad.text
    );
    assert!(bad.text.contains("omit `id`"), "{}", bad.text);
    // Without an id the next free one is handed out.
    let r = c.call("cron_create", json!({"schedule": "@daily", "message": "m"}));
    assert_eq!(r.structured["entry"]["id"], "cron-2", "{}", r.text);
}

fn command_action_is_recorded_and_killed_with_its_children_on_timeout(b: &Backend) {
    let mut c = b.spawn(
        Era::Handshake,
        &[
            "--test-clock-start",
            "2026-07-01T12:00:58Z",
            "--test-clock-rate",
            "20",
        ],
    );
    let r = c.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "stuck job", "recurring": false, "timezone": "UTC",
               "command": "sleep 300 & echo $! > child.pid; echo started; sleep 300", "command_timeout_secs": 1}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "quick job", "recurring": false, "timezone": "UTC",
               "command": "echo hello from $KITBAG_CRON_ID; exit 4"}),
    );
    assert!(!r.is_error);
    let mut fired = Vec::new();
    wait_for(&c, &mut fired, "notifications/kitbag/cron_fired", 30, |n| {
        n.len() >= 2
    });
    let quick = fired
        .iter()
        .find(|n| n["params"]["id"] == "cron-2")
        .expect("quick");
    assert_eq!(quick["params"]["command"]["exit_code"], 4);
    assert!(
        quick["params"]["command"]["output_tail"]
            .as_str()
            .expect("tail")
            .contains("hello from cron-2")
    );
    let stuck = fired
        .iter()
        .find(|n| n["params"]["id"] == "cron-1")
        .expect("stuck");
    assert_eq!(stuck["params"]["command"]["status"], "timed_out");
    let pid: u32 = std::fs::read_to_string(b.dir.path().join("child.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("n");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !kitbag_testkit::process_alive(pid),
        "the command's child {pid} survived"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let history = loop {
        let h = runs(&mut c, "cron-1");
        if !h.is_empty() || Instant::now() > deadline {
            break h;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(history[0]["command"]["status"], "timed_out");
    assert!(
        history[0]["command"]["output_tail"]
            .as_str()
            .expect("t")
            .contains("started")
    );
}

fn no_commands_flag_refuses_command_entries(b: &Backend) {
    let mut c = b.spawn(Era::Handshake, &["--no-commands"]);
    let r = c.call(
        "cron_create",
        json!({"schedule": "@daily", "message": "m", "command": "true"}),
    );
    assert_eq!(r.error_code(), Some("capability_denied"));
    assert!(b.stored_nothing());
}

fn read_only_server_changes_nothing(b: &Backend) {
    let mut c = b.spawn(Era::Handshake, &["--read-only"]);
    let r = c.call("cron_create", json!({"schedule": "@daily", "message": "m"}));
    assert_eq!(r.error_code(), Some("capability_denied"));
    let s = c.call("cron_status", json!({}));
    assert_eq!(s.structured["scheduler"], "read_only");
}

/// Processes that leave the command's process group (`setsid -f`) are stopped when the
/// command ends too (issue #22 §4), under every containment this machine offers.
#[test]
fn command_escapes_are_stopped_when_the_command_ends() {
    for mode in ["auto", "subreaper"] {
        let n = format!("{}{}", std::process::id(), mode.len());
        escaped_sleep_is_stopped(mode, &n, &format!("setsid -f sleep 300.{n}"));
    }
}

/// Issue #42 N10 in cron: the escaped process also moves itself to the root of every cgroup
/// hierarchy (allowed as root) and clears its environment (no `KITBAG_JOB` tag); it is
/// stopped all the same.
#[test]
fn a_command_that_leaves_its_cgroup_is_stopped() {
    let procs: Vec<String> = kitbag_shared::contain::cgroup_mounts()
        .into_iter()
        .filter(|m| m.v2 || m.controllers.iter().any(|c| c == "freezer"))
        .map(|m| m.mount_point.join("cgroup.procs").display().to_string())
        .collect();
    for mode in ["auto", "subreaper"] {
        // `0` first: no other test's token (`300.<pid>…`) is a part of this one, nor this of them.
        let n = format!("0{}{}", std::process::id(), mode.len());
        let escape = format!(
            "setsid -f sh -c 'for p in {}; do echo $$ >\"$p\"; done 2>/dev/null; exec env -i sleep 300.{n}'",
            procs.join(" ")
        );
        escaped_sleep_is_stopped(mode, &n, &escape);
    }
}

/// Live processes whose command line carries `token`.
fn carrying(token: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
        })
        .filter_map(|e| e.file_name().to_str().and_then(|p| p.parse().ok()))
        .filter(|&p: &u32| kitbag_testkit::process_alive(p))
        .map(|p| p as i32)
        .collect()
}

/// Kills what still carries the token when dropped: a failed assertion leaves nothing running.
struct KillCarrying(String);

impl Drop for KillCarrying {
    fn drop(&mut self) {
        for pid in carrying(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Fires a one-shot entry whose command runs `escape` (which starts `sleep 300.{n}` outside
/// the command's process group) and waits for it; that sleep must be gone soon after.
fn escaped_sleep_is_stopped(mode: &str, n: &str, escape: &str) {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn_with_env(
        bin(),
        &[
            "--root",
            d.path().to_str().expect("utf-8 path"),
            "--test-clock-start",
            "2026-07-01T12:00:58Z",
            "--test-clock-rate",
            "20",
        ],
        d.path(),
        Era::Handshake,
        &[("TZ", "UTC"), ("KITBAG_CONTAIN", mode)],
    );
    // The escaped sleep is waited for by its whole command line (`-x`): an escape that execs
    // `sleep` at the end matches only once it is done. `[.]` keeps the shell's own command
    // line from matching the pgrep pattern.
    let token = format!("300.{n}");
    let _guard = KillCarrying(token.clone());
    let command = format!(
        "{escape} >/dev/null 2>&1; \
         while ! pgrep -xf 'sleep 300[.]{n}' >/dev/null; do sleep 0.05; done; echo started"
    );
    let r = c.call(
        "cron_create",
        json!({"schedule": "* * * * *", "message": "escape", "recurring": false,
               "timezone": "UTC", "command": command, "command_timeout_secs": 30}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let mut fired = Vec::new();
    wait_for(&c, &mut fired, "notifications/kitbag/cron_fired", 30, |n| {
        !n.is_empty()
    });
    let outcome = &fired[0]["params"]["command"];
    assert_eq!(outcome["status"], "ok", "{outcome}");
    let kind = outcome["containment"].as_str().expect("containment");
    eprintln!("cron mode {mode}: containment {kind}");
    if mode == "subreaper" {
        assert_eq!(kind, "subreaper");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = carrying(&token);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left:?} escaped the cron command"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.shutdown();
}

/// An empty `KITBAG_DATABASE_URL` counts as unset: the SQLite file under the root is used.
#[test]
fn an_empty_database_url_keeps_the_sqlite_file() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn_with_env(
        bin(),
        &["--root", d.path().to_str().expect("utf-8 path")],
        d.path(),
        Era::Handshake,
        &[("TZ", "UTC"), ("KITBAG_DATABASE_URL", " ")],
    );
    c.call_ok("cron_create", json!({"schedule": "@daily", "message": "m"}));
    let s = c.call_ok("cron_status", json!({}));
    assert!(
        s.structured["store"]
            .as_str()
            .expect("store")
            .ends_with(".kitbag/cron.db"),
        "{}",
        s.structured
    );
    assert_eq!(common::dump_sqlite(d.path()).len(), 2);
}

/// A database that cannot be reached stops the server at start, naming the flag and
/// without repeating the URL's password.
#[test]
fn an_unreachable_database_fails_at_start_without_its_password() {
    let d = tempfile::tempdir().expect("tmp");
    let out = std::process::Command::new(bin())
        .args(["--root", d.path().to_str().expect("utf-8 path")])
        .args([
            "--database-url",
            "postgres://cron:s3cret@%2Fnonexistent%2Fdir/cron",
        ])
        .current_dir(d.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--database-url"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    assert!(!d.path().join(".kitbag/cron.db").exists());
}

/// Issue #37: default answers stay under 40 KB of structuredContent. Before, `cron_list`
/// returned every command whole (30 × ~4 KB here) and `cron_create` / `cron_disable` echoed a
/// 16 KB message that escapes to ~96 KB.
fn list_and_create_hold_the_result_budget(b: &Backend) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let mut c = b.spawn(Era::Handshake, &[]);
    for i in 0..30 {
        let r = c.call(
            "cron_create",
            json!({"schedule": "0 0 1 1 *", "timezone": "UTC", "enabled": false,
                   "message": "\"\n".repeat(8000),
                   "command": format!("echo {i} '{}'", "\"".repeat(1500))}),
        );
        assert!(!r.is_error, "{:?}", r.raw);
        assert!(json_len(&r.structured) < RESULT_BUDGET_BYTES);
    }
    let l = c.call("cron_list", json!({}));
    assert!(!l.is_error, "{:?}", l.raw);
    assert!(
        json_len(&l.structured) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&l.structured)
    );
    assert_eq!(l.structured["total"], 30);
    assert_eq!(l.structured["truncated"], true);
    let shown = l.structured["entries"].as_array().expect("entries").len();
    assert!(shown > 0 && shown < 30, "{shown}");
    assert_eq!(l.structured["next_offset"], shown);
    let last = &l.structured["entries"][shown - 1]["id"];
    assert_eq!(*last, format!("cron-{shown}"));
    let l2 = c.call("cron_list", json!({"offset": shown}));
    assert_eq!(
        l2.structured["entries"][0]["id"],
        format!("cron-{}", shown + 1),
        "the next page starts where the first stopped"
    );

    // Control characters escape to six bytes each.
    let r = c.call(
        "cron_create",
        json!({"schedule": "0 0 1 1 *", "timezone": "UTC", "enabled": false,
               "message": "\u{1}".repeat(16 * 1024)}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert!(
        json_len(&r.structured) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&r.structured)
    );
    assert_eq!(r.structured["entry"]["message_truncated"], true);
    let id = r.structured["entry"]["id"].clone();
    let r = c.call("cron_enable", json!({"id": id}));
    assert!(json_len(&r.structured) < RESULT_BUDGET_BYTES);
    assert_eq!(r.structured["entry"]["message_truncated"], true);
}

/// Issue #37: 30 runs, each with 4 KB of output that escapes to twice that, page at 40 KB
/// (before: all 20 of a default page, ~165 KB).
#[test]
fn runs_hold_the_result_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let d = tempfile::tempdir().expect("tmp");
    let mut c = spawn(d.path(), Era::Handshake, &[]);
    c.call("cron_status", json!({}));
    std::fs::create_dir_all(d.path().join(".kitbag")).expect("dir");
    let mut lines = String::new();
    for i in 0..30 {
        let rec = json!({"id": "cron-1", "session": "s", "scheduled_at": format!("2026-07-01T12:{i:02}:00Z"),
            "fired_at": format!("2026-07-01T12:{i:02}:00Z"), "outcome": "fired", "delivered": true, "pid": 1,
            "command": {"status": "ok", "exit_code": 0, "duration_ms": 1,
                        "output_tail": format!("run {i:02}{}", "\"\n".repeat(2045)), "output_truncated": true}});
        lines.push_str(&format!("{rec}\n"));
    }
    std::fs::write(d.path().join(".kitbag/cron-runs.jsonl"), lines).expect("write");
    let r = c.call("cron_runs", json!({}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert!(
        json_len(&r.structured) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&r.structured)
    );
    assert_eq!(r.structured["truncated"], true);
    let shown = r.structured["runs"].as_array().expect("runs").len();
    assert!(shown > 0 && shown < 20, "{shown}");
    assert_eq!(r.structured["next_offset"], shown);
    let tail = |v: &Value| v["command"]["output_tail"].as_str().expect("tail")[..6].to_string();
    assert_eq!(
        tail(&r.structured["runs"][shown - 1]),
        format!("run {:02}", 29 - (shown - 1))
    );
    let r2 = c.call("cron_runs", json!({"offset": shown}));
    assert_eq!(
        tail(&r2.structured["runs"][0]),
        format!("run {:02}", 29 - shown),
        "newest first, resuming where the first page stopped"
    );
}
