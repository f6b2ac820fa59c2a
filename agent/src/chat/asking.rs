//! A server's question to the operator during a `kitbag chat` turn, asked on the terminal: the
//! hub hands it to [`ChatOperator`], the chat's turn loop asks it a field at a time
//! (`operator::ask_lines`) from the same lines the prompts come from (so a pipe can answer
//! too), checked as typed.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::input::{Input, Lines};
use crate::host::{Operator, Question, Unanswered};
use crate::operator::LineSource;

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

/// The chat's lines as answers: Ctrl-C and the end of the input stop the answering.
impl LineSource for Lines {
    fn next_line(&mut self) -> BoxFuture<'_, Result<Option<String>, Unanswered>> {
        Box::pin(async move {
            match self.next().await {
                Ok(Input::Line(l)) => Ok(Some(l)),
                Ok(Input::Interrupted | Input::Eof) => Ok(None),
                Err(e) => Err(Unanswered(format!("reading the answer: {e}"))),
            }
        })
    }
}
