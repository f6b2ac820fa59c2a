//! `search_glob`: find files by name pattern, newest first.

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::lock::LockExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkState;
use kitbag_shared::{
    Access, CallCtx, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::grep::GrepLimits;
use crate::walk::{WalkOptions, builder};

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 10_000;

pub const DEF: ToolDef = ToolDef::read(
    "search_glob",
    "Find files by name",
    "Find files by glob, newest first (or `sort: \"path\"`). Without `/` the pattern matches file names \
     at any depth (`*.rs`); with `/`, the path under `path` (`src/**/*.test.ts`); `**` crosses \
     directories. Skips hidden and ignored (.gitignore) files unless `hidden`/`no_ignore`. More: pass \
     `next_offset` as `offset`.",
);

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    #[default]
    Mtime,
    Path,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    pub pattern: String,
    /// Directory to search (default the root).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
    /// Default 100, max 10000.
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub sort: Option<SortBy>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GlobResult {
    /// Matching files, root-relative.
    pub files: Vec<String>,
    /// Files returned.
    pub count: u64,
    /// Files that matched in total.
    pub total: u64,
    /// More files matched than returned, or the walk ran out of time.
    pub truncated: bool,
    /// `offset` for the next page when more files matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// Matching files outside the caller's readable mounts (listed, marked here).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_cage: Vec<String>,
}

/// The longest glob accepted: a path is at most 4 KB, and a glob of ~87,000 `*` compiles past
/// the regex size limit (it used to panic in a task and never answer).
pub const MAX_GLOB_BYTES: usize = 4096;

pub fn compile(pattern: &str) -> ToolResult<(GlobMatcher, bool)> {
    args::non_empty("pattern", pattern, "")?;
    args::max_bytes("pattern", pattern, MAX_GLOB_BYTES)?;
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| {
            ToolError::new(
                ErrorCode::InvalidPattern,
                format!("pattern: invalid glob: {e}"),
            )
            .with_detail(json!({ "field": "pattern" }))
        })?;
    Ok((glob.compile_matcher(), !pattern.contains('/')))
}

type Hit = (String, SystemTime, bool);

/// One walker thread's hits, handed to the shared list when the thread is done.
struct Batch {
    local: Vec<Hit>,
    shared: Arc<Mutex<Vec<Hit>>>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        let mut all = self.shared.locked();
        all.append(&mut self.local);
    }
}

pub async fn run(
    policy: Arc<PathPolicy>,
    limits: GrepLimits,
    p: GlobParams,
    ctx: CallCtx,
) -> ToolResult<Reply<GlobResult>> {
    let limit = args::opt_range("limit", p.limit, 1, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT) as usize;
    let offset = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let (matcher, basename_only) = compile(&p.pattern)?;
    let path = p.path.as_deref().unwrap_or(".");
    let root = policy.resolve_in_root(path, "path")?;
    if !root.abs.is_dir() {
        return Err(
            ToolError::new(ErrorCode::NotADirectory, format!("{path}: not a directory"))
                .with_detail(json!({ "field": "path" })),
        );
    }
    let opts = WalkOptions {
        hidden: p.hidden.unwrap_or(false),
        no_ignore: p.no_ignore.unwrap_or(false),
        globs_field: "pattern",
        ..Default::default()
    };
    let walker = builder(&root.abs, &opts)?;
    let sort = p.sort.unwrap_or_default();
    let visit = Visit {
        matcher,
        basename_only,
        base: root.abs.clone(),
        want_mtime: sort == SortBy::Mtime,
        deadline: Instant::now() + limits.budget,
        cancel: ctx.cancel.clone(),
        found: Arc::default(),
        timed_out: Arc::new(AtomicBool::new(false)),
    };
    let (found, timed_out) = (visit.found.clone(), visit.timed_out.clone());
    kitbag_shared::blocking(move || {
        walk(walker, &policy, &visit);
        Ok(())
    })
    .await?;
    ctx.check_cancelled()?;
    let all = std::mem::take(&mut *found.locked());
    Ok(reply(
        all,
        sort,
        offset,
        limit,
        timed_out.load(Ordering::Relaxed),
        &p.pattern,
    ))
}

/// What every walker thread needs to judge an entry and record a hit.
#[derive(Clone)]
struct Visit {
    matcher: GlobMatcher,
    /// A pattern without `/` matches the file name; with one, the path below `base`.
    basename_only: bool,
    base: PathBuf,
    want_mtime: bool,
    deadline: Instant,
    cancel: CancellationToken,
    found: Arc<Mutex<Vec<Hit>>>,
    timed_out: Arc<AtomicBool>,
}

impl Visit {
    fn matches(&self, entry: &ignore::DirEntry) -> bool {
        if self.basename_only {
            self.matcher.is_match(entry.file_name())
        } else {
            entry
                .path()
                .strip_prefix(&self.base)
                .is_ok_and(|rel| self.matcher.is_match(rel))
        }
    }
}

fn walk(walker: ignore::WalkBuilder, policy: &PathPolicy, visit: &Visit) {
    walker.build_parallel().run(|| {
        let visit = visit.clone();
        // Each hit is checked beneath the root without links: a name the walker saw
        // through a directory swapped for a link meanwhile is dropped, never shown.
        let mut beneath = policy.beneath();
        let mut seen = 0u32;
        // Hits gather per walker thread and join the shared list once, when the
        // thread's visitor is dropped: no lock per hit.
        let mut batch = Batch {
            local: Vec::new(),
            shared: visit.found.clone(),
        };
        Box::new(move |entry| {
            seen += 1;
            if seen.is_multiple_of(512)
                && (visit.cancel.is_cancelled() || Instant::now() > visit.deadline)
            {
                visit
                    .timed_out
                    .store(!visit.cancel.is_cancelled(), Ordering::Relaxed);
                return WalkState::Quit;
            }
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            if visit.matches(&entry) {
                let Ok(meta) = beneath.lstat(entry.path()) else {
                    return WalkState::Continue;
                };
                let mtime = if visit.want_mtime {
                    meta.modified
                } else {
                    SystemTime::UNIX_EPOCH
                };
                let outside = !policy.allows(entry.path(), Access::Read);
                batch
                    .local
                    .push((policy.display(entry.path()), mtime, outside));
            }
            WalkState::Continue
        })
    });
}

/// What the result's counters and keys weigh at most, serialized.
const RESERVE_BYTES: usize = 256;

/// Sort the hits, keep `limit` from `offset` within the result budget, and render.
fn reply(
    mut all: Vec<Hit>,
    sort: SortBy,
    offset: usize,
    limit: usize,
    timed_out: bool,
    pattern: &str,
) -> Reply<GlobResult> {
    match sort {
        SortBy::Mtime => all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0))),
        SortBy::Path => all.sort_by(|a, b| a.0.cmp(&b.0)),
    }
    let total = all.len() as u64;
    // A page stops at `limit` or at the file that would pass the budget as JSON carries it
    // (twice for a file outside the cage); the first is always taken, so paging moves on.
    let cap = RESULT_BUDGET_BYTES - RESERVE_BYTES;
    let mut charged = 0;
    let mut taken = 0;
    for hit in all.iter().skip(offset).take(limit) {
        let cost = (json_len(hit.0.as_str()) + 1) * if hit.2 { 2 } else { 1 };
        if charged + cost > cap && taken > 0 {
            break;
        }
        charged += cost;
        taken += 1;
    }
    let all: Vec<Hit> = all.into_iter().skip(offset).take(taken).collect();
    let next = (offset + all.len()) as u64;
    let more = next < total;
    let truncated = more || timed_out;
    let outside_cage: Vec<String> = all.iter().filter(|f| f.2).map(|f| f.0.clone()).collect();
    let files: Vec<String> = all.into_iter().map(|f| f.0).collect();
    let mut text = files.join("\n");
    if files.is_empty() {
        text = format!("no files match {pattern}");
    }
    if truncated {
        if timed_out {
            text.push_str("\n[partial: the search budget ran out; narrow with path]");
        } else {
            text.push_str(&format!(
                "\n[truncated: {} of {total} shown; continue with offset={next}]",
                files.len()
            ));
        }
    }
    Reply::new(
        GlobResult {
            count: files.len() as u64,
            files,
            total,
            truncated,
            next_offset: more.then_some(next),
            outside_cage,
        },
        text,
    )
}
