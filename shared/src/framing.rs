//! `Content-Length` framing, the wire format LSP and DAP share.
//!
//! Each message is `Content-Length: N\r\n[other headers]\r\n\r\n` followed by N bytes of
//! JSON. Written once here so the LSP and DAP bridges cannot drift apart.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Largest message body accepted from a child process; bigger frames are an error
/// rather than an allocation the size of whatever the header claims.
pub const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// Encode one message with its Content-Length header.
pub fn encode(msg: &Value) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Read one frame's body; `None` at a clean end of stream.
pub async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut len: Option<usize> = None;
    let mut line = String::new();
    loop {
        line.clear();
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
    if n > MAX_FRAME_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {n} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"),
        ));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Read the next well-formed JSON message; frames that are not JSON are skipped (a
/// misbehaving child must not end the conversation). `None` at end of stream.
pub async fn read_message<R: AsyncBufRead + Unpin>(r: &mut R) -> std::io::Result<Option<Value>> {
    loop {
        match read_frame(r).await? {
            None => return Ok(None),
            Some(body) => match serde_json::from_slice(&body) {
                Ok(v) => return Ok(Some(v)),
                Err(e) => tracing::warn!("skipping a frame that is not JSON: {e}"),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn round_trips_messages_and_skips_garbage_frames() {
        let a = json!({"seq": 1, "type": "event", "event": "initialized"});
        let b = json!({"jsonrpc": "2.0", "id": 2, "result": {"s": "é 😀"}});
        let mut bytes = encode(&a);
        bytes.extend(b"Content-Length: 3\r\nContent-Type: x\r\n\r\nnot");
        bytes.extend(encode(&b));
        let mut r = BufReader::new(&bytes[..]);
        assert_eq!(read_message(&mut r).await.unwrap(), Some(a));
        assert_eq!(read_message(&mut r).await.unwrap(), Some(b));
        assert_eq!(read_message(&mut r).await.unwrap(), None);
    }

    #[tokio::test]
    async fn refuses_absurd_lengths() {
        let bytes = b"Content-Length: 999999999999\r\n\r\n".to_vec();
        let mut r = BufReader::new(&bytes[..]);
        assert!(read_frame(&mut r).await.is_err());
    }
}
