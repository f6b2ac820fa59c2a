//! Retries, deadlines and cancellation against a loopback server that misbehaves on purpose:
//! overloaded and rate-limited answers, refused keys, streams that stall, break or end early.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::client;
use kitbag_llm::config::{Endpoint, Limits, ModelSpec, Provider};
use kitbag_llm::openai::Dialect;
use kitbag_llm::{Client, LlmError, Message, Request, Response, StopReason, StreamEvent};
use kitbag_testkit::llm_mock::{MockLlm, Reply};

const TEXT: &str = include_str!("fixtures/anthropic/text.sse");
const TOOL_USE: &str = include_str!("fixtures/anthropic/tool_use.sse");
const OVERLOADED: &str = include_str!("fixtures/anthropic/overloaded.sse");
const OPENAI_TOOLS: &str = include_str!("fixtures/openai/tool_calls.sse");

fn limits() -> Limits {
    Limits {
        max_attempts: 4,
        backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        idle_timeout: Duration::from_millis(300),
        response_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

fn request() -> Request {
    Request {
        model: "m".into(),
        messages: vec![Message::user_text("hi")],
        max_tokens: 100,
        ..Request::default()
    }
}

/// The result and the retry reasons reported on the way.
fn run(client: &Client) -> (Result<Response, LlmError>, Vec<String>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut retries = Vec::new();
    let r = rt.block_on(client.stream(&request(), &mut |e| {
        if let StreamEvent::Retry { reason, .. } = e {
            retries.push(reason.to_owned());
        }
    }));
    (r, retries)
}

#[test]
fn overload_and_rate_limits_are_retried_until_an_answer_comes() {
    let mock = MockLlm::start(vec![
        Reply::error(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        Reply::error(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        )
        .header("retry-after", "0"),
        Reply::sse(OVERLOADED),
        Reply::sse(TOOL_USE),
    ]);
    let (r, retries) = run(&client(Provider::Anthropic, &mock, limits()));
    let r = r.unwrap();
    assert_eq!(r.stop, StopReason::ToolUse);
    assert_eq!(r.usage.cache_read, 640);
    assert_eq!(mock.received().len(), 4);
    assert_eq!(retries.len(), 3, "{retries:?}");
    assert!(retries[0].contains("overloaded"), "{retries:?}");
    assert!(retries[1].contains("429"), "{retries:?}");
    assert!(retries[2].contains("Overloaded"), "{retries:?}");
}

#[test]
fn a_refused_key_is_reported_at_once_with_the_variable_to_fix() {
    let mock = MockLlm::start(vec![Reply::error(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    )]);
    let (r, retries) = run(&client(Provider::Anthropic, &mock, limits()));
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::Auth { status: 401, .. }), "{e:?}");
    assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
    assert!(e.to_string().contains("invalid x-api-key"), "{e}");
    assert!(retries.is_empty());
    assert_eq!(mock.received().len(), 1);
}

#[test]
fn a_rejected_request_is_not_retried() {
    let mock = MockLlm::start(vec![Reply::error(
        400,
        r#"{"error":{"message":"messages: too long","type":"invalid_request_error","code":null}}"#,
    )]);
    let (r, _) = run(&client(Provider::OpenAi, &mock, limits()));
    match r.unwrap_err() {
        LlmError::Rejected {
            status,
            kind,
            message,
            ..
        } => {
            assert_eq!((status, kind.as_str()), (400, "invalid_request_error"));
            assert_eq!(message, "messages: too long");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.received().len(), 1);
}

#[test]
fn the_server_can_forbid_or_demand_a_retry() {
    let mock = MockLlm::start(vec![
        Reply::error(500, r#"{"error":{"type":"api_error","message":"boom"}}"#)
            .header("x-should-retry", "false"),
    ]);
    let (r, _) = run(&client(Provider::Anthropic, &mock, limits()));
    assert!(matches!(
        r.unwrap_err(),
        LlmError::Server {
            status: 500,
            attempts: 1,
            ..
        }
    ),);
    let mock = MockLlm::start(vec![
        Reply::error(400, r#"{"error":{"type":"x","message":"try again"}}"#)
            .header("x-should-retry", "true"),
        Reply::sse(TEXT),
    ]);
    let (r, _) = run(&client(Provider::Anthropic, &mock, limits()));
    assert_eq!(r.unwrap().stop, StopReason::EndTurn);
}

#[test]
fn retries_end_with_the_count_of_attempts() {
    let mock = MockLlm::start(vec![
        Reply::error(503, "upstream unavailable"),
        Reply::error(503, "upstream unavailable"),
        Reply::error(503, "upstream unavailable"),
        Reply::error(503, "upstream unavailable"),
    ]);
    let (r, retries) = run(&client(Provider::OpenAi, &mock, limits()));
    let e = r.unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Server {
                status: 503,
                attempts: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("upstream unavailable"), "{e}");
    assert_eq!(retries.len(), 3);
    assert_eq!(mock.received().len(), 4);
}

#[test]
fn a_silent_stream_times_out_and_the_call_is_tried_again() {
    let mut stalled = Reply::sse(TEXT);
    stalled.cut_after = Some(TEXT.len() / 2);
    stalled.stall = Duration::from_secs(5);
    let mock = MockLlm::start(vec![stalled, Reply::sse(TEXT)]);
    let started = Instant::now();
    let (r, retries) = run(&client(Provider::Anthropic, &mock, limits()));
    assert_eq!(r.unwrap().stop, StopReason::EndTurn);
    assert!(retries[0].contains("silent"), "{retries:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    // The client hung up on the stalled connection instead of leaving it open.
    let deadline = Instant::now() + Duration::from_secs(2);
    while mock.hangups() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mock.hangups(), 1);
}

#[test]
fn a_broken_stream_is_retried_and_a_short_one_is_an_error() {
    let mut cut = Reply::sse(OPENAI_TOOLS);
    cut.cut_after = Some(OPENAI_TOOLS.len() / 3);
    let mock = MockLlm::start(vec![cut, Reply::sse(OPENAI_TOOLS)]);
    let (r, retries) = run(&client(Provider::OpenAi, &mock, limits()));
    assert_eq!(r.unwrap().stop, StopReason::ToolUse);
    assert_eq!(retries.len(), 1, "{retries:?}");

    // Complete as HTTP, incomplete as a message (no message_stop): never a silently
    // shortened answer.
    let short = &TEXT[..TEXT.find("event: message_delta").unwrap()];
    let mock = MockLlm::start(vec![Reply::sse(short)]);
    let (r, retries) = run(&client(Provider::Anthropic, &mock, limits()));
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::Protocol { .. }), "{e:?}");
    assert!(e.to_string().contains("message_stop"), "{e}");
    assert!(retries.is_empty());
}

#[test]
fn malformed_events_are_protocol_errors_naming_the_payload() {
    let bad = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":4,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    let mock = MockLlm::start(vec![Reply::sse(bad)]);
    let (r, _) = run(&client(Provider::Anthropic, &mock, limits()));
    let e = r.unwrap_err().to_string();
    assert!(e.contains("content block 4"), "{e}");

    let mock = MockLlm::start(vec![Reply::sse("data: {not json\n\n")]);
    let (r, _) = run(&client(Provider::OpenAi, &mock, limits()));
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("not valid JSON") && e.contains("{not json"),
        "{e}"
    );
}

#[test]
fn dropping_the_call_closes_the_connection() {
    let mut stalled = Reply::sse(TEXT);
    stalled.cut_after = Some(100);
    stalled.stall = Duration::from_secs(10);
    let mock = MockLlm::start(vec![stalled]);
    let c = client(
        Provider::Anthropic,
        &mock,
        Limits {
            idle_timeout: Duration::from_secs(30),
            ..limits()
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = request();
    let cancelled = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(300), c.stream(&req, &mut |_| {})).await
    });
    assert!(
        cancelled.is_err(),
        "the call should still have been running"
    );
    // The runtime keeps running (as the agent loop's does): the connection's task sees the
    // response dropped and closes the socket.
    let deadline = Instant::now() + Duration::from_secs(2);
    while mock.hangups() == 0 && Instant::now() < deadline {
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    }
    assert_eq!(mock.hangups(), 1, "the server still holds the connection");
}

#[test]
fn an_unreachable_endpoint_is_a_network_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = Client::new(
        Endpoint {
            spec: ModelSpec {
                provider: Provider::OpenAi,
                model: "m".into(),
            },
            base_url: format!("http://127.0.0.1:{port}/v1"),
            api_key: None,
            dialect: Dialect::Compatible,
        },
        Limits {
            max_attempts: 2,
            ..limits()
        },
    )
    .unwrap();
    let (r, retries) = run(&c);
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::Network { .. }), "{e:?}");
    assert!(e.to_string().to_lowercase().contains("connect"), "{e}");
    assert_eq!(retries.len(), 1);
}
