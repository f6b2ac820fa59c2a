//! `web_fetch`'s `render` against headless Chromium: an app-shell page served from loopback
//! whose script fills it in — and tries to reach internal addresses through every kind of
//! request a page can make. Each of those must be refused by the guard (a trap listening on
//! another loopback address counts what reaches it: nothing may), and the browser must never
//! outlive the server, however it ends.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kitbag_testkit::{McpClient, child_pids, process_alive, wait_until};
use serde_json::{Value, json};

#[path = "common/clients.rs"]
mod clients;
#[path = "common/http.rs"]
mod http;
use clients::client_via;

/// Whether Chromium is here. Under `CI=true` its absence fails the test (scripts/test
/// installs it); elsewhere the test returns, saying SKIP.
fn chromium_present() -> bool {
    // The server's own lookup of a browser on PATH.
    let found = kitbag_web::render::browser::locate(None).is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Chromium is required under CI=true (scripts/test installs it)"
        );
        eprintln!("SKIP: no Chromium on PATH");
    }
    found
}

/// A listener on 127.0.0.2 (loopback, so refused by the guard) counting every connection.
fn trap() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let port = listener.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (port, hits)
}

/// The site on 127.0.0.1: `/spa` is an empty root and a script; the script reads its article
/// from `/data.json` and, on the way, tries the trap and the metadata address every way a page
/// can.
fn site(trap_port: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || answer(s, trap_port));
        }
    });
    port
}

const SHELL: &str = r#"<!doctype html><html><head><title>Loading…</title>
<script type="module" src="/app.js"></script></head>
<body><div id="root"></div><noscript>You need to enable JavaScript to run this app.</noscript></body></html>"#;

fn app_js(trap: u16) -> String {
    format!(
        r#"
const trap = "127.0.0.2:{trap}";
// Subresources, XHR, fetch, a WebSocket, a redirect to the metadata address, a name that
// resolves to loopback, an iframe: each must be refused.
new Image().src = "http://169.254.169.254/latest/meta-data/iam";
new Image().src = "http://" + trap + "/img";
fetch("http://" + trap + "/fetch").catch(() => {{}});
fetch("/to-metadata").catch(() => {{}});
fetch("http://localhost:{trap}/by-name").catch(() => {{}});
const x = new XMLHttpRequest(); x.open("GET", "http://" + trap + "/xhr"); x.send();
try {{ new WebSocket("ws://" + trap + "/ws"); }} catch (e) {{}}
const f = document.createElement("iframe"); f.src = "http://10.0.0.1/"; document.body.appendChild(f);
// The service worker's install waits for its own request, and the page for the worker: the
// worker's request is made before the article is written.
if (navigator.serviceWorker) {{
  await navigator.serviceWorker.register("/sw.js");
  await navigator.serviceWorker.ready;
}}
const data = await (await fetch("/data.json")).json();
document.title = data.title;
const root = document.getElementById("root");
const article = document.createElement("article");
article.innerHTML = "<h1>" + data.title + "</h1>" + data.paragraphs.map(p => "<p>" + p + "</p>").join("");
root.appendChild(article);
"#
    )
}

const PARAGRAPHS: [&str; 3] = [
    "Rendered pages are read from the browser's DOM once their network has gone quiet, so the article a script writes is the article the agent reads.",
    "Every request the page makes passes the same guard as the fetch itself: names are resolved by the server, and internal addresses are refused.",
    "The browser is started once, kept for the next page, restarted after a crash and never left running after the server has gone.",
];

fn answer(mut stream: TcpStream, trap: u16) {
    let Some(target) = http::request_target(&stream) else {
        return;
    };
    let path = target.split('?').next().unwrap_or(&target).to_string();
    let data = json!({"title": "The rendered article", "paragraphs": PARAGRAPHS}).to_string();
    let (status, ctype, body, location) = match path.as_str() {
        "/spa" => ("200 OK", "text/html", SHELL.to_string(), None),
        "/app.js" => ("200 OK", "text/javascript", app_js(trap), None),
        "/sw.js" => (
            "200 OK",
            "text/javascript",
            format!(
                "self.addEventListener('install', e => e.waitUntil(fetch('http://127.0.0.2:{trap}/sw').catch(() => {{}})));"
            ),
            None,
        ),
        "/data.json" => ("200 OK", "application/json", data, None),
        "/to-metadata" => (
            "302 Found",
            "text/plain",
            String::new(),
            Some("http://169.254.169.254/latest/meta-data/"),
        ),
        // Writes its article, then keeps a request open for 20 s.
        "/busy" => (
            "200 OK",
            "text/html",
            format!(
                "<html><body><div id=root></div><script>document.getElementById('root').innerHTML = '<article><p>{}</p></article>'; fetch('/slow');</script></body></html>",
                PARAGRAPHS[2]
            ),
            None,
        ),
        "/slow" => {
            std::thread::sleep(std::time::Duration::from_secs(20));
            ("200 OK", "text/plain", "late".to_string(), None)
        }
        "/article" => (
            "200 OK",
            "text/html",
            format!(
                "<html><body><script>var t = 1;</script><article><h1>Plain</h1><p>{}</p></article></body></html>",
                PARAGRAPHS.join("</p><p>")
            ),
            None,
        ),
        _ => ("404 Not Found", "text/plain", "no".to_string(), None),
    };
    http::respond(&mut stream, status, ctype, body.as_bytes(), location);
}

fn text(r: &Value) -> &str {
    r["text"].as_str().expect("text")
}

/// Every process under `pid`, however deep.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = kitbag_testkit::bench::process_tree(pid);
    all.retain(|p| *p != pid);
    all
}

/// The browser's main process under the web server `server` (its command line carries the
/// pipe flag; its helpers' do not).
fn browser_under(server: u32) -> Option<u32> {
    tree(server).into_iter().find(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--remote-debugging-pipe"))
    })
}

#[test]
fn an_app_shell_is_rendered_and_the_browser_reaches_nothing_internal() {
    if !chromium_present() {
        return;
    }
    let (trap_port, hits) = trap();
    let port = site(trap_port);
    for through_host in [false, true] {
        let (mut c, _cfg) = client_via(&["--allow-host", "127.0.0.1"], through_host);
        let url = format!("http://127.0.0.1:{port}/spa");
        let r = c.call_ok("web_fetch", json!({"url": url})).structured;
        assert_eq!(r["rendered"], true, "{r}");
        assert_eq!(r["title"], "The rendered article");
        for p in PARAGRAPHS {
            assert!(text(&r).contains(p), "{p} in {}", text(&r));
        }
        let blocked: Vec<&str> = r["blocked_requests"]
            .as_array()
            .expect("blocked_requests")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for needle in [
            "169.254.169.254/latest/meta-data/iam",
            "169.254.169.254/latest/meta-data/ ",
            &format!("127.0.0.2:{trap_port}/fetch"),
            &format!("127.0.0.2:{trap_port}/xhr"),
            &format!("localhost:{trap_port}/by-name"),
            "10.0.0.1",
            // The WebSocket's tunnel, and the service worker's own fetch.
            &format!("tunnel to 127.0.0.2:{trap_port}"),
            &format!("127.0.0.2:{trap_port}/sw"),
        ] {
            let needle = needle.trim_end();
            assert!(
                blocked.iter().any(|b| b.contains(needle)),
                "{needle} refused: {blocked:#?}"
            );
        }
        assert!(
            r["note"]
                .as_str()
                .is_some_and(|n| n.contains("rendered in headless Chromium")),
            "{r}"
        );
        // The same page unrendered is the empty shell.
        let plain = c
            .call_ok("web_fetch", json!({"url": url, "render": "never"}))
            .structured;
        assert!(plain.get("rendered").is_none());
        assert!(!text(&plain).contains(PARAGRAPHS[0]));
        // A page with its text in the HTML is not rendered under auto; always renders it.
        let article = format!("http://127.0.0.1:{port}/article");
        let r = c.call_ok("web_fetch", json!({"url": article})).structured;
        assert!(r.get("rendered").is_none(), "{r}");
        let r = c
            .call_ok("web_fetch", json!({"url": article, "render": "always"}))
            .structured;
        assert_eq!(r["rendered"], true);
        assert!(text(&r).contains(PARAGRAPHS[2]));
        // raw + always: the DOM's HTML, as the script left it.
        let r = c
            .call_ok(
                "web_fetch",
                json!({"url": url, "render": "always", "raw": true, "max_length": 100000}),
            )
            .structured;
        assert!(
            text(&r).contains("<article><h1>The rendered article</h1>"),
            "{}",
            text(&r)
        );
        c.call_err(
            "web_fetch",
            json!({"url": url, "render": "sometimes"}),
            "invalid_params",
        )
        .expect_field("render");
        let server = if through_host {
            *child_pids(c.pid())
                .first()
                .expect("the web server under the host")
        } else {
            c.pid()
        };
        let browser_tree: Vec<u32> = tree(server);
        assert!(browser_under(server).is_some(), "one browser runs");
        c.shutdown();
        wait_until("the browser to stop with its server", 10, || {
            browser_tree.iter().all(|p| !process_alive(*p))
        });
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the trap on 127.0.0.2"
    );
}

/// A browser killed outright is started again on the next render; a server killed outright
/// (kill -9) takes its browser with it.
#[test]
fn a_crashed_browser_restarts_and_a_killed_server_leaves_none() {
    if !chromium_present() {
        return;
    }
    let (trap_port, _hits) = trap();
    let port = site(trap_port);
    let url = format!("http://127.0.0.1:{port}/spa");
    let mut c = clients::client(&["--allow-host", "127.0.0.1"]);
    let first = c
        .call_ok(
            "web_fetch",
            json!({"url": url, "render": "always", "raw": true}),
        )
        .structured;
    assert_eq!(first["rendered"], true);
    let browser = browser_under(c.pid()).expect("a browser");
    kitbag_shared::process::kill_tree(browser);
    wait_until("the browser to die", 10, || !process_alive(browser));
    // A different URL (not the cached page): the render starts a new browser.
    let again = c
        .call_ok(
            "web_fetch",
            json!({"url": format!("{url}?again"), "render": "always"}),
        )
        .structured;
    assert!(text(&again).contains(PARAGRAPHS[1]), "{again}");
    let second = browser_under(c.pid()).expect("a browser again");
    assert_ne!(second, browser);
    let killed = c.pid();
    let everything = tree(killed);
    assert!(everything.len() > 1, "the browser has its helpers");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    wait_until(
        "every browser process to go after kill -9 of the server",
        15,
        || everything.iter().all(|p| !process_alive(*p)),
    );
    // Its profile (and Chromium's socket directory inside it) is left behind until a browser
    // starts: the next server's, or one of a test running beside this one.
    let mut next = clients::client(&["--allow-host", "127.0.0.1"]);
    next.call_ok(
        "web_fetch",
        json!({"url": format!("{url}?next"), "render": "always"}),
    );
    assert!(
        profiles_of(killed).is_empty(),
        "swept by the next browser's start: {:?}",
        profiles_of(killed)
    );
    // A server that ends normally takes its profile along.
    let next_pid = next.pid();
    assert!(!profiles_of(next_pid).is_empty());
    next.shutdown();
    wait_until("the profile of a server that ended to go", 10, || {
        profiles_of(next_pid).is_empty()
    });
}

/// The browser profiles of the web server `pid` (in the temporary directory it shares with
/// this test).
fn profiles_of(pid: u32) -> Vec<std::path::PathBuf> {
    let prefix = format!("kitbag-web-browser-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The caps: a browser past its memory cap is stopped and the render refused, typed, with the
/// figures; a page whose network never goes quiet is read when its settle time runs out.
#[test]
fn the_memory_and_settle_caps_hold() {
    if !chromium_present() {
        return;
    }
    let (trap_port, _hits) = trap();
    let port = site(trap_port);
    let mut small = clients::client(&["--allow-host", "127.0.0.1", "--render-memory-mb", "128"]);
    let r = small.call_err(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/spa")}),
        "fetch_failed",
    );
    let error = &r.structured["error"];
    assert_eq!(error["detail"]["reason"], "memory", "{error}");
    assert!(
        error["detail"]["used_bytes"].as_u64() > Some(128 << 20),
        "{error}"
    );
    wait_until("the browser past its cap to be stopped", 10, || {
        browser_under(small.pid()).is_none()
    });
    let mut patient = clients::client(&["--allow-host", "127.0.0.1", "--render-settle-ms", "1000"]);
    let (r, took) = patient.timed_call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/busy"), "render": "always"}),
    );
    assert!(
        text(&r.structured).contains(PARAGRAPHS[2]),
        "{}",
        r.structured
    );
    assert!(
        r.structured["note"]
            .as_str()
            .is_some_and(|n| n.contains("still busy")),
        "{}",
        r.structured
    );
    assert!(
        took < std::time::Duration::from_secs(10),
        "read at its settle time, not the request's end: {took:?}"
    );
}

/// No browser: the page that needs one is refused with how to install it; never still works.
#[test]
fn without_a_browser_a_shell_is_refused_saying_how_to_install_one() {
    let (trap_port, _hits) = trap();
    let port = site(trap_port);
    let url = format!("http://127.0.0.1:{port}/spa");
    let mut c: McpClient = clients::client(&[
        "--allow-host",
        "127.0.0.1",
        "--chromium",
        "/nonexistent/chromium",
    ]);
    let r = c.call_err("web_fetch", json!({"url": url}), "renderer_unavailable");
    let msg = r.structured["error"]["message"].as_str().expect("message");
    assert!(msg.contains("apt-get install chromium"), "{msg}");
    assert!(msg.contains("render: \"never\""), "{msg}");
    let plain = c
        .call_ok("web_fetch", json!({"url": url, "render": "never"}))
        .structured;
    assert_eq!(text(&plain), "# Loading…", "{plain}");
    // A page with text needs no browser under auto.
    c.call_ok(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/article")}),
    );
}
