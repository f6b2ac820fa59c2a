//! `ask` and `form`: the agent asks its operator (seed 004's `kaged.ask` / `kaged.form`),
//! through the client, as an MCP elicitation in form mode: the questions or fields become one
//! form's JSON Schema, and the operator's answers come back as the tool's typed result. A
//! declined or cancelled form is a result too (`action`), not an error; a client that cannot
//! answer gets `elicitation_unsupported` (`kitbag_shared::elicit`).
//!
//! The answers are checked against the form before they are returned: a client that sends
//! back a value of another type, an option not offered or no value for a required field gets
//! `invalid_answer`, never a result the agent would trust.

use kitbag_shared::args;
pub use kitbag_shared::elicit::answer::{Action, AnswerValue, Answered, Form, answered};
use kitbag_shared::{CallCtx, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

pub const ASK_DEF: ToolDef = ToolDef::read(
    "ask",
    "Ask the operator",
    "Ask your operator questions (one form) and wait for the answers.",
);

pub const FORM_DEF: ToolDef = ToolDef::read(
    "form",
    "Form for the operator",
    "Ask your operator for typed values (one form) and wait for them.",
);

/// Most questions or fields in one form.
const MAX_ITEMS: usize = 20;
/// Most options of one question.
const MAX_OPTIONS: usize = 50;
/// Longest title, label, option or message, in characters.
const MAX_TEXT: usize = 500;
/// Longest description, in characters.
const MAX_DESCRIPTION: usize = 2000;

/// An answer key: what the result's `answers` is keyed by.
const ID_RULES: args::NameRules = args::NameRules {
    max_len: 64,
    first: |b| b.is_ascii_alphabetic() || b == b'_',
    rest: |b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
    describe: "1–64 letters, digits, '_' and '-', starting with a letter or '_'",
};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskParams {
    pub questions: Vec<Question>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Choices; none: free text.
    #[serde(default)]
    pub options: Option<Vec<String>>,
    /// Answer: a list of options.
    #[serde(default)]
    pub multiple: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormParams {
    pub fields: Vec<Field>,
    /// Shown above them.
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub name: String,
    pub label: String,
    /// Default text.
    #[serde(rename = "type", default)]
    #[schemars(schema_with = "offered_types")]
    pub kind: Option<FieldType>,
    #[serde(default)]
    pub required: Option<bool>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    #[default]
    #[serde(alias = "string")]
    Text,
    Number,
    Integer,
    Boolean,
    Email,
    Url,
    Date,
    #[serde(alias = "date-time")]
    Datetime,
    /// Refused with a way out (files cannot travel in an elicitation): not offered.
    File,
}

/// The field types the schema offers (`file` is understood only to be refused kindly).
fn offered_types(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["text", "number", "integer", "boolean", "email", "url", "date", "datetime"]
    })
}

fn text(field: &str, s: &str, max: usize) -> ToolResult<()> {
    args::non_empty(field, s.trim(), "")?;
    args::max_chars(field, s, max)
}

fn opt_text(field: &str, s: &Option<String>, max: usize) -> ToolResult<()> {
    match s {
        Some(s) => text(field, s, max),
        None => Ok(()),
    }
}

fn count(field: &str, n: usize, noun: &str) -> ToolResult<()> {
    if n == 0 {
        return Err(ToolError::invalid_field(
            field,
            format!("give 1 to {MAX_ITEMS} {noun}"),
        ));
    }
    args::max_count(field, n, MAX_ITEMS, noun)
}

fn unique_key(field: &str, key: &str, seen: &mut Vec<String>) -> ToolResult<()> {
    args::name(field, key, &ID_RULES)?;
    if seen.iter().any(|k| k == key) {
        return Err(ToolError::invalid_field(
            field,
            format!("{key:?} is used twice; each must be unique"),
        ));
    }
    seen.push(key.to_string());
    Ok(())
}

fn titled(kind: Value, title: &str, description: &Option<String>) -> Value {
    let mut p = kind;
    p["title"] = json!(title);
    if let Some(d) = description {
        p["description"] = json!(d);
    }
    p
}

/// The form `ask` shows: a required property per question.
pub fn ask_form(p: &AskParams) -> ToolResult<Form> {
    count("questions", p.questions.len(), "questions")?;
    let mut properties = Map::new();
    let mut seen = Vec::new();
    for (i, q) in p.questions.iter().enumerate() {
        let at = |f: &str| format!("questions[{i}].{f}");
        unique_key(&at("id"), &q.id, &mut seen)?;
        text(&at("title"), &q.title, MAX_TEXT)?;
        opt_text(&at("description"), &q.description, MAX_DESCRIPTION)?;
        let options = q.options.as_deref().unwrap_or_default();
        args::max_count(&at("options"), options.len(), MAX_OPTIONS, "options")?;
        let mut offered: Vec<&str> = Vec::new();
        for (j, o) in options.iter().enumerate() {
            text(&format!("{}[{j}]", at("options")), o, MAX_TEXT)?;
            if offered.contains(&o.as_str()) {
                return Err(ToolError::invalid_field(
                    &at("options"),
                    format!("{o:?} is offered twice"),
                ));
            }
            offered.push(o);
        }
        let kind = match (options.is_empty(), q.multiple.unwrap_or(false)) {
            (true, false) => json!({"type": "string"}),
            (true, true) => {
                return Err(ToolError::invalid_field(
                    &at("multiple"),
                    "a question with several answers needs `options` to choose from",
                ));
            }
            (false, false) => json!({"type": "string", "enum": options}),
            (false, true) => {
                json!({"type": "array", "items": {"type": "string", "enum": options}})
            }
        };
        properties.insert(q.id.clone(), titled(kind, &q.title, &q.description));
    }
    let message = match p.questions.as_slice() {
        [one] => one.title.clone(),
        many => format!("The agent has {} questions for you.", many.len()),
    };
    Ok(Form {
        message,
        schema: json!({"type": "object", "properties": properties, "required": seen}),
    })
}

/// The form `form` shows: a property per field, those marked `required` required.
pub fn form_form(p: &FormParams) -> ToolResult<Form> {
    count("fields", p.fields.len(), "fields")?;
    opt_text("message", &p.message, MAX_TEXT)?;
    let mut properties = Map::new();
    let mut seen = Vec::new();
    let mut required = Vec::new();
    for (i, f) in p.fields.iter().enumerate() {
        let at = |x: &str| format!("fields[{i}].{x}");
        unique_key(&at("name"), &f.name, &mut seen)?;
        text(&at("label"), &f.label, MAX_TEXT)?;
        opt_text(&at("description"), &f.description, MAX_DESCRIPTION)?;
        let kind = match f.kind.unwrap_or_default() {
            FieldType::Text => json!({"type": "string"}),
            FieldType::Number => json!({"type": "number"}),
            FieldType::Integer => json!({"type": "integer"}),
            FieldType::Boolean => json!({"type": "boolean"}),
            FieldType::Email => json!({"type": "string", "format": "email"}),
            FieldType::Url => json!({"type": "string", "format": "uri"}),
            FieldType::Date => json!({"type": "string", "format": "date"}),
            FieldType::Datetime => json!({"type": "string", "format": "date-time"}),
            FieldType::File => {
                return Err(ToolError::invalid_field(
                    &at("type"),
                    "a file cannot be sent through an MCP form; ask for a path inside the root \
                     (type text) and read the file from there. Accepted: text, number, integer, \
                     boolean, email, url, date, datetime",
                ));
            }
        };
        properties.insert(f.name.clone(), titled(kind, &f.label, &f.description));
        if f.required == Some(true) {
            required.push(f.name.clone());
        }
    }
    let message = p
        .message
        .clone()
        .unwrap_or_else(|| "The agent asks you to fill in this form.".to_string());
    Ok(Form {
        message,
        schema: json!({"type": "object", "properties": properties, "required": required}),
    })
}

/// The answer as the model reads it.
pub fn reply(a: Answered) -> Reply<Answered> {
    let text = match (a.action, &a.answers) {
        (Action::Accept, Some(answers)) => {
            let lines: Vec<String> = answers
                .iter()
                .map(|(k, v)| format!("{k}: {}", serde_json::to_value(v).unwrap_or_default()))
                .collect();
            format!("The operator answered.\n{}", lines.join("\n"))
        }
        (Action::Accept, None) => "The operator answered.".to_string(),
        (Action::Decline, _) => "The operator declined to answer.".to_string(),
        (Action::Cancel, _) => "The operator dismissed the form without answering.".to_string(),
    };
    Reply::new(a, text)
}

/// Ask the operator with `form` under `key`, and check what comes back.
pub async fn run(ctx: &CallCtx, key: &str, form: Form) -> ToolResult<Reply<Answered>> {
    let result = ctx.elicit(key, &form.message, &form.schema).await?;
    answered(&form, result).map(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kitbag_shared::ErrorCode;
    use kitbag_shared::rmcp::model::{ElicitResult, ElicitationAction};

    fn ask(v: Value) -> ToolResult<Form> {
        ask_form(&serde_json::from_value(v).expect("params"))
    }

    fn form(v: Value) -> ToolResult<Form> {
        form_form(&serde_json::from_value(v).expect("params"))
    }

    fn accept(content: Value) -> ElicitResult {
        ElicitResult::new(ElicitationAction::Accept).with_content(content)
    }

    /// Every form made is an elicitation request the protocol allows (rmcp's types).
    fn allowed(f: &Form) {
        let params = kitbag_shared::elicit::form_params("k", &f.message, &f.schema);
        serde_json::from_value::<kitbag_shared::rmcp::model::ElicitRequestParams>(params)
            .unwrap_or_else(|e| panic!("not an elicitation request: {e}\n{}", f.schema));
    }

    #[test]
    fn questions_become_one_form_of_required_answers() {
        let f = ask(json!({"questions": [
            {"id": "target", "title": "Deploy where?", "options": ["staging", "production"]},
            {"id": "checks", "title": "Which checks?", "options": ["unit", "e2e"], "multiple": true},
            {"id": "note", "title": "Anything else?", "description": "free text"}
        ]}))
        .expect("form");
        allowed(&f);
        assert_eq!(f.message, "The agent has 3 questions for you.");
        assert_eq!(f.schema["required"], json!(["target", "checks", "note"]));
        assert_eq!(
            f.schema["properties"]["target"]["enum"],
            json!(["staging", "production"])
        );
        assert_eq!(f.schema["properties"]["checks"]["type"], "array");
        assert_eq!(f.schema["properties"]["note"]["description"], "free text");

        let a = answered(
            &f,
            accept(json!({"target": "staging", "checks": ["unit"], "note": "go", "extra": 1})),
        )
        .expect("answered");
        assert_eq!(a.action, Action::Accept);
        let answers = a.answers.expect("answers");
        assert_eq!(
            answers.len(),
            3,
            "a key the form did not ask for is not kept"
        );
        assert_eq!(answers["checks"], AnswerValue::Choices(vec!["unit".into()]));
    }

    #[test]
    fn answers_outside_the_form_are_refused() {
        let f = ask(json!({"questions": [
            {"id": "target", "title": "Where?", "options": ["staging", "production"]},
            {"id": "checks", "title": "Which?", "options": ["unit"], "multiple": true}
        ]}))
        .expect("form");
        for (content, key) in [
            (json!({"target": "moon", "checks": []}), "target"),
            (json!({"target": "staging", "checks": ["fuzz"]}), "checks"),
            (json!({"target": 3, "checks": []}), "target"),
            (json!({"checks": []}), "target"),
        ] {
            let e = answered(&f, accept(content.clone())).expect_err("refused");
            assert_eq!(e.code, ErrorCode::InvalidAnswer, "{content}");
            assert_eq!(e.detail["field"], key, "{content}");
        }
        let declined = answered(&f, ElicitResult::new(ElicitationAction::Decline)).expect("typed");
        assert_eq!(
            declined,
            Answered {
                action: Action::Decline,
                answers: None
            }
        );
        let cancelled = answered(&f, ElicitResult::new(ElicitationAction::Cancel)).expect("typed");
        assert_eq!(cancelled.action, Action::Cancel);
    }

    #[test]
    fn fields_are_typed_and_only_the_required_ones_must_be_filled() {
        let f = form(json!({"message": "Release", "fields": [
            {"name": "version", "label": "Version", "required": true},
            {"name": "count", "label": "Count", "type": "integer"},
            {"name": "ratio", "label": "Ratio", "type": "number"},
            {"name": "notify", "label": "Notify?", "type": "boolean"},
            {"name": "mail", "label": "Mail", "type": "email"},
            {"name": "when", "label": "When", "type": "datetime"}
        ]}))
        .expect("form");
        allowed(&f);
        assert_eq!(f.message, "Release");
        assert_eq!(f.schema["required"], json!(["version"]));
        assert_eq!(f.schema["properties"]["when"]["format"], "date-time");
        let a = answered(
            &f,
            accept(json!({"version": "1.2", "count": 3, "notify": false})),
        )
        .expect("answered");
        assert_eq!(a.answers.expect("answers").len(), 3);
        let e = answered(&f, accept(json!({"version": "1.2", "count": 2.5}))).expect_err("int");
        assert_eq!(e.detail["field"], "count");
    }

    #[test]
    fn bad_forms_name_their_field() {
        let cases = [
            (ask(json!({"questions": []})), "questions"),
            (
                ask(json!({"questions": [{"id": "a b", "title": "x"}]})),
                "questions[0].id",
            ),
            (
                ask(json!({"questions": [{"id": "a", "title": "x"}, {"id": "a", "title": "y"}]})),
                "questions[1].id",
            ),
            (
                ask(json!({"questions": [{"id": "a", "title": " "}]})),
                "questions[0].title",
            ),
            (
                ask(json!({"questions": [{"id": "a", "title": "x", "multiple": true}]})),
                "questions[0].multiple",
            ),
            (
                ask(json!({"questions": [{"id": "a", "title": "x", "options": ["1", "1"]}]})),
                "questions[0].options",
            ),
            (form(json!({"fields": []})), "fields"),
            (
                form(json!({"fields": [{"name": "f", "label": "F", "type": "file"}]})),
                "fields[0].type",
            ),
        ];
        for (r, field) in cases {
            let e = r.expect_err(field);
            assert_eq!(e.code, ErrorCode::InvalidParams, "{field}");
            assert_eq!(e.detail["field"], field);
        }
    }
}
