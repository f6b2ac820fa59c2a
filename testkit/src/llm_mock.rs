//! A loopback model server for tests: it answers each POST with the next scripted reply (a
//! recorded SSE stream, an HTTP error, a stall, a cut connection) and keeps every request it
//! received, so tests can check what a client sent.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body is written in pieces of this many bytes, flushed one by one.
    pub piece: usize,
    /// After the body (or after `cut_after` bytes of it), hold the connection open this long
    /// without a byte: a stalled stream.
    pub stall: Duration,
    /// Write only this many bytes of the body (its whole length is announced), then stall if
    /// `stall` says so, then close the connection: a broken stream.
    pub cut_after: Option<usize>,
    /// Wait this long after the request before answering: a model that thinks.
    pub delay: Duration,
}

impl Reply {
    /// A 200 event stream with this body.
    pub fn sse(body: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: body.into(),
            piece: 29,
            stall: Duration::ZERO,
            cut_after: None,
            delay: Duration::ZERO,
        }
    }

    /// An error status with a JSON body.
    pub fn error(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
            piece: usize::MAX,
            stall: Duration::ZERO,
            cut_after: None,
            delay: Duration::ZERO,
        }
    }

    /// A 200 JSON body (a non-streaming answer).
    pub fn json(body: &str) -> Self {
        Self::error(200, body)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Answer only `delay` after the request arrived.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// What a client sent.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// When the whole request had arrived.
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Answers the requests it recognizes itself, outside the script (a CLI's side calls: a
/// title, a quota check), given the request's body.
pub type SideRule = fn(&Value) -> Option<Reply>;

pub struct MockLlm {
    ip: std::net::Ipv4Addr,
    port: u16,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    side: Arc<Mutex<Option<SideRule>>>,
    received: Arc<Mutex<Vec<Received>>>,
    /// Connections whose client hung up before the reply was written in full.
    hangups: Arc<Mutex<u32>>,
    /// When each reply had been written in full, in order.
    replied: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl MockLlm {
    pub fn start(replies: Vec<Reply>) -> Self {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST, replies)
    }

    /// Listen on `ip` (a machine's own address, for clients in a sandbox whose loopback is
    /// not the machine's).
    pub fn start_on(ip: std::net::Ipv4Addr, replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind((ip, 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let side: Arc<Mutex<Option<SideRule>>> = Arc::new(Mutex::new(None));
        let received = Arc::new(Mutex::new(Vec::new()));
        let hangups = Arc::new(Mutex::new(0));
        let replied = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, rc, h, rp, s, sd) = (
            replies.clone(),
            received.clone(),
            hangups.clone(),
            replied.clone(),
            stop.clone(),
            side.clone(),
        );
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (r, rc, h, rp, sd) = (r.clone(), rc.clone(), h.clone(), rp.clone(), sd.clone());
                thread::spawn(move || serve(conn, &r, &sd, &rc, &h, &rp));
            }
        });
        Self {
            ip,
            port,
            replies,
            side,
            received,
            hangups,
            replied,
            stop,
            handle: Some(handle),
        }
    }

    /// `http://IP:PORT` (no path).
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.ip, self.port)
    }

    /// Answer the requests `rule` recognizes with its reply, leaving the script for the rest.
    pub fn side_replies(&self, rule: SideRule) {
        *self.side.lock().expect("lock") = Some(rule);
    }

    pub fn push(&self, reply: Reply) {
        self.replies.lock().expect("lock").push_back(reply);
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }

    pub fn hangups(&self) -> u32 {
        *self.hangups.lock().expect("lock")
    }

    /// When each reply had been written in full, in the order written.
    pub fn replied(&self) -> Vec<Instant> {
        self.replied.lock().expect("lock").clone()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect((self.ip, self.port));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    replies: &Mutex<VecDeque<Reply>>,
    side: &Mutex<Option<SideRule>>,
    received: &Mutex<Vec<Received>>,
    hangups: &Mutex<u32>,
    replied: &Mutex<Vec<Instant>>,
) {
    // Small writes go out at once, as a streaming server's do (with Nagle's algorithm a piece
    // would wait for the client's delayed ACK: ~40 ms that no real model server adds).
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let rule = *side.lock().expect("lock");
        let side_reply = rule.and_then(|r| r(&body));
        received.lock().expect("lock").push(Received {
            method,
            path,
            headers,
            body,
            at: Instant::now(),
        });
        let scripted = || replies.lock().expect("lock").pop_front();
        let reply = side_reply.or_else(scripted).unwrap_or_else(|| {
            Reply::error(
                500,
                r#"{"error":{"type":"mock_exhausted","message":"no scripted reply left"}}"#,
            )
        });
        std::thread::sleep(reply.delay);
        if write_reply(&mut conn, &reply).is_err() {
            *hangups.lock().expect("lock") += 1;
            return;
        }
        replied.lock().expect("lock").push(Instant::now());
        if reply.cut_after.is_some() {
            return;
        }
    }
}

fn write_reply(conn: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} X\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len()));
    conn.write_all(head.as_bytes())?;
    let body = match reply.cut_after {
        Some(n) => &reply.body[..n.min(reply.body.len())],
        None => &reply.body[..],
    };
    for piece in body.chunks(reply.piece.max(1)) {
        conn.write_all(piece)?;
        conn.flush()?;
    }
    if !reply.stall.is_zero() {
        // Hold the connection, noticing a client that gives up.
        let deadline = Instant::now() + reply.stall;
        conn.set_read_timeout(Some(Duration::from_millis(20)))?;
        let mut buf = [0u8; 1];
        while Instant::now() < deadline {
            match conn.read(&mut buf) {
                Ok(0) => return Err(std::io::ErrorKind::ConnectionAborted.into()),
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
        }
        conn.set_read_timeout(None)?;
    }
    Ok(())
}

/// One Anthropic stream asking for one tool call.
pub fn anthropic_tool_call(id: &str, name: &str, input: &Value) -> String {
    let events = [
        json!({"type":"message_start","message":{"id":format!("msg_{id}"),"type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":input.to_string()}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}),
        json!({"type":"message_stop"}),
    ];
    anthropic_stream(&events)
}

/// One Anthropic stream answering `text` (what a router model or a plain answer sends).
pub fn anthropic_text(text: &str) -> String {
    let events = [
        json!({"type":"message_start","message":{"id":"msg_t","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}),
        json!({"type":"message_stop"}),
    ];
    anthropic_stream(&events)
}

/// Anthropic stream events as the API sends them: `event: TYPE` and `data: JSON` per event.
pub fn anthropic_stream(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// One OpenAI Responses API stream (what `codex exec` reads): `response.created`, each output
/// item done, `response.completed` with `usage`.
pub fn responses_stream(items: &[Value], usage: (u64, u64, u64)) -> String {
    let (input, cached, output) = usage;
    let mut events = vec![json!({"type": "response.created", "response": {"id": "resp_1"}})];
    for item in items {
        events.push(json!({"type": "response.output_item.done", "item": item}));
    }
    events.push(
        json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {
        "input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output}}}),
    );
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// A Responses API function call item.
pub fn responses_call(call_id: &str, name: &str, arguments: &Value) -> Value {
    json!({"type": "function_call", "call_id": call_id, "name": name,
           "arguments": arguments.to_string()})
}

/// A Responses API assistant message item.
pub fn responses_message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant",
           "content": [{"type": "output_text", "text": text}]})
}

/// Claude Code's calls without tools (a session title, a quota check) answered aside, for
/// [`MockLlm::side_replies`]: the script is for its turns.
pub fn claude_code_side_calls(body: &Value) -> Option<Reply> {
    if body
        .get("tools")
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        return None;
    }
    if body["stream"] == true {
        return Some(Reply::sse(anthropic_text("Delegated task")));
    }
    let message = json!({"id": "msg_side", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "Delegated task"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}});
    Some(Reply::json(&message.to_string()))
}
