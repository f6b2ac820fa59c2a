//! A small client of the Docker Engine API (dockerd, or `podman system service`) over its
//! unix socket: HTTP/1.1, one request per connection (`Connection: close`), JSON in and out,
//! chunked or sized bodies. The few endpoints kitbag-vm uses need nothing more.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The API version asked for: 1.41 is Docker 20.10 and podman 4's compatible API, and every
/// field used here exists there.
const API: &str = "v1.41";

#[derive(Debug, Clone)]
pub struct Docker {
    pub socket: PathBuf,
}

/// An answer that is not 2xx: the status and the engine's `message`.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (HTTP {})", self.message, self.status)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

fn io(e: impl std::fmt::Display) -> ApiError {
    ApiError {
        status: 0,
        message: e.to_string(),
    }
}

impl Docker {
    /// `unix:///path` (DOCKER_HOST's form) or a plain path.
    pub fn from_host(host: &str) -> Result<Docker, ApiError> {
        let path = host.strip_prefix("unix://").unwrap_or(host);
        if host.contains("://") && !host.starts_with("unix://") {
            return Err(io(format!(
                "{host}: only a unix socket is supported (unix:///var/run/docker.sock)"
            )));
        }
        Ok(Docker {
            socket: PathBuf::from(path),
        })
    }

    /// One request; the status and body of a 2xx answer, else the engine's message.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> ApiResult<Vec<u8>> {
        let (status, bytes) = self.raw(method, path, body).await?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_string());
        Err(ApiError { status, message })
    }

    pub async fn json<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> ApiResult<T> {
        let encoded = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let bytes = self
            .call(
                method,
                path,
                encoded.as_deref().map(|b| ("application/json", b)),
            )
            .await?;
        let bytes = if bytes.is_empty() {
            b"null".to_vec()
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|e| io(format!("{method} {path}: {e}")))
    }

    async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> ApiResult<(u16, Vec<u8>)> {
        let mut stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| io(format!("{}: {e}", self.socket.display())))?;
        stream
            .write_all(&request_bytes(method, path, body))
            .await
            .map_err(io)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.map_err(io)?;
        parse_response(&response)
    }

    /// Kill and remove a container at once.
    pub async fn remove(&self, container: &str) -> ApiResult<Vec<u8>> {
        self.call("DELETE", &remove_path(container), None).await
    }

    /// The same call, blocking, with a 10 s timeout: for pause and resume, which run where
    /// the instance table is locked (a sandbox's freezer write is as quick).
    pub fn call_blocking(&self, method: &str, path: &str) -> ApiResult<Vec<u8>> {
        use std::io::{Read, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&self.socket)
            .map_err(|e| io(format!("{}: {e}", self.socket.display())))?;
        let timeout = Some(std::time::Duration::from_secs(10));
        stream.set_read_timeout(timeout).map_err(io)?;
        stream.set_write_timeout(timeout).map_err(io)?;
        stream
            .write_all(&request_bytes(method, path, None))
            .map_err(io)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).map_err(io)?;
        let (status, bytes) = parse_response(&response)?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        Err(ApiError {
            status,
            message: String::from_utf8_lossy(&bytes).trim().to_string(),
        })
    }
}

fn request_bytes(method: &str, path: &str, body: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut head = format!(
        "{method} /{API}{path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nUser-Agent: kitbag-vm\r\n"
    );
    if let Some((ctype, bytes)) = body {
        head.push_str(&format!(
            "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
            bytes.len()
        ));
    } else if method == "POST" {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if let Some((_, bytes)) = body {
        out.extend_from_slice(bytes);
    }
    out
}

/// Status and decoded body of a whole HTTP/1.1 response.
fn parse_response(r: &[u8]) -> ApiResult<(u16, Vec<u8>)> {
    let end = r
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io("the engine's answer has no header end"))?;
    let head = String::from_utf8_lossy(&r[..end]);
    let body = &r[end + 4..];
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io("the engine's answer has no status"))?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if k == "content-length" {
            length = v.parse::<usize>().ok();
        }
    }
    if chunked {
        return Ok((status, dechunk(body)?));
    }
    let body = match length {
        Some(n) if n <= body.len() => &body[..n],
        _ => body,
    };
    Ok((status, body.to_vec()))
}

fn dechunk(mut b: &[u8]) -> ApiResult<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let nl = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| io("a chunk without its size line"))?;
        let size_text = String::from_utf8_lossy(&b[..nl]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| io(format!("a bad chunk size {size_text:?}")))?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size {
            return Err(io("the answer ended inside a chunk"));
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..).unwrap_or(&[]);
    }
}

/// The path that kills and removes a container.
pub fn remove_path(container: &str) -> String {
    format!("/containers/{}?force=1", query(container))
}

/// Percent-encoding for a query value (image names carry `/` and `:`).
pub fn query(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The engine's socket: `--docker-host`, else `$DOCKER_HOST`, else the default.
pub fn default_host(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn responses_sized_and_chunked() {
        let sized = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"Id\":\"ab\"}";
        assert_eq!(
            parse_response(sized).unwrap(),
            (201, b"{\"Id\":\"ab\"}".to_vec())
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n6;x=y\r\npedia \r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked).unwrap(),
            (200, b"Wikipedia ".to_vec())
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err()
        );
    }

    #[test]
    fn hosts_and_queries() {
        assert_eq!(
            Docker::from_host("unix:///run/d.sock").unwrap().socket,
            PathBuf::from("/run/d.sock")
        );
        assert!(Docker::from_host("tcp://1.2.3.4:2375").is_err());
        assert_eq!(query("kitbag-vm/busybox:1"), "kitbag-vm%2Fbusybox%3A1");
    }
}
