//! web_fetch against a real HTTP server on loopback started by the test.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};

#[path = "common/clients.rs"]
mod clients;
#[path = "common/http.rs"]
mod http;
use clients::{bin, client, client_via};
use serde_json::json;

const ARTICLE: &str = include_str!("fixtures/article.html");

/// A small HTTP/1.1 server on 127.0.0.1 with the routes the tests need.
fn serve() -> u16 {
    http::serve_on("127.0.0.1", handle)
}

fn handle(mut stream: TcpStream, port: u16) {
    let Some(path) = http::request_target(&stream) else {
        return;
    };
    let long: String = (0..2500).map(|i| format!("line {i:04} é\n")).collect();
    let (status, ctype, body, location): (&str, &str, Vec<u8>, Option<String>) = match path.as_str()
    {
        "/article" => (
            "200 OK",
            "text/html; charset=utf-8",
            ARTICLE.as_bytes().to_vec(),
            None,
        ),
        "/json" => (
            "200 OK",
            "application/json",
            br#"{"name":"kitbag","tools":["web_fetch"],"ok":true}"#.to_vec(),
            None,
        ),
        "/text" => ("200 OK", "text/plain", b"just some text\n".to_vec(), None),
        "/long" => (
            "200 OK",
            "text/plain; charset=utf-8",
            long.into_bytes(),
            None,
        ),
        // 30,000 control characters and quotes: 10,000 of them weigh 46,666 bytes escaped.
        "/escapes" => (
            "200 OK",
            "text/plain; charset=utf-8",
            "\u{1}\u{2}\"".repeat(10_000).into_bytes(),
            None,
        ),
        // /chain/N/<padding>: N more redirects, each to a URL as long, then /escapes' body.
        p if p.starts_with("/chain/") => {
            let rest = &p["/chain/".len()..];
            let (n, pad) = rest.split_once('/').unwrap_or((rest, ""));
            match n.parse::<u32>().unwrap_or(0) {
                0 => (
                    "200 OK",
                    "text/plain; charset=utf-8",
                    "\u{1}\u{2}\"".repeat(10_000).into_bytes(),
                    None,
                ),
                n => (
                    "302 Found",
                    "text/plain",
                    Vec::new(),
                    Some(format!("/chain/{}/{pad}", n - 1)),
                ),
            }
        }
        // Legacy encodings with no charset in the header: one declared in a <meta>, one not
        // declared at all (windows-1252, as browsers assume).
        "/cyrillic" => {
            let mut page = b"<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\"><title>t</title></head><body><main><h1>".to_vec();
            // "Привет, мир" in windows-1251.
            page.extend_from_slice(b"\xcf\xf0\xe8\xe2\xe5\xf2, \xec\xe8\xf0");
            page.extend_from_slice(b"</h1><p>text</p></main></body></html>");
            ("200 OK", "text/html", page, None)
        }
        "/latin" => (
            "200 OK",
            "text/html",
            b"<html><body><main><h1>Gr\xfc\xdfe aus K\xf6ln</h1></main></body></html>".to_vec(),
            None,
        ),
        "/r1" => ("302 Found", "text/plain", Vec::new(), Some("/r2".into())),
        "/r2" => (
            "301 Moved Permanently",
            "text/plain",
            Vec::new(),
            Some(format!("http://127.0.0.1:{port}/article")),
        ),
        "/to-ip" => (
            "302 Found",
            "text/plain",
            Vec::new(),
            Some(format!("http://127.0.0.1:{port}/article")),
        ),
        "/big" => ("200 OK", "text/plain", vec![b'x'; 3 << 20], None),
        // A news page: 2 MB of inline scripts and navigation before the article.
        "/heavy" => {
            let mut page = String::from("<html><head>");
            while page.len() < 2 << 20 {
                page.push_str("<script>window.__state = {\"k\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"};</script>\n");
            }
            page.push_str("</head><body><nav>Home News</nav><main><article><h1>Late headline</h1>");
            page.push_str("<p>The article text arrives after two megabytes of markup.</p></article></main></body></html>");
            ("200 OK", "text/html", page.into_bytes(), None)
        }
        "/feed.rss" => (
            "200 OK",
            "application/rss+xml",
            RSS.as_bytes().to_vec(),
            None,
        ),
        "/feed.atom" => ("200 OK", "application/xml", ATOM.as_bytes().to_vec(), None),
        "/doc.pdf" => (
            "200 OK",
            "application/pdf",
            pdf(&["First page text", "Second (page) text", "Third page"]),
            None,
        ),
        "/unlabelled.pdf" => (
            "200 OK",
            "application/octet-stream",
            pdf(&["Served without its type"]),
            None,
        ),
        "/scan.pdf" => ("200 OK", "application/pdf", pdf(&["", ""]), None),
        "/broken.pdf" => (
            "200 OK",
            "application/pdf",
            b"%PDF-1.4\n1 0 obj << /Type /Catalog".to_vec(),
            None,
        ),
        "/big.pdf" => {
            let pages: Vec<String> = (1..=12)
                .map(|i| format!("page {i} {}", "x".repeat(2000)))
                .collect();
            let refs: Vec<&str> = pages.iter().map(String::as_str).collect();
            ("200 OK", "application/pdf", pdf(&refs), None)
        }
        "/image" => (
            "200 OK",
            "image/png",
            b"\x89PNG\r\n\x1a\n\0\0\0".to_vec(),
            None,
        ),
        "/slow" => {
            std::thread::sleep(Duration::from_secs(6));
            ("200 OK", "text/plain", b"late".to_vec(), None)
        }
        _ => (
            "404 Not Found",
            "text/html",
            b"<html><body><main><h1>Not here</h1></main></body></html>".to_vec(),
            None,
        ),
    };
    http::respond(&mut stream, status, ctype, &body, location.as_deref());
}

const RSS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0"><channel><title>Kitbag &amp; friends</title><link>https://example.org/</link>
<item><title>Release 1.2</title><link>https://example.org/1.2</link>
<pubDate>Mon, 23 Nov 2026 09:00:00 GMT</pubDate>
<description><![CDATA[<p>Faster <b>shell</b> and a patch tool.</p>]]></description></item>
<item><title>Release 1.1</title><link>https://example.org/1.1</link>
<description>Bug fixes &amp; docs.</description></item>
</channel></rss>"#;

const ATOM: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Atom news</title>
<entry><title>Entry one</title><link rel="alternate" href="https://example.org/e1"/>
<updated>2026-11-20T10:00:00Z</updated><summary>Short summary.</summary></entry>
</feed>"#;

/// A PDF with one page per text (an empty text: a page with no text layer), written out by
/// hand — objects, offsets, cross-reference table — so the parser is checked against a file
/// it did not write.
fn pdf(pages: &[&str]) -> Vec<u8> {
    let n = pages.len();
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!("<< /Type /Pages /Kids [{}] /Count {n} >>", kids.join(" ")),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    for (i, text) in pages.iter().enumerate() {
        let escaped = text.replace('(', "\\(").replace(')', "\\)");
        let content = if text.is_empty() {
            "0 0 m 10 10 l S".to_string()
        } else {
            format!("BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET")
        };
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + 2 * i
        ));
        objects.push(format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for off in offsets {
        out.extend(format!("{off:010} 00000 n \n").as_bytes());
    }
    out.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// Feeds become their entries; PDFs their pages' text, with page markers; what cannot be read
/// says why, typed — from the single server and through `kitbag serve` alike.
#[test]
fn feeds_and_pdfs_become_text() {
    let port = serve();
    for through_host in [false, true] {
        feeds_and_pdfs_become_text_via(port, through_host);
    }
}

fn feeds_and_pdfs_become_text_via(port: u16, through_host: bool) {
    let (mut c, _cfg) = client_via(&["--allow-host", "127.0.0.1"], through_host);
    let base = format!("http://127.0.0.1:{port}");
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/feed.rss")}));
    assert_eq!(r.structured["feed_entries"], 2);
    assert_eq!(r.structured["title"], "Kitbag & friends");
    let text = r.structured["text"].as_str().expect("text");
    assert!(
        text.contains("1. **Release 1.2** — Mon, 23 Nov 2026 09:00:00 GMT\n   https://example.org/1.2\n   Faster shell and a patch tool."),
        "{text}"
    );
    assert!(text.contains("Bug fixes & docs."), "{text}");
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/feed.atom")}));
    assert_eq!(r.structured["feed_entries"], 1);
    assert!(
        r.structured["text"]
            .as_str()
            .expect("text")
            .contains("https://example.org/e1")
    );
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/doc.pdf")}));
    assert_eq!(r.structured["pdf_pages"], 3);
    assert_eq!(r.structured["pdf_pages_converted"], 3);
    let text = r.structured["text"].as_str().expect("text");
    for want in [
        "--- page 1 ---",
        "First page text",
        "--- page 2 ---",
        "Second (page) text",
        "--- page 3 ---",
        "Third page",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("{base}/unlabelled.pdf")}),
    );
    assert!(
        r.structured["text"]
            .as_str()
            .expect("t")
            .contains("Served without its type")
    );
    // Paged like any text: the second page of a long PDF goes on where the first stopped.
    let first = c.call_ok(
        "web_fetch",
        json!({"url": format!("{base}/big.pdf"), "max_length": 5000}),
    );
    assert_eq!(first.structured["pdf_pages"], 12);
    assert_eq!(first.structured["truncated"], true);
    let next = first.structured["next_start_index"].as_u64().expect("next");
    let second = c.call_ok(
        "web_fetch",
        json!({"url": format!("{base}/big.pdf"), "max_length": 5000, "start_index": next}),
    );
    let (a, b) = (
        first.structured["text"].as_str().expect("t"),
        second.structured["text"].as_str().expect("t"),
    );
    assert!(a.contains("--- page 2 ---") && !a.contains("--- page 4 ---"));
    assert!(b.contains("--- page 4 ---") && !b.contains("--- page 2 ---"));
    let e = c.call_err(
        "web_fetch",
        json!({"url": format!("{base}/scan.pdf")}),
        "unsupported",
    );
    assert_eq!(
        e.structured["error"]["detail"]["reason"], "image_only",
        "{}",
        e.text
    );
    assert!(e.text.contains("needs OCR"), "{}", e.text);
    let e = c.call_err(
        "web_fetch",
        json!({"url": format!("{base}/broken.pdf")}),
        "unsupported",
    );
    assert_eq!(e.structured["error"]["detail"]["reason"], "broken");
    let (mut small, _small_cfg) = client_via(
        &["--allow-host", "127.0.0.1", "--max-body-bytes", "1000"],
        through_host,
    );
    let e = small.call_err(
        "web_fetch",
        json!({"url": format!("{base}/big.pdf")}),
        "unsupported",
    );
    assert_eq!(e.structured["error"]["detail"]["reason"], "cut");
    // raw: the bytes as they came, not converted.
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("{base}/feed.rss"), "raw": true}),
    );
    assert!(
        r.structured["text"]
            .as_str()
            .expect("t")
            .starts_with("<?xml")
    );
}

#[test]
fn eras_and_catalog() {
    let port = serve();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = McpClient::spawn(
            bin(),
            &["--allow-host", "127.0.0.1"],
            &std::env::temp_dir(),
            era,
        );
        let r = c.call_ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/text")}),
        );
        assert_eq!(r.structured["text"], "just some text\n");
        assert!(c.stdout_garbage().is_empty());
        if era == Era::Handshake {
            assert_catalog_matches(
                &mut c,
                &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/web/tools.json"),
            );
        }
    }
}

#[test]
fn legacy_encodings_are_decoded_as_the_page_declares() {
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    for (path, want) in [("cyrillic", "# Привет, мир"), ("latin", "# Grüße aus Köln")] {
        let r = c.call_ok(
            "web_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/{path}")}),
        );
        let text = r.structured["text"].as_str().expect("text");
        assert!(text.starts_with(want), "{path}: {text}");
    }
}

#[test]
fn article_becomes_clean_markdown() {
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/article"), "max_length": 100000}),
    );
    let md = r.structured["text"].as_str().expect("text");
    assert_eq!(
        r.structured["title"],
        "Understanding Ownership in Rust | The Systems Blog"
    );
    assert!(md.starts_with("# Understanding Ownership in Rust"), "{md}");
    for kept in [
        "## The three rules",
        "[official book](https://doc.rust-lang.org/book/ch04-01-what-is-ownership.html)",
        "1.  Each value has an owner.",
        "```",
        "let s2 = s1;",
        "| String | Move ",
        "> Borrowing lets you use a value",
        "Next week we will look at lifetimes.",
    ] {
        assert!(md.contains(kept), "missing {kept:?} in:\n{md}");
    }
    for dropped in [
        "Archive",
        "About us",
        "cookies",
        "Share on X",
        "gtag",
        "Related posts",
        "42 comments",
        "Subscribe",
        "© 2026",
        "Skip to content",
        "highlight",
    ] {
        assert!(!md.contains(dropped), "{dropped:?} should be gone:\n{md}");
    }
    assert!(
        r.structured["raw"]
            .as_str()
            .expect("raw")
            .starts_with("<!DOCTYPE html>")
    );
    assert!(r.structured["raw"].as_str().expect("raw").len() <= 2048);
    let again = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/article")}),
    );
    assert_eq!(again.structured["cached"], true);
    let src = c.call_ok("web_fetch", json!({"url": format!("http://127.0.0.1:{port}/article"), "raw": true, "max_length": 100000}));
    assert!(
        src.structured["text"]
            .as_str()
            .expect("t")
            .contains("<nav class=\"primary-nav\"")
    );
}

/// A default page stays under the result budget (issue #37) however its characters escape,
/// and the next page starts where it ended.
#[test]
fn a_default_page_fits_the_result_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    let url = format!("http://127.0.0.1:{port}/escapes");
    let full = "\u{1}\u{2}\"".repeat(10_000);
    let first = c.call_ok("web_fetch", json!({ "url": url })).structured;
    assert!(
        json_len(&first) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&first)
    );
    assert_eq!(first["truncated"], true);
    let t1 = first["text"].as_str().expect("text");
    let next = first["next_start_index"].as_u64().expect("next");
    assert_eq!(next as usize, t1.chars().count());
    assert!(full.starts_with(t1));
    let second = c
        .call_ok("web_fetch", json!({ "url": url, "start_index": next }))
        .structured;
    assert!(
        json_len(&second) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&second)
    );
    let t2 = second["text"].as_str().expect("text");
    assert!(full[t1.len()..].starts_with(t2) && !t2.is_empty());
    // An explicit max_length still gets what it asks for.
    let all = c
        .call_ok("web_fetch", json!({ "url": url, "max_length": 30_000 }))
        .structured;
    assert_eq!(all["text"], full);
}

/// Issue #37: ten redirects through 30 KB URLs made a default answer ~360 KB of URLs alone;
/// `url`, `final_url` and the hops are now cut (each saying so) and the text takes the room
/// left, paged on by `next_start_index` as usual.
#[test]
fn a_redirect_chain_of_long_urls_fits_the_result_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    let url = format!("http://127.0.0.1:{port}/chain/10/{}", "a".repeat(30_000));
    let full = "\u{1}\u{2}\"".repeat(10_000);
    let first = c.call_ok("web_fetch", json!({ "url": url })).structured;
    assert!(
        json_len(&first) < RESULT_BUDGET_BYTES,
        "{}",
        json_len(&first)
    );
    let hops = first["redirects"].as_array().expect("redirects");
    assert_eq!(hops.len(), 10);
    let final_url = first["final_url"].as_str().expect("final_url");
    for u in hops
        .iter()
        .map(|h| h.as_str().expect("hop"))
        .chain([final_url, first["url"].as_str().expect("url")])
    {
        assert!(
            u.contains("bytes]") && u.starts_with("http://127.0.0.1:"),
            "{u}"
        );
        assert!(u.contains("cut to fit the answer"), "{u}");
    }
    assert!(final_url.contains("/chain/0/aaa"));
    assert_eq!(first["truncated"], true);
    let t1 = first["text"].as_str().expect("text");
    assert!(!t1.is_empty() && full.starts_with(t1));
    let next = first["next_start_index"].as_u64().expect("next");
    assert_eq!(next as usize, t1.chars().count());
    let second = c
        .call_ok("web_fetch", json!({ "url": url, "start_index": next }))
        .structured;
    assert!(json_len(&second) < RESULT_BUDGET_BYTES);
    let t2 = second["text"].as_str().expect("text");
    assert!(full[t1.len()..].starts_with(t2) && !t2.is_empty());
}

#[test]
fn paging_reassembles_exactly() {
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    let url = format!("http://127.0.0.1:{port}/long");
    let whole = c.call_ok("web_fetch", json!({"url": url, "max_length": 1000000}));
    let full = whole.structured["text"].as_str().expect("t").to_string();
    assert_eq!(whole.structured["total_length"], full.chars().count());
    let mut joined = String::new();
    let mut start = 0u64;
    loop {
        let r = c.call_ok(
            "web_fetch",
            json!({"url": url, "max_length": 997, "start_index": start}),
        );
        joined.push_str(r.structured["text"].as_str().expect("t"));
        if r.structured["truncated"] == false {
            break;
        }
        start = r.structured["next_start_index"].as_u64().expect("next");
    }
    assert_eq!(
        joined, full,
        "pages (split inside multi-byte characters' neighbours) reassemble the text"
    );
}

#[test]
fn a_page_with_megabytes_of_markup_before_its_article_is_read_whole() {
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1"]);
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/heavy")}),
    );
    let text = r.structured["text"].as_str().expect("text");
    assert!(text.contains("after two megabytes of markup"), "{text}");
    assert_ne!(r.structured["body_truncated"], true);
}

#[test]
fn redirects_statuses_types_and_limits() {
    let port = serve();
    let mut c = client(&["--allow-host", "127.0.0.1", "--max-body-bytes", "100000"]);
    let base = format!("http://127.0.0.1:{port}");
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/r1")}));
    assert_eq!(r.structured["final_url"], format!("{base}/article"));
    assert_eq!(r.structured["redirects"].as_array().expect("r").len(), 2);
    assert_eq!(r.structured["status"], 200);
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/nope")}));
    assert_eq!(r.structured["status"], 404, "an HTTP error status is data");
    assert!(
        r.structured["text"]
            .as_str()
            .expect("t")
            .contains("Not here")
    );
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/json")}));
    assert_eq!(
        r.structured["text"],
        "{\n  \"name\": \"kitbag\",\n  \"tools\": [\n    \"web_fetch\"\n  ],\n  \"ok\": true\n}"
    );
    let r = c.call_ok("web_fetch", json!({"url": format!("{base}/image")}));
    assert_eq!(
        r.structured["text"],
        "[binary content: image/png, 11 bytes; not shown]"
    );
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("{base}/big"), "max_length": 10}),
    );
    assert_eq!(r.structured["body_truncated"], true);
    assert_eq!(r.structured["total_length"], 100000);
    let started = Instant::now();
    let r = c.call_err(
        "web_fetch",
        json!({"url": format!("{base}/slow"), "timeout": 1}),
        "timeout",
    );
    assert!(r.text.contains("1 s"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Also through `kitbag serve`: the guard is the web server's, whoever calls it.
#[test]
fn redirect_from_allowed_host_to_loopback_literal_is_refused() {
    let port = serve();
    for through_host in [false, true] {
        redirect_to_a_loopback_literal_is_refused_via(port, through_host);
    }
}

fn redirect_to_a_loopback_literal_is_refused_via(port: u16, through_host: bool) {
    let (mut c, _cfg) = client_via(&["--allow-host", "localhost"], through_host);
    let r = c.call_err(
        "web_fetch",
        json!({"url": format!("http://localhost:{port}/to-ip")}),
        "url_blocked",
    );
    assert!(r.text.contains("127.0.0.1"), "{}", r.text);
    // The allowed host itself works.
    let r = c.call_ok(
        "web_fetch",
        json!({"url": format!("http://localhost:{port}/text")}),
    );
    assert_eq!(r.structured["status"], 200);
}

/// Also through `kitbag serve`, the metadata address included.
#[test]
fn ssrf_guard_refuses_internal_targets() {
    for through_host in [false, true] {
        ssrf_guard_refuses_internal_targets_via(through_host);
    }
}

fn ssrf_guard_refuses_internal_targets_via(through_host: bool) {
    let (mut c, _cfg) = client_via(&[], through_host);
    for url in [
        "http://127.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f000001/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.0.1/",
        "http://100.64.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://224.0.0.251/",
        "http://[fc00::1]/",
        "http://[fe80::1]/",
        "http://localhost/",
    ] {
        let r = c.call_err("web_fetch", json!({"url": url}), "url_blocked");
        assert_eq!(r.structured["error"]["detail"]["field"], "url", "{url}");
    }
}

#[test]
fn bad_input_is_typed() {
    let mut c = client(&[]);
    for (args, field) in [
        (json!({"url": "ftp://example.com/file"}), "url"),
        (json!({"url": "file:///etc/passwd"}), "url"),
        (json!({"url": "not a url"}), "url"),
        (json!({"url": "http://user:secret@example.com/"}), "url"),
        (
            json!({"url": "http://example.com/", "max_length": 0}),
            "max_length",
        ),
        (
            json!({"url": "http://example.com/", "max_length": -5}),
            "max_length",
        ),
        (
            json!({"url": "http://example.com/", "start_index": -1}),
            "start_index",
        ),
        (
            json!({"url": "http://example.com/", "timeout": 0}),
            "timeout",
        ),
        (json!({"url": "http://example.com/", "bogus": 1}), "bogus"),
    ] {
        let r = c.call_err("web_fetch", args.clone(), "invalid_params");
        assert_eq!(
            r.structured["error"]["detail"]["field"], field,
            "{args}: {}",
            r.text
        );
    }
}
