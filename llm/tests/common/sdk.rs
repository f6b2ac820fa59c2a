//! The official SDKs as the oracle (`testkit/llm-py/oracle.py`): run it, and check that
//! kitbag-llm made of a stream what the SDK made of the same bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_llm::{Block, Response, StopReason};
use kitbag_testkit::clients::{require, testkit_dir};
use serde_json::{Value, json};

/// The venv's Python with both SDKs, or `None` (with the reason said) when not installed.
pub fn python() -> Option<PathBuf> {
    let p = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("llm-py/.venv/bin/python");
    require(
        p.exists(),
        "the Anthropic/OpenAI Python SDKs are not installed (scripts/test installs them in testkit/llm-py/.venv)",
    )
    .then_some(p)
}

/// The SDK's verdict on each file, keyed by its path (one Python process for all of them:
/// importing both SDKs takes seconds).
pub fn oracle(python: &Path, mode: &str, provider: &str, files: &[PathBuf]) -> Value {
    let script = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("llm-py/oracle.py");
    let out = Command::new(python)
        .arg(script)
        .args([mode, provider])
        .args(files)
        .output()
        .expect("run oracle.py");
    assert!(
        out.status.success(),
        "oracle.py {mode} {provider}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("oracle JSON")
}

pub fn verdict<'a>(all: &'a Value, file: &Path) -> &'a Value {
    &all[file.to_str().expect("utf-8 path")]
}

fn stop_name(s: StopReason) -> Value {
    serde_json::to_value(s).expect("stop")
}

/// kitbag-llm's parse of an Anthropic stream against the SDK's (`sdk`: its message): id, model,
/// stop reason, every usage figure, every block. Returns the tool calls whose arguments were
/// cut off — kitbag keeps their raw text — with what the SDK's partial-JSON parser recovered,
/// for the caller to judge.
pub fn same_as_anthropic_sdk(name: &str, ours: &Response, sdk: &Value) -> Vec<(String, Value)> {
    let mut cut_off = Vec::new();
    assert_eq!(ours.id, sdk["id"], "{name}");
    assert_eq!(ours.model, sdk["model"], "{name}");
    assert_eq!(stop_name(ours.stop), sdk["stop_reason"], "{name}");
    let u = &sdk["usage"];
    assert_eq!(
        json!([
            ours.usage.input_tokens,
            ours.usage.output_tokens,
            ours.usage.cache_read,
            ours.usage.cache_creation
        ]),
        json!([
            u["input_tokens"],
            u["output_tokens"],
            // Absent (a stream without cache fields) counts as none.
            u["cache_read_input_tokens"].as_u64().unwrap_or(0),
            u["cache_creation_input_tokens"].as_u64().unwrap_or(0)
        ]),
        "{name}"
    );
    let blocks = sdk["content"].as_array().unwrap();
    assert_eq!(
        ours.content.len(),
        blocks.len(),
        "{name}: {:?}",
        ours.content
    );
    for (b, s) in ours.content.iter().zip(blocks) {
        match b {
            Block::Text { text } => assert_eq!(json!({"type": "text", "text": text}), *s),
            Block::Thinking {
                thinking,
                signature,
            } => assert_eq!(
                json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                *s
            ),
            Block::ToolUse {
                id,
                name: tool,
                input,
                invalid_input: None,
            } => assert_eq!(
                json!({"type": "tool_use", "id": id, "name": tool, "input": input}),
                *s,
                "{name}"
            ),
            Block::ToolUse {
                id,
                invalid_input: Some(raw),
                ..
            } => {
                assert_eq!(*id, s["id"], "{name}");
                cut_off.push((raw.clone(), s["input"].clone()));
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
    }
    cut_off
}

/// kitbag-llm's parse of an OpenAI stream against the SDK's chunks folded as its own stream
/// state folds them: id, model, finish reason, usage, text and every tool call.
pub fn same_as_openai_sdk(name: &str, ours: &Response, sdk: &Value) {
    assert_eq!(ours.id, sdk["id"], "{name}");
    assert_eq!(ours.model, sdk["model"], "{name}");
    let want_stop = match sdk["finish_reason"].as_str().unwrap() {
        "stop" => StopReason::EndTurn,
        "tool_calls" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => panic!("{name}: finish_reason {other}"),
    };
    assert_eq!(ours.stop, want_stop, "{name}");
    let u = &sdk["usage"];
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(ours.usage.prompt_tokens(), u["prompt_tokens"], "{name}");
    assert_eq!(ours.usage.cache_read, cached, "{name}");
    assert_eq!(ours.usage.output_tokens, u["completion_tokens"], "{name}");
    assert_eq!(ours.usage.cache_creation, 0);
    assert_eq!(
        kitbag_llm::types::blocks_text(&ours.content),
        sdk["content"],
        "{name}"
    );
    let calls: Vec<&Block> = ours.tool_uses().collect();
    let sdk_calls = sdk["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), sdk_calls.len(), "{name}");
    for (b, s) in calls.into_iter().zip(sdk_calls) {
        let Block::ToolUse {
            id,
            name: tool,
            input,
            invalid_input,
        } = b
        else {
            unreachable!()
        };
        assert_eq!(*id, s["id"], "{name}");
        assert_eq!(*tool, s["name"], "{name}");
        let args = s["arguments"].as_str().unwrap();
        match serde_json::from_str::<Value>(args) {
            Ok(v) => assert_eq!(*input, v, "{name}"),
            Err(_) => assert_eq!(invalid_input.as_deref(), Some(args), "{name}"),
        }
    }
}
