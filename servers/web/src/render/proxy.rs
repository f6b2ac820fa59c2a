//! The guard in front of the browser: every request a rendered page makes — the document,
//! subresources, redirects, fetch/XHR, WebSockets, service workers — reaches the network
//! only through this HTTP proxy, which checks it exactly as `web_fetch` checks a URL
//! (scheme, credentials, IP literals, every resolved address) and connects to the addresses
//! it checked, so a second lookup cannot swap one in. One proxy per render: what it refused
//! is that render's.
//!
//! Plain HTTP arrives in absolute form and is sent on with `Connection: close` (a kept-alive
//! connection could carry a later request to another host past the check); HTTPS and
//! WebSockets arrive as CONNECT tunnels to a host and port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kitbag_shared::lock::LockExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use url::Url;

use crate::guard::{GuardConfig, Refusal, check_url, resolve_checked};

/// The largest request head read (a browser's are a few KB).
const MAX_HEAD: usize = 64 << 10;
/// How long a request head and a connection to the origin may take.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Refusals kept per render (the count goes on).
pub const MAX_REFUSALS_KEPT: usize = 20;

/// What the guard refused during one render.
#[derive(Debug, Default, Clone)]
pub struct Refusals {
    pub kept: Vec<String>,
    pub total: u64,
}

/// A proxy listening on loopback for one render; it stops (with every connection through
/// it) when dropped.
pub struct GuardProxy {
    pub addr: SocketAddr,
    refusals: Arc<Mutex<Refusals>>,
    accept: tokio::task::JoinHandle<()>,
}

impl GuardProxy {
    pub async fn start(cfg: Arc<GuardConfig>) -> std::io::Result<GuardProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let refusals: Arc<Mutex<Refusals>> = Arc::default();
        let kept = refusals.clone();
        let accept = tokio::spawn(async move {
            // Owned here: aborting the accept task drops the set, which aborts every tunnel.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(serve(client, cfg.clone(), kept.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(GuardProxy {
            addr,
            refusals,
            accept,
        })
    }

    pub fn refusals(&self) -> Refusals {
        self.refusals.locked().clone()
    }
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One request (or tunnel) from the browser.
async fn serve(mut client: TcpStream, cfg: Arc<GuardConfig>, refusals: Arc<Mutex<Refusals>>) {
    let Ok(Ok((head, rest))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await
    else {
        return;
    };
    let request = match Request::parse(&head) {
        Ok(r) => r,
        Err(why) => {
            refuse(&mut client, &refusals, "a request", &why.to_string()).await;
            return;
        }
    };
    let origin = match admit(&request.url, &cfg).await {
        Ok(addrs) => connect(&addrs).await,
        Err(Refusal::Blocked(why)) | Err(Refusal::Invalid(why)) => {
            refuse(&mut client, &refusals, &request.shown(), &why).await;
            return;
        }
    };
    let Some(mut origin) = origin else {
        let _ = client
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let _ = origin.set_nodelay(true);
    let _ = client.set_nodelay(true);
    if request.tunnel {
        if client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
    } else if origin.write_all(&request.forwarded_head()).await.is_err() {
        return;
    }
    if !rest.is_empty() && origin.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut origin).await;
}

/// The URL checked as web_fetch checks one, then its host resolved and every address checked.
async fn admit(url: &Url, cfg: &GuardConfig) -> Result<Vec<SocketAddr>, Refusal> {
    check_url(url, cfg)?;
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(80);
    resolve_checked(host, port, cfg).await
}

async fn connect(addrs: &[SocketAddr]) -> Option<TcpStream> {
    for a in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            return Some(s);
        }
    }
    None
}

async fn refuse(client: &mut TcpStream, refusals: &Mutex<Refusals>, what: &str, why: &str) {
    tracing::debug!(target: "kitbag_web::render", "refused {what}: {why}");
    {
        let mut r = refusals.locked();
        r.total += 1;
        if r.kept.len() < MAX_REFUSALS_KEPT {
            r.kept.push(
                kitbag_shared::limits::truncate_str(&format!("{what}: {why}"), 400)
                    .0
                    .to_string(),
            );
        }
    }
    let _ = client
        .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await;
}

/// The request head (through the blank line) and whatever came after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Why a request from the browser could not be read as a proxy request.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("the request head is not UTF-8")]
    NotUtf8,
    #[error("a malformed request line")]
    Malformed,
    #[error("target {target}: {source}")]
    Target {
        target: String,
        source: url::ParseError,
    },
    #[error("only plain http comes in absolute form, not {0}")]
    NotPlainHttp(String),
}

/// A proxy request: a tunnel to host:port, or a plain HTTP request in absolute form.
#[derive(Debug)]
struct Request {
    tunnel: bool,
    method: String,
    url: Url,
    version: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn parse(head: &[u8]) -> Result<Request, BadRequest> {
        let text = std::str::from_utf8(head).map_err(|_| BadRequest::NotUtf8)?;
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap_or_default();
        let mut parts = first.split(' ');
        let (Some(method), Some(target), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(BadRequest::Malformed);
        };
        let tunnel = method.eq_ignore_ascii_case("CONNECT");
        let url = if tunnel {
            // host:port, read by the same parser web_fetch's URLs go through.
            Url::parse(&format!("https://{target}/")).map_err(|source| BadRequest::Target {
                target: target.to_string(),
                source,
            })?
        } else {
            let url = Url::parse(target).map_err(|source| BadRequest::Target {
                target: target.to_string(),
                source,
            })?;
            if url.scheme() != "http" {
                return Err(BadRequest::NotPlainHttp(target.to_string()));
            }
            url
        };
        let headers = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Ok(Request {
            tunnel,
            method: method.to_string(),
            url,
            version: version.to_string(),
            headers,
        })
    }

    /// How a refusal names it.
    fn shown(&self) -> String {
        if self.tunnel {
            let host = self.url.host_str().unwrap_or_default();
            let port = self.url.port_or_known_default().unwrap_or(443);
            format!("tunnel to {host}:{port}")
        } else {
            format!("{} {}", self.method, self.url)
        }
    }

    /// The head sent to the origin: origin-form target, proxy headers dropped, one request
    /// per connection.
    fn forwarded_head(&self) -> Vec<u8> {
        let mut target = self.url.path().to_string();
        if let Some(q) = self.url.query() {
            target.push('?');
            target.push_str(q);
        }
        let mut head = format!("{} {target} {}\r\n", self.method, self.version);
        for (k, v) in &self.headers {
            let name = k.to_ascii_lowercase();
            if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
                continue;
            }
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("Connection: close\r\n\r\n");
        head.into_bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_and_forwarded_in_origin_form() {
        let r = Request::parse(
            b"GET http://example.org:8080/a/b?c=1 HTTP/1.1\r\nHost: example.org:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert!(!r.tunnel);
        let head = String::from_utf8(r.forwarded_head()).unwrap();
        assert_eq!(
            head,
            "GET /a/b?c=1 HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let t = Request::parse(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n").unwrap();
        assert!(t.tunnel);
        assert_eq!(t.shown(), "tunnel to [::1]:443");
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"GET https://example.org/ HTTP/1.1\r\n\r\n",
            b"GET ftp://example.org/ HTTP/1.1\r\n\r\n",
            b"NONSENSE\r\n\r\n",
        ] {
            assert!(
                Request::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[tokio::test]
    async fn internal_targets_are_refused_in_every_form() {
        let cfg = Arc::new(GuardConfig::default());
        for target in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:9/",
            "http://[::1]/",
            "http://localhost/",
            "http://2130706433/",
        ] {
            let url = Url::parse(target).unwrap();
            assert!(
                matches!(admit(&url, &cfg).await, Err(Refusal::Blocked(_))),
                "{target}"
            );
        }
        let t = Request::parse(b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n").unwrap();
        assert!(matches!(
            admit(&t.url, &cfg).await,
            Err(Refusal::Blocked(_))
        ));
    }
}
