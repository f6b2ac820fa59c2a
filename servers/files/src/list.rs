//! `file_list`: a directory's entries, or a recursive gitignore-aware listing.

use std::path::Path;
use std::time::SystemTime;

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::paths::EntryKind;
use kitbag_shared::{Access, ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const DEFAULT_LIMIT: u64 = 1000;
pub const MAX_LIMIT: u64 = 10_000;
/// What the result's fields other than `path` and `entries` weigh at most, serialized.
const RESERVE_BYTES: usize = 128;

pub const DEF: ToolDef = ToolDef::read(
    "file_list",
    "List files",
    "List a directory's entries (name, type, size, mtime), sorted by path. Skips hidden and \
     ignored entries unless `hidden`/`no_ignore`.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory (default the root).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub recursive: Option<bool>,
    /// With `recursive`: 1 = direct children.
    #[serde(default)]
    pub max_depth: Option<i64>,
    #[serde(default)]
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
    /// Default 1000.
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// Root-relative path.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    pub size: u64,
    /// Last modification, RFC 3339 UTC.
    pub modified: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    /// The listed directory, root-relative.
    pub path: String,
    pub entries: Vec<Entry>,
    /// Entries found in total (before offset/limit).
    pub total: u64,
    pub truncated: bool,
    /// `offset` for the next page when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

pub fn run(policy: &PathPolicy, p: ListParams) -> ToolResult<Reply<ListResult>> {
    let limit =
        args::opt_range("limit", p.limit, 1, MAX_LIMIT as i64)?.map_or(DEFAULT_LIMIT, |n| n as u64);
    let offset = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as u64;
    let max_depth = args::opt_at_least("max_depth", p.max_depth, 1)?.map(|n| n as usize);
    let path = p.path.as_deref().unwrap_or(".");
    let (r, dir) = policy.open_file(path, "path", Access::Read)?;
    let meta = dir.metadata().map_err(|e| ToolError::io(&r.rel, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::new(
            ErrorCode::NotADirectory,
            format!("{}: not a directory; use file_read for files", r.rel),
        ));
    }
    let mut entries = collect(policy, walker(&r.abs, &p, max_depth));
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let total = entries.len() as u64;
    // Held to the result budget as JSON carries the entries (issue #37): a page stops at the
    // entry that would pass it, and `next_offset` starts the next page there.
    let cap = RESULT_BUDGET_BYTES.saturating_sub(RESERVE_BYTES + json_len(r.rel.as_str()));
    let mut charged = 0;
    let mut page: Vec<Entry> = Vec::new();
    for e in entries
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
    {
        let cost = json_len(&e) + 1;
        if charged + cost > cap && !page.is_empty() {
            break;
        }
        charged += cost;
        page.push(e);
    }
    let next = offset + page.len() as u64;
    let truncated = next < total;
    let mut text: String = page.iter().map(entry_line).collect();
    if page.is_empty() {
        text = format!("{}: no entries\n", r.rel);
    }
    if truncated {
        text.push_str(&format!(
            "[truncated: {total} entries; continue with offset={next}]\n"
        ));
    }
    text.pop();
    Ok(Reply::new(
        ListResult {
            path: r.rel,
            entries: page,
            total,
            truncated,
            next_offset: truncated.then_some(next),
        },
        text,
    ))
}

/// The walk over `dir`: one level, or down to `max_depth` when recursive.
fn walker(dir: &Path, p: &ListParams, max_depth: Option<usize>) -> ignore::WalkBuilder {
    let recursive = p.recursive.unwrap_or(false);
    let no_ignore = p.no_ignore.unwrap_or(false);
    let mut walker = ignore::WalkBuilder::new(dir);
    walker
        .hidden(!p.hidden.unwrap_or(false))
        .git_ignore(!no_ignore)
        .git_global(!no_ignore)
        .git_exclude(!no_ignore)
        .ignore(!no_ignore)
        .parents(!no_ignore)
        .require_git(false)
        .follow_links(false)
        .max_depth(if recursive { max_depth } else { Some(1) });
    walker
}

/// The entries the caller may read, unsorted.
fn collect(policy: &PathPolicy, walker: ignore::WalkBuilder) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    // The walker lists by path; each entry is then checked beneath the root without links,
    // so names seen through a directory swapped for a link meanwhile are dropped.
    let mut beneath = policy.beneath();
    for item in walker.build() {
        let Ok(item) = item else { continue };
        if item.depth() == 0 {
            continue;
        }
        // Nested mounts: skip what this caller may not read.
        if !policy.allows(item.path(), Access::Read) {
            continue;
        }
        let Ok(m) = beneath.lstat(item.path()) else {
            continue;
        };
        let kind = match m.kind {
            EntryKind::Symlink => Kind::Symlink,
            EntryKind::Dir => Kind::Dir,
            EntryKind::File => Kind::File,
            EntryKind::Other => Kind::Other,
        };
        entries.push(Entry {
            path: policy.display(item.path()),
            kind,
            size: if kind == Kind::Dir { 0 } else { m.len },
            modified: rfc3339(Some(m.modified)),
        });
    }
    entries
}

/// `path/` for a directory, `path[@]  size B  modified` for the rest.
fn entry_line(e: &Entry) -> String {
    let suffix = match e.kind {
        Kind::Dir => "/",
        Kind::Symlink => "@",
        _ => "",
    };
    if e.kind == Kind::Dir {
        format!("{}{suffix}\n", e.path)
    } else {
        format!("{}{suffix}  {} B  {}\n", e.path, e.size, e.modified)
    }
}

pub fn rfc3339(t: Option<SystemTime>) -> String {
    let Some(t) = t else { return String::new() };
    let dt: time::OffsetDateTime = t.into();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    dt.format(&fmt).unwrap_or_default()
}
