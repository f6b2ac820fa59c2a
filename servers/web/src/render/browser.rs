//! One headless Chromium per server: found, started with its DevTools on a pipe and every
//! request sent through a proxy, its pages opened each in a browser context of their own, and
//! stopped — with every process it started — when the server lets it go or dies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kitbag_cdp::{CdpError, Connection};
use serde_json::json;
use url::Url;

use super::RenderError;
use super::proxy::GuardProxy;

/// The browsers looked for on PATH, in order, when `--chromium` does not name one.
pub const CANDIDATES: &[&str] = &[
    "chromium",
    "chromium-browser",
    "google-chrome-stable",
    "google-chrome",
    "chrome",
    "headless_shell",
];

/// What to say when there is none.
pub const INSTALL_HINT: &str = "install Chromium (Debian/Ubuntu: apt-get install chromium; elsewhere a Chrome or Chromium build) or name one with --chromium PATH / KITBAG_CHROMIUM";

/// How long a started browser has to answer its first command.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long any one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);
/// The profile directories' prefix in the temporary directory (`<prefix><pid>-<n>`).
const PROFILE_PREFIX: &str = "kitbag-web-browser-";

/// Where the browser is: `configured` (a path or a name on PATH), else the first of
/// [`CANDIDATES`] on PATH.
pub fn locate(configured: Option<&Path>) -> Result<PathBuf, RenderError> {
    if let Some(c) = configured {
        return kitbag_shared::process::locate(&c.to_string_lossy()).ok_or_else(|| {
            RenderError::Unavailable(format!(
                "{} is not an executable file; {INSTALL_HINT}",
                c.display()
            ))
        });
    }
    CANDIDATES
        .iter()
        .find_map(|c| kitbag_shared::process::locate(c))
        .ok_or_else(|| {
            RenderError::Unavailable(format!(
                "no Chromium found on PATH ({}); {INSTALL_HINT}",
                CANDIDATES.join(", ")
            ))
        })
}

/// A running browser.
pub struct Browser {
    pub connection: Arc<Connection>,
    pub pid: u32,
    profile: PathBuf,
    /// Kept so the runtime reaps the process when it exits.
    _child: tokio::process::Child,
}

/// The command line: headless, DevTools on the pipe, nothing fetched on its own account, no
/// popups, downloads or WebRTC around the proxy, and a dead proxy for anything outside the
/// per-page contexts (each of which names its own).
fn command(bin: &Path, profile: &Path, js_heap_mb: u64) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args([
        "--headless",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-breakpad",
        "--disable-crash-reporter",
        "--no-pings",
        "--mute-audio",
        "--hide-scrollbars",
        "--block-new-web-contents",
        "--dns-prefetch-disable",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        // Fails closed: nothing reaches the network except through a page's own proxy.
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
        // The browser never resolves a name itself (the proxy does, and checks the answer).
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display()));
    cmd.arg(format!("--js-flags=--max-old-space-size={js_heap_mb}"));
    if kitbag_shared::proc_stat::is_root() {
        // Chromium will not start as root with its sandbox; the proxy and the profile of its
        // own are the boundary then (said in the README).
        cmd.arg("--no-sandbox");
    }
    cmd.arg("about:blank");
    // Chromium leaves a directory for its singleton socket in TMPDIR, removed only on a clean
    // exit: inside the profile it goes with it.
    cmd.env("TMPDIR", profile.join("tmp"));
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    kitbag_shared::process::die_with_parent(&mut cmd);
    cmd
}

static LAUNCHES: AtomicU64 = AtomicU64::new(0);

impl Browser {
    /// Start the browser at `bin` and wait for its first answer.
    pub async fn launch(bin: &Path, js_heap_mb: u64) -> Result<Browser, RenderError> {
        let (profile, stderr) = kitbag_shared::blocking::unblock(new_profile)
            .await
            .map_err(|e| RenderError::Unavailable(format!("the browser's profile: {e}")))?;
        let mut cmd = command(bin, &profile, js_heap_mb);
        cmd.stderr(stderr);
        let piped = kitbag_cdp::pipe::spawn(cmd, COMMAND_TIMEOUT).map_err(|e| {
            RenderError::Unavailable(format!(
                "cannot start {}: {e}; {INSTALL_HINT}",
                bin.display()
            ))
        })?;
        let pid = piped.child.id().unwrap_or(0);
        // Browser-wide events are not used; dropping their receiver discards them.
        drop(piped.events);
        let browser = Browser {
            connection: piped.connection,
            pid,
            profile,
            _child: piped.child,
        };
        let first = tokio::time::timeout(
            START_TIMEOUT,
            browser.connection.call("Browser.getVersion", json!({})),
        )
        .await;
        match first {
            Ok(Ok(_)) => Ok(browser),
            Ok(Err(e)) => Err(RenderError::Unavailable(format!(
                "{} did not start: {e}; it printed: {}",
                bin.display(),
                browser.stderr_tail()
            ))),
            Err(_) => Err(RenderError::Unavailable(format!(
                "{} did not answer within {} s; it printed: {}",
                bin.display(),
                START_TIMEOUT.as_secs(),
                browser.stderr_tail()
            ))),
        }
    }

    /// Whether the browser still runs and answers.
    pub fn alive(&self) -> bool {
        self.connection.is_open() && kitbag_shared::process::running(self.pid)
    }

    /// The memory of the browser and every process under it, shared pages counted by share.
    pub fn memory_bytes(&self) -> u64 {
        std::iter::once(self.pid)
            .chain(kitbag_shared::process::descendants(self.pid))
            .filter_map(kitbag_shared::proc_stat::proportional_bytes)
            .sum()
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.profile.join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("dbus") && !l.trim().is_empty())
            .collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        kitbag_shared::limits::truncate_str(&tail, 1500)
            .0
            .to_string()
    }

    /// Open `url` in a fresh context whose traffic goes through `proxy`, wait until it has
    /// loaded and gone quiet (or `settle` has passed), and read back the DOM as HTML, cut to
    /// `max_chars`. The context (and any page it opened) is disposed of on every path.
    pub async fn page(
        &self,
        url: &Url,
        proxy: &GuardProxy,
        settle: Duration,
        max_chars: usize,
    ) -> Result<Snapshot, RenderError> {
        let c = &self.connection;
        let mut page = self.open_page(proxy).await?;
        for domain in ["Page.enable", "Network.enable"] {
            c.call_in(&page.session, domain, json!({}))
                .await
                .map_err(failed)?;
        }
        let nav = c
            .call_in(&page.session, "Page.navigate", json!({"url": url.as_str()}))
            .await
            .map_err(failed)?;
        if let Some(err) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(RenderError::Failed(format!(
                "the browser could not load {url}: {err}"
            )));
        }
        let settled = tokio::time::timeout(settle, settle_after_load(&mut page.events))
            .await
            .unwrap_or(false);
        let read = c
            .call_in(
                &page.session,
                "Runtime.evaluate",
                json!({"expression": snapshot_script(max_chars), "returnByValue": true}),
            )
            .await
            .map_err(failed)?;
        let v = &read["result"]["value"];
        Ok(Snapshot {
            html: v["html"].as_str().unwrap_or_default().to_string(),
            cut: v["cut"].as_bool().unwrap_or(false),
            final_url: v["url"].as_str().unwrap_or(url.as_str()).to_string(),
            settled,
        })
    }

    /// A blank page in a browser context of its own — its proxy `proxy`, downloads denied —
    /// attached as a session whose events come to the returned page.
    async fn open_page(&self, proxy: &GuardProxy) -> Result<OpenPage, RenderError> {
        let c = &self.connection;
        let context = c
            .call(
                "Target.createBrowserContext",
                json!({
                    "disposeOnDetach": true,
                    "proxyServer": format!("http://{}", proxy.addr),
                    "proxyBypassList": "<-loopback>",
                }),
            )
            .await
            .map_err(failed)?["browserContextId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let disposal = Disposal {
            connection: c.clone(),
            context: context.clone(),
        };
        c.call(
            "Browser.setDownloadBehavior",
            json!({"behavior": "deny", "browserContextId": context}),
        )
        .await
        .map_err(failed)?;
        let target = c
            .call(
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": context}),
            )
            .await
            .map_err(failed)?["targetId"]
            .clone();
        let session = c
            .call(
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await
            .map_err(failed)?["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(OpenPage {
            events: c.subscribe(&session),
            _unsubscribe: Unsubscribe {
                connection: c.clone(),
                session: session.clone(),
            },
            session,
            _disposal: disposal,
        })
    }
}

/// A page being rendered: its session and events; dropping it unsubscribes and disposes of
/// its context (fields drop in order: the subscription first).
struct OpenPage {
    session: String,
    events: tokio::sync::mpsc::UnboundedReceiver<kitbag_cdp::Event>,
    _unsubscribe: Unsubscribe,
    _disposal: Disposal,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Its helpers (zygote, renderers, the network service) are its descendants.
        kitbag_shared::process::kill_tree(self.pid);
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// How long a loaded page's network must stay quiet before its DOM is read: long enough for a
/// script's next request to start after the last one's answer, far shorter than Chromium's
/// own network-idle signal (500 ms of quiet, which came ~1 s after navigation here).
const QUIET: Duration = Duration::from_millis(150);

/// Wait until the page has loaded and none of its requests has been in flight for [`QUIET`].
/// A request counts until it finishes or fails, or its frame goes away (a cross-site frame
/// moves to a process of its own, whose requests this page's session no longer sees). False
/// when the events end first (the page or the browser went away).
async fn settle_after_load(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<kitbag_cdp::Event>,
) -> bool {
    // Request id → its frame.
    let mut in_flight: HashMap<String, String> = HashMap::new();
    let mut loaded = false;
    loop {
        let next = if loaded && in_flight.is_empty() {
            match tokio::time::timeout(QUIET, events.recv()).await {
                Ok(e) => e,
                Err(_) => return true,
            }
        } else {
            events.recv().await
        };
        let Some(e) = next else {
            return false;
        };
        let text = |key: &str| e.params[key].as_str().unwrap_or_default().to_string();
        match e.method.as_str() {
            "Network.requestWillBeSent" => {
                in_flight.insert(text("requestId"), text("frameId"));
            }
            "Network.loadingFinished" | "Network.loadingFailed" => {
                in_flight.remove(&text("requestId"));
            }
            "Page.frameDetached" => {
                let frame = text("frameId");
                in_flight.retain(|_, f| *f != frame);
            }
            "Page.loadEventFired" => loaded = true,
            _ => {}
        }
    }
}

/// The DOM as the page left it.
pub struct Snapshot {
    pub html: String,
    /// The HTML was longer than asked for and cut.
    pub cut: bool,
    /// `location.href` when it was read.
    pub final_url: String,
    /// The network went idle before the read (else `settle` ran out first).
    pub settled: bool,
}

/// The expression that reads the DOM back: its HTML cut to `max_chars`, and where it is.
fn snapshot_script(max_chars: usize) -> String {
    format!(
        "(() => {{ const h = document.documentElement ? document.documentElement.outerHTML : ''; \
         return {{ html: h.length > {max_chars} ? h.slice(0, {max_chars}) : h, cut: h.length > {max_chars}, url: location.href }}; }})()"
    )
}

fn failed(e: CdpError) -> RenderError {
    match e {
        CdpError::Closed => RenderError::Crashed,
        other => RenderError::Failed(format!("the browser: {other}")),
    }
}

/// Disposes of a page's context (closing its pages) however the render ends.
struct Disposal {
    connection: Arc<Connection>,
    context: String,
}

impl Drop for Disposal {
    fn drop(&mut self) {
        // Not awaited: the command is on its way before the next render's.
        drop(self.connection.send(
            None,
            "Target.disposeBrowserContext",
            json!({"browserContextId": self.context}),
        ));
    }
}

struct Unsubscribe {
    connection: Arc<Connection>,
    session: String,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        self.connection.unsubscribe(&self.session);
    }
}

/// A fresh profile directory for the next browser (those of dead servers swept first), and
/// the file its stderr goes to.
fn new_profile() -> std::io::Result<(PathBuf, std::fs::File)> {
    sweep_profiles();
    let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let profile = std::env::temp_dir().join(format!("{PROFILE_PREFIX}{}-{n}", std::process::id()));
    std::fs::create_dir_all(profile.join("tmp"))?;
    let stderr = std::fs::File::create(profile.join("stderr.log"))?;
    Ok((profile, stderr))
}

/// Profiles left by servers that died without stopping their browser.
fn sweep_profiles() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PROFILE_PREFIX) else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !kitbag_shared::process::running(pid)) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
