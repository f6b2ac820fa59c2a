//! `kitbag run` and `daemon` have nobody to ask: a server's question to the operator (MCP
//! elicitation — `ask`, `form`) pauses the session instead. The question is answered
//! `cancel` to the server at once (its call ends), the turn records a `waiting` record — the
//! form, the step's calls to run again (those routed to the asking server), the results of
//! the others — and stops. `kitbag sessions answer NAME KEY=VALUE…` records the operator's
//! answer and resumes: the pending calls run again, and the same question, asked again, is
//! answered from the record (`turn.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kitbag_llm::Block;
use kitbag_shared::lock::LockExt;
use serde_json::{Value, json};

use crate::host::{Operator, Question, Unanswered};
use crate::operator::{self, AnswerError};
use crate::record::Record;

/// The operator of `kitbag run` and `daemon`: answers from the session's recorded answers
/// when it has one, else notes the question (the turn then stops) and answers `cancel`.
#[derive(Debug, Default)]
pub struct PauseOperator {
    answers: Mutex<VecDeque<Value>>,
    asked: Mutex<Option<Question>>,
}

impl PauseOperator {
    pub fn new() -> Arc<PauseOperator> {
        Arc::new(PauseOperator::default())
    }

    /// The next question is answered with `answer` (a resumed step's).
    pub fn give(&self, answer: Value) {
        self.answers.locked().push_back(answer);
    }

    /// The question asked with no answer to give, if one was (once).
    pub fn take_asked(&self) -> Option<Question> {
        self.asked.locked().take()
    }
}

impl Operator for PauseOperator {
    fn ask(&self, question: Question) -> BoxFuture<'static, Result<Value, Unanswered>> {
        let answer = match self.answers.locked().pop_front() {
            Some(a) => a,
            None => {
                self.asked.locked().get_or_insert(question);
                json!({"action": "cancel"})
            }
        };
        Box::pin(async move { Ok(answer) })
    }
}

/// Where a session stopped for the operator.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub question: Question,
    /// The tool_use ids to run again.
    pub pending: Vec<String>,
    /// The results of the step's other calls.
    pub done: Vec<Block>,
    /// The operator's answer, once given.
    pub answer: Option<Value>,
}

/// The question the session waits at: its last conversation record is a `waiting` one
/// (perhaps followed by the operator's `answer`). `None` when the session goes on normally.
pub fn waiting(records: &[Record]) -> Option<Waiting> {
    let mut answer = None;
    for r in records.iter().rev() {
        match r {
            Record::Answer { answer: a, .. } => {
                answer.get_or_insert_with(|| a.clone());
            }
            Record::Waiting {
                server,
                message,
                schema,
                key,
                pending,
                done,
                ..
            } => {
                return Some(Waiting {
                    question: Question {
                        server: server.clone(),
                        message: message.clone(),
                        schema: schema.clone(),
                        key: key.clone(),
                    },
                    pending: pending.clone(),
                    done: done.clone(),
                    answer,
                });
            }
            Record::User { .. } | Record::Assistant { .. } | Record::ToolResult { .. } => {
                return None;
            }
            Record::Usage { .. }
            | Record::Compaction { .. }
            | Record::SessionPrompt { .. }
            | Record::IssueBound { .. } => {}
        }
    }
    None
}

/// The `waiting` record of a step whose calls `calls` (tool_use id, server) gave `results`,
/// when `question` came from a server: its calls run again on resume, the others' results
/// are kept.
pub fn record(
    question: Question,
    calls: &[(String, Option<String>)],
    results: Vec<Block>,
) -> Record {
    let pending: Vec<String> = calls
        .iter()
        .filter(|(_, server)| server.as_deref() == Some(question.server.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    let done = results
        .into_iter()
        .filter(|b| !matches!(b, Block::ToolResult { tool_use_id, .. } if pending.contains(tool_use_id)))
        .collect();
    Record::Waiting {
        server: question.server,
        message: question.message,
        schema: question.schema,
        key: question.key,
        pending,
        done,
        ts: crate::record::now(),
    }
}

/// The step a session stopped at: the text of the turn's user message, and the tool calls
/// of the assistant message before the `waiting` record.
pub fn stopped_step(records: &[Record]) -> (String, Vec<Block>) {
    let step = records
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::Assistant { content, .. } => Some(
                content
                    .iter()
                    .filter(|b| matches!(b, Block::ToolUse { .. }))
                    .cloned()
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default();
    let prompt = records
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::User { content, .. } => Some(kitbag_llm::types::blocks_text(content)),
            _ => None,
        })
        .unwrap_or_default();
    (prompt, step)
}

/// What `kitbag sessions answer` records: `KEY=VALUE` pairs checked against the form, or a
/// refusal (`decline`, `cancel`).
pub fn answer_of(
    question: &Question,
    pairs: &[String],
    refusal: Option<&str>,
) -> Result<Value, AnswerError> {
    match refusal {
        Some(action) if pairs.is_empty() => Ok(json!({ "action": action })),
        Some(_) => Err(AnswerError(
            "give either answers or a refusal, not both".into(),
        )),
        None => operator::from_pairs(&question.schema, pairs),
    }
}

/// What a person reads when a session stops for the operator: the question, its fields, and
/// the command that answers it.
pub fn how_to_answer(session: &str, question: &Question) -> String {
    let mut s = match question.checkpoint() {
        Some(id) => format!(
            "session {session} stopped at checkpoint {id} for the operator's sign-off: {}\n",
            question.message
        ),
        None => format!(
            "session {session} is waiting for the operator: {} asks: {}\n",
            question.server, question.message
        ),
    };
    for f in operator::fields(&question.schema) {
        let prompt = operator::prompt(&f);
        if f.title == f.key {
            s.push_str(&format!("  {prompt}\n"));
        } else {
            s.push_str(&format!("  {}: {prompt}\n", f.key));
        }
    }
    s.push_str(&format!(
        "answer with: kitbag sessions answer {session} KEY=VALUE … (or --decline / --cancel); the turn then goes on"
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> Question {
        Question {
            server: "issues".into(),
            message: "Deploy?".into(),
            key: Some("ask".into()),
            schema: json!({"type": "object", "required": ["target"], "properties": {
                "target": {"type": "string", "enum": ["staging", "production"]}}}),
        }
    }

    fn result(id: &str) -> Block {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: vec![],
            is_error: false,
        }
    }

    #[tokio::test]
    async fn a_question_without_an_answer_is_noted_and_cancelled_one_with_is_answered() {
        let p = PauseOperator::new();
        let a = p.ask(question()).await.expect("answered");
        assert_eq!(a, json!({"action": "cancel"}));
        assert_eq!(p.take_asked(), Some(question()));
        assert_eq!(p.take_asked(), None);
        p.give(json!({"action": "accept", "content": {"target": "staging"}}));
        let a = p.ask(question()).await.expect("answered");
        assert_eq!(a["content"]["target"], "staging");
        assert_eq!(p.take_asked(), None);
    }

    #[test]
    fn a_waiting_step_keeps_the_other_calls_results_and_waits_for_its_answer() {
        let calls = [
            ("t1".to_string(), Some("files".to_string())),
            ("t2".to_string(), Some("issues".to_string())),
        ];
        let w = record(question(), &calls, vec![result("t1"), result("t2")]);
        let Record::Waiting { pending, done, .. } = &w else {
            panic!("a waiting record")
        };
        assert_eq!(pending, &["t2".to_string()]);
        assert_eq!(done, &[result("t1")]);
        let mut records = vec![w];
        let found = waiting(&records).expect("waits");
        assert_eq!((found.question, found.answer), (question(), None));
        records.push(Record::Answer {
            answer: json!({"action": "decline"}),
            ts: "t".into(),
        });
        assert_eq!(
            waiting(&records).expect("waits").answer,
            Some(json!({"action": "decline"}))
        );
        records.push(Record::ToolResult {
            content: vec![],
            ts: "t".into(),
        });
        assert_eq!(waiting(&records), None, "answered and resumed");
    }

    #[test]
    fn answers_are_checked_against_the_form() {
        let q = question();
        assert_eq!(
            answer_of(&q, &["target=2".into()], None).expect("ok"),
            json!({"action": "accept", "content": {"target": "production"}})
        );
        assert!(answer_of(&q, &["target=moon".into()], None).is_err());
        assert!(answer_of(&q, &[], None).is_err(), "target is required");
        assert_eq!(
            answer_of(&q, &[], Some("decline")).expect("ok"),
            json!({"action": "decline"})
        );
        assert!(answer_of(&q, &["target=1".into()], Some("cancel")).is_err());
        let how = how_to_answer("s1", &q);
        assert!(how.contains("kitbag sessions answer s1 KEY=VALUE"), "{how}");
        assert!(
            how.contains("\n  target (1 staging, 2 production)\n"),
            "{how}"
        );
    }
}
