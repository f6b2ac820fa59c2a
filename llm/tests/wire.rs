//! The wire formats, with the vendors' official SDKs (`anthropic`, `openai` on PyPI, in
//! testkit/llm-py/.venv) as the oracle:
//! - every recorded stream in tests/fixtures is parsed by the SDK and by kitbag-llm, and both
//!   must agree (content blocks, tool arguments, stop reason, every usage figure);
//! - every conversation in tests/conversations is sent by the SDK (from the vendor-native
//!   parameters) and by kitbag-llm (from the neutral form), and the requests must be equal.
#![allow(clippy::unwrap_used)]

mod common;

use common::sdk::{oracle, python, verdict};

use std::path::{Path, PathBuf};

use kitbag_llm::config::{Limits, Provider};
use kitbag_llm::{Client, LlmError, Request, Response};
use kitbag_testkit::llm_mock::{MockLlm, Reply};
use serde_json::{Value, json};

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
        let cut_off = common::sdk::same_as_anthropic_sdk(&name, &ours, sdk);
        for (raw, recovered) in cut_off {
            // Where the arguments were cut off (max_tokens), the SDK keeps what its
            // partial-JSON parser recovered ({"path": "notes.md"}, without the content):
            // kitbag keeps the raw text and never runs a truncated call.
            assert_eq!(name, "max_tokens.sse");
            assert!(raw.starts_with("{\"path\": \"notes.md\""), "{raw}");
            assert_eq!(recovered, json!({"path": "notes.md"}));
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
        common::sdk::same_as_openai_sdk(&name, &ours, sdk);
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
