//! The tests' HTTP/1.1 servers on loopback: each connection one request, one answer.

// Each test file uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

/// Serve on `ip` (a loopback address), each connection handled by `answer` on its own thread;
/// returns the port.
pub fn serve_on(ip: &str, answer: fn(TcpStream, u16)) -> u16 {
    let listener = TcpListener::bind((ip, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream, port));
        }
    });
    port
}

/// The request's target (path and query), its head read through the blank line; None when the
/// client sent nothing.
pub fn request_target(stream: &TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line == "\r\n" || line.is_empty() {
            break;
        }
    }
    Some(
        request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string(),
    )
}

/// Write an answer and close: `status` ("200 OK"), its type, body and an optional Location.
pub fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    location: Option<&str>,
) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(l) = location {
        head.push_str(&format!("Location: {l}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}
