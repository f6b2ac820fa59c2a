//! `search_grep`: regex search over a tree with the engine ripgrep is built on.
//!
//! The walk is parallel (`ignore`), each file is searched with `grep-searcher` (never
//! memory-mapped), results are collected per file and sorted by path so the answer is
//! deterministic. A time budget, cancellation and an output cap bound every search.

use kitbag_shared::args;
use kitbag_shared::lock::LockExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grep_matcher::Matcher;
use grep_regex::RegexMatcherBuilder;

use crate::prefilter::{Literal, PrefilteredMatcher};
use grep_searcher::{
    BinaryDetection, MmapChoice, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind,
    SinkMatch,
};
use ignore::WalkState;
use kitbag_shared::limits::{json_len, truncate_line};
use kitbag_shared::{
    Access, CallCtx, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::walk::{OneOrMany, WalkOptions, builder};

/// Longest line text returned per match (a minified file must not flood the answer).
pub const MAX_LINE_CHARS: usize = 500;
/// Most bytes of match text held in memory while walking; past it the search stops early.
const MEMORY_BUDGET: usize = 64 << 20;
pub const MAX_CONTEXT: i64 = 50;

pub const DEF: ToolDef = ToolDef::read(
    "search_grep",
    "Search file contents",
    "Search file contents with a regex (ripgrep syntax) in a tree or one file, sorted by path. \
     Skips binary, hidden and ignored files unless `hidden`/`no_ignore`.",
);

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    #[default]
    FilesWithMatches,
    Content,
    Count,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CaseMode {
    #[default]
    Smart,
    Sensitive,
    Insensitive,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    pub pattern: String,
    /// Directory or file (default the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Globs; `!` excludes, e.g. ["*.rs", "!*_test.rs"].
    #[serde(default)]
    pub include: Option<OneOrMany>,
    /// ripgrep file types, e.g. rust, py, ts.
    #[serde(default, rename = "type")]
    pub file_type: Option<OneOrMany>,
    /// `smart` (default): insensitive unless uppercase.
    #[serde(default)]
    pub case: Option<CaseMode>,
    /// `pattern` is literal text.
    #[serde(default)]
    pub fixed_strings: Option<bool>,
    #[serde(default)]
    pub word: Option<bool>,
    #[serde(default)]
    pub multiline: Option<bool>,
    #[serde(default)]
    pub before: Option<i64>,
    #[serde(default)]
    pub after: Option<i64>,
    /// Lines around each match (content mode).
    #[serde(default)]
    pub context: Option<i64>,
    /// files_with_matches (default): paths; content: `path:line:text`; count: lines per file.
    #[serde(default)]
    pub output_mode: Option<OutputMode>,
    /// Most entries to return.
    #[serde(default)]
    pub head_limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ContextLine {
    pub line: u64,
    pub content: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GrepMatch {
    /// Root-relative path.
    pub file: String,
    /// 1-based line of the match (its first line for a multiline match).
    pub line: u64,
    /// The matching line(s), as seed 004 names them; absent for files outside the caller's
    /// readable mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<ContextLine>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<ContextLine>,
    /// The file lies outside the caller's readable mounts: path and line only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside_cage: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileCount {
    pub file: String,
    pub count: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside_cage: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GrepResult {
    pub output_mode: OutputMode,
    /// files_with_matches mode: matching files, sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// content mode: matching lines, sorted by path then line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<GrepMatch>>,
    /// count mode: matching lines per file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Vec<FileCount>>,
    /// Files with at least one match (before paging).
    pub total_files: u64,
    /// Matching lines over all files (content and count modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_matches: Option<u64>,
    /// Files searched.
    pub files_searched: u64,
    /// Entries in this answer.
    pub returned: u64,
    /// Entries `offset` pages over (files, or matches in content mode).
    pub total: u64,
    /// False: the search stopped early, so `total` is a lower bound.
    pub total_exact: bool,
    /// More results exist than this answer holds, or the search stopped early.
    pub truncated: bool,
    /// Why: `head_limit`, `output_cap`, `time_budget` or `memory_budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_reason: Option<String>,
    /// `offset` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

/// Server-wide bounds, from flags.
#[derive(Debug, Clone, Copy)]
pub struct GrepLimits {
    pub budget: Duration,
    pub max_output_bytes: usize,
    pub progress_interval: Duration,
}

struct Hit {
    line: u64,
    text: String,
    before: Vec<ContextLine>,
    after: Vec<ContextLine>,
}

struct FileHits {
    path: String,
    outside: bool,
    hits: Vec<Hit>,
    count: u64,
}

/// Shared state of one search across walker threads.
struct Shared {
    results: Mutex<Vec<FileHits>>,
    files_searched: AtomicU64,
    bytes_held: AtomicUsize,
    timed_out: AtomicBool,
    memory_out: AtomicBool,
    deadline: Instant,
    cancel: CancellationToken,
}

impl Shared {
    fn new(deadline: Instant, cancel: CancellationToken) -> Self {
        Self {
            results: Mutex::new(Vec::new()),
            files_searched: AtomicU64::new(0),
            bytes_held: AtomicUsize::new(0),
            timed_out: AtomicBool::new(false),
            memory_out: AtomicBool::new(false),
            deadline,
            cancel,
        }
    }

    /// Why the walk stopped before its end, if a budget ran out.
    fn stopped(&self) -> Option<&'static str> {
        if self.timed_out.load(Ordering::Relaxed) {
            Some("time_budget")
        } else if self.memory_out.load(Ordering::Relaxed) {
            Some("memory_budget")
        } else {
            None
        }
    }

    fn should_stop(&self) -> bool {
        if self.cancel.is_cancelled() || self.memory_out.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= self.deadline {
            self.timed_out.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

struct FileSink<'a> {
    shared: &'a Shared,
    /// Set in multiline count mode: every regex match in a matched block is counted, as
    /// `rg -c -U` does (one block may hold several matches, or one match several lines).
    count_each: Option<&'a PrefilteredMatcher>,
    mode: OutputMode,
    keep_text: bool,
    hits: Vec<Hit>,
    count: u64,
    pending_before: Vec<ContextLine>,
    binary: bool,
}

/// The regex matches that start inside a matched block, found in the searcher's buffer so
/// that anchors and word boundaries see the block's surroundings.
fn matches_in(matcher: &PrefilteredMatcher, mat: &SinkMatch<'_>) -> u64 {
    let range = mat.bytes_range_in_buffer();
    let mut n = 0u64;
    let _ = matcher.find_iter_at(mat.buffer(), range.start, |m| {
        if m.start() >= range.end {
            return false;
        }
        n += 1;
        true
    });
    n
}

fn line_text(bytes: &[u8]) -> String {
    let mut b = bytes;
    while matches!(b.last(), Some(b'\n' | b'\r')) {
        b = &b[..b.len() - 1];
    }
    let s = String::from_utf8_lossy(b);
    truncate_line(&s, MAX_LINE_CHARS).0
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.count += match self.count_each {
            Some(m) => matches_in(m, mat).max(1),
            None => 1,
        };
        if self.mode == OutputMode::FilesWithMatches {
            return Ok(false); // one match decides the file
        }
        if self.mode == OutputMode::Content {
            let text = if self.keep_text {
                line_text(mat.bytes())
            } else {
                String::new()
            };
            let held = self
                .shared
                .bytes_held
                .fetch_add(text.len() + 32, Ordering::Relaxed);
            if held > MEMORY_BUDGET {
                self.shared.memory_out.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            self.hits.push(Hit {
                line: mat.line_number().unwrap_or(0),
                text,
                before: std::mem::take(&mut self.pending_before),
                after: Vec::new(),
            });
        }
        // Check the budget every 256 matches: cheap, and bounds a pathological file.
        Ok(!(self.count.is_multiple_of(256) && self.shared.should_stop()))
    }

    fn context(&mut self, _s: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if !self.keep_text {
            return Ok(true);
        }
        let line = ContextLine {
            line: ctx.line_number().unwrap_or(0),
            content: line_text(ctx.bytes()),
        };
        match ctx.kind() {
            SinkContextKind::Before => self.pending_before.push(line),
            SinkContextKind::After => {
                if let Some(last) = self.hits.last_mut() {
                    last.after.push(line);
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }

    fn binary_data(&mut self, _s: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// The longest search pattern accepted (a long alternation of identifiers fits easily).
pub const MAX_PATTERN_BYTES: usize = 64 * 1024;

/// What the result's counters, flags and keys weigh at most, serialized: held back from the
/// output cap, which the entries are charged against as JSON carries them.
const RESERVE_BYTES: usize = 384;

pub async fn run(
    policy: Arc<PathPolicy>,
    limits: GrepLimits,
    p: GrepParams,
    ctx: CallCtx,
) -> ToolResult<Reply<GrepResult>> {
    let plan = plan(&p)?;
    let matcher = matcher(&p, plan.multiline)?;
    let path = p.path.as_deref().unwrap_or(".");
    let root = policy.resolve_in_root(path, "path")?;
    if !root.abs.exists() {
        return Err(ToolError::new(
            ErrorCode::FileNotFound,
            format!("{path}: no such file or directory"),
        )
        .with_detail(json!({ "field": "path" })));
    }
    let walker = builder(&root.abs, &walk_options(&p))?;
    let mut searcher = SearcherBuilder::new();
    searcher
        .line_number(true)
        .multi_line(plan.multiline)
        .before_context(plan.before as usize)
        .after_context(plan.after as usize)
        .binary_detection(BinaryDetection::quit(0))
        .memory_map(MmapChoice::never());
    let search = Search {
        walker,
        searcher,
        matcher,
        mode: plan.mode,
        multiline: plan.multiline,
    };
    let shared = Arc::new(Shared::new(
        Instant::now() + limits.budget,
        ctx.cancel.clone(),
    ));

    let progress = report_progress(&ctx, limits.progress_interval, &shared);
    let work_shared = shared.clone();
    let walked = kitbag_shared::blocking(move || {
        walk(search, &policy, &work_shared);
        Ok(())
    })
    .await;
    if let Some(task) = progress {
        task.abort();
    }
    walked?;
    ctx.check_cancelled()?;

    let mut files = std::mem::take(&mut *shared.results.locked());
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(render(
        files,
        plan.mode,
        plan.offset,
        plan.head_limit,
        limits,
        shared.files_searched.load(Ordering::Relaxed),
        shared.stopped(),
    ))
}

/// The checked arguments that shape the search and the answer's paging.
struct Plan {
    mode: OutputMode,
    head_limit: Option<u64>,
    offset: u64,
    before: u64,
    after: u64,
    multiline: bool,
}

/// Check the arguments (before anything is compiled or walked).
fn plan(p: &GrepParams) -> ToolResult<Plan> {
    args::non_empty("pattern", &p.pattern, "")?;
    // Checked before compiling: a 50 MB pattern reached 5.2 GB before the regex engine refused it.
    args::max_bytes("pattern", &p.pattern, MAX_PATTERN_BYTES)?;
    let mode = p.output_mode.unwrap_or_default();
    let count = |n: i64| n as u64;
    let head_limit = args::opt_at_least("head_limit", p.head_limit, 1)?.map(count);
    let offset = args::opt_at_least("offset", p.offset, 0)?.map_or(0, count);
    let context = args::opt_range("context", p.context, 0, MAX_CONTEXT)?.map(count);
    let before = args::opt_range("before", p.before, 0, MAX_CONTEXT)?.map(count);
    let after = args::opt_range("after", p.after, 0, MAX_CONTEXT)?.map(count);
    if context.is_some() && (before.is_some() || after.is_some()) {
        return Err(ToolError::invalid_field(
            "context",
            "give `context` or `before`/`after`, not both",
        ));
    }
    let (before, after) = match context {
        Some(c) => (c, c),
        None => (before.unwrap_or(0), after.unwrap_or(0)),
    };
    if (before > 0 || after > 0) && mode != OutputMode::Content {
        return Err(ToolError::invalid_field(
            "context",
            "context lines are only shown with output_mode: \"content\"",
        ));
    }
    Ok(Plan {
        mode,
        head_limit,
        offset,
        before,
        after,
        multiline: p.multiline.unwrap_or(false),
    })
}

/// Compile the pattern, with the literal prefilter when one can be extracted.
fn matcher(p: &GrepParams, multiline: bool) -> ToolResult<PrefilteredMatcher> {
    let mut mb = RegexMatcherBuilder::new();
    match p.case.unwrap_or_default() {
        CaseMode::Smart => mb.case_smart(true),
        CaseMode::Sensitive => mb.case_insensitive(false),
        CaseMode::Insensitive => mb.case_insensitive(true),
    };
    mb.word(p.word.unwrap_or(false))
        .fixed_strings(p.fixed_strings.unwrap_or(false))
        .multi_line(true);
    if !multiline {
        mb.line_terminator(Some(b'\n'));
    }
    let regex = mb.build(&p.pattern).map_err(|e| {
        ToolError::new(
            ErrorCode::InvalidPattern,
            format!("pattern: invalid regular expression: {e}"),
        )
        .with_detail(json!({ "field": "pattern" }))
    })?;
    let case_insensitive = match p.case.unwrap_or_default() {
        CaseMode::Insensitive => true,
        CaseMode::Sensitive => false,
        // ripgrep's rule: insensitive unless the pattern has an uppercase letter.
        CaseMode::Smart => !p.pattern.chars().any(char::is_uppercase),
    };
    let literal = if multiline {
        None
    } else if p.fixed_strings.unwrap_or(false) {
        Literal::extract(&regex_syntax::escape(&p.pattern), case_insensitive)
    } else {
        Literal::extract(&p.pattern, case_insensitive)
    };
    Ok(PrefilteredMatcher::new(regex, literal))
}

fn walk_options(p: &GrepParams) -> WalkOptions {
    WalkOptions {
        hidden: p.hidden.unwrap_or(false),
        no_ignore: p.no_ignore.unwrap_or(false),
        globs: p
            .include
            .as_ref()
            .map(OneOrMany::to_vec)
            .unwrap_or_default(),
        types: p
            .file_type
            .as_ref()
            .map(OneOrMany::to_vec)
            .unwrap_or_default(),
        globs_field: "include",
    }
}

/// Progress while walking, when the client asked for it; the caller aborts the task.
fn report_progress(
    ctx: &CallCtx,
    interval: Duration,
    shared: &Arc<Shared>,
) -> Option<tokio::task::JoinHandle<()>> {
    ctx.wants_progress().then(|| {
        let (ctx, shared) = (ctx.clone(), shared.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let n = shared.files_searched.load(Ordering::Relaxed);
                ctx.progress(n as f64, None, Some(format!("{n} files searched")))
                    .await;
            }
        })
    })
}

/// What the walker threads share read-only: built before the walk, consumed by it.
struct Search {
    walker: ignore::WalkBuilder,
    searcher: SearcherBuilder,
    matcher: PrefilteredMatcher,
    mode: OutputMode,
    multiline: bool,
}

fn walk(search: Search, policy: &PathPolicy, shared: &Arc<Shared>) {
    let Search {
        walker,
        searcher: sb,
        matcher,
        mode,
        multiline,
    } = search;
    walker.build_parallel().run(|| {
        let mut searcher = sb.build();
        let matcher = matcher.clone();
        let shared = shared.clone();
        // The walker finds files by path; each is opened beneath the root refusing links, so
        // one reached through a directory swapped for a link is skipped, never read.
        let mut beneath = policy.beneath();
        Box::new(move |entry| {
            if shared.should_stop() {
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let path = entry.path();
            let Ok(file) = beneath.open_read(path) else {
                return WalkState::Continue;
            };
            shared.files_searched.fetch_add(1, Ordering::Relaxed);
            let keep_text = policy.allows(path, Access::Read);
            let mut sink = FileSink {
                shared: &shared,
                count_each: (multiline && mode == OutputMode::Count).then_some(&matcher),
                mode,
                keep_text,
                hits: Vec::new(),
                count: 0,
                pending_before: Vec::new(),
                binary: false,
            };
            if searcher.search_file(&matcher, &file, &mut sink).is_err()
                || sink.binary
                || sink.count == 0
            {
                return WalkState::Continue;
            }
            let hits = FileHits {
                path: policy.display(path),
                outside: !keep_text,
                hits: sink.hits,
                count: sink.count,
            };
            shared.results.locked().push(hits);
            WalkState::Continue
        })
    });
}

fn render(
    files: Vec<FileHits>,
    mode: OutputMode,
    offset: u64,
    head_limit: Option<u64>,
    limits: GrepLimits,
    files_searched: u64,
    stopped: Option<&str>,
) -> Reply<GrepResult> {
    let total_files = files.len() as u64;
    let total_matches: u64 = files.iter().map(|f| f.count).sum();
    let cap = limits.max_output_bytes.saturating_sub(RESERVE_BYTES);
    let mut page = Page::new(offset, head_limit, cap);
    let mut result = GrepResult {
        output_mode: mode,
        files: None,
        matches: None,
        counts: None,
        total_files,
        total_matches: (mode != OutputMode::FilesWithMatches).then_some(total_matches),
        files_searched,
        returned: 0,
        total: match mode {
            OutputMode::Content => total_matches,
            _ => total_files,
        },
        total_exact: stopped.is_none(),
        truncated: false,
        truncated_reason: None,
        next_offset: None,
    };
    match mode {
        OutputMode::FilesWithMatches => result.files = Some(page_files(&files, &mut page)),
        OutputMode::Count => result.counts = Some(page_counts(&files, &mut page)),
        OutputMode::Content => result.matches = Some(page_matches(&files, &mut page)),
    }
    let Page {
        returned,
        cut_by,
        mut text,
        ..
    } = page;
    result.returned = returned;
    let reason = cut_by.or(stopped);
    result.truncated = reason.is_some();
    result.truncated_reason = reason.map(str::to_string);
    if cut_by.is_some() {
        result.next_offset = Some(offset + returned);
    }
    if text.ends_with('\n') {
        text.pop();
    }
    if returned == 0 && !result.truncated {
        text = format!("no matches ({files_searched} files searched)");
    }
    match reason {
        Some("head_limit") | Some("output_cap") => text.push_str(&format!(
            "\n[truncated: {returned} of {} shown; continue with offset={}, or narrow with path/include/type]",
            result.total,
            offset + returned
        )),
        Some("time_budget") => text.push_str(&format!(
            "\n[partial: the {} s search budget ran out after {files_searched} files; narrow with path, include or type]",
            limits.budget.as_secs_f64()
        )),
        Some("memory_budget") => text.push_str("\n[partial: too many matches to hold; narrow the pattern, path or include]"),
        _ => {}
    }
    Reply::new(result, text)
}

/// One page of the ordered entries: skips `offset` entries, then takes them until
/// `head_limit` or the output cap stops it, building the text answer as it goes.
struct Page {
    offset: u64,
    limit: u64,
    cap: usize,
    /// Position in the full ordered list of entries.
    index: u64,
    /// Bytes charged against `cap`, as the structured result will carry them.
    charged: usize,
    returned: u64,
    text: String,
    cut_by: Option<&'static str>,
}

impl Page {
    fn new(offset: u64, head_limit: Option<u64>, cap: usize) -> Self {
        Self {
            offset,
            limit: head_limit.unwrap_or(u64::MAX),
            cap,
            index: 0,
            charged: 0,
            returned: 0,
            text: String::new(),
            cut_by: None,
        }
    }

    /// Take one entry unless a bound stops it: `Some(Some(item))` when taken (its text line
    /// rendered by `entry`), `Some(None)` when before the offset, `None` to stop.
    fn admit<T: Serialize>(
        &mut self,
        item: impl FnOnce() -> T,
        entry: impl FnOnce() -> String,
    ) -> Option<Option<T>> {
        let i = self.index;
        self.index += 1;
        if i < self.offset {
            return Some(None);
        }
        if self.returned >= self.limit {
            self.cut_by.get_or_insert("head_limit");
            return None;
        }
        // Charged as the structured result carries it, with the comma before it.
        let item = item();
        let cost = json_len(&item) + 1;
        if self.charged + cost > self.cap {
            self.cut_by.get_or_insert("output_cap");
            // A page's first entry is taken even when it alone passes the cap (a match with
            // much explicit context): an empty page would send the caller back to the same
            // offset for ever.
            if self.returned > 0 {
                return None;
            }
        }
        self.charged += cost;
        self.text.push_str(&entry());
        self.returned += 1;
        Some(Some(item))
    }
}

fn page_files(files: &[FileHits], page: &mut Page) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        match page.admit(|| f.path.clone(), || format!("{}\n", f.path)) {
            Some(Some(path)) => out.push(path),
            Some(None) => {}
            None => break,
        }
    }
    out
}

fn page_counts(files: &[FileHits], page: &mut Page) -> Vec<FileCount> {
    let mut out = Vec::new();
    for f in files {
        let item = || FileCount {
            file: f.path.clone(),
            count: f.count,
            outside_cage: f.outside,
        };
        match page.admit(item, || format!("{}:{}\n", f.path, f.count)) {
            Some(Some(c)) => out.push(c),
            Some(None) => {}
            None => break,
        }
    }
    out
}

fn page_matches(files: &[FileHits], page: &mut Page) -> Vec<GrepMatch> {
    let mut out = Vec::new();
    // The file and last line of the previous entry taken, to place `--` between groups.
    let mut last: Option<(String, u64)> = None;
    for f in files {
        for h in &f.hits {
            let item = || GrepMatch {
                file: f.path.clone(),
                line: h.line,
                content: (!f.outside).then(|| h.text.clone()),
                before: h.before.clone(),
                after: h.after.clone(),
                outside_cage: f.outside,
            };
            match page.admit(item, || content_entry(f, h, last.as_ref())) {
                Some(Some(m)) => {
                    last = Some((f.path.clone(), h.after.last().map_or(h.line, |c| c.line)));
                    out.push(m);
                }
                Some(None) => {}
                None => return out,
            }
        }
    }
    out
}

/// One match as `rg` prints it: context lines `path-N-text`, the match `path:N:text`, and a
/// `--` separator when context is shown and this group does not continue the previous one.
fn content_entry(f: &FileHits, h: &Hit, last: Option<&(String, u64)>) -> String {
    let mut entry = String::new();
    let first = h.before.first().map_or(h.line, |c| c.line);
    if let Some((lp, ll)) = last
        && (lp != &f.path || first > ll + 1)
        && (!h.before.is_empty() || !h.after.is_empty())
    {
        entry.push_str("--\n");
    }
    for c in &h.before {
        entry.push_str(&format!("{}-{}-{}\n", f.path, c.line, c.content));
    }
    if f.outside {
        entry.push_str(&format!(
            "{}:{}: [outside the readable mounts: path and line only]\n",
            f.path, h.line
        ));
    } else {
        entry.push_str(&format!("{}:{}:{}\n", f.path, h.line, h.text));
    }
    for c in &h.after {
        entry.push_str(&format!("{}-{}-{}\n", f.path, c.line, c.content));
    }
    entry
}

#[cfg(test)]
mod page_tests {
    use super::*;

    /// An entry bigger than the cap by itself still makes the page (and the next one moves
    /// on); the entries after it wait for the next page.
    #[test]
    fn a_page_always_moves_on() {
        let mut page = Page::new(0, None, 100);
        let big = "x".repeat(500);
        assert!(matches!(
            page.admit(|| big.clone(), String::new),
            Some(Some(_))
        ));
        assert!(page.admit(|| "small".to_string(), String::new).is_none());
        assert_eq!((page.returned, page.cut_by), (1, Some("output_cap")));
        let mut next = Page::new(1, None, 100);
        assert!(matches!(
            next.admit(|| big.clone(), String::new),
            Some(None)
        ));
        assert!(matches!(
            next.admit(|| "small".to_string(), String::new),
            Some(Some(_))
        ));
    }
}
