//! Opt-in, against the real APIs: runs only when `KITBAG_LIVE_ANTHROPIC_KEY` /
//! `KITBAG_LIVE_OPENAI_KEY` is set (never on the machines that test this: they reach no model).
//!
//! Each scenario — a text answer, one tool call, parallel tool calls, the tool results sent
//! back for a final answer — goes from kitbag-llm through a loopback recording proxy to the
//! real endpoint. Then every recorded stream is parsed by the official SDK (`oracle.py parse`)
//! and must agree with what kitbag-llm made of it live, as the fixtures do in `wire.rs`. The
//! recordings are written as fresh fixtures to `$KITBAG_LIVE_RECORD_DIR` (default
//! `target/live-transcripts/<provider>/`), request bodies beside them.
//!
//! Settings: `KITBAG_LIVE_ANTHROPIC_MODEL` / `KITBAG_LIVE_OPENAI_MODEL` (default: the crate's
//! default model), `KITBAG_LIVE_ANTHROPIC_BASE_URL` / `KITBAG_LIVE_OPENAI_BASE_URL` (default
//! the vendors' own: `https://api.anthropic.com`, `https://api.openai.com`).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kitbag_llm::config::{Endpoint, Limits, ModelSpec, Provider};
use kitbag_llm::openai::Dialect;
use kitbag_llm::{
    Block, Client, Message, Request, Response, ResultPart, Role, StopReason, ToolSpec,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[test]
fn anthropic_against_the_real_api_when_a_key_is_given() {
    live(
        Provider::Anthropic,
        "ANTHROPIC",
        "https://api.anthropic.com",
    );
}

#[test]
fn openai_against_the_real_api_when_a_key_is_given() {
    live(Provider::OpenAi, "OPENAI", "https://api.openai.com");
}

/// One request and what the real API answered, as it crossed the proxy.
struct Exchange {
    request: Value,
    status: u16,
    body: Vec<u8>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn live(provider: Provider, vendor: &str, default_origin: &str) {
    let Some(key) = var(&format!("KITBAG_LIVE_{vendor}_KEY")) else {
        eprintln!(
            "skipped: KITBAG_LIVE_{vendor}_KEY is not set (the opt-in test against the real API)"
        );
        return;
    };
    let origin =
        var(&format!("KITBAG_LIVE_{vendor}_BASE_URL")).unwrap_or_else(|| default_origin.into());
    let model = var(&format!("KITBAG_LIVE_{vendor}_MODEL"))
        .unwrap_or_else(|| provider.default_model().to_owned());
    let dir = var("KITBAG_LIVE_RECORD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/live-transcripts")
        })
        .join(vendor.to_lowercase());
    record_and_check(provider, &key, &origin, &model, &dir);
}

/// The scenarios through the recording proxy to `origin`, each answer checked, recorded in
/// `dir` and compared with the official SDK's parse of the recording.
fn record_and_check(
    provider: Provider,
    key: &str,
    origin: &str,
    model: &str,
    dir: &std::path::Path,
) {
    let Some(python) = common::sdk::python() else {
        return;
    };
    let vendor = match provider {
        Provider::Anthropic => "anthropic",
        Provider::OpenAi => "openai",
    };
    std::fs::create_dir_all(dir).unwrap();
    // The proxy's own HTTP client needs the TLS provider kitbag-llm installs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let exchanges = Arc::new(Mutex::new(Vec::new()));
    let proxy = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = proxy.local_addr().unwrap().port();
    rt.spawn(serve_proxy(
        proxy,
        origin.trim_end_matches('/').to_owned(),
        exchanges.clone(),
    ));
    let client = Client::new(
        Endpoint {
            spec: ModelSpec {
                provider,
                model: model.to_owned(),
            },
            base_url: match provider {
                Provider::Anthropic => format!("http://127.0.0.1:{port}"),
                Provider::OpenAi => format!("http://127.0.0.1:{port}/v1"),
            },
            api_key: Some(key.to_owned()),
            dialect: Dialect::OpenAi,
        },
        Limits::default(),
    )
    .unwrap();

    let mut answers: Vec<(&str, Response)> = Vec::new();
    for (name, request) in scenarios(model) {
        let request = match name {
            // The parallel calls' results sent back: the conversation goes on from them.
            "tool_results" => follow_up(request, &answers.last().unwrap().1),
            _ => request,
        };
        let before = exchanges.lock().unwrap().len();
        let response = rt
            .block_on(client.stream(&request, &mut |_| {}))
            .unwrap_or_else(|e| panic!("{vendor} {name}: {e}"));
        check_answer(name, &response);
        // The exchange that answered (earlier ones were retried failures): record it.
        let all = exchanges.lock().unwrap();
        let answered = all[before..].last().unwrap();
        assert_eq!(answered.status, 200, "{name}");
        std::fs::write(dir.join(format!("{name}.sse")), &answered.body).unwrap();
        std::fs::write(
            dir.join(format!("{name}.request.json")),
            serde_json::to_vec_pretty(&answered.request).unwrap(),
        )
        .unwrap();
        drop(all);
        answers.push((name, response));
    }

    let files: Vec<PathBuf> = answers
        .iter()
        .map(|(n, _)| dir.join(format!("{n}.sse")))
        .collect();
    let verdicts = common::sdk::oracle(&python, "parse", vendor, &files);
    for ((name, ours), file) in answers.iter().zip(&files) {
        let sdk = &common::sdk::verdict(&verdicts, file)["ok"];
        assert!(
            !sdk.is_null(),
            "{name}: the SDK refused the stream: {verdicts}"
        );
        match provider {
            Provider::Anthropic => {
                let cut = common::sdk::same_as_anthropic_sdk(name, ours, sdk);
                assert!(cut.is_empty(), "{name}: arguments cut off: {cut:?}");
            }
            Provider::OpenAi => common::sdk::same_as_openai_sdk(name, ours, sdk),
        }
    }
    eprintln!(
        "{vendor}: {} scenarios with {model}; fresh transcripts in {}",
        answers.len(),
        dir.display()
    );
}

/// The harness itself, so that the opt-in test is known to work before a key is given: the
/// same scenarios, proxy, recording and SDK comparison against a loopback stand-in that
/// answers as the APIs do (this is not a test of the real APIs).
#[test]
fn the_live_harness_records_and_checks_against_a_loopback_stand_in() {
    use kitbag_testkit::llm_mock::{MockLlm, Reply};
    let weather = |city: &str| json!({"city": city});
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let replies = match provider {
            Provider::Anthropic => vec![
                anthropic_sse(&[json!({"type": "text", "text": "Hello!"})], "end_turn"),
                anthropic_sse(&[tool_block("toolu_1", &weather("Paris"))], "tool_use"),
                anthropic_sse(
                    &[
                        tool_block("toolu_2", &weather("Paris")),
                        tool_block("toolu_3", &weather("Tokyo")),
                    ],
                    "tool_use",
                ),
                anthropic_sse(
                    &[json!({"type": "text", "text": "Rain in both."})],
                    "end_turn",
                ),
            ],
            Provider::OpenAi => vec![
                openai_sse("Hello!", &[]),
                openai_sse("", &[("call_1", weather("Paris"))]),
                openai_sse(
                    "",
                    &[("call_2", weather("Paris")), ("call_3", weather("Tokyo"))],
                ),
                openai_sse("Rain in both.", &[]),
            ],
        };
        let stand_in = MockLlm::start(replies.into_iter().map(Reply::sse).collect());
        let dir = tempfile::tempdir().unwrap();
        record_and_check(provider, "test-key", &stand_in.url(), "m", dir.path());
        let sent = stand_in.received();
        assert_eq!(sent.len(), 4);
        // The proxy passed the client's request on unchanged, and kept it.
        let kept: Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("tool_results.request.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(kept, sent[3].body);
        assert!(
            sent[0]
                .header("authorization")
                .is_some_and(|a| a.ends_with("test-key"))
        );
        // The follow-up carries both results.
        let results = kept.to_string();
        assert!(
            results.contains("Paris: 18 °C") && results.contains("Tokyo: 18 °C"),
            "{results}"
        );
    }
}

fn tool_block(id: &str, input: &Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": "get_weather", "input": input})
}

/// An Anthropic stream of these blocks (tool inputs as `input_json_delta`).
fn anthropic_sse(blocks: &[Value], stop: &str) -> String {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_live","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1}}}),
    ];
    for (i, b) in blocks.iter().enumerate() {
        if b["type"] == "text" {
            events.push(json!({"type":"content_block_start","index":i,"content_block":{"type":"text","text":""}}));
            events.push(json!({"type":"content_block_delta","index":i,"delta":{"type":"text_delta","text":b["text"]}}));
        } else {
            events.push(json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":b["id"],"name":b["name"],"input":{}}}));
            events.push(json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":b["input"].to_string()}}));
        }
        events.push(json!({"type":"content_block_stop","index":i}));
    }
    events.push(json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":9}}));
    events.push(json!({"type":"message_stop"}));
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// An OpenAI stream with this text and these tool calls, then usage and `[DONE]`.
fn openai_sse(text: &str, calls: &[(&str, Value)]) -> String {
    let chunk = |delta: Value, finish: Value| json!({"id":"chatcmpl-live","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": text}),
        Value::Null,
    )];
    for (i, (id, args)) in calls.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": "get_weather", "arguments": args.to_string()}}]}),
            Value::Null,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunks.push(chunk(json!({}), json!(finish)));
    chunks.push(json!({"id":"chatcmpl-live","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}));
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "The current weather in a city.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"]
        }),
    }
}

fn scenarios(model: &str) -> Vec<(&'static str, Request)> {
    let ask = |system: &str, prompt: &str, tools: Vec<ToolSpec>| Request {
        model: model.to_owned(),
        system: system.to_owned(),
        messages: vec![Message::user_text(prompt)],
        tools,
        max_tokens: 1024,
        temperature: None,
        no_tool_calls: false,
    };
    let parallel = ask(
        "Use the tools. Call several at once when they are independent.",
        "What is the weather in Paris and in Tokyo? Call get_weather for both cities at once.",
        vec![weather_tool()],
    );
    vec![
        (
            "text",
            ask("Answer in one short sentence.", "Say hello.", Vec::new()),
        ),
        (
            "tool_use",
            ask(
                "Use the tools.",
                "What is the weather in Paris? Use get_weather.",
                vec![weather_tool()],
            ),
        ),
        ("parallel_tools", parallel.clone()),
        ("tool_results", parallel),
    ]
}

/// `request` continued with `answer` and a result for each of its tool calls.
fn follow_up(mut request: Request, answer: &Response) -> Request {
    request.messages.push(Message {
        role: Role::Assistant,
        content: answer.content.clone(),
    });
    let results = answer
        .tool_uses()
        .filter_map(|b| match b {
            Block::ToolUse { id, input, .. } => Some(Block::ToolResult {
                tool_use_id: id.clone(),
                content: vec![ResultPart::Text {
                    text: format!(
                        "{}: 18 °C, light rain",
                        input["city"].as_str().unwrap_or("?")
                    ),
                }],
                is_error: false,
            }),
            _ => None,
        })
        .collect();
    request.messages.push(Message {
        role: Role::User,
        content: results,
    });
    request
}

/// What each scenario's answer must be, whatever the model's words.
fn check_answer(name: &str, r: &Response) {
    let calls: Vec<&Block> = r.tool_uses().collect();
    match name {
        "text" | "tool_results" => {
            assert_eq!(r.stop, StopReason::EndTurn, "{name}: {r:?}");
            assert!(
                !kitbag_llm::types::blocks_text(&r.content).trim().is_empty(),
                "{name}"
            );
        }
        _ => {
            assert_eq!(r.stop, StopReason::ToolUse, "{name}: {r:?}");
            assert!(!calls.is_empty(), "{name}");
            for c in &calls {
                let Block::ToolUse {
                    name: tool,
                    input,
                    invalid_input,
                    ..
                } = c
                else {
                    unreachable!()
                };
                assert_eq!(tool, "get_weather", "{name}");
                assert!(invalid_input.is_none(), "{name}: {invalid_input:?}");
                assert!(input["city"].is_string(), "{name}: {input}");
            }
        }
    }
    assert!(
        r.usage.prompt_tokens() > 0 && r.usage.output_tokens > 0,
        "{name}"
    );
}

/// The recording proxy: each request forwarded to `origin` with its path and headers, the
/// whole answer kept and passed back.
async fn serve_proxy(listener: TcpListener, origin: String, log: Arc<Mutex<Vec<Exchange>>>) {
    let http = reqwest::Client::new();
    while let Ok((conn, _)) = listener.accept().await {
        let (http, origin, log) = (http.clone(), origin.clone(), log.clone());
        tokio::spawn(async move {
            if let Err(e) = forward(conn, &http, &origin, &log).await {
                eprintln!("live proxy: {e}");
            }
        });
    }
}

async fn forward(
    mut conn: TcpStream,
    http: &reqwest::Client,
    origin: &str,
    log: &Mutex<Vec<Exchange>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut piece = [0u8; 8192];
        let n = conn.read(&mut piece).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&piece[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let (method, path) = (
        first.next().unwrap_or("POST").to_owned(),
        first.next().unwrap_or("/").to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut piece = vec![0u8; length - body.len()];
        let n = conn.read(&mut piece).await?;
        if n == 0 {
            return Ok(());
        }
        body.extend_from_slice(&piece[..n]);
    }
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::POST);
    let mut req = http.request(method, format!("{origin}{path}"));
    for (k, v) in &headers {
        if !["host", "content-length", "connection", "accept-encoding"].contains(&k.as_str()) {
            req = req.header(k, v);
        }
    }
    let (status, answer_headers, answer) = match req.body(body.clone()).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let keep: Vec<(String, String)> = r
                .headers()
                .iter()
                .filter(|(k, _)| {
                    [
                        "content-type",
                        "retry-after",
                        "x-should-retry",
                        "request-id",
                    ]
                    .contains(&k.as_str())
                })
                .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
                .collect();
            let bytes = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            (status, keep, bytes)
        }
        Err(e) => (502, Vec::new(), format!("upstream: {e}").into_bytes()),
    };
    log.lock().unwrap().push(Exchange {
        request: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status,
        body: answer.clone(),
    });
    let mut reply = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in answer_headers {
        reply.push_str(&format!("{k}: {v}\r\n"));
    }
    reply.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    ));
    conn.write_all(reply.as_bytes()).await?;
    conn.write_all(&answer).await?;
    conn.shutdown().await
}
