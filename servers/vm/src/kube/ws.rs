//! The API server's streaming subresources over WebSocket: `pods/exec` (channel protocol
//! `v5.channel.k8s.io`, `v4` accepted) and `pods/portforward` (`v4.channel.k8s.io`: channel 0
//! carries the data, channel 1 errors; the server opens each channel with the port number,
//! two bytes little-endian).

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::api::{Api, KubeError, KubeResult, q, status_error};
use crate::proto::{self, Stream};

type Ws = WebSocketStream<Stream>;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
/// v5: "this stream is closed" — `[255, channel]`.
const CLOSE: u8 = 255;
/// The largest piece of stdin or port data in one message.
const CHUNK: usize = 64 * 1024;

/// Open a WebSocket to `path` on the API server with the first of `protocols` it accepts.
async fn connect(api: &Api, path: &str, protocols: &[&str]) -> KubeResult<(Ws, String)> {
    let server = url::Url::parse(&api.cfg.server).map_err(|e| KubeError::Decode(e.to_string()))?;
    let host = server
        .host_str()
        .ok_or_else(|| KubeError::Decode("the server URL has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = server.port_or_known_default().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| KubeError::Transport(format!("{host}:{port}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let stream: Stream = match &api.tls {
        Some(tls) => {
            let name = api.cfg.tls_server_name.clone().unwrap_or(host.clone());
            let name = rustls::pki_types::ServerName::try_from(name)
                .map_err(|e| KubeError::Decode(format!("TLS server name: {e}")))?;
            let tls = tokio_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| KubeError::Transport(format!("TLS: {e}")))?;
            Box::new(tls)
        }
        None => Box::new(tcp),
    };
    let ws_url = format!(
        "{}{path}",
        api.cfg
            .server
            .replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1)
    );
    let mut req = ws_url
        .into_client_request()
        .map_err(|e| KubeError::Decode(e.to_string()))?;
    let headers = req.headers_mut();
    let offer = HeaderValue::from_str(&protocols.join(", "))
        .map_err(|e| KubeError::Decode(e.to_string()))?;
    headers.insert("Sec-WebSocket-Protocol", offer);
    if let Some(auth) = api.authorization()
        && let Ok(v) = HeaderValue::from_str(&auth)
    {
        headers.insert("Authorization", v);
    }
    match tokio_tungstenite::client_async(req, stream).await {
        Ok((ws, resp)) => {
            let chosen = resp
                .headers()
                .get("Sec-WebSocket-Protocol")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            Ok((ws, chosen))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp.body().clone().unwrap_or_default();
            Err(status_error(resp.status().as_u16(), &body))
        }
        Err(e) => Err(KubeError::Transport(e.to_string())),
    }
}

/// What a command run through `pods/exec` printed and how it ended.
#[derive(Debug, Default)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub code: i32,
}

/// Run `argv` in the pod's `container`, feeding it `stdin` (closed after), and collect its
/// output and exit code.
pub async fn exec(
    api: &Api,
    pod: &str,
    container: &str,
    argv: &[&str],
    stdin: Option<&[u8]>,
) -> KubeResult<ExecOutput> {
    let mut path = format!(
        "/api/v1/namespaces/{}/pods/{pod}/exec?container={}&stdout=true&stderr=true&stdin={}",
        api.namespace(),
        q(container),
        stdin.is_some()
    );
    for a in argv {
        path.push_str("&command=");
        path.push_str(&q(a));
    }
    let (ws, protocol) = connect(api, &path, &["v5.channel.k8s.io", "v4.channel.k8s.io"]).await?;
    let (mut sink, mut source) = ws.split();
    let feed = async {
        if let Some(bytes) = stdin {
            for piece in bytes.chunks(CHUNK) {
                let mut msg = Vec::with_capacity(piece.len() + 1);
                msg.push(STDIN);
                msg.extend_from_slice(piece);
                sink.send(Message::binary(msg)).await?;
            }
            if protocol == "v5.channel.k8s.io" {
                sink.send(Message::binary(vec![CLOSE, STDIN])).await?;
            }
        }
        Ok::<_, tokio_tungstenite::tungstenite::Error>(sink)
    };
    let collect = async {
        let mut out = ExecOutput::default();
        let mut status = None;
        while let Some(msg) = source.next().await {
            let msg = msg.map_err(|e| KubeError::Transport(e.to_string()))?;
            let Message::Binary(b) = msg else {
                if msg.is_close() {
                    break;
                }
                continue;
            };
            match b.first() {
                Some(&STDOUT) => out.stdout.extend_from_slice(&b[1..]),
                Some(&STDERR) => out.stderr.extend_from_slice(&b[1..]),
                Some(&STATUS) => status = Some(b[1..].to_vec()),
                _ => {}
            }
        }
        Ok::<_, KubeError>((out, status))
    };
    let (fed, collected) = tokio::join!(feed, collect);
    let (mut out, status) = collected?;
    if let Ok(mut sink) = fed {
        let _ = sink.close().await;
    }
    out.code = exit_code(status.as_deref())?;
    Ok(out)
}

/// The exit code in an exec's final Status (`Success`, or `NonZeroExitCode` with the code
/// as an `ExitCode` cause); any other failure (the command could not start) is an error.
fn exit_code(status: Option<&[u8]>) -> KubeResult<i32> {
    let Some(bytes) = status else {
        return Err(KubeError::Transport(
            "the exec stream ended without a status".into(),
        ));
    };
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| KubeError::Decode(e.to_string()))?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    if v["reason"] == "NonZeroExitCode"
        && let Some(causes) = v["details"]["causes"].as_array()
        && let Some(code) = causes
            .iter()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str()?.parse::<i32>().ok())
    {
        return Ok(code);
    }
    Err(status_error(
        v["code"].as_u64().unwrap_or(500) as u16,
        bytes,
    ))
}

/// A byte stream to `127.0.0.1:port` inside the pod, through `pods/portforward`.
pub async fn port_forward(api: &Api, pod: &str, port: u16) -> KubeResult<Stream> {
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}/portforward?ports={port}",
        api.namespace()
    );
    let (ws, _) = connect(api, &path, &["v4.channel.k8s.io"]).await?;
    let (ours, theirs) = tokio::io::duplex(proto::RELAY_BUF);
    tokio::spawn(relay(ws, theirs, port));
    Ok(Box::new(ours))
}

/// Move bytes between the local end and the WebSocket until either side is done. The
/// channel protocol has no half-close: the local end's EOF stops the uploads only, and the
/// relay lasts until the pod's side closes or the local end is gone.
async fn relay(ws: Ws, local: tokio::io::DuplexStream, port: u16) {
    let (mut sink, mut source) = ws.split();
    let (mut read, mut write) = tokio::io::split(local);
    let up = async move {
        let mut buf = vec![0u8; CHUNK];
        buf[0] = 0;
        loop {
            let n = match read.read(&mut buf[1..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if sink
                .send(Message::binary(buf[..=n].to_vec()))
                .await
                .is_err()
            {
                break;
            }
        }
        sink
    };
    let down = async move {
        let mut opened = [false; 2];
        while let Some(Ok(msg)) = source.next().await {
            let Message::Binary(b) = msg else {
                if msg.is_close() {
                    break;
                }
                continue;
            };
            let Some((&channel, mut data)) = b.split_first() else {
                continue;
            };
            let channel = channel as usize;
            if channel > 1 {
                continue;
            }
            if !opened[channel] {
                opened[channel] = true;
                if data.len() >= 2 && u16::from_le_bytes([data[0], data[1]]) == port {
                    data = &data[2..];
                }
            }
            if channel == 1 {
                if !data.is_empty() {
                    tracing::debug!("port-forward to {port}: {}", String::from_utf8_lossy(data));
                    break;
                }
                continue;
            }
            if write.write_all(data).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    };
    let (up, down) = (tokio::spawn(up), down);
    down.await;
    up.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_the_status() {
        assert_eq!(
            exit_code(Some(br#"{"metadata":{},"status":"Success"}"#)).ok(),
            Some(0)
        );
        let three = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code(Some(three)).ok(), Some(3));
        let failed = br#"{"metadata":{},"status":"Failure","message":"exec: \"nope\": executable file not found in $PATH","reason":"InternalError","code":500}"#;
        assert!(exit_code(Some(failed)).is_err());
        assert!(exit_code(None).is_err());
    }
}
