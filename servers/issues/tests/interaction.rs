//! `ask` and `form` over the real binary: the operator's answers arrive through MCP
//! elicitation in both protocol eras (a request on the connection; `input_required` and a
//! retry), are checked against the form, and come back as the typed result. A client without
//! the capability gets `elicitation_unsupported`; a bad answer `invalid_answer`.

use std::path::Path;
use std::sync::Arc;

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-issues"))
}

fn server(
    dir: &Path,
    era: Era,
    answer: impl Fn(&Value) -> Value + Send + Sync + 'static,
) -> McpClient {
    let db = dir.join("issues.db");
    McpClient::spawn_eliciting(
        bin(),
        &[
            "--root",
            &dir.to_string_lossy(),
            "--db",
            &db.to_string_lossy(),
        ],
        dir,
        era,
        Arc::new(answer),
    )
}

fn deploy_questions() -> Value {
    json!({"questions": [
        {"id": "target", "title": "Deploy where?", "options": ["staging", "production"]},
        {"id": "checks", "title": "Which checks first?", "options": ["unit", "e2e", "lint"], "multiple": true},
        {"id": "note", "title": "Anything the release notes should say?"}
    ]})
}

#[test]
fn ask_gets_the_operators_answers_in_both_eras() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = server(d.path(), era, |params| {
            // The operator sees one form with every question, each required.
            assert_eq!(params["message"], "The agent has 3 questions for you.");
            assert_eq!(
                params["requestedSchema"]["required"],
                json!(["target", "checks", "note"])
            );
            json!({"action": "accept", "content": {
                "target": "staging", "checks": ["unit", "lint"], "note": "faster start"}})
        });
        let r = c.call_ok("ask", deploy_questions());
        assert_eq!(r.structured["action"], "accept", "{era:?}");
        assert_eq!(
            r.structured["answers"],
            json!({"target": "staging", "checks": ["unit", "lint"], "note": "faster start"}),
            "{era:?}"
        );
        assert!(r.text.contains("target: \"staging\""), "{}", r.text);
        let asked = c.elicited.lock().expect("lock").clone();
        assert_eq!(asked.len(), 1, "{era:?}: one form for three questions");
        assert_eq!(asked[0]["mode"], "form");
        assert_eq!(asked[0]["_meta"]["io.kitbag/inputKey"], "ask");
        assert_eq!(
            asked[0]["requestedSchema"]["properties"]["checks"]["items"]["enum"],
            json!(["unit", "e2e", "lint"])
        );
        c.shutdown();
    }
}

#[test]
fn form_values_are_typed_and_a_refusal_is_a_result() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = server(d.path(), era, |params| {
            if params["message"] == "Decline me" {
                return json!({"action": "decline"});
            }
            if params["message"] == "Cancel me" {
                return json!({"action": "cancel"});
            }
            json!({"action": "accept", "content": {"version": "2.1.0", "replicas": 3, "notify": true}})
        });
        let fields = json!([
            {"name": "version", "label": "Version", "required": true},
            {"name": "replicas", "label": "Replicas", "type": "integer", "required": true},
            {"name": "notify", "label": "Tell the team?", "type": "boolean"},
            {"name": "when", "label": "When", "type": "datetime", "description": "empty: now"}
        ]);
        let r = c.call_ok("form", json!({"message": "Release", "fields": fields}));
        assert_eq!(
            r.structured,
            json!({"action": "accept", "answers": {"version": "2.1.0", "replicas": 3, "notify": true}}),
            "{era:?}: the optional field left empty is absent"
        );
        let schema = c.elicited.lock().expect("lock")[0]["requestedSchema"].clone();
        assert_eq!(schema["properties"]["when"]["format"], "date-time");
        assert_eq!(schema["required"], json!(["version", "replicas"]));

        // Seed 004's names reach the same tools.
        let r = c.call_ok(
            "kaged.form",
            json!({"message": "Release", "fields": fields}),
        );
        assert_eq!(r.structured["action"], "accept", "{era:?}");
        let r = c.call_ok("form", json!({"message": "Decline me", "fields": fields}));
        assert_eq!(r.structured, json!({"action": "decline"}), "{era:?}");
        let r = c.call_ok(
            "ask",
            json!({"questions": [{"id": "q", "title": "Cancel me"}]}),
        );
        assert_eq!(r.structured, json!({"action": "cancel"}), "{era:?}");
        c.shutdown();
    }
}

#[test]
fn an_answer_outside_the_form_is_refused() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = server(
            d.path(),
            era,
            |_| json!({"action": "accept", "content": {"target": "the moon", "checks": [], "note": "x"}}),
        );
        let r = c.call_err("ask", deploy_questions(), "invalid_answer");
        assert_eq!(
            r.structured["error"]["detail"]["field"], "target",
            "{era:?}"
        );
        c.shutdown();
    }
}

#[test]
fn a_client_without_elicitation_is_told_who_can_answer() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().expect("tmp");
        let db = d.path().join("issues.db");
        let mut c = McpClient::spawn(
            bin(),
            &[
                "--root",
                &d.path().to_string_lossy(),
                "--db",
                &db.to_string_lossy(),
            ],
            d.path(),
            era,
        );
        let r = c.call_err("ask", deploy_questions(), "elicitation_unsupported");
        assert!(r.text.contains("Python SDK"), "{}", r.text);
        // Bad questions are refused before anything is asked, naming the field.
        c.call_err(
            "form",
            json!({"fields": [{"name": "cv", "label": "CV", "type": "file"}]}),
            "invalid_params",
        )
        .expect_field("fields[0].type");
        c.shutdown();
    }
}
