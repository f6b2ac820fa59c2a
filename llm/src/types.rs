//! The conversation in one provider-neutral shape: what sessions store and what both clients
//! translate to and from their wire formats.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One turn of the conversation. Tool results travel in a user message, as the Anthropic API
/// has them; the OpenAI client splits them into `tool` messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Block::text(text)],
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        blocks_text(&self.content)
    }
}

/// The concatenated text blocks of a content list.
pub fn blocks_text(blocks: &[Block]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let Block::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    /// Base64 image data, e.g. `media_type: "image/png"`.
    Image {
        media_type: String,
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        /// The model's argument text when it was not a JSON object (cut off or malformed);
        /// `input` is then `{}` and the loop answers with an error instead of calling the tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalid_input: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        content: Vec<ResultPart>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// Extended thinking (Anthropic). Kept so that it can be sent back unchanged, which the API
    /// requires within a tool-use turn.
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
}

impl Block {
    pub fn text(text: impl Into<String>) -> Self {
        Block::Text { text: text.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResultPart {
    Text { text: String },
    Image { media_type: String, data: String },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Request {
    /// The model id without the provider prefix (`claude-sonnet-4-5`, `gpt-4.1`).
    pub model: String,
    #[serde(default)]
    pub system: String,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Offer the tools but forbid calling them (`tool_choice: none`): for the last call of a
    /// turn whose tool budget is spent — a history with tool calls needs its tools defined.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_tool_calls: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A final answer.
    EndTurn,
    /// The model wants tools run.
    ToolUse,
    /// Cut off at `max_tokens`.
    MaxTokens,
    StopSequence,
    /// The provider refused (Anthropic `refusal`, OpenAI `content_filter`).
    Refusal,
    /// A reason this client does not know; the turn is treated as ended.
    Other,
}

/// Token counts of one call. `input_tokens` counts only prompt tokens that were neither read
/// from nor written to the prompt cache (the Anthropic convention; OpenAI's `prompt_tokens`
/// includes its cached tokens, which are subtracted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

impl Usage {
    /// Every prompt token the call consumed, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read + self.cache_creation
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read += other.cache_read;
        self.cache_creation += other.cache_creation;
    }
}

/// A finished call: the assistant message's blocks, why it stopped and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: String,
    /// The model the provider says answered (may be more specific than the one asked for).
    pub model: String,
    pub content: Vec<Block>,
    pub stop: StopReason,
    pub usage: Usage,
}

impl Response {
    pub fn tool_uses(&self) -> impl Iterator<Item = &Block> {
        self.content
            .iter()
            .filter(|b| matches!(b, Block::ToolUse { .. }))
    }
}

/// What a caller sees while a response streams in (progress output, first-token timing).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent<'a> {
    TextDelta(&'a str),
    ThinkingDelta(&'a str),
    ToolUseStart {
        id: &'a str,
        name: &'a str,
    },
    ToolInputDelta(&'a str),
    /// The call failed in a way worth retrying; the client waits `wait_ms` and tries again
    /// (anything already streamed of the failed attempt is void).
    Retry {
        attempt: u32,
        wait_ms: u64,
        reason: &'a str,
    },
}
