//! Hostile pages — nesting far deeper than any recursive walk survives, NUL-filled bodies —
//! served from a real HTTP server on loopback to the real binary: each is answered, the memory
//! stays bounded and the server keeps serving.

use std::net::TcpStream;
use std::path::Path;
use std::time::Instant;

use kitbag_testkit::{Era, McpClient};

#[path = "common/http.rs"]
mod http;
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-web"))
}

fn page(path: &str) -> Option<Vec<u8>> {
    let nest = |open: &str, n: usize, bottom: &str| {
        format!(
            "<!DOCTYPE html><html><head><title>deep</title></head><body>{}{bottom}</body></html>",
            open.repeat(n)
        )
        .into_bytes()
    };
    Some(match path {
        "/b" => nest("<b>", 50_000, "innermost b"),
        "/div" => nest("<div>", 50_000, "innermost div"),
        "/span" => nest("<span>", 100_000, "innermost span"),
        "/mix" => {
            let levels: String = (0..10_000)
                .map(|i| format!("<div class=\"l{i}\"><span>{i}</span><b><i><section>"))
                .collect();
            nest(&levels, 1, "bottom of the mix")
        }
        "/nul" => {
            let mut body = b"<html><body><p>before".to_vec();
            body.resize(5 << 20, 0); // the default body cap
            body
        }
        "/ok" => b"<html><body><main><p>still here</p></main></body></html>".to_vec(),
        _ => return None,
    })
}

fn serve() -> u16 {
    http::serve_on("127.0.0.1", handle)
}

fn handle(mut stream: TcpStream, _port: u16) {
    let Some(path) = http::request_target(&stream) else {
        return;
    };
    let (status, body) = match page(&path) {
        Some(b) => ("200 OK", b),
        None => ("404 Not Found", b"no".to_vec()),
    };
    http::respond(&mut stream, status, "text/html; charset=utf-8", &body, None);
}

/// Peak resident set of a process, in kB.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn client() -> McpClient {
    McpClient::spawn(
        bin(),
        &["--allow-host", "127.0.0.1"],
        &std::env::temp_dir(),
        Era::Handshake,
    )
}

fn still_serves(c: &mut McpClient, port: u16) {
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/ok")}),
    );
    assert_eq!(r.structured["text"], "still here");
}

#[test]
fn deep_nesting_is_answered_with_the_innermost_text() {
    let port = serve();
    let mut c = client();
    for (path, innermost) in [
        ("/b", "innermost b"),
        ("/div", "innermost div"),
        ("/span", "innermost span"),
        ("/mix", "bottom of the mix"),
    ] {
        let started = Instant::now();
        let r = c.call_ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}{path}"), "max_length": 1_000_000}),
        );
        let text = r.structured["text"].as_str().expect("text");
        assert!(text.contains(innermost), "{path}: {text:.300}");
        assert_eq!(r.structured["title"], "deep", "{path}");
        let note = r.structured["note"].as_str().expect("note");
        assert!(note.contains("unwrapped"), "{path}: {note}");
        assert!(r.text.contains(note), "the note is in the text content too");
        eprintln!(
            "{path}: {:?}, peak RSS {} kB",
            started.elapsed(),
            peak_rss_kb(c.pid())
        );
        still_serves(&mut c, port);
    }
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/mix"), "max_length": 1_000_000}),
    );
    let text = r.structured["text"].as_str().expect("text");
    let (first, last) = (text.find("9998"), text.find("9999"));
    assert!(first.is_some() && first < last, "deep text in order");
}

/// Stated bound for a 5 MB NUL-filled body (the default cap): before the fix a 1 MB one took
/// ~100 MB for the parse-error log alone.
const NUL_PEAK_RSS_KB: u64 = 200 * 1024;

#[test]
fn nul_filled_body_is_answered_in_bounded_memory() {
    let port = serve();
    let mut c = client();
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/nul")}),
    );
    assert_eq!(r.structured["text"], "before");
    let peak = peak_rss_kb(c.pid());
    eprintln!("/nul: peak RSS {peak} kB");
    assert!(peak < NUL_PEAK_RSS_KB, "peak RSS {peak} kB");
    still_serves(&mut c, port);
}
