//! `web_fetch`'s `render` beside Chromium on its own, and what the browser path costs a page
//! that does not need it.
//!
//! Run: `cargo bench -p kitbag-web --bench render` (in `scripts/bench` as `web-render`).
//! Served from loopback: an app shell whose module script reads its article from a JSON file
//! and writes it into the page, and a 60 KB article whose text is in its HTML. Measured:
//! - Chromium alone: `chromium --headless --dump-dom URL` (start, load, print the DOM, exit);
//! - a cold render: the first `web_fetch` of the shell after the server starts (the browser
//!   starts inside it);
//! - warm renders: the next ones, each a new URL (no cache);
//! - the article with `render: "never"` and with the default `auto` (which looks at the page
//!   and does not render it): what the browser path adds to a page without it;
//! - memory: the server before any render, the server and its browser after.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, mb, median, ms, pss_kb, summary, tree_memory_kb};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const SHELL: &str = r#"<!doctype html><html><head><title>Loading</title><script type="module" src="/app.js"></script></head><body><div id="root"></div></body></html>"#;
const APP: &str = r#"const d = await (await fetch("/data.json")).json();
document.getElementById("root").innerHTML = "<article><h1>" + d.title + "</h1>" + d.paragraphs.map(p => "<p>" + p + "</p>").join("") + "</article>";"#;

fn article() -> String {
    let mut body = String::from(
        "<!doctype html><html><head><title>Article</title><script>var t=1;</script></head><body><nav><a href='/'>Home</a></nav><main><article><h1>Article</h1>",
    );
    let mut i = 0;
    while body.len() < 60 * 1024 {
        i += 1;
        body.push_str(&format!("<p>Paragraph {i} of an article whose text is in its HTML, with <a href=\"/l/{i}\">a link</a>.</p>"));
    }
    body.push_str("</article></main></body></html>");
    body
}

fn serve() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let article = article();
    let paragraphs: Vec<String> = (0..40)
        .map(|i| {
            format!("Paragraph {i} of the rendered article, written into the page by its script.")
        })
        .collect();
    let data = json!({"title": "Rendered", "paragraphs": paragraphs}).to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (article, data) = (article.clone(), data.clone());
            std::thread::spawn(move || {
                let mut s = stream;
                let mut r = BufReader::new(s.try_clone().expect("clone"));
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("/");
                let path = path.split('?').next().unwrap_or(path);
                let (ctype, body) = match path {
                    "/spa" => ("text/html", SHELL.to_string()),
                    "/app.js" => ("text/javascript", APP.to_string()),
                    "/data.json" => ("application/json", data),
                    _ => ("text/html", article),
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(body.as_bytes());
            });
        }
    });
    port
}

fn call(c: &mut McpClient, args: serde_json::Value) -> Duration {
    let t = Instant::now();
    let r = c.call("web_fetch", args);
    let took = t.elapsed();
    assert!(!r.is_error, "{}", r.text);
    took
}

fn main() {
    let Ok(chromium) = kitbag_web::render::browser::locate(None) else {
        println!("SKIP: no Chromium on PATH");
        return;
    };
    let port = serve();
    let spa = format!("http://127.0.0.1:{port}/spa");
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-web"));
    let dir = std::env::temp_dir();
    let args = ["--allow-host", "127.0.0.1"];

    let mut alone = Vec::new();
    for i in 0..5 {
        let profile = tempfile::tempdir().expect("profile");
        let t = Instant::now();
        let mut cmd = std::process::Command::new(&chromium);
        cmd.args([
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("{spa}?alone={i}"))
        .stderr(std::process::Stdio::null());
        if kitbag_shared::proc_stat::is_root() {
            cmd.arg("--no-sandbox");
        }
        let out = cmd.output().expect("chromium --dump-dom");
        alone.push(t.elapsed());
        assert!(out.status.success());
    }
    let alone = median(alone);

    let mut cold = Vec::new();
    let mut idle_server_kb = 0;
    for i in 0..5 {
        let mut c = McpClient::spawn(bin, &args, &dir, Era::Handshake);
        idle_server_kb = pss_kb(c.pid());
        cold.push(call(&mut c, json!({"url": format!("{spa}?cold={i}")})));
    }
    let cold = median(cold);

    let mut c = McpClient::spawn(bin, &args, &dir, Era::Handshake);
    call(&mut c, json!({"url": format!("{spa}?first")}));
    let mut warm = Vec::new();
    for i in 0..20 {
        warm.push(call(&mut c, json!({"url": format!("{spa}?warm={i}")})));
    }
    let warm = median(warm);
    let (_, with_browser_kb) = tree_memory_kb(c.pid());

    let mut plain = McpClient::spawn(bin, &args, &dir, Era::Handshake);
    let (mut never, mut auto) = (Vec::new(), Vec::new());
    for i in 0..100 {
        let page = format!("http://127.0.0.1:{port}/article?n={i}");
        never.push(call(
            &mut plain,
            json!({"url": format!("{page}&never"), "render": "never"}),
        ));
        auto.push(call(&mut plain, json!({"url": page})));
    }
    let (never, auto) = (median(never), median(auto));
    let never_server_kb = pss_kb(plain.pid());

    println!(
        "Chromium alone, --dump-dom of the app shell (start, load, print, exit), median of 5: {}",
        ms(alone)
    );
    println!(
        "web_fetch render, cold (the browser starts inside the call), median of 5: {}",
        ms(cold)
    );
    println!(
        "web_fetch render, warm (browser kept, each a new URL), median of 20: {}",
        ms(warm)
    );
    println!(
        "a 60 KB article: render never {} / auto (looked at, not rendered) {}, medians of 100",
        ms(never),
        ms(auto)
    );
    println!(
        "memory (PSS): server before any render {}, after 100 unrendered pages {}, server + browser after renders {}",
        mb(idle_server_kb),
        mb(never_server_kb),
        mb(with_browser_kb)
    );
    summary(Summary {
        area: "web",
        measure: "render an app shell, cold browser",
        kitbag: ms(cold),
        reference: format!("chromium --dump-dom {}", ms(alone)),
        compared: format!("{:.2}×", cold.as_secs_f64() / alone.as_secs_f64()),
        target: "",
        met: None,
    });
    summary(Summary {
        area: "web",
        measure: "render an app shell, warm browser",
        kitbag: ms(warm),
        reference: format!("chromium --dump-dom {}", ms(alone)),
        compared: format!("{:.2}×", warm.as_secs_f64() / alone.as_secs_f64()),
        target: "",
        met: None,
    });
    summary(Summary {
        area: "web",
        measure: "an article under render auto (not rendered)",
        kitbag: ms(auto),
        reference: format!("render never {}", ms(never)),
        compared: format!(
            "{:+.2} ms",
            (auto.as_secs_f64() - never.as_secs_f64()) * 1e3
        ),
        target: "",
        met: None,
    });
}
