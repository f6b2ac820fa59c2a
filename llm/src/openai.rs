//! OpenAI Chat Completions (and the servers that copy it: llama.cpp, vLLM, Ollama): the
//! request body, and a decoder for the chunk stream (`tool_calls` deltas by index,
//! `finish_reason`, the final usage chunk, `[DONE]`).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::decode::{ErrorBody, StreamError, prefix, tool_input};
use crate::error::LlmError;
use crate::types::{
    Block, Message, Request, Response, ResultPart, Role, StopReason, StreamEvent, Usage,
};

pub const PROVIDER: &str = "OpenAI";

/// Which spelling of the output limit the endpoint takes: OpenAI's own API wants
/// `max_completion_tokens` (reasoning models refuse `max_tokens`); the compatible local servers
/// all read `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Compatible,
}

pub fn request_body(req: &Request, dialect: Dialect) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        push_message(m, &mut messages);
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if req.no_tool_calls {
            body.insert("tool_choice".into(), json!("none"));
        }
    }
    let limit = match dialect {
        Dialect::OpenAi => "max_completion_tokens",
        Dialect::Compatible => "max_tokens",
    };
    body.insert(limit.into(), json!(req.max_tokens));
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

fn data_url(media_type: &str, data: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})
}

/// One neutral message becomes one or more chat messages: tool results become `tool`
/// messages (text only, as the API takes them) and any images they carried follow in one user
/// message, so that the model still sees them.
fn push_message(m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::Assistant => {
            let text = crate::types::blocks_text(&m.content);
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse {
                        id, name, input, ..
                    } => Some(json!({"id": id, "type": "function", "function": {
                        "name": name, "arguments": input.to_string()}})),
                    _ => None,
                })
                .collect();
            let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
        Role::User => {
            let mut parts = Vec::new();
            let mut result_images = Vec::new();
            for b in &m.content {
                match b {
                    Block::Text { text } => parts.push(json!({"type": "text", "text": text})),
                    Block::Image { media_type, data } => parts.push(data_url(media_type, data)),
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        let mut text = String::new();
                        if *is_error {
                            text.push_str("error: ");
                        }
                        for p in content {
                            match p {
                                ResultPart::Text { text: t } => {
                                    if !text.is_empty() && !text.ends_with(' ') {
                                        text.push('\n');
                                    }
                                    text.push_str(t);
                                }
                                ResultPart::Image { media_type, data } => {
                                    result_images.push(data_url(media_type, data));
                                }
                            }
                        }
                        out.push(
                            json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}),
                        );
                    }
                    Block::ToolUse { .. }
                    | Block::Thinking { .. }
                    | Block::RedactedThinking { .. } => {}
                }
            }
            if !result_images.is_empty() {
                let mut content = vec![
                    json!({"type": "text", "text": "Images returned by the tool calls above:"}),
                ];
                content.extend(result_images);
                out.push(json!({"role": "user", "content": content}));
            }
            if !parts.is_empty() {
                // A lone text part is sent as a plain string, the form every compatible
                // server accepts.
                let content = match parts.as_slice() {
                    [p] if p["type"] == "text" => p["text"].clone(),
                    _ => Value::Array(parts),
                };
                out.push(json!({"role": "user", "content": content}));
            }
        }
    }
}

// ---- the stream ----

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Default)]
struct CallPartial {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
pub struct Decoder {
    id: String,
    model: String,
    text: String,
    refusal: String,
    calls: Vec<CallPartial>,
    finish: Option<StopReason>,
    usage: Option<Usage>,
}

fn protocol(message: impl Into<String>) -> LlmError {
    crate::decode::protocol(PROVIDER, message)
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn event(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Option<StreamError>, LlmError> {
        if data.trim() == "[DONE]" {
            return Ok(None);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| protocol(format!("chunk is not valid JSON ({e}): {}", prefix(data))))?;
        if let Some(e) = chunk.error {
            return Ok(Some(e.into_stream_error()));
        }
        if let Some(id) = chunk.id.filter(|s| !s.is_empty()) {
            self.id = id;
        }
        if let Some(m) = chunk.model.filter(|s| !s.is_empty()) {
            self.model = m;
        }
        if let Some(u) = chunk.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: u.prompt_tokens.saturating_sub(cached),
                output_tokens: u.completion_tokens,
                cache_read: cached,
                cache_creation: 0,
            });
        }
        // Only the first choice: kitbag never asks for `n > 1`.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(t) = delta.content.filter(|t| !t.is_empty()) {
                on_event(StreamEvent::TextDelta(&t));
                self.text.push_str(&t);
            }
            if let Some(r) = delta.refusal {
                self.refusal.push_str(&r);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.tool_call_delta(call, on_event)?;
            }
            if let Some(r) = choice.finish_reason {
                self.finish = Some(stop_reason(&r));
            }
        }
        Ok(None)
    }

    fn tool_call_delta(
        &mut self,
        call: ToolCallDelta,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<(), LlmError> {
        if call.index > 127 {
            return Err(protocol(format!(
                "tool call index {} is out of range",
                call.index
            )));
        }
        if self.calls.len() <= call.index {
            self.calls.resize_with(call.index + 1, CallPartial::default);
        }
        let slot = &mut self.calls[call.index];
        let started = !slot.id.is_empty() || !slot.name.is_empty();
        if let Some(id) = call.id.filter(|s| !s.is_empty()) {
            slot.id = id;
        }
        let function = call.function;
        if let Some(name) = function.as_ref().and_then(|f| f.name.as_ref()) {
            slot.name.push_str(name);
        }
        if !started && (!slot.id.is_empty() || !slot.name.is_empty()) {
            on_event(StreamEvent::ToolUseStart {
                id: &slot.id,
                name: &slot.name,
            });
        }
        if let Some(args) = function.and_then(|f| f.arguments) {
            on_event(StreamEvent::ToolInputDelta(&args));
            slot.arguments.push_str(&args);
        }
        Ok(())
    }

    /// The body ended. A stream that ended without `[DONE]` is still complete once a
    /// `finish_reason` came (some compatible servers stop there); before that it was cut off.
    pub fn finish(self) -> Result<Response, LlmError> {
        let Some(mut stop) = self.finish else {
            return Err(protocol("the stream ended before a finish_reason"));
        };
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        if !self.refusal.is_empty() {
            content.push(Block::Text { text: self.refusal });
            stop = StopReason::Refusal;
        }
        for (i, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(protocol(format!("tool call {i} has no name")));
            }
            let (input, invalid_input) = tool_input(&call.arguments);
            content.push(Block::ToolUse {
                id: if call.id.is_empty() {
                    format!("call_{i}")
                } else {
                    call.id
                },
                name: call.name,
                input,
                invalid_input,
            });
        }
        Ok(Response {
            id: self.id,
            model: self.model,
            content,
            stop,
            usage: self.usage.unwrap_or_default(),
        })
    }
}

fn stop_reason(r: &str) -> StopReason {
    match r {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        _ => StopReason::Other,
    }
}
