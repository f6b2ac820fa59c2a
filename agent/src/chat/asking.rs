//! A server's question to the operator during a `kitbag chat` turn, asked on the terminal: the
//! hub hands it to [`ChatOperator`], the chat's turn loop asks it a field at a time from the
//! same lines the prompts come from (so a pipe can answer too), checked as typed.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use super::input::{Input, Lines};
use crate::host::{Operator, Question, Unanswered};
use crate::operator::{self, fields, parse};

/// A question waiting for the chat's turn loop, and where its answer goes.
pub type Asked = (Question, oneshot::Sender<Result<Value, Unanswered>>);

/// Hands the servers' questions to the chat loop, which owns the terminal.
pub struct ChatOperator {
    tx: mpsc::UnboundedSender<Asked>,
}

impl ChatOperator {
    pub fn new() -> (Arc<ChatOperator>, mpsc::UnboundedReceiver<Asked>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Arc::new(ChatOperator { tx }), rx)
    }
}

impl Operator for ChatOperator {
    fn ask(&self, question: Question) -> BoxFuture<'static, Result<Value, Unanswered>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send((question, reply));
        let ended = || Unanswered("the chat has ended".into());
        Box::pin(async move {
            sent.map_err(|_| ended())?;
            answer.await.unwrap_or_else(|_| Err(ended()))
        })
    }
}

const CANCEL: &str = "cancel";

/// Ask `question` on the terminal: its message, then each field until a valid value (or an
/// empty line for an optional one). `/decline` declines, `/cancel`, Ctrl-C or the end of the
/// input cancels.
pub async fn ask_on_terminal(lines: &mut Lines, question: &Question) -> Result<Value, Unanswered> {
    eprintln!(
        "\n[{} asks] {}  (/decline or /cancel to refuse)",
        question.server, question.message
    );
    let mut content = Map::new();
    for field in fields(&question.schema) {
        loop {
            eprintln!("  {}", operator::prompt(&field));
            let line = match lines.next().await {
                Ok(Input::Line(l)) => l,
                Ok(Input::Interrupted | Input::Eof) => return Ok(json!({"action": CANCEL})),
                Err(e) => return Err(Unanswered(format!("reading the answer: {e}"))),
            };
            match line.trim() {
                "/decline" => return Ok(json!({"action": "decline"})),
                "/cancel" => return Ok(json!({"action": CANCEL})),
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
