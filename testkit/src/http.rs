//! A small blocking HTTP/1.1 client for MCP Streamable HTTP tests and benchmarks: keep-alive,
//! Content-Length and chunked bodies, SSE events, TCP or a Unix socket. Deliberately plain:
//! what it sends is exactly what the test wrote.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Where a server listens.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Tcp(String),
    Unix(PathBuf),
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// One connection, reused across requests while the server keeps it open.
pub struct HttpConn {
    reader: BufReader<Box<dyn Stream>>,
    /// What the `Host` header says unless a request sets its own.
    host: String,
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON-RPC messages in the body: one JSON document, or SSE `data:` events.
    pub fn messages(&self) -> Vec<Value> {
        let ct = self.header("content-type").unwrap_or("");
        if ct.starts_with("text/event-stream") {
            sse_data(&self.text())
                .iter()
                .filter_map(|d| serde_json::from_str(d).ok())
                .collect()
        } else {
            serde_json::from_slice(&self.body).into_iter().collect()
        }
    }

    /// The response to request `id` among the messages.
    pub fn response_to(&self, id: &Value) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m.get("id") == Some(id) && m.get("method").is_none())
            .unwrap_or_else(|| panic!("no response to {id} in {} {}", self.status, self.text()))
    }
}

/// The `data:` payloads of an SSE text, one per event.
pub fn sse_data(text: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            if !data.is_empty() {
                events.push(data.join("\n"));
                data.clear();
            }
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if !data.is_empty() {
        events.push(data.join("\n"));
    }
    events
}

impl HttpConn {
    pub fn open(endpoint: &Endpoint) -> std::io::Result<Self> {
        let (stream, host): (Box<dyn Stream>, String) = match endpoint {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(Duration::from_secs(60)))?;
                (Box::new(s), addr.clone())
            }
            Endpoint::Unix(path) => {
                let s = UnixStream::connect(path)?;
                s.set_read_timeout(Some(Duration::from_secs(60)))?;
                (Box::new(s), "localhost".to_string())
            }
        };
        Ok(Self {
            reader: BufReader::new(stream),
            host,
        })
    }

    /// Send one request and read the whole response.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        self.write_request(method, path, headers, body)?;
        self.read_response()
    }

    /// A JSON POST to `/mcp` with the headers every MCP client sends, plus `extra`.
    pub fn post_mcp(&mut self, message: &Value, extra: &[(&str, &str)]) -> HttpResponse {
        self.try_post_mcp(message, extra).expect("POST /mcp")
    }

    /// [`post_mcp`](Self::post_mcp), with a broken connection as an error instead of a panic.
    pub fn try_post_mcp(
        &mut self,
        message: &Value,
        extra: &[(&str, &str)],
    ) -> std::io::Result<HttpResponse> {
        let body = message.to_string();
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        headers.extend_from_slice(extra);
        self.send("POST", "/mcp", &headers, body.as_bytes())
    }

    pub fn write_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<()> {
        // One write: a server that answers from the head alone (413) and closes must not
        // turn the body's write into a broken pipe before the answer is read.
        let mut message = self.head(method, path, headers, body.len());
        message.extend_from_slice(body);
        let stream = self.reader.get_mut();
        stream.write_all(&message)?;
        stream.flush()
    }

    /// [`Self::write_request`] the way some clients send it (httpx): the head, then the body
    /// in a write of its own, `pause` later.
    pub fn write_request_split(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        pause: Duration,
    ) -> std::io::Result<()> {
        let head = self.head(method, path, headers, body.len());
        let stream = self.reader.get_mut();
        stream.write_all(&head)?;
        stream.flush()?;
        std::thread::sleep(pause);
        stream.write_all(body)?;
        stream.flush()
    }

    fn head(&self, method: &str, path: &str, headers: &[(&str, &str)], length: usize) -> Vec<u8> {
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            head.push_str(&format!("host: {}\r\n", self.host));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
        }) {
            head.push_str(&format!("content-length: {length}\r\n"));
        }
        head.push_str("\r\n");
        head.into_bytes()
    }

    /// Status line and headers only: the body is left for [`Self::read_event`].
    pub fn read_head(&mut self) -> std::io::Result<HttpResponse> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        Ok(HttpResponse {
            status,
            headers,
            body: Vec::new(),
        })
    }

    pub fn read_response(&mut self) -> std::io::Result<HttpResponse> {
        let mut response = self.read_head()?;
        if let Some(n) = response
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            response.body = vec![0; n];
            self.reader.read_exact(&mut response.body)?;
        } else if response
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            while let Some(chunk) = self.read_chunk()? {
                response.body.extend_from_slice(&chunk);
            }
        } else {
            self.reader.read_to_end(&mut response.body)?;
        }
        Ok(response)
    }

    /// The next chunk of a chunked body; None at its end.
    pub fn read_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
        let mut chunk = vec![0; size];
        self.reader.read_exact(&mut chunk)?;
        let mut crlf = [0u8; 2];
        self.reader.read_exact(&mut crlf)?;
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(chunk))
    }

    /// Read a chunked SSE body until an event's data satisfies `want` (or the body ends).
    pub fn read_event(&mut self, want: impl Fn(&Value) -> bool) -> Option<Value> {
        let mut pending = String::new();
        loop {
            let chunk = self.read_chunk().ok()??;
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for data in sse_data(&event) {
                    if let Ok(v) = serde_json::from_str::<Value>(&data)
                        && want(&v)
                    {
                        return Some(v);
                    }
                }
            }
        }
    }
}

/// A server binary started with `--http 127.0.0.1:0` (or `--unix`), stopped on drop.
pub struct HttpServer {
    pub child: Child,
    pub endpoint: Endpoint,
    /// Everything the server wrote to stderr after its address line, for failure reports.
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpServer {
    /// Start `bin args...`; `args` must include `--http 127.0.0.1:0` or `--unix PATH`.
    pub fn start(bin: &Path, args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(cwd)
            .env_remove("KITBAG_HOST_DEPTH")
            .env_remove("KITBAG_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("serving MCP at ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(rest.to_string());
                    }
                } else if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        let Ok(address) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not announce its address; stderr: {}",
                bin.display(),
                log.lock().map(|s| s.clone()).unwrap_or_default()
            );
        };
        let endpoint = match address.strip_prefix("unix:") {
            Some(rest) => {
                Endpoint::Unix(PathBuf::from(rest.split(" (path").next().unwrap_or(rest)))
            }
            None => Endpoint::Tcp(
                address
                    .trim_start_matches("http://")
                    .trim_start_matches("https://")
                    .trim_end_matches("/mcp")
                    .to_string(),
            ),
        };
        Self {
            child,
            endpoint,
            stderr: log,
        }
    }

    pub fn connect(&self) -> HttpConn {
        HttpConn::open(&self.endpoint).expect("connect")
    }

    /// `http://ADDR/mcp`, for real clients (TCP only).
    pub fn url(&self) -> String {
        match &self.endpoint {
            Endpoint::Tcp(addr) => format!("http://{addr}/mcp"),
            Endpoint::Unix(path) => panic!("{} is a Unix socket, not a URL", path.display()),
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (None if it had to be killed after 10 s).
    pub fn stop(mut self) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A JSON-RPC request with the 2026-07-28 per-request `_meta`.
pub fn modern_request(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "kitbag-testkit", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The headers a 2026-07-28 client sends with `method` (and the tool or resource `name`).
pub fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = name {
        h.push(("mcp-name", name));
    }
    h
}

/// One handshake-era session (a server run with `--http-sessions`): its id, a connection for
/// its requests, and its server-to-client stream (a GET held open on a second connection).
pub struct Session {
    pub id: String,
    conn: HttpConn,
    pub stream: HttpConn,
    next: u64,
}

const HANDSHAKE: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

impl Session {
    /// Initialize (2025-11-25), confirm, and open the stream.
    pub fn open(server: &HttpServer) -> Session {
        let mut conn = server.connect();
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "kitbag-testkit", "version": "1"}}});
        let r = conn.post_mcp(&init, &[]);
        let id = r
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("no session id (is --http-sessions on?): {}", r.text()))
            .to_string();
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let with = [("mcp-session-id", id.as_str()), HANDSHAKE];
        assert_eq!(conn.post_mcp(&note, &with).status, 202);
        let mut stream = server.connect();
        stream
            .write_request(
                "GET",
                "/mcp",
                &[
                    ("accept", "text/event-stream"),
                    ("mcp-session-id", &id),
                    HANDSHAKE,
                ],
                b"",
            )
            .expect("GET the session's stream");
        assert_eq!(stream.read_head().expect("stream head").status, 200);
        Session {
            id,
            conn,
            stream,
            next: 10,
        }
    }

    /// One request in this session; its JSON-RPC answer.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let message = serde_json::json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        let with = [("mcp-session-id", self.id.as_str()), HANDSHAKE];
        let r = self.conn.post_mcp(&message, &with);
        r.response_to(&serde_json::json!(self.next))
    }

    /// Read the stream until `uri` is announced (`notifications/resources/updated`); every
    /// updated URI seen on the way, that one included. Panics if the stream ends or stays
    /// silent past the connection's read timeout first.
    pub fn updates_until(&mut self, uri: &str) -> Vec<String> {
        let seen = std::cell::RefCell::new(Vec::new());
        let found = self.stream.read_event(|v| {
            if v["method"] != "notifications/resources/updated" {
                return false;
            }
            let u = v["params"]["uri"].as_str().unwrap_or("").to_string();
            seen.borrow_mut().push(u.clone());
            u == uri
        });
        assert!(
            found.is_some(),
            "{uri} never announced; saw {:?}",
            seen.borrow()
        );
        seen.into_inner()
    }
}

/// A loopback server answering every request with `body` (HTML).
pub fn serve_page(body: Vec<u8>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    port
}
