//! A loopback OTLP/HTTP collector stand-in for tests and benchmarks: it accepts every POST
//! (keep-alive, `Content-Length` or chunked bodies), answers `200 {}`, and keeps each request
//! — path, headers, body — for the test to check. `fail_next(n)` answers the next `n`
//! requests 503, as a collector that is down for a moment.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Sink {
    pub addr: std::net::SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    failures: Arc<AtomicUsize>,
}

impl Sink {
    /// Listen on 127.0.0.1 (a free port).
    pub fn start() -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the OTLP sink");
        let addr = listener.local_addr().expect("address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(AtomicUsize::new(0));
        let (keep, fail) = (received.clone(), failures.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (keep, fail) = (keep.clone(), fail.clone());
                std::thread::spawn(move || serve(stream, &keep, &fail));
            }
        });
        Sink {
            addr,
            received,
            failures,
        }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answer the next `n` requests with 503 (kept all the same).
    pub fn fail_next(&self, n: usize) {
        self.failures.store(n, Ordering::SeqCst);
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Wait until `done` holds for what was received (or `secs` pass); returns it.
    pub fn wait_for(&self, secs: u64, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.received();
            if done(&got) || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(stream: TcpStream, keep: &Mutex<Vec<Received>>, fail: &AtomicUsize) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, path) = (method.to_string(), path.to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                if r.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let Ok(n) = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                else {
                    return;
                };
                let mut chunk = vec![0; n + 2];
                if r.read_exact(&mut chunk).is_err() {
                    return;
                }
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body = vec![0; n];
            if r.read_exact(&mut body).is_err() {
                return;
            }
        }
        if let Ok(mut k) = keep.lock() {
            k.push(Received {
                method,
                path,
                headers,
                body,
            });
        }
        let failing = fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let answer: &[u8] = if failing {
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        };
        if out.write_all(answer).is_err() {
            return;
        }
    }
}
