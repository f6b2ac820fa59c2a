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
