//! Clients for tests against the fixture: `kubectl` (async, with a timeout), a bare
//! HTTP/1.0 request, and the JSON helpers the checks use.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// How a kubectl run ended.
pub struct Out {
    pub ok: bool,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `kubectl --kubeconfig F ARGS`, with `stdin` piped in; panics after 60 s.
pub async fn kubectl_in(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Out {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        pipe.write_all(s.as_bytes()).await.unwrap();
    }
    drop(pipe);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} hung"))
        .unwrap();
    Out {
        ok: out.status.success(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Concatenated JSON values (kubectl -w -o json prints one after another).
pub fn json_stream(s: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(s)
        .into_iter::<Value>()
        .filter_map(Result::ok)
        .collect()
}

pub fn json_of(b: &str) -> Value {
    serde_json::from_str(b).unwrap_or_else(|e| panic!("{e}: {b}"))
}

/// One HTTP/1.0 request (the body read to the end of the connection).
pub fn http(
    url: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    ct: &str,
    body: &str,
) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Content-Type: {ct}\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}
