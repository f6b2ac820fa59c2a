//! Streaming clients for the two model APIs kitbag's agent loop speaks: the Anthropic Messages
//! API and OpenAI Chat Completions (which OpenAI-compatible local servers — llama.cpp, vLLM,
//! Ollama — also speak). One SSE parser, one provider-neutral conversation type, typed errors
//! and retries. No vendor SDK exists in Rust; the tests check every wire fixture against the
//! vendors' official Python SDKs instead.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod decode;
pub mod error;
pub mod openai;
pub mod sse;
pub mod types;

pub use client::Client;
pub use config::{Endpoint, Limits, ModelSpec, Provider};
pub use error::LlmError;
pub use types::{
    Block, Message, Request, Response, ResultPart, Role, StopReason, StreamEvent, ToolSpec, Usage,
};
