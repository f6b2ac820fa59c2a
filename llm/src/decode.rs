//! What both stream decoders and the transport share: the in-stream error, the vendors' error
//! body, tool arguments as a JSON object, and short quotes of payloads for messages.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::LlmError;

/// A decoded in-stream error (`error` event, error chunk), kept apart so that the transport
/// can decide whether to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamError {
    pub kind: String,
    pub message: String,
}

/// An error object as either vendor writes it: Anthropic `{"type","message"}`, OpenAI
/// `{"message","type","code"}` (where `type` may be null and `code` says what happened).
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub message: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

impl ErrorBody {
    /// The error's kind: its `type`, else its `code`, else `error`.
    pub(crate) fn kind(&self) -> String {
        match (&self.kind, &self.code) {
            (Some(k), _) if !k.is_empty() => k.clone(),
            (_, Some(Value::String(c))) => c.clone(),
            (_, Some(c)) if !c.is_null() => c.to_string(),
            _ => "error".into(),
        }
    }

    pub(crate) fn into_stream_error(self) -> StreamError {
        StreamError {
            kind: self.kind(),
            message: self.message,
        }
    }
}

pub(crate) fn protocol(provider: &'static str, message: impl Into<String>) -> LlmError {
    LlmError::Protocol {
        provider,
        message: message.into(),
    }
}

/// The assembled argument text as a JSON object; anything else is kept as text for the loop
/// to report back to the model. No text at all means no arguments.
pub(crate) fn tool_input(json: &str) -> (Value, Option<String>) {
    if json.trim().is_empty() {
        return (json!({}), None);
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v @ Value::Object(_)) => (v, None),
        _ => (json!({}), Some(json.to_owned())),
    }
}

/// At most 200 bytes of a payload, for error messages.
pub(crate) fn prefix(s: &str) -> &str {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
