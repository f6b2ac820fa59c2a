//! The operator's side of a server's question (MCP elicitation, form mode) inside the agent
//! loop: `kitbag chat` (`chat/asking.rs`) and `kitbag call` ([`StdinOperator`]) ask it a field
//! at a time ([`ask_lines`]); `kitbag run` and `daemon` pause the session until
//! `kitbag sessions answer` gives the values (`pause.rs`). Plain functions over the form's
//! schema: its fields, a typed value from what a person types, and `KEY=VALUE` pairs checked
//! into a whole answer.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::host::{Operator, Question, Unanswered};

/// Why a typed answer was not taken, in words for the operator ("\"7\" is not one of: …").
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct AnswerError(pub String);

fn wrong(why: String) -> AnswerError {
    AnswerError(why)
}

/// One question of a form, as a person answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub key: String,
    pub title: String,
    pub description: Option<String>,
    pub kind: Kind,
    pub required: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Free text; `format` (email, uri, date, date-time) as the schema says.
    Text {
        format: Option<String>,
    },
    Number,
    Integer,
    Boolean,
    /// One of these.
    Choice(Vec<String>),
    /// Any of these (a list).
    Choices(Vec<String>),
}

/// The options of an enum schema: `enum`, or `oneOf`/`anyOf` of `const`s.
fn options(schema: &Value) -> Option<Vec<String>> {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return Some(
            e.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        );
    }
    let listed = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        listed
            .iter()
            .filter_map(|o| o.get("const").and_then(Value::as_str).map(str::to_owned))
            .collect(),
    )
}

/// The form's fields, in the schema's order.
pub fn fields(schema: &Value) -> Vec<Field> {
    let required = kitbag_shared::schema::required_names(schema);
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(key, p)| {
            let kind = match p["type"].as_str() {
                Some("array") => Kind::Choices(options(&p["items"]).unwrap_or_default()),
                Some("number") => Kind::Number,
                Some("integer") => Kind::Integer,
                Some("boolean") => Kind::Boolean,
                _ => match options(p) {
                    Some(o) => Kind::Choice(o),
                    None => Kind::Text {
                        format: p["format"].as_str().map(str::to_owned),
                    },
                },
            };
            Field {
                key: key.clone(),
                title: p["title"].as_str().unwrap_or(key).to_owned(),
                description: p["description"].as_str().map(str::to_owned),
                kind,
                required: required.contains(&key.as_str()),
            }
        })
        .collect()
}

/// How the field is asked on a terminal: its title, description and what to type.
pub fn prompt(field: &Field) -> String {
    let mut s = field.title.clone();
    if let Some(d) = &field.description {
        s.push_str(&format!(" — {d}"));
    }
    let how = match &field.kind {
        Kind::Text { format: Some(f) } => format!("({f})"),
        Kind::Text { format: None } => String::new(),
        Kind::Number => "(a number)".into(),
        Kind::Integer => "(a whole number)".into(),
        Kind::Boolean => "(y/n)".into(),
        Kind::Choice(o) => format!("({})", numbered(o)),
        Kind::Choices(o) => format!(
            "(any of {}; numbers or names, comma-separated)",
            numbered(o)
        ),
    };
    if !how.is_empty() {
        s.push(' ');
        s.push_str(&how);
    }
    if !field.required {
        s.push_str(" [optional: empty skips]");
    }
    s
}

fn numbered(options: &[String]) -> String {
    options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("{} {o}", i + 1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An option named by its number (1-based) or its text.
fn pick(options: &[String], typed: &str) -> Result<String, AnswerError> {
    let t = typed.trim();
    if let Ok(n) = t.parse::<usize>()
        && (1..=options.len()).contains(&n)
    {
        return Ok(options[n - 1].clone());
    }
    options
        .iter()
        .find(|o| o.eq_ignore_ascii_case(t))
        .cloned()
        .ok_or_else(|| wrong(format!("{t:?} is not one of: {}", numbered(options))))
}

/// The value a person typed for `field`: `Ok(None)` when left empty (allowed only if the
/// field is optional), `Err` saying what is accepted.
pub fn parse(field: &Field, typed: &str) -> Result<Option<Value>, AnswerError> {
    let t = typed.trim();
    if t.is_empty() {
        return if field.required {
            Err(wrong("an answer is required".into()))
        } else {
            Ok(None)
        };
    }
    let v = match &field.kind {
        Kind::Text { .. } => json!(t),
        Kind::Number => json!(
            t.parse::<f64>()
                .map_err(|_| wrong(format!("{t:?} is not a number")))?
        ),
        Kind::Integer => json!(
            t.parse::<i64>()
                .map_err(|_| wrong(format!("{t:?} is not a whole number")))?
        ),
        Kind::Boolean => match t.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" | "1" => json!(true),
            "n" | "no" | "false" | "0" => json!(false),
            _ => return Err(wrong(format!("{t:?}: answer y or n"))),
        },
        Kind::Choice(o) => json!(pick(o, t)?),
        Kind::Choices(o) => {
            let picked: Result<Vec<String>, AnswerError> = t
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| pick(o, p))
                .collect();
            json!(picked?)
        }
    };
    Ok(Some(v))
}

/// Where a person's answers come from, a line at a time: `None` when they stop (Ctrl-C, the
/// end of the input).
pub trait LineSource: Send {
    fn next_line(&mut self) -> BoxFuture<'_, Result<Option<String>, Unanswered>>;
}

/// Ask `question` a field at a time from `lines`, prompts on stderr: its message, then each
/// field until a valid value (or an empty line for an optional one). `/decline` declines;
/// `/cancel`, Ctrl-C or the end of the input cancels.
pub async fn ask_lines(
    lines: &mut dyn LineSource,
    question: &Question,
) -> Result<Value, Unanswered> {
    eprintln!(
        "\n[{} asks] {}  (/decline or /cancel to refuse)",
        question.server, question.message
    );
    let mut content = Map::new();
    for field in fields(&question.schema) {
        loop {
            eprintln!("  {}", prompt(&field));
            let Some(line) = lines.next_line().await? else {
                return Ok(json!({"action": "cancel"}));
            };
            match line.trim() {
                "/decline" => return Ok(json!({"action": "decline"})),
                "/cancel" => return Ok(json!({"action": "cancel"})),
                _ => {}
            }
            match parse(&field, &line) {
                Ok(Some(v)) => {
                    content.insert(field.key.clone(), v);
                    break;
                }
                Ok(None) => break,
                Err(why) => eprintln!("  {why}"),
            }
        }
    }
    Ok(json!({"action": "accept", "content": content}))
}

/// The operator of `kitbag call`: the person at the command's stdin answers, one question at
/// a time.
pub struct StdinOperator {
    lines: Arc<tokio::sync::Mutex<StdinLines>>,
}

type StdinReader = tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>;

struct StdinLines(StdinReader);

impl LineSource for StdinLines {
    fn next_line(&mut self) -> BoxFuture<'_, Result<Option<String>, Unanswered>> {
        Box::pin(async move {
            self.0
                .next_line()
                .await
                .map_err(|e| Unanswered(format!("reading the answer: {e}")))
        })
    }
}

impl StdinOperator {
    pub fn new() -> Arc<StdinOperator> {
        use tokio::io::AsyncBufReadExt;
        let lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        Arc::new(StdinOperator {
            lines: Arc::new(tokio::sync::Mutex::new(StdinLines(lines))),
        })
    }
}

impl Operator for StdinOperator {
    fn ask(&self, question: Question) -> BoxFuture<'static, Result<Value, Unanswered>> {
        let lines = self.lines.clone();
        Box::pin(async move { ask_lines(&mut *lines.lock().await, &question).await })
    }
}

/// A whole answer from `KEY=VALUE` pairs (`kitbag sessions answer`): every key a field of the
/// form, every value parsed as typed on a terminal, every required field given.
pub fn from_pairs(schema: &Value, pairs: &[String]) -> Result<Value, AnswerError> {
    let fields = fields(schema);
    let mut content = Map::new();
    for pair in pairs {
        let Some((key, typed)) = pair.split_once('=') else {
            return Err(wrong(format!("{pair:?}: give each answer as KEY=VALUE")));
        };
        let Some(field) = fields.iter().find(|f| f.key == key) else {
            let keys: Vec<&str> = fields.iter().map(|f| f.key.as_str()).collect();
            return Err(wrong(format!(
                "{key:?} is not asked; the form asks: {}",
                keys.join(", ")
            )));
        };
        if let Some(v) = parse(field, typed).map_err(|why| wrong(format!("{key}: {why}")))? {
            content.insert(key.to_owned(), v);
        }
    }
    if let Some(missing) = fields
        .iter()
        .find(|f| f.required && !content.contains_key(&f.key))
    {
        return Err(wrong(format!(
            "{}: an answer is required ({})",
            missing.key,
            prompt(missing)
        )));
    }
    Ok(json!({"action": "accept", "content": content}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> Value {
        json!({"type": "object", "required": ["target", "checks", "replicas"], "properties": {
            "target": {"type": "string", "title": "Deploy where?", "enum": ["staging", "production"]},
            "checks": {"type": "array", "title": "Checks", "items": {"type": "string", "enum": ["unit", "e2e"]}},
            "replicas": {"type": "integer", "title": "Replicas"},
            "notify": {"type": "boolean", "title": "Notify?"},
            "when": {"type": "string", "title": "When", "format": "date", "description": "empty: today"}
        }})
    }

    #[test]
    fn a_form_is_asked_field_by_field_and_typed() {
        let f = fields(&form());
        assert_eq!(f.len(), 5);
        assert_eq!(
            f[0].kind,
            Kind::Choice(vec!["staging".into(), "production".into()])
        );
        assert!(f[0].required && !f[3].required);
        assert_eq!(prompt(&f[0]), "Deploy where? (1 staging, 2 production)");
        assert_eq!(
            prompt(&f[4]),
            "When — empty: today (date) [optional: empty skips]"
        );
        assert_eq!(parse(&f[0], "2"), Ok(Some(json!("production"))));
        assert_eq!(
            parse(&f[0], "3").map_err(|e| e.to_string()),
            Err("\"3\" is not one of: 1 staging, 2 production".to_string())
        );
        assert_eq!(parse(&f[0], "Staging"), Ok(Some(json!("staging"))));
        assert!(parse(&f[0], "3").is_err() && parse(&f[0], "").is_err());
        assert_eq!(parse(&f[1], "2, unit"), Ok(Some(json!(["e2e", "unit"]))));
        assert_eq!(parse(&f[2], "3"), Ok(Some(json!(3))));
        assert!(parse(&f[2], "2.5").is_err());
        assert_eq!(parse(&f[3], "y"), Ok(Some(json!(true))));
        assert_eq!(parse(&f[3], ""), Ok(None));
    }

    #[test]
    fn pairs_make_a_whole_answer_or_say_what_is_wrong() {
        let a = from_pairs(
            &form(),
            &["target=1".into(), "checks=e2e".into(), "replicas=2".into()],
        )
        .expect("answer");
        assert_eq!(
            a,
            json!({"action": "accept", "content": {"target": "staging", "checks": ["e2e"], "replicas": 2}})
        );
        let e = from_pairs(&form(), &["target=1".into()]).expect_err("missing");
        assert!(e.0.starts_with("checks: an answer is required"), "{e}");
        let e = from_pairs(&form(), &["colour=red".into()]).expect_err("unknown");
        assert!(e.0.contains("the form asks: target, checks"), "{e}");
        let e = from_pairs(&form(), &["replicas".into()]).expect_err("no =");
        assert!(e.0.contains("KEY=VALUE"), "{e}");
    }
}
