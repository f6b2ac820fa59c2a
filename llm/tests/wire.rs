//! The wire formats, with the vendors' official SDKs (`anthropic`, `openai` on PyPI, in
//! testkit/llm-py/.venv) as the oracle:
//! - every recorded stream in tests/fixtures is parsed by the SDK and by kitbag-llm, and both
//!   must agree (content blocks, tool arguments, stop reason, every usage figure);
//! - every conversation in tests/conversations is sent by the SDK (from the vendor-native
//!   parameters) and by kitbag-llm (from the neutral form), and the requests must be equal.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use kitbag_llm::config::{Limits, Provider};
use kitbag_llm::{Block, Client, LlmError, Request, Response, StopReason};
use kitbag_testkit::clients::{require, testkit_dir};
use kitbag_testkit::llm_mock::{MockLlm, Reply};
use serde_json::{Value, json};

fn python() -> Option<PathBuf> {
    let p = testkit_dir(env!("CARGO_MANIFEST_DIR")).join("llm-py/.venv/bin/python");
    require(
        p.exists(),
        "the Anthropic/OpenAI Python SDKs are not installed (scripts/test installs them in testkit/llm-py/.venv)",
    )
    .then_some(p)
}

/// The SDK's verdict on each file, keyed by its path (one Python process for all of them:
/// importing both SDKs takes seconds).
fn oracle(python: &Path, mode: &str, provider: &str, files: &[PathBuf]) -> Value {
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

fn verdict<'a>(all: &'a Value, file: &Path) -> &'a Value {
    &all[file.to_str().expect("utf-8 path")]
}

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

fn client(provider: Provider, mock: &MockLlm) -> Client {
    let limits = Limits {
        max_attempts: 1,
        ..Limits::default()
    };
    common::client(provider, mock, limits)
}

fn run(client: &Client, req: &Request) -> Result<Response, LlmError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(client.stream(req, &mut |_| {}))
}

fn hello() -> Request {
    Request {
        model: "m".into(),
        messages: vec![kitbag_llm::Message::user_text("hi")],
        max_tokens: 1024,
        ..Request::default()
    }
}

fn stop_name(s: StopReason) -> Value {
    serde_json::to_value(s).expect("stop")
}

#[test]
fn anthropic_streams_parse_as_the_official_sdk_parses_them() {
    let Some(py) = python() else { return };
    let files = fixtures("fixtures/anthropic");
    let all = oracle(&py, "parse", "anthropic", &files);
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let sdk = verdict(&all, &file);
        let mock = MockLlm::start(vec![Reply::sse(std::fs::read(&file).unwrap())]);
        let ours = run(&client(Provider::Anthropic, &mock), &hello());
        if let Some(err) = sdk.get("error") {
            let e = ours.expect_err(&name);
            assert!(
                err["message"]
                    .as_str()
                    .unwrap()
                    .contains("overloaded_error"),
                "{name}: {err}"
            );
            assert!(matches!(e, LlmError::Overloaded { .. }), "{name}: {e:?}");
            continue;
        }
        let sdk = &sdk["ok"];
        let ours = ours.unwrap_or_else(|e| panic!("{name}: {e}"));
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
                u["cache_read_input_tokens"],
                u["cache_creation_input_tokens"]
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
                    // Where the arguments were cut off (max_tokens), the SDK keeps what its
                    // partial-JSON parser recovered ({"path": "notes.md"}, without the
                    // content): kitbag keeps the raw text and never runs a truncated call.
                    assert_eq!(name, "max_tokens.sse");
                    assert_eq!(*id, s["id"]);
                    assert!(raw.starts_with("{\"path\": \"notes.md\""), "{raw}");
                    assert_eq!(s["input"], json!({"path": "notes.md"}));
                }
                other => panic!("{name}: unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn openai_streams_parse_as_the_official_sdk_parses_them() {
    let Some(py) = python() else { return };
    let files = fixtures("fixtures/openai");
    let all = oracle(&py, "parse", "openai", &files);
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let sdk = verdict(&all, &file);
        let mock = MockLlm::start(vec![Reply::sse(std::fs::read(&file).unwrap())]);
        let ours = run(&client(Provider::OpenAi, &mock), &hello());
        if let Some(err) = sdk.get("error") {
            let e = ours.expect_err(&name);
            assert_eq!(err["class"], "APIError", "{name}");
            match e {
                LlmError::Stream { kind, message, .. } => {
                    assert_eq!(kind, "server_error");
                    assert_eq!(message, err["message"].as_str().unwrap());
                }
                other => panic!("{name}: {other:?}"),
            }
            continue;
        }
        let sdk = &sdk["ok"];
        let ours = ours.unwrap_or_else(|e| panic!("{name}: {e}"));
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
}

#[test]
fn requests_equal_what_the_official_sdks_send() {
    let Some(py) = python() else { return };
    let files = fixtures("conversations");
    let by_provider = [
        oracle(&py, "request", "anthropic", &files),
        oracle(&py, "request", "openai", &files),
    ];
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let conv: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let req: Request = serde_json::from_value(conv["neutral"].clone()).unwrap();
        for (i, (provider, label, body)) in [
            (
                Provider::Anthropic,
                "anthropic",
                include_str!("fixtures/anthropic/text.sse"),
            ),
            (
                Provider::OpenAi,
                "openai",
                include_str!("fixtures/openai/text.sse"),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let sdk = verdict(&by_provider[i], &file);
            let mock = MockLlm::start(vec![Reply::sse(body)]);
            run(&client(provider, &mock), &req).unwrap_or_else(|e| panic!("{name}: {e}"));
            let sent = mock.received().remove(0);
            assert_eq!(sent.method, "POST");
            assert_eq!(sent.path, sdk["path"], "{name} {label}");
            assert_eq!(
                sent.body, sdk["body"],
                "{name} {label}: kitbag sent\n{}\nthe SDK sent\n{}",
                sent.body, sdk["body"]
            );
            for header in ["authorization", "anthropic-version", "content-type"] {
                assert_eq!(
                    sent.header(header),
                    sdk["headers"][header].as_str(),
                    "{name} {label} {header}"
                );
            }
        }
    }
}
