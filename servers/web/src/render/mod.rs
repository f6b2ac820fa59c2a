//! `web_fetch`'s `render`: pages whose content JavaScript writes, read from the DOM of a
//! headless Chromium after their network goes idle.
//!
//! The browser is started on first need and kept (`browser`); each render opens one page in
//! a browser context of its own whose every request goes through a guard proxy of its own
//! (`proxy`); `app_shell` says when `auto` renders. Caps: pages at once, the render's share
//! of the call's timeout, the browser's memory (a browser past it is stopped, the render
//! refused), the HTML read back.

pub mod app_shell;
pub mod browser;
pub mod proxy;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_shared::{ErrorCode, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Mutex, Semaphore};
use url::Url;

use crate::guard::GuardConfig;
use browser::Browser;
use proxy::{GuardProxy, Refusals};

/// Whether `web_fetch` renders an HTML page in the browser: `Auto` when its HTML reads as an
/// app shell (almost no text, scripts). No per-variant docs: they would make a `oneOf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RenderMode {
    #[default]
    Auto,
    Never,
    Always,
}

/// The operator's settings.
#[derive(Debug, Clone)]
pub struct RenderConfig {
    /// `--chromium`: the browser, else the first found on PATH.
    pub chromium: Option<PathBuf>,
    /// Pages rendered at once; more wait their turn within their timeout.
    pub max_pages: usize,
    /// The browser's memory (proportional set size, all its processes together), past which
    /// it is stopped.
    pub memory_bytes: u64,
    /// How long a page may take to go network-idle before its DOM is read anyway.
    pub settle: Duration,
}

/// Why a render gave nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderError {
    /// No browser, or it would not start: the message says how to install one.
    Unavailable(String),
    /// The browser died during the render (it is started again on the next one).
    Crashed,
    /// The browser passed the memory cap and was stopped: bytes used, the cap.
    Memory {
        used: u64,
        cap: u64,
    },
    /// The call's timeout ran out during the render.
    Timeout,
    Failed(String),
}

impl RenderError {
    pub fn into_tool_error(self, url: &Url, timeout_secs: u64) -> ToolError {
        let never = "render: \"never\" returns the page's HTML as served";
        match self {
            RenderError::Unavailable(m) => ToolError::new(
                ErrorCode::RendererUnavailable,
                format!("url: this page needs a browser to render it, and {m}; {never}"),
            )
            .with_detail(json!({"field": "render", "install": browser::INSTALL_HINT})),
            RenderError::Crashed => ToolError::new(
                ErrorCode::FetchFailed,
                format!("{url}: the browser crashed while rendering it (it restarts on the next call); {never}"),
            )
            .with_detail(json!({"field": "render", "reason": "crashed"})),
            RenderError::Memory { used, cap } => ToolError::new(
                ErrorCode::FetchFailed,
                format!("{url}: rendering it took the browser to {} MB, past its cap of {} MB (--render-memory-mb); the browser was stopped; {never}", used >> 20, cap >> 20),
            )
            .with_detail(json!({"field": "render", "reason": "memory", "used_bytes": used, "cap_bytes": cap})),
            RenderError::Timeout => ToolError::new(
                ErrorCode::Timeout,
                format!("url: not rendered within {timeout_secs} s; a longer timeout, or {never}"),
            )
            .with_detail(json!({"field": "timeout", "seconds": timeout_secs})),
            RenderError::Failed(m) => ToolError::new(ErrorCode::FetchFailed, format!("{url}: {m}"))
                .with_detail(json!({"field": "render", "reason": "failed"})),
        }
    }
}

/// A rendered page.
pub struct Rendered {
    pub html: String,
    pub final_url: String,
    /// The HTML was cut at the body cap.
    pub cut: bool,
    pub settled: bool,
    /// What the guard refused the page.
    pub refusals: Refusals,
}

/// The server's renderer: at most one browser, started on the first render.
pub struct Renderer {
    cfg: RenderConfig,
    guard: Arc<GuardConfig>,
    browser: Mutex<Option<Arc<Browser>>>,
    pages: Semaphore,
}

/// What a render keeps of its deadline for reading the DOM back.
const READ_MARGIN: Duration = Duration::from_millis(1500);

/// How often the memory cap is looked at during a render.
const MEMORY_POLL: Duration = Duration::from_millis(200);

impl Renderer {
    pub fn new(cfg: RenderConfig, guard: Arc<GuardConfig>) -> Renderer {
        let pages = Semaphore::new(cfg.max_pages.max(1));
        Renderer {
            cfg,
            guard,
            browser: Mutex::new(None),
            pages,
        }
    }

    /// Render `url` before `deadline`, reading back at most `max_chars` of HTML.
    pub async fn render(
        &self,
        url: &Url,
        deadline: Instant,
        max_chars: usize,
    ) -> Result<Rendered, RenderError> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let _page = tokio::time::timeout_at(deadline, self.pages.acquire())
            .await
            .map_err(|_| RenderError::Timeout)?
            .map_err(|_| RenderError::Crashed)?;
        let browser = tokio::time::timeout_at(deadline, self.browser())
            .await
            .map_err(|_| RenderError::Timeout)??;
        let proxy = GuardProxy::start(self.guard.clone())
            .await
            .map_err(|e| RenderError::Failed(format!("the guard proxy: {e}")))?;
        // The DOM is read before the deadline: a page that never goes quiet is still read.
        let settle = self.cfg.settle.min(
            deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .saturating_sub(READ_MARGIN),
        );
        let outcome = tokio::select! {
            r = browser.page(url, &proxy, settle, max_chars) => r,
            used = watch_memory(&browser, self.cfg.memory_bytes) => Err(RenderError::Memory { used, cap: self.cfg.memory_bytes }),
            _ = tokio::time::sleep_until(deadline) => Err(RenderError::Timeout),
        };
        if matches!(
            outcome,
            Err(RenderError::Crashed | RenderError::Memory { .. })
        ) || !browser.alive()
        {
            self.retire(&browser).await;
        }
        let snapshot = outcome?;
        Ok(Rendered {
            html: snapshot.html,
            final_url: snapshot.final_url,
            cut: snapshot.cut,
            settled: snapshot.settled,
            refusals: proxy.refusals(),
        })
    }

    /// The running browser, started (again) when there is none or it died.
    async fn browser(&self) -> Result<Arc<Browser>, RenderError> {
        let mut slot = self.browser.lock().await;
        if let Some(b) = slot.as_ref().filter(|b| b.alive()) {
            return Ok(b.clone());
        }
        // A dead one is dropped first: its leftovers are stopped with it.
        *slot = None;
        let bin = browser::locate(self.cfg.chromium.as_deref())?;
        let heap_mb = (self.cfg.memory_bytes >> 20) / 2;
        let b = Arc::new(Browser::launch(&bin, heap_mb.max(64)).await?);
        *slot = Some(b.clone());
        Ok(b)
    }

    /// Let `browser` go: the next render starts another. Its processes stop once the last
    /// render using it ends.
    async fn retire(&self, browser: &Arc<Browser>) {
        let mut slot = self.browser.lock().await;
        if slot.as_ref().is_some_and(|b| Arc::ptr_eq(b, browser)) {
            *slot = None;
        }
        kitbag_shared::process::kill_tree(browser.pid);
    }
}

/// Resolves (with what they use) once the browser's processes together pass `cap` bytes.
async fn watch_memory(browser: &Browser, cap: u64) -> u64 {
    loop {
        let used = browser.memory_bytes();
        if used > cap {
            return used;
        }
        tokio::time::sleep(MEMORY_POLL).await;
    }
}
