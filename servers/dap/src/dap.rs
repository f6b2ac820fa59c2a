//! Content-Length framing and the request/response/event envelope, written by hand.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, oneshot};

/// Encode one DAP message with its Content-Length header.
pub fn encode(msg: &Value) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Read one framed message; `None` at end of stream.
pub async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<Value>> {
    let mut len: Option<usize> = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let t = line.trim_end();
        if t.is_empty() {
            if len.is_some() {
                break;
            }
            continue;
        }
        if let Some((k, v)) = t.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok();
        }
    }
    let n = len.unwrap_or(0);
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await?;
    Ok(serde_json::from_slice(&buf).ok())
}

/// Everything the adapter told us asynchronously.
#[derive(Default)]
pub struct Events {
    pub initialized: bool,
    pub stopped: Option<Value>,
    pub exited: Option<i64>,
    pub terminated: bool,
    pub output: Vec<(String, String)>,
    pub stop_count: u64,
    /// The adapter's capabilities from the `initialize` response.
    pub caps: Value,
}

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

pub struct Client {
    stdin: tokio::sync::Mutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    seq: Mutex<i64>,
    pending: Pending,
    pub events: Arc<Mutex<Events>>,
    pub notify: Arc<Notify>,
    pub child: Mutex<Option<Child>>,
}

impl Client {
    pub fn spawn(
        program: &str,
        args: &[String],
        cwd: &std::path::Path,
    ) -> std::io::Result<Arc<Client>> {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        Ok(Self::over(Box::new(stdin), stdout, Some(child)))
    }

    /// A client over a TCP connection to an adapter (e.g. `python -m debugpy --listen`).
    pub async fn connect(host: &str, port: u16) -> std::io::Result<Arc<Client>> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        let (r, w) = stream.into_split();
        Ok(Self::over(Box::new(w), r, None))
    }

    fn over<R: tokio::io::AsyncRead + Send + Unpin + 'static>(
        stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
        stdout: R,
        child: Option<Child>,
    ) -> Arc<Client> {
        let client = Arc::new(Client {
            stdin: tokio::sync::Mutex::new(stdin),
            seq: Mutex::new(0),
            pending: Arc::default(),
            events: Arc::default(),
            notify: Arc::new(Notify::new()),
            child: Mutex::new(child),
        });
        let weak = Arc::downgrade(&client);
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            while let Ok(Some(msg)) = read_message(&mut r).await {
                let Some(c) = weak.upgrade() else { break };
                c.dispatch(msg).await;
            }
            if let Some(c) = weak.upgrade() {
                if let Ok(mut e) = c.events.lock() {
                    e.terminated = true;
                }
                c.notify.notify_waiters();
            }
        });
        client
    }

    async fn dispatch(&self, msg: Value) {
        match msg["type"].as_str() {
            Some("response") => {
                let id = msg["request_seq"].as_i64().unwrap_or(-1);
                if msg["command"] == "initialize"
                    && let Ok(mut e) = self.events.lock()
                {
                    e.caps = msg["body"].clone();
                }
                let tx = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
                if let Some(tx) = tx {
                    let _ = tx.send(msg);
                }
            }
            Some("event") => {
                let body = &msg["body"];
                if let Ok(mut e) = self.events.lock() {
                    match msg["event"].as_str().unwrap_or("") {
                        "initialized" => e.initialized = true,
                        "stopped" => {
                            e.stopped = Some(body.clone());
                            e.stop_count += 1;
                        }
                        "continued" => e.stopped = None,
                        "exited" => e.exited = body["exitCode"].as_i64(),
                        "terminated" => e.terminated = true,
                        "output" => {
                            let cat = body["category"].as_str().unwrap_or("console").to_string();
                            if cat != "telemetry" {
                                let text = body["output"].as_str().unwrap_or("").to_string();
                                e.output.push((cat, text));
                            }
                        }
                        _ => {}
                    }
                }
                self.notify.notify_waiters();
            }
            Some("request") => {
                // Reverse requests: we never run a terminal and never start child sessions.
                let cmd = msg["command"].as_str().unwrap_or("").to_string();
                let reply = json!({"type": "response", "request_seq": msg["seq"], "command": cmd,
                    "success": false, "message": format!("{cmd} is not supported by kitbag-dap")});
                let _ = self.send_raw(reply).await;
            }
            _ => {}
        }
    }

    async fn send_raw(&self, mut msg: Value) -> std::io::Result<i64> {
        let seq = {
            let mut s = self
                .seq
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?;
            *s += 1;
            *s
        };
        msg["seq"] = json!(seq);
        let mut w = self.stdin.lock().await;
        w.write_all(&encode(&msg)).await?;
        w.flush().await?;
        Ok(seq)
    }

    /// Send a request and return a receiver for its response (correlated by seq).
    pub async fn start(
        &self,
        command: &str,
        args: Value,
    ) -> std::io::Result<oneshot::Receiver<Value>> {
        let (tx, rx) = oneshot::channel();
        // Reserve the seq under the pending lock so the response can never race the insert.
        let seq = {
            let mut s = self
                .seq
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?;
            *s += 1;
            *s
        };
        if let Ok(mut p) = self.pending.lock() {
            p.insert(seq, tx);
        }
        let msg = json!({"seq": seq, "type": "request", "command": command, "arguments": args});
        let mut w = self.stdin.lock().await;
        w.write_all(&encode(&msg)).await?;
        w.flush().await?;
        Ok(rx)
    }

    /// Send a request and wait for its response; Err(message) on failure or timeout.
    pub async fn request(
        &self,
        command: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let rx = self
            .start(command, args)
            .await
            .map_err(|e| format!("adapter write failed: {e}"))?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(format!(
                "adapter did not answer `{command}` within {}s",
                timeout.as_secs()
            )),
            Ok(Err(_)) => Err("debug adapter ended".into()),
            Ok(Ok(resp)) if resp["success"].as_bool() == Some(true) => Ok(resp["body"].clone()),
            Ok(Ok(resp)) => Err(resp["body"]["error"]["format"]
                .as_str()
                .or(resp["message"].as_str())
                .unwrap_or("request failed")
                .to_string()),
        }
    }

    /// Kill the adapter's whole process group (adapter and debuggee).
    pub fn kill(&self) {
        if let Ok(mut c) = self.child.lock()
            && let Some(mut child) = c.take()
        {
            if let Some(pid) = child.id() {
                // The debuggee may live in its own process group: kill every descendant too.
                let mut targets: Vec<String> =
                    descendants(pid).iter().map(u32::to_string).collect();
                targets.push(format!("-{pid}"));
                let _ = std::process::Command::new("kill")
                    .arg("-KILL")
                    .arg("--")
                    .args(&targets)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            let _ = child.start_kill();
        }
    }
}

/// Every descendant of `pid`, read from /proc.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // Fields after the closing paren of the command name: state ppid ...
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(pp) = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
                parent.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(cur) = todo.pop() {
        for (c, pp) in &parent {
            if *pp == cur && !out.contains(c) {
                out.push(*c);
                todo.push(*c);
            }
        }
    }
    out
}

impl Drop for Client {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn framing_round_trips_two_messages() {
        let a = json!({"seq": 1, "type": "event", "event": "initialized"});
        let b = json!({"seq": 2, "type": "response", "request_seq": 1, "success": true, "body": {"s": "é"}});
        let mut bytes = encode(&a);
        bytes.extend(encode(&b));
        let mut r = BufReader::new(&bytes[..]);
        assert_eq!(read_message(&mut r).await.unwrap(), Some(a));
        assert_eq!(read_message(&mut r).await.unwrap(), Some(b));
        assert_eq!(read_message(&mut r).await.unwrap(), None);
    }
}
