//! `search_glob`: find files by name pattern, newest first.

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use globset::{GlobBuilder, GlobMatcher};
use kitbag_shared::rustix::fs::{AtFlags, OFlags, statat};
use kitbag_shared::{
    Access, CallCtx, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::dirwalk::{self, DirWalkOptions, FileEntry, Visitor};
use crate::grep::GrepLimits;

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 10_000;

pub const DEF: ToolDef = ToolDef::read(
    "search_glob",
    "Find files by name",
    "Find files by glob, newest first. `*.rs` matches names at any depth; with `/` it matches \
     the path under `path` (`src/**/*.ts`). Skips hidden and ignored files unless \
     `hidden`/`no_ignore`.",
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
    /// Default 100.
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
    /// False: the walk ran out of time, so `total` is a lower bound.
    pub total_exact: bool,
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
    let opts = DirWalkOptions {
        hidden: p.hidden.unwrap_or(false),
        no_ignore: p.no_ignore.unwrap_or(false),
        threads: crate::walk::threads(),
    };
    let sort = p.sort.unwrap_or_default();
    let visit = Visit {
        matcher,
        basename_only,
        want_mtime: sort == SortBy::Mtime,
        deadline: Instant::now() + limits.budget,
        cancel: ctx.cancel.clone(),
    };
    let (all, timed_out) =
        kitbag_shared::blocking(move || Ok(walk(&policy, &root.abs, opts, &visit))).await?;
    ctx.check_cancelled()?;
    Ok(reply(all, sort, offset, limit, timed_out, &p.pattern))
}

/// What every walker thread needs to judge a file and record a hit.
struct Visit {
    matcher: GlobMatcher,
    /// A pattern without `/` matches the file name; with one, the path below the search
    /// directory.
    basename_only: bool,
    want_mtime: bool,
    deadline: Instant,
    cancel: CancellationToken,
}

/// Walk `dir` (a real directory under the root) by descriptors (see [`dirwalk`]): every name
/// comes from a directory reached from the root without links, so a hit needs no check of its
/// own. Its hits, and whether the time budget ran out.
fn walk(
    policy: &PathPolicy,
    dir: &std::path::Path,
    opts: DirWalkOptions,
    visit: &Visit,
) -> (Vec<Hit>, bool) {
    // Beneath the root's descriptor, refusing links; a directory that cannot be listed (or was
    // swapped for a link since it was resolved) has no files, as before.
    let Ok(start) = policy.open_real(dir, OFlags::RDONLY | OFlags::DIRECTORY) else {
        return (Vec::new(), false);
    };
    let walked = dirwalk::walk(
        start,
        dir,
        &policy.display(dir),
        opts,
        || Hits {
            visit,
            policy,
            local: Vec::new(),
            scratch: PathBuf::new(),
            dir_readable: (PathBuf::new(), false),
        },
        || visit.cancel.is_cancelled() || Instant::now() > visit.deadline,
    );
    let timed_out = walked.stopped && !visit.cancel.is_cancelled();
    let mut visitors = walked.visitors.into_iter();
    let mut all = visitors.next().map(|h| h.local).unwrap_or_default();
    for mut h in visitors {
        all.append(&mut h.local);
    }
    (all, timed_out)
}

/// One walker thread's hits.
struct Hits<'a> {
    visit: &'a Visit,
    policy: &'a PathPolicy,
    local: Vec<Hit>,
    scratch: PathBuf,
    /// The directory of the last hit, and whether a readable mount covers it.
    dir_readable: (PathBuf, bool),
}

impl Hits<'_> {
    /// Whether the file lies in a readable mount. A mount over its directory covers it, so
    /// the mounts are searched once per directory, and per file only where none does (a
    /// mount may name the file itself).
    fn readable(&mut self, f: &FileEntry<'_>) -> bool {
        // Compared as bytes: `Path` equality parses components.
        if self.dir_readable.0.as_os_str().as_bytes() != f.dir_abs.as_os_str().as_bytes() {
            self.dir_readable = (
                f.dir_abs.to_path_buf(),
                self.policy.allows(f.dir_abs, Access::Read),
            );
        }
        if self.dir_readable.1 {
            return true;
        }
        self.scratch.as_mut_os_string().clear();
        self.scratch.push(f.dir_abs);
        self.scratch.push(f.name);
        self.policy.allows(&self.scratch, Access::Read)
    }
}

impl Visitor for Hits<'_> {
    fn wants(&mut self, f: &FileEntry<'_>) -> bool {
        if self.visit.basename_only {
            return self.visit.matcher.is_match(f.name);
        }
        self.scratch.as_mut_os_string().clear();
        self.scratch.push(f.dir_sub);
        self.scratch.push(f.name);
        self.visit.matcher.is_match(&self.scratch)
    }

    fn found(&mut self, f: &FileEntry<'_>) {
        // The time is read only to sort by it, from the open directory (a file gone
        // meanwhile is dropped).
        let mtime = if self.visit.want_mtime {
            match statat(f.dir, f.name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => mtime_of(&st),
                Err(_) => return,
            }
        } else {
            SystemTime::UNIX_EPOCH
        };
        let outside = !self.readable(f);
        let name = String::from_utf8_lossy(f.name.as_bytes());
        let shown = if f.dir_display == "." {
            name.into_owned()
        } else {
            let mut s = String::with_capacity(f.dir_display.len() + 1 + name.len());
            s.push_str(f.dir_display);
            s.push('/');
            s.push_str(&name);
            s
        };
        self.local.push((shown, mtime, outside));
    }
}

/// `st_mtime` as a time (before 1970 too).
// The field widths of `struct stat` differ between architectures; `as` converts all of them.
#[allow(clippy::unnecessary_cast)]
fn mtime_of(st: &kitbag_shared::rustix::fs::Stat) -> SystemTime {
    let (secs, nanos) = (st.st_mtime as i64, st.st_mtime_nsec as u32);
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
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
            total_exact: !timed_out,
            truncated,
            next_offset: more.then_some(next),
            outside_cage,
        },
        text,
    )
}
