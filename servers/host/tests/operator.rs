//! `ask` and `form` through `kitbag serve` (issue #39): the issues family asks, the host
//! carries the question to its client — relayed as `elicitation/create` in the handshake era,
//! as `input_required` and the client's retry in 2026-07-28 — and the operator's answer comes
//! back typed. A client without elicitation gets the typed refusal through the host too.

use std::path::Path;
use std::sync::Arc;

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn questions() -> Value {
    json!({"questions": [
        {"id": "target", "title": "Deploy where?", "options": ["staging", "production"]},
        {"id": "why", "title": "Why now?"}
    ]})
}

#[test]
fn the_operator_answers_through_the_host_in_both_eras() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = McpClient::spawn_eliciting(
            bin(),
            &["serve"],
            d.path(),
            era,
            Arc::new(|params: &Value| {
                if params["message"] == "Release" {
                    return json!({"action": "accept", "content": {"version": "3.0", "days": 2}});
                }
                json!({"action": "accept", "content": {"target": "production", "why": "freeze ends"}})
            }),
        );
        let r = c.call_ok("ask", questions());
        assert_eq!(
            r.structured,
            json!({"action": "accept", "answers": {"target": "production", "why": "freeze ends"}}),
            "{era:?}"
        );
        let r = c.call_ok(
            "form",
            json!({"message": "Release", "fields": [
                {"name": "version", "label": "Version", "required": true},
                {"name": "days", "label": "Days of canary", "type": "integer"}
            ]}),
        );
        assert_eq!(
            r.structured["answers"],
            json!({"version": "3.0", "days": 2}),
            "{era:?}"
        );
        let asked = c.elicited.lock().expect("lock").clone();
        assert_eq!(asked.len(), 2, "{era:?}: one form per call: {asked:#?}");
        assert_eq!(
            asked[0]["requestedSchema"]["required"],
            json!(["target", "why"])
        );
        c.shutdown();
    }
}

#[test]
fn a_client_without_elicitation_gets_the_typed_refusal_through_the_host() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), era);
        let r = c.call_err("ask", questions(), "elicitation_unsupported");
        assert!(r.text.contains("elicitation"), "{era:?}: {}", r.text);
        c.shutdown();
    }
}

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

/// `checkpoint` through `kitbag serve` (issue #39 §2): the files family's writes, the search
/// family's `edit_ast` and a shell command all land in one root; the files family snapshots
/// and asks the operator to sign off (one question per checkpoint in both eras: the retry of
/// 2026-07-28 finds the checkpoint its first round made); a restore rewinds kitbag's writes and
/// refuses a file a shell command changed since.
#[test]
fn checkpoints_sign_off_and_rewind_every_write_path_through_the_host() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path();
        let mut c = McpClient::spawn_eliciting(
            bin(),
            &["serve"],
            root,
            era,
            Arc::new(|params: &Value| {
                assert!(
                    params["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Checkpoint ")),
                    "{params}"
                );
                json!({"action": "accept", "content": {"decision": "approve", "comment": "go on"}})
            }),
        );
        c.call_ok("file_write", json!({"path": "a.txt", "content": "one\n"}));
        c.call_ok(
            "file_write",
            json!({"path": "c.py", "content": "x = foo()\n"}),
        );
        let r = c.call_ok(
            "checkpoint",
            json!({"reason": "baseline", "summary": "two files"}),
        );
        assert_eq!(
            r.structured,
            json!({"id": 1, "decision": "approve", "comment": "go on", "files": [
                {"path": "a.txt", "change": "created", "bytes": 4},
                {"path": "c.py", "change": "created", "bytes": 10}
            ]}),
            "{era:?}"
        );
        let asked = c.elicited.lock().expect("lock").clone();
        assert_eq!(asked.len(), 1, "{era:?}: one question: {asked:#?}");
        assert!(
            asked[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("baseline") && m.contains("a.txt, c.py")),
            "{}",
            asked[0]["message"]
        );

        c.call_ok("file_read", json!({"path": "a.txt"}));
        c.call_ok(
            "edit_text",
            json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
        );
        c.call_ok("file_write", json!({"path": "b.txt", "content": "bee\n"}));
        c.call_ok(
            "edit_ast",
            json!({"rewrites": {"foo()": "bar()"}, "path": "c.py", "lang": "python", "dry_run": false}),
        );
        assert_eq!(read(root, "c.py").as_deref(), Some("x = bar()\n"));
        let l = c.call_ok("checkpoint_list", json!({}));
        assert_eq!(
            l.structured["changed"],
            json!(["a.txt", "b.txt", "c.py"]),
            "{era:?}"
        );
        assert_eq!(l.structured["checkpoints"][0]["decision"], "approve");

        let p = c.call_ok("checkpoint_restore", json!({"id": 1, "preview": true}));
        assert_eq!(p.structured["files"].as_array().map(Vec::len), Some(3));
        let diff = p.structured["files"][0]["diff"].as_str().expect("diff");
        assert!(diff.contains("-two") && diff.contains("+one"), "{diff}");
        assert_eq!(
            read(root, "a.txt").as_deref(),
            Some("two\n"),
            "a preview writes nothing"
        );

        // A command changes b.txt behind kitbag's back: the restore refuses, changing nothing.
        c.call_ok("shell_bash", json!({"command": "echo by-hand >> b.txt"}));
        let e = c.call_err(
            "checkpoint_restore",
            json!({"id": 1}),
            "changed_outside_session",
        );
        assert_eq!(e.structured["error"]["detail"]["files"][0]["path"], "b.txt");
        assert_eq!(read(root, "a.txt").as_deref(), Some("two\n"));

        let r = c.call_ok(
            "checkpoint_restore",
            json!({"id": 1, "paths": ["a.txt", "c.py"]}),
        );
        assert_eq!(r.structured["files"].as_array().map(Vec::len), Some(2));
        assert_eq!(read(root, "a.txt").as_deref(), Some("one\n"));
        assert_eq!(read(root, "c.py").as_deref(), Some("x = foo()\n"));
        assert_eq!(read(root, "b.txt").as_deref(), Some("bee\nby-hand\n"));
        // Seed 004's name resolves too.
        let again = c.call_ok("kaged.checkpoint", json!({"reason": "after the restore"}));
        assert_eq!(again.structured["id"], 2);
        c.shutdown();
    }
}

/// A client that cannot ask still gets its checkpoint (and its undo): recorded, not signed off.
#[test]
fn a_checkpoint_without_elicitation_is_recorded_unsigned() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = McpClient::spawn(bin(), &["serve"], d.path(), era);
        c.call_ok("file_write", json!({"path": "a.txt", "content": "one\n"}));
        let r = c.call_ok("checkpoint", json!({"reason": "before the refactor"}));
        assert_eq!(r.structured["decision"], "unavailable", "{era:?}");
        c.call_ok("file_read", json!({"path": "a.txt"}));
        c.call_ok(
            "file_write",
            json!({"path": "a.txt", "content": "rewritten\n"}),
        );
        c.call_ok("file_delete", json!({"path": "a.txt"}));
        c.call_ok("checkpoint_restore", json!({"id": 1}));
        assert_eq!(read(d.path(), "a.txt").as_deref(), Some("one\n"), "{era:?}");
        c.call_err(
            "checkpoint_restore",
            json!({"id": 7}),
            "checkpoint_not_found",
        );
        c.call_err("checkpoint", json!({"reason": " "}), "invalid_params");
        c.shutdown();
    }
}
