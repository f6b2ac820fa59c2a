//! `web_fetch` of a 200 KB HTML page from a loopback server, and the server's cold start.
//!
//! Run: `cargo bench -p kitbag-web`. The page is served fresh each time (a query string
//! defeats the cache) so every round trip includes the fetch and the conversion.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn page() -> String {
    let mut body = String::from(
        "<!DOCTYPE html><html><head><title>Bench article</title><script>var x=1;</script></head><body><nav><a href='/'>Home</a></nav><main><article><h1>Bench</h1>",
    );
    let mut i = 0;
    while body.len() < 200 * 1024 {
        i += 1;
        body.push_str(&format!(
            "<h2>Section {i}</h2><p>Paragraph {i} with <a href=\"/link/{i}\">a link</a>, <code>inline code</code> and <em>emphasis</em>.</p><ul><li>item a</li><li>item b</li></ul><pre><code>fn f{i}() {{ println!(\"{i}\"); }}</code></pre>"
        ));
    }
    body.push_str("</article></main><footer>footer</footer></body></html>");
    body
}

fn main() {
    let html = page();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let served = html.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = served.clone();
            std::thread::spawn(move || {
                let mut s = stream;
                let mut r = BufReader::new(s.try_clone().expect("clone"));
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(body.as_bytes());
            });
        }
    });
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-web"));
    let dir = std::env::temp_dir();
    let mut cold = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let mut c = McpClient::spawn(bin, &[], &dir, Era::Handshake);
        assert!(!c.list_tools().is_empty());
        cold.push(t.elapsed());
    }
    println!(
        "kitbag-web cold start (spawn → initialize → tools/list), median of 20: {}",
        ms(median(cold))
    );
    let mut c = McpClient::spawn(bin, &["--allow-host", "127.0.0.1"], &dir, Era::Handshake);
    let mut runs = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        let r = c.call(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/page?n={i}")}),
        );
        runs.push(t.elapsed());
        assert!(!r.is_error, "{}", r.text);
    }
    println!(
        "web_fetch of a {} KB HTML page from loopback (fetch + convert + 10,000-char answer), median of 100: {}",
        html.len() / 1024,
        ms(median(runs))
    );
    let mut conv = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        std::hint::black_box(kitbag_web::html::to_markdown(&html));
        conv.push(t.elapsed());
    }
    println!(
        "  of which HTML → markdown conversion in-process, median of 100: {}",
        ms(median(conv))
    );
}
