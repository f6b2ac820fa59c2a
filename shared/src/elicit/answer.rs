//! An operator's answer to a form, checked against the form before anyone trusts it: a
//! client that sends back a value of another type, an option not offered or no value for a
//! required field gets `invalid_answer`. Declined and cancelled forms are answers too
//! (`action`). Used by every tool that asks (kitbag-issues' `ask` and `form`, kitbag-files'
//! `checkpoint`).

use std::collections::BTreeMap;

use rmcp::model::{ElicitResult, ElicitationAction};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::{ErrorCode, ToolError, ToolResult};

/// What the operator did with the form.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Answered: `answers` holds the values.
    Accept,
    /// Refused to answer.
    Decline,
    /// Dismissed the form without choosing.
    Cancel,
}

/// The operator's answer to `ask` or `form`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Answered {
    pub action: Action,
    /// By question id / field name (accept only). An optional field left empty is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<BTreeMap<String, AnswerValue>>,
}

/// One answer, as the form's field typed it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum AnswerValue {
    Flag(bool),
    Whole(i64),
    Number(f64),
    /// Free text, or the option chosen.
    Text(String),
    /// The options chosen for a `multiple` question.
    Choices(Vec<String>),
}

impl AnswerValue {
    /// `v` as an answer, once `check_value` has held it against its field.
    fn of(v: &Value) -> Option<AnswerValue> {
        Some(match v {
            Value::Bool(b) => AnswerValue::Flag(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => AnswerValue::Whole(i),
                None => AnswerValue::Number(n.as_f64()?),
            },
            Value::String(s) => AnswerValue::Text(s.clone()),
            Value::Array(items) => AnswerValue::Choices(
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned))
                    .collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    }
}

/// One form: its message, its JSON Schema, and the rules its answers are checked by.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    pub message: String,
    pub schema: Value,
}

pub fn bad_answer(key: &str, why: impl std::fmt::Display) -> ToolError {
    ToolError::new(
        ErrorCode::InvalidAnswer,
        format!("the client's answer to `{key}` {why}; nothing was taken from it"),
    )
    .with_detail(json!({ "field": key }))
}

/// Whether `v` is what `property` asks for.
fn check_value(key: &str, property: &Value, v: &Value) -> ToolResult<()> {
    let offered = |s: &Value| {
        property
            .get("enum")
            .or_else(|| property.get("items").and_then(|i| i.get("enum")))
            .and_then(Value::as_array)
            .is_none_or(|options| options.contains(s))
    };
    let ok = match property["type"].as_str() {
        Some("string") => v.is_string() && offered(v),
        Some("number") => v.is_number(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("boolean") => v.is_boolean(),
        Some("array") => v
            .as_array()
            .is_some_and(|items| items.iter().all(|s| s.is_string() && offered(s))),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(bad_answer(key, format!("is {v}, not what the form asks")))
    }
}

/// The client's answer, checked against the form it was asked with.
pub fn answered(form: &Form, result: ElicitResult) -> ToolResult<Answered> {
    let action = match result.action {
        ElicitationAction::Accept => Action::Accept,
        ElicitationAction::Decline => Action::Decline,
        // Cancel, and any action a later protocol adds: nothing was answered.
        _ => Action::Cancel,
    };
    if action != Action::Accept {
        return Ok(Answered {
            action,
            answers: None,
        });
    }
    let content = match result.content {
        Some(Value::Object(m)) => m,
        None => Map::new(),
        Some(other) => return Err(bad_answer("content", format!("is {other}, not an object"))),
    };
    let properties = form.schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut answers = BTreeMap::new();
    for (key, property) in &properties {
        match content.get(key) {
            None | Some(Value::Null) => {}
            Some(v) => {
                check_value(key, property, v)?;
                let typed = AnswerValue::of(v)
                    .ok_or_else(|| bad_answer(key, format!("is {v}, not what the form asks")))?;
                answers.insert(key.clone(), typed);
            }
        }
    }
    if let Some(missing) = crate::schema::required_names(&form.schema)
        .into_iter()
        .find(|k| !answers.contains_key(*k))
    {
        return Err(bad_answer(
            missing,
            "is missing, though the form requires it",
        ));
    }
    Ok(Answered {
        action,
        answers: Some(answers),
    })
}
