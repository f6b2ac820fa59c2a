//! Content-Length framing and the request/response/event envelope, written by hand. What the
//! adapter says unasked (events, output, capabilities) is kept by [`Events`].

mod events;

use kitbag_shared::lock::LockExt;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

pub use events::{BreakpointChange, Events, RunState, Stop, StopMark};
pub use kitbag_shared::framing::{encode, read_message};

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

pub struct Client {
    stdin: tokio::sync::Mutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>,
    seq: Mutex<i64>,
    pending: Pending,
    events: Events,
    child: Mutex<Option<Child>>,
    /// Processes an in-process adapter started (Node.js, Bun): killed with the client.
    owned: Arc<Mutex<Vec<u32>>>,
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
        Ok(Self::over(
            Box::new(stdin),
            stdout,
            Some(child),
            Arc::default(),
        ))
    }

    /// Start an adapter that dials in (`--client-addr=127.0.0.1:PORT` appended, Delve's
    /// convention): we listen on a loopback port of our own and take the first connection.
    /// What it (and the program it runs, which shares its stdout and stderr) prints is kept
    /// as `stdout` / `stderr` output, never passed to the MCP stream.
    pub async fn spawn_dialing_in(
        program: &str,
        args: &[String],
        cwd: &std::path::Path,
        wait: Duration,
    ) -> std::io::Result<Arc<Client>> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let mut child = Command::new(program)
            .args(args)
            .arg(format!("--client-addr={addr}"))
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()?;
        let streams = (child.stdout.take(), child.stderr.take());
        let accepted = tokio::select! {
            r = tokio::time::timeout(wait, listener.accept()) => r,
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(std::io::Error::other(format!(
                    "the adapter exited ({status}) before connecting"
                )));
            }
        };
        // On failure the child is dropped, which kills it (`kill_on_drop`); before it has
        // connected it has started no debuggee.
        let (stream, _) = accepted.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the adapter did not connect within {}s", wait.as_secs()),
            )
        })??;
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        let client = Self::over(Box::new(w), r, Some(child), Arc::default());
        if let Some(out) = streams.0 {
            client.keep_output("stdout", out);
        }
        if let Some(err) = streams.1 {
            client.keep_output("stderr", err);
        }
        Ok(client)
    }

    /// Record what `stream` prints, a line at a time, as output of `category`.
    fn keep_output(
        self: &Arc<Self>,
        category: &'static str,
        stream: impl tokio::io::AsyncRead + Send + Unpin + 'static,
    ) {
        use tokio::io::AsyncBufReadExt;
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream);
            let mut line = Vec::new();
            loop {
                line.clear();
                match lines.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let Some(c) = weak.upgrade() else { return };
                c.events
                    .push_output(category, String::from_utf8_lossy(&line).into_owned());
            }
        });
    }

    /// A client of an adapter running in this process (kitbag's inspector bridge), over
    /// `stream`; the pids it records in `owned` are killed with the client.
    pub fn in_process<S>(stream: S, owned: Arc<Mutex<Vec<u32>>>) -> Arc<Client>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        Self::over(Box::new(w), r, None, owned)
    }

    /// A client over a TCP connection to an adapter (e.g. `python -m debugpy --listen`).
    pub async fn connect(host: &str, port: u16) -> std::io::Result<Arc<Client>> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        let (r, w) = stream.into_split();
        Ok(Self::over(Box::new(w), r, None, Arc::default()))
    }

    fn over<R: tokio::io::AsyncRead + Send + Unpin + 'static>(
        stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
        stdout: R,
        child: Option<Child>,
        owned: Arc<Mutex<Vec<u32>>>,
    ) -> Arc<Client> {
        let client = Arc::new(Client {
            stdin: tokio::sync::Mutex::new(stdin),
            seq: Mutex::new(0),
            pending: Arc::default(),
            events: Events::default(),
            child: Mutex::new(child),
            owned,
        });
        let weak = Arc::downgrade(&client);
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            while let Ok(Some(msg)) = read_message(&mut r).await {
                let Some(c) = weak.upgrade() else { break };
                c.dispatch(msg).await;
            }
            if let Some(c) = weak.upgrade() {
                c.events.close();
                // Nothing more will arrive: fail every waiting request at once (after
                // `closed` is set, so `start` sees one or the other).
                c.pending.locked().clear();
            }
        });
        client
    }

    async fn dispatch(&self, msg: Value) {
        tracing::trace!(target: "kitbag_dap::dap", "<- {}", msg.to_string().chars().take(1500).collect::<String>());
        match msg["type"].as_str() {
            Some("response") => {
                let id = msg["request_seq"].as_i64().unwrap_or(-1);
                if msg["command"] == "initialize" {
                    self.events.set_capabilities(msg["body"].clone());
                }
                let tx = self.pending.locked().remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(msg);
                }
            }
            Some("event") => self
                .events
                .on_event(msg["event"].as_str().unwrap_or(""), &msg["body"]),
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
            let mut s = self.seq.locked();
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
            let mut s = self.seq.locked();
            *s += 1;
            *s
        };
        self.pending.locked().insert(seq, tx);
        if self.events.is_closed() {
            self.pending.locked().remove(&seq);
            return Err(std::io::Error::other("debug adapter ended"));
        }
        let msg = json!({"seq": seq, "type": "request", "command": command, "arguments": args});
        tracing::trace!(target: "kitbag_dap::dap", "-> {msg}");
        let mut w = self.stdin.lock().await;
        w.write_all(&encode(&msg)).await?;
        w.flush().await?;
        Ok(rx)
    }

    /// Send a request and wait for its response's body.
    pub async fn request(
        &self,
        command: &str,
        args: Value,
        timeout: Duration,
    ) -> Result<Value, RequestError> {
        let rx = self
            .start(command, args)
            .await
            .map_err(RequestError::Write)?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(RequestError::Timeout {
                command: command.to_string(),
                secs: timeout.as_secs(),
            }),
            Ok(Err(_)) => Err(RequestError::Ended),
            Ok(Ok(resp)) if resp["success"].as_bool() == Some(true) => Ok(resp["body"].clone()),
            Ok(Ok(resp)) => Err(RequestError::Refused(error_message(
                &resp,
                "request failed",
            ))),
        }
    }

    /// What the adapter said unasked, and the program's run state that follows from it.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Wait up to `grace` for a spawned adapter to end by itself; true when it has (or when
    /// there is no child to wait for). An adapter told `disconnect` cleans up as it exits —
    /// Delve deletes the binary it built — so it gets this time before [`Client::kill`].
    pub async fn exited_within(&self, grace: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let done = match self.child.locked().as_mut() {
                None => true,
                Some(child) => !matches!(child.try_wait(), Ok(None)),
            };
            if done {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Kill the adapter's whole process group (adapter and debuggee).
    pub fn kill(&self) {
        {
            let mut owned = self.owned.locked();
            for pid in owned.drain(..) {
                kitbag_shared::process::kill_tree(pid);
            }
        }
        let child = self.child.locked().take();
        if let Some(mut child) = child {
            if let Some(pid) = child.id() {
                // The debuggee may live in its own process group: kill every descendant too.
                kitbag_shared::process::kill_tree(pid);
            }
            let _ = child.start_kill();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a failed response says: the detailed `body.error.format` (its `{name}` variables
/// filled in) when the adapter gave one — Delve puts a build error there — else `message`.
/// Why a request to the adapter got no usable answer; the text is what the client is told.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("adapter write failed: {0}")]
    Write(std::io::Error),
    /// A start-up request could not be sent (the adapter had ended, or its input closed).
    #[error("{0}")]
    Unsent(std::io::Error),
    #[error("adapter did not answer `{command}` within {secs}s")]
    Timeout { command: String, secs: u64 },
    #[error("adapter did not answer `{0}`")]
    NoAnswer(String),
    #[error("adapter never sent `initialized`")]
    NoInitialized,
    #[error("debug adapter ended")]
    Ended,
    /// The adapter answered `success: false`: its message (see [`error_message`]).
    #[error("{0}")]
    Refused(String),
}

pub fn error_message(resp: &Value, default: &str) -> String {
    let error = &resp["body"]["error"];
    if let Some(format) = error["format"].as_str() {
        let mut text = format.to_string();
        if let Some(vars) = error["variables"].as_object() {
            for (name, value) in vars {
                if let Some(v) = value.as_str() {
                    text = text.replace(&format!("{{{name}}}"), v);
                }
            }
        }
        return text;
    }
    resp["message"].as_str().unwrap_or(default).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_prefers_the_detailed_format() {
        let delve = json!({"success": false, "message": "Failed to launch",
            "body": {"error": {"id": 3000, "format": "Failed to launch: Build error: x undefined"}}});
        assert_eq!(
            error_message(&delve, "launch failed"),
            "Failed to launch: Build error: x undefined"
        );
        let vars = json!({"success": false, "body": {"error": {"format": "no {what} at {where}",
            "variables": {"what": "frame", "where": "7"}}}});
        assert_eq!(error_message(&vars, "x"), "no frame at 7");
        let plain = json!({"success": false, "message": "cancelled"});
        assert_eq!(error_message(&plain, "x"), "cancelled");
        assert_eq!(error_message(&json!({"success": false}), "x"), "x");
    }
}
