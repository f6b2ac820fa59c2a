//! Pod subresources that move bytes: `exec` and `portforward` over WebSocket, `log`.
//!
//! WebSocket channel protocol (`v5.channel.k8s.io`, `v4.channel.k8s.io`): binary messages
//! whose first byte is the channel. exec: 0 stdin, 1 stdout, 2 stderr, 3 the exit Status
//! (JSON `metav1.Status`), 4 resize (ignored); v5's 255 closes a channel (`[255, 0]`: stdin
//! ended). portforward (`v4.channel.k8s.io`): channel 2i carries port i's data, 2i+1 its
//! errors; the server opens each channel with the port number, 2 bytes little-endian, as
//! the kubelet does.
//!
//! Limits: the agent's exec takes its whole stdin up front, so with `stdin=true` the
//! command starts only once stdin is closed (v5 close, or the WebSocket closing) — an
//! interactive command sees nothing until then; at most 16 MiB. No terminal: `tty=true`
//! runs without one (stderr then goes to the stdout channel). kubectl's `port-forward`
//! (SPDY tunnelled in a WebSocket, or a SPDY upgrade) goes to [`super::transport`]; a SPDY
//! upgrade for exec is refused with a Status.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kitbag_vm::engine::Engine;
use kitbag_vm::proto::{self, ExecRequest, Frame as AgentFrame, Request as AgentRequest};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::Inner;
use super::http::{Query, Resp, Target, full, q_get, q_true};
use super::portforward::{BoxRead, BoxWrite, Dial};
use super::resources::PODS;
use super::store::{ApiError, ApiResult, key};
use super::transport::{self, TUNNEL_PROTOCOL};

const MAX_STDIN: usize = 16 << 20;
const EXEC_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
const PORTFORWARD_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", TUNNEL_PROTOCOL];

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

pub async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
    t: Target,
    sub: &str,
    q: Query,
) -> ApiResult<Resp> {
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let pod = inner
        .store()
        .get(&key(&PODS, &ns, &name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(&PODS, &name))?;
    match (sub, req.method()) {
        ("log", &Method::GET) => logs(inner, &pod, &q),
        ("portforward", &Method::GET | &Method::POST) if transport::is_spdy_upgrade(&req) => {
            let (engine, who) = running(&inner, &pod, &q)?;
            transport::upgrade_spdy(&inner, req, dialer(engine), who)
        }
        ("exec" | "portforward", &Method::GET | &Method::POST) => upgrade(inner, req, &pod, sub, q),
        ("exec" | "portforward" | "log", m) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({m})"),
        )),
        _ => Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

/// The container a request names (default: the first), checked against the pod.
fn container(pod: &Value, q: &Query) -> ApiResult<String> {
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    match q_get(q, "container").filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => names
            .first()
            .map(|s| s.to_string())
            .ok_or_else(|| ApiError::bad_request("the pod has no containers")),
    }
}

fn header_values(req: &Request<Incoming>, name: &str) -> Vec<String> {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The WebSocket handshake's checks: the client's key and the subprotocol chosen (None when
/// the client offered none).
fn handshake(req: &Request<Incoming>, sub: &str) -> ApiResult<(Vec<u8>, Option<String>)> {
    let upgrade_to = header_values(req, "upgrade").join(",").to_ascii_lowercase();
    if upgrade_to.contains("spdy") {
        return Err(ApiError::bad_request(
            "SPDY upgrades for exec are not supported by this API server (the kitbag fixture speaks the WebSocket channel protocols there)",
        ));
    }
    let key_header = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| k.as_bytes().to_vec());
    let Some(ws_key) = key_header.filter(|_| upgrade_to.contains("websocket")) else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    let offered = header_values(req, "sec-websocket-protocol");
    let supported: &[&str] = if sub == "exec" {
        &EXEC_PROTOCOLS
    } else {
        &PORTFORWARD_PROTOCOLS
    };
    let chosen = supported
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .map(|p| p.to_string());
    if chosen.is_none() && !offered.is_empty() {
        return Err(ApiError::bad_request(format!(
            "requested protocol(s) are not supported: {offered:?}; supports {supported:?}"
        )));
    }
    Ok((ws_key, chosen))
}

/// What the stream will do, from the query.
fn job(pod: &Value, sub: &str, q: &Query, cwd: &str, chosen: Option<&str>) -> ApiResult<Job> {
    if sub != "exec" {
        return Ok(if chosen == Some(TUNNEL_PROTOCOL) {
            Job::Tunnel(who(pod))
        } else {
            Job::Forward(ports(q)?, who(pod))
        });
    }
    let argv: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    if argv.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    Ok(Job::Exec(ExecJob {
        argv,
        cwd: cwd.to_string(),
        stdin: q_true(q, "stdin"),
        stdout: q_true(q, "stdout") || !q.iter().any(|(k, _)| k == "stdout"),
        stderr: q_true(q, "stderr") || !q.iter().any(|(k, _)| k == "stderr"),
        tty: q_true(q, "tty"),
        v5: chosen == Some(EXEC_PROTOCOLS[0]),
    }))
}

fn switching_protocols(ws_key: &[u8], chosen: Option<String>) -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&derive_accept_key(ws_key)) {
        h.insert("sec-websocket-accept", v);
    }
    if let Some(p) = chosen.and_then(|p| hyper::header::HeaderValue::from_str(&p).ok()) {
        h.insert("sec-websocket-protocol", p);
    }
    resp
}

fn upgrade(
    inner: Arc<Inner>,
    mut req: Request<Incoming>,
    pod: &Value,
    sub: &str,
    q: Query,
) -> ApiResult<Resp> {
    let (ws_key, chosen) = handshake(&req, sub)?;
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let c = container(pod, &q)?;
    let (engine, rt) = inner.kubelet.running(ns, name).ok_or_else(|| {
        ApiError::bad_request(format!("container {c} in pod {name} is not running"))
    })?;
    let job = job(pod, sub, &q, &rt.cwd, chosen.as_deref())?;
    let on_upgrade = hyper::upgrade::on(&mut req);
    let cancel = inner.cancel.clone();
    let stats = inner.portforward.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        let session = async {
            match job {
                Job::Exec(j) => exec(ws, engine, j).await,
                Job::Forward(ports, who) => forward(ws, engine, ports, who).await,
                Job::Tunnel(who) => {
                    let token = cancel.clone();
                    transport::tunnel(ws, dialer(engine), who, stats, token).await
                }
            }
        };
        tokio::select! {
            _ = session => {}
            _ = cancel.cancelled() => {}
        }
    });
    Ok(switching_protocols(&ws_key, chosen))
}

enum Job {
    Exec(ExecJob),
    Forward(Vec<u16>, String),
    /// kubectl's SPDY session inside the WebSocket.
    Tunnel(String),
}

/// `NAME, uid UID`, as the kubelet names a pod in port-forward errors.
fn who(pod: &Value) -> String {
    format!(
        "{}, uid {}",
        pod["metadata"]["name"].as_str().unwrap_or_default(),
        pod["metadata"]["uid"].as_str().unwrap_or_default()
    )
}

/// The pod's running sandbox (checking the container the query names) and its name for
/// errors.
fn running(inner: &Inner, pod: &Value, q: &Query) -> ApiResult<(Arc<Engine>, String)> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let c = container(pod, q)?;
    let (engine, _) = inner.kubelet.running(ns, name).ok_or_else(|| {
        ApiError::bad_request(format!("container {c} in pod {name} is not running"))
    })?;
    Ok((engine, who(pod)))
}

/// Connections to the pod's ports through its agent, for a SPDY session.
fn dialer(engine: Arc<Engine>) -> Dial {
    Arc::new(move |port| {
        let engine = engine.clone();
        Box::pin(async move {
            match dial(&engine, port).await {
                Ok((r, w)) => Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite)),
                Err(e) => Err(format!(
                    "failed to connect to localhost:{port} inside the pod: {e}"
                )),
            }
        })
    })
}

struct ExecJob {
    argv: Vec<String>,
    cwd: String,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    v5: bool,
}

fn ports(q: &Query) -> ApiResult<Vec<u16>> {
    let mut out = Vec::new();
    for (_, v) in q.iter().filter(|(k, _)| k == "ports") {
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => out.push(n),
                _ => return Err(ApiError::bad_request(format!("invalid port {p:?}"))),
            }
        }
    }
    if out.is_empty() {
        return Err(ApiError::bad_request("at least 1 port must be specified"));
    }
    Ok(out)
}

fn channel_msg(ch: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(ch);
    b.extend_from_slice(data);
    Message::Binary(Bytes::from(b))
}

/// A Close with code 1000: client-go reads it as the end of every stream (a bare Close,
/// 1005, is an error to it).
fn normal_close() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn failure(message: String) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

/// Collect stdin until the client closes it: v5's `[255, 0]`, or the WebSocket's end.
async fn read_stdin(rx: &mut futures::stream::SplitStream<Ws>) -> Result<Vec<u8>, String> {
    let mut stdin = Vec::new();
    while let Some(msg) = rx.next().await {
        match msg {
            Ok(Message::Binary(b)) => match b.first() {
                Some(0) => stdin.extend_from_slice(&b[1..]),
                Some(255) if b.get(1) == Some(&0) => break,
                _ => {}
            },
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
        if stdin.len() > MAX_STDIN {
            return Err(format!("stdin is larger than {MAX_STDIN} bytes"));
        }
    }
    Ok(stdin)
}

async fn exec(ws: Ws, engine: Arc<Engine>, j: ExecJob) {
    let (mut tx, mut rx) = ws.split();
    let stdin = if j.stdin {
        match read_stdin(&mut rx).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx
                    .send(channel_msg(3, failure(e).to_string().as_bytes()))
                    .await;
                let _ = tx.send(normal_close()).await;
                return;
            }
        }
    } else {
        Vec::new()
    };
    let status = run_exec(&engine, &j, stdin, &mut tx, &mut rx).await;
    let _ = tx.send(channel_msg(3, status.to_string().as_bytes())).await;
    let _ = tx.send(normal_close()).await;
    linger(&mut rx).await;
}

/// After our close frame, read until the client's close (or its end) before dropping the
/// connection. Dropping it with the client's late frames unread makes the kernel answer
/// with a reset, and a reset can discard what the client had not read yet: the exit status,
/// or a port's error. Bounded, for a client that never answers.
async fn linger(rx: &mut futures::stream::SplitStream<Ws>) {
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(m)) = rx.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// Run the command through the agent, relaying its output; the Status for channel 3.
async fn run_exec(
    engine: &Engine,
    j: &ExecJob,
    stdin: Vec<u8>,
    tx: &mut futures::stream::SplitSink<Ws, Message>,
    rx: &mut futures::stream::SplitStream<Ws>,
) -> Value {
    let stream = match engine.agent().await {
        Ok(s) => s,
        Err(e) => return failure(format!("the container's agent does not answer: {e}")),
    };
    let (read, mut write) = tokio::io::split(stream);
    let req = AgentRequest::Exec(ExecRequest {
        argv: j.argv.clone(),
        env: Default::default(),
        cwd: j.cwd.clone(),
        stdin_len: stdin.len() as u64,
        job: None,
    });
    let sent = async {
        proto::write_line(&mut write, &req).await?;
        write.write_all(&stdin).await?;
        write.flush().await
    };
    if let Err(e) = sent.await {
        return failure(format!("sending the command: {e}"));
    }
    let mut read = tokio::io::BufReader::new(read);
    loop {
        tokio::select! {
            frame = proto::read_frame(&mut read) => match frame {
                Ok(Some(AgentFrame::Stdout(b))) if j.stdout => {
                    if tx.send(channel_msg(1, &b)).await.is_err() { return failure("client gone".into()); }
                }
                Ok(Some(AgentFrame::Stderr(b))) if j.stderr => {
                    let ch = if j.tty { 1 } else { 2 };
                    if tx.send(channel_msg(ch, &b)).await.is_err() { return failure("client gone".into()); }
                }
                Ok(Some(AgentFrame::Exit(s))) => return exit_status(&j.argv, s.code),
                Ok(Some(AgentFrame::Error(e))) => {
                    return failure(format!("failed to exec in container: {e}"));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return failure("the container ended while the command ran".into()),
            },
            msg = rx.next() => {
                // After stdin only resizes may come; the client going away ends the
                // command (dropping the agent connection kills its process group).
                if matches!(msg, None | Some(Err(_)) | Some(Ok(Message::Close(_)))) {
                    drop(write);
                    return failure("the client closed the stream".into());
                }
            }
        }
    }
}

/// Port-forward: one agent connection per port, relayed both ways.
async fn forward(ws: Ws, engine: Arc<Engine>, ports: Vec<u16>, who: String) {
    let (mut sink, mut rx) = ws.split();
    for (i, p) in ports.iter().enumerate() {
        let le = p.to_le_bytes();
        let ch = (i * 2) as u8;
        let _ = sink.send(channel_msg(ch, &le)).await;
        let _ = sink.send(channel_msg(ch + 1, &le)).await;
    }
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if sink.send(m).await.is_err() {
                break;
            }
        }
        let _ = sink.send(normal_close()).await;
    });
    let mut writers: Vec<Option<tokio::io::WriteHalf<proto::Stream>>> = Vec::new();
    let mut readers = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let ch = (i * 2) as u8;
        match dial(&engine, *p).await {
            Ok((r, w)) => {
                writers.push(Some(w));
                readers.push(tokio::spawn(pump(r, ch, out_tx.clone())));
            }
            Err(e) => {
                writers.push(None);
                let msg = format!(
                    "error forwarding port {p} to pod {who}: failed to connect to localhost:{p} inside the pod: {e}"
                );
                let _ = out_tx.send(channel_msg(ch + 1, msg.as_bytes())).await;
            }
        }
    }
    let all_done = futures::future::join_all(readers);
    tokio::pin!(all_done);
    loop {
        tokio::select! {
            _ = &mut all_done => break,
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(b))) if !b.is_empty() && b[0] % 2 == 0 => {
                    let i = usize::from(b[0] / 2);
                    if let Some(Some(w)) = writers.get_mut(i)
                        && w.write_all(&b[1..]).await.is_err()
                    {
                        writers[i] = None;
                    }
                }
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {
                    for w in writers.iter_mut().flatten() {
                        let _ = w.shutdown().await;
                    }
                    break;
                }
                Some(Ok(_)) => {}
            }
        }
    }
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    linger(&mut rx).await;
}

type Halves = (
    tokio::io::BufReader<tokio::io::ReadHalf<proto::Stream>>,
    tokio::io::WriteHalf<proto::Stream>,
);

/// `connect` to 127.0.0.1:port inside the pod, through its agent.
async fn dial(engine: &Engine, port: u16) -> Result<Halves, String> {
    let stream = engine.agent().await.map_err(|e| e.to_string())?;
    let (read, mut write) = tokio::io::split(stream);
    proto::write_line(&mut write, &AgentRequest::Connect { port })
        .await
        .map_err(|e| e.to_string())?;
    let mut read = tokio::io::BufReader::new(read);
    let answer: proto::Answer = proto::read_line(&mut read)
        .await
        .map_err(|e| e.to_string())?;
    if !answer.ok {
        return Err(answer.error.unwrap_or_else(|| "connection refused".into()));
    }
    Ok((read, write))
}

/// The pod side's bytes into data channel `ch`, until it closes.
async fn pump(
    mut r: tokio::io::BufReader<tokio::io::ReadHalf<proto::Stream>>,
    ch: u8,
    out: mpsc::Sender<Message>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(channel_msg(ch, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// `pods/log`: the main command's output (`tailLines`, `follow`).
fn logs(inner: Arc<Inner>, pod: &Value, q: &Query) -> ApiResult<Resp> {
    let ns = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let c = container(pod, q)?;
    let dir = inner.kubelet.dir_of(&ns, &name).ok_or_else(|| {
        ApiError::bad_request(format!(
            "container \"{c}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        ))
    })?;
    let path = kitbag_vm::instance_dir::guest_logs_dir(&dir).join("main.log");
    let mut text = std::fs::read(&path).unwrap_or_default();
    if let Some(n) = q_get(q, "tailLines").and_then(|n| n.parse::<usize>().ok()) {
        let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
        text = lines[lines.len().saturating_sub(n)..].concat();
    }
    let text_plain = |body| {
        let mut r = Response::new(body);
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain"),
        );
        r
    };
    if !q_true(q, "follow") {
        return Ok(text_plain(full(text)));
    }
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let mut offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    tokio::spawn(async move {
        if tx.send(Bytes::from(text)).await.is_err() {
            return;
        }
        loop {
            let running = inner.kubelet.running(&ns, &name).is_some();
            let bytes = std::fs::read(&path).unwrap_or_default();
            if bytes.len() as u64 > offset {
                let new = Bytes::copy_from_slice(&bytes[offset as usize..]);
                offset = bytes.len() as u64;
                if tx.send(new).await.is_err() {
                    return;
                }
            }
            if !running || inner.cancel.is_cancelled() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    Ok(text_plain(BodyExt::boxed(StreamBody::new(stream))))
}
