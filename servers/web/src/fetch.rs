//! `web_fetch`: one URL → readable text, paged by characters.

use kitbag_shared::lock::LockExt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use url::Url;

use kitbag_shared::limits::{RESULT_BUDGET_BYTES, fit_str, json_len, json_prefix};

use crate::guard::{GuardConfig, GuardResolver, Refusal, check_url};
use crate::render::{RenderConfig, RenderMode, Renderer, app_shell};

pub const DEFAULT_MAX_LENGTH: i64 = 10_000;
pub const MAX_MAX_LENGTH: i64 = 1_000_000;
pub const DEFAULT_TIMEOUT_SECS: i64 = 30;
pub const MAX_REDIRECTS: usize = 10;
pub const RAW_HEAD_BYTES: usize = 2048;
/// What `url` and `final_url` may weigh in an answer (JSON bytes), and the redirect hops
/// together: a chain of long URLs would pass the result budget.
const URL_ROOM: usize = 4096;
const REDIRECTS_ROOM: usize = 8192;
const CONTENT_TYPE_ROOM: usize = 512;

/// `s` within `room` JSON bytes, a cut one ending in a marker that says so.
fn cut_to(s: &str, room: usize) -> String {
    fit_str(
        s,
        room,
        &format!("… [cut to fit the answer: {} bytes]", s.len()),
    )
    .0
}

/// The redirect hops within [`REDIRECTS_ROOM`]: when they pass it, each cut to its share.
fn cut_hops(hops: &[String]) -> Vec<String> {
    if json_len(hops) <= REDIRECTS_ROOM {
        return hops.to_vec();
    }
    let share = REDIRECTS_ROOM / hops.len().max(1) - 1;
    hops.iter().map(|h| cut_to(h, share)).collect()
}

pub const DEF: ToolDef = ToolDef::read(
    "web_fetch",
    "Fetch a web page",
    "Fetch an http(s) URL as text: HTML as markdown of its main content, JSON pretty-printed, \
     other types described. Private addresses refused; HTTP errors are data.",
)
.open_world();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchParams {
    pub url: String,
    /// Characters; default 10000.
    #[serde(default)]
    pub max_length: Option<i64>,
    #[serde(default)]
    pub start_index: Option<i64>,
    /// HTML source.
    #[serde(default)]
    pub raw: Option<bool>,
    /// Seconds; default 30.
    #[serde(default)]
    pub timeout: Option<i64>,
    /// Headless Chromium; auto: scripts but no text.
    #[serde(default)]
    pub render: Option<RenderMode>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FetchResult {
    pub url: String,
    /// The URL after redirects (one longer than 4 KB cut, saying so).
    pub final_url: String,
    pub status: u16,
    pub content_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// This page of the content.
    pub text: String,
    /// More content follows `next_start_index`.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start_index: Option<u64>,
    /// Characters in the whole converted content.
    pub total_length: u64,
    /// The body was cut at the size limit before conversion.
    pub body_truncated: bool,
    /// HTML only: the first 2 KB of the raw body, for debugging the conversion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Redirect hops followed, in order (cut to 8 KB together, saying so).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<String>,
    /// Served from the 15-minute cache.
    pub cached: bool,
    /// Something about the conversion worth knowing, e.g. that deeply nested elements were
    /// unwrapped (their text kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A PDF: its pages, and how many of them (the first) are in the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pdf_pages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pdf_pages_converted: Option<u64>,
    /// An RSS or Atom feed: its entries (every one is in the text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feed_entries: Option<u64>,
    /// Read from the DOM of headless Chromium.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rendered: bool,
    /// The browser's requests the guard refused (the first 20).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_requests: Vec<String>,
}

#[derive(Clone)]
struct Page {
    final_url: String,
    status: u16,
    content_type: String,
    title: Option<String>,
    text: String,
    raw_head: Option<String>,
    body_truncated: bool,
    redirects: Vec<String>,
    note: Option<String>,
    kind: Kind,
    rendered: bool,
    blocked: Vec<String>,
}

/// What a body was read as, beyond its text.
#[derive(Clone, Copy, Default)]
struct Kind {
    pdf: Option<(u64, u64)>,
    feed_entries: Option<u64>,
}

/// A page is cached per URL, `raw` and `render`.
type CacheKey = (String, bool, RenderMode);

pub struct WebState {
    client: reqwest::Client,
    cfg: Arc<GuardConfig>,
    pub max_body: usize,
    cache: Mutex<lru::LruCache<CacheKey, (Instant, Page)>>,
    ttl: Duration,
    pub renderer: Renderer,
}

impl WebState {
    pub fn new(
        cfg: GuardConfig,
        max_body: usize,
        ttl: Duration,
        render: RenderConfig,
    ) -> anyhow::Result<Self> {
        // reqwest is built without a default crypto provider; ring compiles fast.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cfg = Arc::new(cfg);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardResolver { cfg: cfg.clone() }))
            .no_proxy()
            .user_agent(concat!("kitbag-web/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let cap = NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN);
        Ok(Self {
            client,
            renderer: Renderer::new(render, cfg.clone()),
            cfg,
            max_body,
            cache: Mutex::new(lru::LruCache::new(cap)),
            ttl,
        })
    }
}

fn refusal(e: Refusal) -> ToolError {
    match e {
        Refusal::Invalid(m) => ToolError::invalid_field("url", m),
        Refusal::Blocked(m) => ToolError::new(
            ErrorCode::UrlBlocked,
            format!("url: refused: {m}; the server blocks private, loopback and link-local addresses (--allow-private or --allow-host open it)"),
        )
        .with_detail(json!({ "field": "url" })),
    }
}

fn positive(field: &str, v: Option<i64>, default: i64, min: i64, max: i64) -> ToolResult<i64> {
    match v {
        None => Ok(default),
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => Err(ToolError::invalid_field(
            field,
            format!("{n} is not accepted; {min}..={max}"),
        )),
    }
}

pub async fn run(
    state: Arc<WebState>,
    p: FetchParams,
    ctx: CallCtx,
) -> ToolResult<Reply<FetchResult>> {
    let max_length = positive(
        "max_length",
        p.max_length,
        DEFAULT_MAX_LENGTH,
        1,
        MAX_MAX_LENGTH,
    )? as usize;
    let start = positive("start_index", p.start_index, 0, 0, i64::MAX)? as usize;
    let timeout = positive("timeout", p.timeout, DEFAULT_TIMEOUT_SECS, 1, 120)? as u64;
    let raw = p.raw.unwrap_or(false);
    let mode = p.render.unwrap_or_default();
    let url = Url::parse(p.url.trim())
        .map_err(|e| ToolError::invalid_field("url", format!("not a valid URL: {e}")))?;
    check_url(&url, &state.cfg).map_err(refusal)?;
    let key = (url.to_string(), raw, mode);
    let cached = {
        let mut cache = state.cache.locked();
        match cache.get(&key) {
            Some((at, page)) if at.elapsed() < state.ttl => Some(page.clone()),
            _ => None,
        }
    };
    let (page, from_cache) = match cached {
        Some(p) => (p, true),
        None => {
            let deadline = Instant::now() + Duration::from_secs(timeout);
            let fetched = tokio::time::timeout(
                Duration::from_secs(timeout),
                fetch(&state, url.clone(), raw, mode, deadline),
            )
            .await;
            let page = match fetched {
                Ok(r) => r?,
                Err(_) => {
                    return Err(ToolError::new(
                        ErrorCode::Timeout,
                        format!("url: no complete answer within {timeout} s"),
                    )
                    .with_detail(json!({ "field": "timeout", "seconds": timeout })));
                }
            };
            state
                .cache
                .locked()
                .put(key, (Instant::now(), page.clone()));
            (page, false)
        }
    };
    ctx.check_cancelled()?;
    let shown_url = cut_to(url.as_str(), URL_ROOM);
    let final_url = cut_to(&page.final_url, URL_ROOM);
    let redirects = cut_hops(&page.redirects);
    let content_type = cut_to(&page.content_type, CONTENT_TYPE_ROOM);
    let total = page.text.chars().count();
    let mut window: String = page.text.chars().skip(start).take(max_length).collect();
    let (mut title, mut raw_head) = (page.title.clone(), page.raw_head.clone());
    if p.max_length.is_none() {
        // A default page also ends where the answer's budget would be passed (10,000
        // characters weigh up to 60,000 bytes escaped). The title and the raw head give
        // way first when they are huge.
        let fixed = |title: &Option<String>, raw_head: &Option<String>| {
            json_len(&shown_url)
                + json_len(&final_url)
                + json_len(&content_type)
                + json_len(title)
                + json_len(raw_head)
                + json_len(&redirects)
                + json_len(&page.note)
                + 512
        };
        if fixed(&title, &raw_head) > RESULT_BUDGET_BYTES / 2 {
            title = title.map(|t| json_prefix(&t, 2048 + 2).0.to_string());
            raw_head = raw_head.map(|h| json_prefix(&h, 4096 + 2).0.to_string());
        }
        let room = RESULT_BUDGET_BYTES.saturating_sub(fixed(&title, &raw_head));
        window = json_prefix(&window, room + 2).0.to_string();
    }
    let end = (start + window.chars().count()).min(total);
    let truncated = end < total;
    let mut text = window.clone();
    if start >= total && total > 0 {
        text = format!("[start_index {start} is past the end: the content has {total} characters]");
    }
    if truncated {
        text.push_str(&format!(
            "\n\n[truncated: characters {start}–{end} of {total}; continue with start_index={end}]"
        ));
    }
    let mut header = format!("{} {final_url} ({content_type})\n\n", page.status);
    if let Some(note) = &page.note {
        header.push_str(&format!("[{note}]\n\n"));
    }
    Ok(Reply::new(
        FetchResult {
            url: shown_url,
            final_url,
            status: page.status,
            content_type,
            title,
            text: window,
            truncated,
            next_start_index: truncated.then_some(end as u64),
            total_length: total as u64,
            body_truncated: page.body_truncated,
            raw: raw_head,
            redirects,
            cached: from_cache,
            note: page.note.clone(),
            pdf_pages: page.kind.pdf.map(|(pages, _)| pages),
            pdf_pages_converted: page.kind.pdf.map(|(_, shown)| shown),
            feed_entries: page.kind.feed_entries,
            rendered: page.rendered,
            blocked_requests: page.blocked.clone(),
        },
        format!("{header}{text}"),
    ))
}

fn net_error(e: reqwest::Error, url: &Url) -> ToolError {
    // A refusal from the guard's resolver arrives wrapped in the connect error.
    let mut source: Option<&dyn std::error::Error> = Some(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::PermissionDenied
        {
            return refusal(Refusal::Blocked(io.to_string()));
        }
        source = s.source();
    }
    let mut msg = e.to_string();
    let mut s = std::error::Error::source(&e);
    while let Some(inner) = s {
        msg.push_str(&format!(": {inner}"));
        s = inner.source();
    }
    ToolError::new(ErrorCode::FetchFailed, format!("{url}: {msg}"))
        .with_detail(json!({ "field": "url" }))
}

async fn fetch(
    state: &WebState,
    url: Url,
    raw: bool,
    mode: RenderMode,
    deadline: Instant,
) -> ToolResult<Page> {
    let (response, url, redirects) = follow(state, url).await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_string();
    let final_url = response.url().to_string();
    let (body, body_truncated) = read_body(state, response, &url).await?;
    let shown = show(&body, &content_type, body_truncated, raw).map_err(|e| {
        ToolError::new(ErrorCode::Unsupported, format!("{url}: {e}"))
            .with_detail(json!({ "field": "url", "reason": e.reason() }))
    })?;
    let mut page = Page {
        final_url,
        status,
        content_type,
        title: shown.title,
        text: shown.text,
        raw_head: shown.raw_head,
        body_truncated,
        redirects,
        note: shown.note,
        kind: shown.kind,
        rendered: false,
        blocked: Vec::new(),
    };
    let wanted = match mode {
        RenderMode::Never => false,
        RenderMode::Always => true,
        RenderMode::Auto => !raw && app_shell::looks_like_app_shell(&body, &page.text),
    };
    if wanted && is_html(&page.content_type) {
        render_into(state, &mut page, &url, raw, deadline).await?;
    }
    Ok(page)
}

fn is_html(content_type: &str) -> bool {
    let mime = mime_of(content_type);
    mime == "text/html" || mime == "application/xhtml+xml"
}

/// The media type of a Content-Type value, lower-cased, parameters left out.
fn mime_of(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// `page` read again from the DOM of the browser (as HTML source when `raw`).
async fn render_into(
    state: &WebState,
    page: &mut Page,
    url: &Url,
    raw: bool,
    deadline: Instant,
) -> ToolResult<()> {
    let timeout_secs = deadline
        .saturating_duration_since(Instant::now())
        .as_secs()
        .max(1);
    let rendered = state
        .renderer
        .render(url, deadline, state.max_body)
        .await
        .map_err(|e| e.into_tool_error(url, timeout_secs))?;
    let mut notes: Vec<String> = Vec::new();
    if raw {
        page.text = rendered.html;
    } else {
        let (title, md, unwrapped) =
            tokio::task::block_in_place(|| crate::html::to_markdown(&rendered.html));
        page.title = title;
        page.text = md;
        if unwrapped > 0 {
            notes.push(format!(
                "{unwrapped} elements nested more than {} levels deep were unwrapped; their text is kept",
                crate::html::MAX_DEPTH
            ));
        }
    }
    notes.push("rendered in headless Chromium".into());
    if !rendered.settled {
        notes.push("its network was still busy when the DOM was read".into());
    }
    if rendered.refusals.total > 0 {
        notes.push(format!(
            "the guard refused {} of the browser's requests",
            rendered.refusals.total
        ));
    }
    page.note = Some(notes.join("; "));
    page.final_url = rendered.final_url;
    page.body_truncated |= rendered.cut;
    page.rendered = true;
    page.blocked = rendered.refusals.kept;
    Ok(())
}

/// GET `url`, following redirects (each checked like the first URL). Returns the final
/// response, its URL and the redirects taken.
async fn follow(
    state: &WebState,
    mut url: Url,
) -> ToolResult<(reqwest::Response, Url, Vec<String>)> {
    let mut redirects = Vec::new();
    loop {
        let resp = state
            .client
            .get(url.clone())
            .header(
                "Accept",
                "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5",
            )
            .send()
            .await
            .map_err(|e| net_error(e, &url))?;
        if !resp.status().is_redirection() {
            return Ok((resp, url, redirects));
        }
        let Some(location) = resp.headers().get("location").and_then(|v| v.to_str().ok()) else {
            return Ok((resp, url, redirects));
        };
        if redirects.len() >= MAX_REDIRECTS {
            return Err(ToolError::new(
                ErrorCode::FetchFailed,
                format!("more than {MAX_REDIRECTS} redirects"),
            ));
        }
        let next = url.join(location).map_err(|e| {
            ToolError::new(
                ErrorCode::FetchFailed,
                format!("bad redirect location {location}: {e}"),
            )
        })?;
        check_url(&next, &state.cfg).map_err(|e| match e {
            Refusal::Invalid(m) => ToolError::new(
                ErrorCode::UrlBlocked,
                format!("redirect to {next} refused: {m}"),
            ),
            other => refusal(other),
        })?;
        redirects.push(next.to_string());
        url = next;
    }
}

/// The body, cut at `max_body` bytes; and whether it was cut.
async fn read_body(
    state: &WebState,
    response: reqwest::Response,
    url: &Url,
) -> ToolResult<(Vec<u8>, bool)> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| net_error(e, url))?;
        let room = state.max_body - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A body as it is shown: the parts of a [`Page`] that depend on its type.
struct Shown {
    title: Option<String>,
    text: String,
    raw_head: Option<String>,
    note: Option<String>,
    kind: Kind,
}

/// HTML as markdown (or raw), JSON pretty-printed, feeds as their entries, PDFs as their
/// pages' text, other text as is, binaries described.
fn show(
    body: &[u8],
    content_type: &str,
    body_truncated: bool,
    raw: bool,
) -> Result<Shown, crate::pdf::PdfError> {
    let mime = mime_of(content_type);
    let decoded = || crate::charset::decode(body, content_type);
    let mut note = None;
    let mut kind = Kind::default();
    let xmlish = mime.ends_with("+xml") || mime == "application/xml" || mime == "text/xml";
    let is_pdf = mime == "application/pdf"
        || (mime == "application/octet-stream" && body.starts_with(b"%PDF-"));
    let feed = if xmlish && !raw {
        crate::feed::parse(&decoded())
    } else {
        None
    };
    let (title, text, raw_head) = if let Some(feed) = feed {
        kind.feed_entries = Some(feed.entries.len() as u64);
        let title = (!feed.title.is_empty()).then(|| feed.title.clone());
        (title, crate::feed::to_text(&feed), None)
    } else if is_pdf && !raw {
        // A parser bug on a hostile file must not take the server down.
        let converted = std::panic::catch_unwind(|| crate::pdf::to_text(body, body_truncated))
            .unwrap_or_else(|_| {
                Err(crate::pdf::PdfError::Broken(
                    "the PDF parser could not read it".into(),
                ))
            })?;
        kind.pdf = Some((converted.pages as u64, converted.shown as u64));
        if converted.shown < converted.pages {
            note = Some(format!(
                "the PDF has {} pages; the first {} are converted",
                converted.pages, converted.shown
            ));
        }
        (None, converted.text, None)
    } else if mime == "text/html" || mime == "application/xhtml+xml" {
        let html = decoded();
        let head: String = kitbag_shared::limits::truncate_str(&html, RAW_HEAD_BYTES)
            .0
            .to_string();
        if raw {
            (None, html, Some(head))
        } else {
            let (title, md, unwrapped) =
                tokio::task::block_in_place(|| crate::html::to_markdown(&html));
            if unwrapped > 0 {
                note = Some(format!(
                    "{unwrapped} elements nested more than {} levels deep were unwrapped; their text is kept",
                    crate::html::MAX_DEPTH
                ));
            }
            (title, md, Some(head))
        }
    } else if mime == "application/json" || mime.ends_with("+json") {
        let s = decoded();
        let pretty = serde_json::from_str::<serde_json::Value>(&s)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or(s);
        (None, pretty, None)
    } else if mime.starts_with("text/")
        || mime.ends_with("+xml")
        || mime == "application/xml"
        || mime == "application/javascript"
    {
        (None, decoded(), None)
    } else {
        let size = if body_truncated {
            format!("more than {} bytes", body.len())
        } else {
            format!("{} bytes", body.len())
        };
        (
            None,
            format!("[binary content: {mime}, {size}; not shown]"),
            None,
        )
    };
    Ok(Shown {
        title,
        text,
        raw_head,
        note,
        kind,
    })
}
