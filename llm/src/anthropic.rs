//! The Anthropic Messages API: the request body, and a decoder that turns the SSE stream
//! (`message_start`, `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`) into a
//! [`Response`].

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::decode::{ErrorBody, StreamError, prefix, tool_input};
use crate::error::LlmError;
use crate::types::{
    Block, Message, Request, Response, ResultPart, Role, StopReason, StreamEvent, Usage,
};

pub const PROVIDER: &str = "Anthropic";
/// The API version the official SDK of this time sends (anthropic 2.14: `2026-10-21`, with
/// the key as a bearer token); the wire tests hold kitbag to what that SDK sends.
pub const API_VERSION: &str = "2026-10-21";

/// The request body. Prompt caching through the top-level `cache_control`, which marks the last
/// cacheable block: each step of a tool loop then reads the previous step's prefix (system
/// prompt, tools, earlier turns) from the cache. `temperature` is not sent: this API version
/// no longer takes it.
pub fn request_body(req: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if !req.system.is_empty() {
        body.insert("system".into(), json!(req.system));
    }
    let messages: Vec<Value> = req.messages.iter().map(message).collect();
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if req.no_tool_calls {
            body.insert("tool_choice".into(), json!({"type": "none"}));
        }
    }
    body.insert("cache_control".into(), json!({"type": "ephemeral"}));
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = m.content.iter().map(block).collect();
    json!({"role": role, "content": content})
}

fn image(media_type: &str, data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
}

fn block(b: &Block) -> Value {
    match b {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::Image { media_type, data } => image(media_type, data),
        Block::ToolUse {
            id, name, input, ..
        } => json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let parts: Vec<Value> = content
                .iter()
                .map(|p| match p {
                    ResultPart::Text { text } => json!({"type": "text", "text": text}),
                    ResultPart::Image { media_type, data } => image(media_type, data),
                })
                .collect();
            let mut v =
                json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": parts});
            if *is_error {
                v["is_error"] = json!(true);
            }
            v
        }
        Block::Thinking {
            thinking,
            signature,
        } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
    }
}

// ---- the stream ----

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    /// Event types added after this client was written are ignored, as the API's versioning
    /// policy asks.
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Usage as the API reports it; `message_delta` repeats the counts cumulatively, so a later
/// figure replaces an earlier one.
#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

/// A block being assembled from its deltas.
enum Partial {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    Skipped,
}

/// Turns SSE events into a [`Response`]. Feed every event's data; `finish` when the body ends.
#[derive(Default)]
pub struct Decoder {
    id: String,
    model: String,
    blocks: Vec<Option<Partial>>,
    done: Vec<(usize, Block)>,
    stop: Option<StopReason>,
    usage: Usage,
    stopped: bool,
}

fn protocol(message: impl Into<String>) -> LlmError {
    crate::decode::protocol(PROVIDER, message)
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// One event's `data`. `Ok(Some(_))` is an `error` event.
    pub fn event(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Option<StreamError>, LlmError> {
        let event: Event = serde_json::from_str(data)
            .map_err(|e| protocol(format!("event is not valid JSON ({e}): {}", prefix(data))))?;
        match event {
            Event::MessageStart { message } => {
                self.id = message.id;
                self.model = message.model;
                if let Some(u) = message.usage {
                    self.take_usage(&u);
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, on_event)?,
            Event::ContentBlockDelta { index, delta } => {
                self.block_delta(index, delta, on_event)?
            }
            Event::ContentBlockStop { index } => {
                let Some(partial) = self.blocks.get_mut(index).and_then(Option::take) else {
                    return Err(protocol(format!(
                        "stop for content block {index}, which was not started"
                    )));
                };
                if let Some(b) = finish_block(partial) {
                    self.done.push((index, b));
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(r) = delta.stop_reason {
                    self.stop = Some(stop_reason(&r));
                }
                if let Some(u) = usage {
                    self.take_usage(&u);
                }
            }
            Event::MessageStop => self.stopped = true,
            Event::Ping | Event::Unknown => {}
            Event::Error { error } => {
                return Ok(Some(error.into_stream_error()));
            }
        }
        Ok(None)
    }

    fn block_start(
        &mut self,
        index: usize,
        content_block: StartBlock,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<(), LlmError> {
        let partial = match content_block {
            StartBlock::Text { text } => {
                if !text.is_empty() {
                    on_event(StreamEvent::TextDelta(&text));
                }
                Partial::Text(text)
            }
            StartBlock::ToolUse { id, name } => {
                on_event(StreamEvent::ToolUseStart {
                    id: &id,
                    name: &name,
                });
                Partial::ToolUse {
                    id,
                    name,
                    json: String::new(),
                }
            }
            StartBlock::Thinking {
                thinking,
                signature,
            } => Partial::Thinking {
                thinking,
                signature,
            },
            StartBlock::RedactedThinking { data } => Partial::Redacted(data),
            StartBlock::Unknown => Partial::Skipped,
        };
        if self.blocks.len() <= index {
            self.blocks.resize_with(index + 1, || None);
        }
        if self.blocks[index].is_some() {
            return Err(protocol(format!("content block {index} started twice")));
        }
        self.blocks[index] = Some(partial);
        Ok(())
    }

    /// A delta must match its block's kind; unknown deltas and skipped blocks are ignored.
    fn block_delta(
        &mut self,
        index: usize,
        delta: WireDelta,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<(), LlmError> {
        let Some(Some(partial)) = self.blocks.get_mut(index) else {
            return Err(protocol(format!(
                "delta for content block {index}, which was not started"
            )));
        };
        match (partial, delta) {
            (Partial::Text(t), WireDelta::TextDelta { text }) => {
                on_event(StreamEvent::TextDelta(&text));
                t.push_str(&text);
            }
            (Partial::ToolUse { json, .. }, WireDelta::InputJsonDelta { partial_json }) => {
                on_event(StreamEvent::ToolInputDelta(&partial_json));
                json.push_str(&partial_json);
            }
            (Partial::Thinking { thinking: t, .. }, WireDelta::ThinkingDelta { thinking }) => {
                on_event(StreamEvent::ThinkingDelta(&thinking));
                t.push_str(&thinking);
            }
            (Partial::Thinking { signature: s, .. }, WireDelta::SignatureDelta { signature }) => {
                s.push_str(&signature);
            }
            (Partial::Skipped, _) | (_, WireDelta::Unknown) => {}
            _ => {
                return Err(protocol(format!(
                    "delta of the wrong kind for content block {index}"
                )));
            }
        }
        Ok(())
    }

    fn take_usage(&mut self, u: &WireUsage) {
        if let Some(n) = u.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = u.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.usage.cache_read = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.usage.cache_creation = n;
        }
    }

    /// The body ended. Without `message_stop` the answer is incomplete: an error, never a
    /// silently shortened answer.
    pub fn finish(mut self) -> Result<Response, LlmError> {
        if !self.stopped {
            return Err(protocol("the stream ended before message_stop"));
        }
        // Blocks the server never stopped are finished as they are.
        for (index, partial) in std::mem::take(&mut self.blocks).into_iter().enumerate() {
            if let Some(b) = partial.and_then(finish_block) {
                self.done.push((index, b));
            }
        }
        self.done.sort_by_key(|(i, _)| *i);
        Ok(Response {
            id: self.id,
            model: self.model,
            content: self.done.into_iter().map(|(_, b)| b).collect(),
            stop: self.stop.unwrap_or(StopReason::Other),
            usage: self.usage,
        })
    }
}

fn finish_block(partial: Partial) -> Option<Block> {
    Some(match partial {
        Partial::Text(text) => Block::Text { text },
        Partial::ToolUse { id, name, json } => {
            let (input, invalid_input) = tool_input(&json);
            Block::ToolUse {
                id,
                name,
                input,
                invalid_input,
            }
        }
        Partial::Thinking {
            thinking,
            signature,
        } => Block::Thinking {
            thinking,
            signature,
        },
        Partial::Redacted(data) => Block::RedactedThinking { data },
        Partial::Skipped => return None,
    })
}

fn stop_reason(r: &str) -> StopReason {
    match r {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        // `pause_turn` belongs to server-side tools, which kitbag does not offer.
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        _ => StopReason::Other,
    }
}
