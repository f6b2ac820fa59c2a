//! `search_ast` and `edit_ast`: structural search and rewrite with ast-grep.

use kitbag_lsp_client::check::EditDiagnostics;
use kitbag_lsp_client::feedback::Feedback;
use kitbag_shared::args;
use kitbag_shared::lock::LockExt;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use ast_grep_core::meta_var::MetaVariable;
use ast_grep_core::tree_sitter::StrDoc;
use ast_grep_core::{AstGrep, Pattern};
use ast_grep_language::SupportLang;
use ignore::WalkState;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len, json_prefix, truncate_line};
use kitbag_shared::paths::fd;
use kitbag_shared::{
    Access, CallCtx, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::walk::{OneOrMany, WalkOptions, builder};

/// Context and match text are cut so a minified one-line file cannot flood the answer.
pub const MAX_CONTEXT_LINE_CHARS: usize = 200;
pub const MAX_MATCH_CHARS: usize = 2000;
pub const MAX_CONTEXT: i64 = 10;
pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;
/// Change records listed in one edit_ast answer (every change is still applied).
pub const MAX_CHANGES_LISTED: usize = 500;
/// What one match's captured meta-variables may weigh, serialized: a `$$$ARGS` over a call of
/// ten thousand arguments is listed in part, ending with a `… [N more]` item.
pub const MAX_CAPTURE_BYTES: usize = 12 * 1024;
/// What the skipped files listed in one answer may weigh, serialized.
const MAX_PARSE_ERROR_BYTES: usize = 4 * 1024;
/// What a result's counters, flags and keys weigh at most, serialized: held back from the
/// budget (issue #37) that pages of matches and changes are cut to.
const RESERVE_BYTES: usize = 1024 + kitbag_lsp_client::check::MAX_BYTES;

pub const SEARCH_DEF: ToolDef = ToolDef::read(
    "search_ast",
    "Structural code search",
    "Search code by syntax tree with an ast-grep pattern in `lang`: `$NAME` matches one node, \
     `$$$ARGS` any number (both captured), e.g. \
     `fn $NAME($$$ARGS) -> Result<$T>`.",
);

pub const EDIT_DEF: ToolDef = ToolDef::write(
    "edit_ast",
    "Structural rewrite",
    "Rewrite code structurally with ast-grep (patterns as in search_ast). DRY RUN BY DEFAULT: \
     per-file diffs; `dry_run: false` writes every touched file or none.",
)
.destructive();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Must parse as code of `lang`.
    pub pattern: String,
    /// rust, python, typescript, tsx, javascript, go, java, c, cpp, …; default: by extension.
    #[serde(default)]
    pub lang: Option<String>,
    /// Files or directories (default the root).
    #[serde(default)]
    pub paths: Option<OneOrMany>,
    /// `!` excludes.
    #[serde(default)]
    pub globs: Option<OneOrMany>,
    /// Lines around each match (0–10).
    #[serde(default)]
    pub context: Option<i64>,
    /// Default 100.
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Captured {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AstMatch {
    pub file: String,
    /// 1-based line where the match starts (seed 004's `line`).
    pub line: u64,
    pub start_column: u64,
    pub end_line: u64,
    pub end_column: u64,
    /// The matched code (cut at 2000 characters); absent outside the readable mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Captured meta-variables: `$NAME` → text, `$$$ARGS` → list of texts (separators dropped;
    /// a list past 12 KB ends with `… [N more]`).
    pub meta_variables: BTreeMap<String, Captured>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_before: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_after: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside_cage: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ParseError {
    pub path: String,
    pub message: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    pub matches: Vec<AstMatch>,
    /// Matches returned.
    pub count: u64,
    /// Matches found in total.
    pub total: u64,
    /// Always true: every file is searched, so `total` is exact.
    pub total_exact: bool,
    /// More matches exist past those returned.
    pub truncated: bool,
    /// `offset` for the next page when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    pub files_searched: u64,
    /// The language used (given or inferred).
    pub lang: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parse_errors: Vec<ParseError>,
    /// Further skipped files, not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_errors_unlisted: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// Pattern → template with its meta-variables, applied in order, e.g. {"$A.unwrap()": "$A?"}.
    pub rewrites: serde_json::Map<String, serde_json::Value>,
    /// Default: by file extension.
    #[serde(default)]
    pub lang: Option<String>,
    /// File or directory (default the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Filters files under `path`.
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default)]
    pub max_replacements: Option<i64>,
    #[serde(default)]
    pub max_files: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
    /// Report new/fixed diagnostics.
    #[serde(default)]
    pub check: Option<bool>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Change {
    pub path: String,
    pub before: String,
    pub after: String,
    pub byte_start: u64,
    pub byte_end: u64,
    pub start_line: u64,
    pub start_column: u64,
    pub end_line: u64,
    pub end_column: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileChange {
    pub path: String,
    /// Changes of this file listed in this answer.
    pub count: u64,
    /// Unified diff of those changes.
    pub diff: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EditResult {
    /// The replacements, from `offset`, as many as fit (at most 500; see `changes_truncated`).
    pub changes: Vec<Change>,
    /// More changes than listed: pass `next_offset` as `offset`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub changes_truncated: bool,
    /// `offset` for the next page when `changes_truncated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    pub file_changes: Vec<FileChange>,
    pub total_replacements: u64,
    pub files_touched: u64,
    pub files_searched: u64,
    /// True when the files were written.
    pub applied: bool,
    /// `max_replacements` or `max_files` stopped further changes.
    pub limit_reached: bool,
    pub parse_errors: Vec<ParseError>,
    /// Further skipped files, not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parse_errors_unlisted: Option<u64>,
    pub lang: String,
    /// What the rewrite did to the language servers' diagnostics (servers run with --lsp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<EditDiagnostics>,
}

/// Names accepted for `lang`, for error messages.
fn lang_names() -> String {
    crate::languages::available()
        .iter()
        .map(|l| l.to_string().to_lowercase())
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_lang(name: &str) -> ToolResult<SupportLang> {
    match SupportLang::from_str(name) {
        Ok(l) if crate::languages::compiled(l) => Ok(l),
        Ok(_) => Err(ToolError::invalid_field(
            "lang",
            format!(
                "`{name}` is not compiled into this build of kitbag-search; accepted: {}",
                lang_names()
            ),
        )),
        Err(_) => Err(ToolError::invalid_field(
            "lang",
            format!("unknown language `{name}`; accepted: {}", lang_names()),
        )),
    }
}

/// Walk `roots` and list candidate files (sorted, deduplicated).
fn candidates(roots: &[PathBuf], opts: &WalkOptions) -> ToolResult<Vec<PathBuf>> {
    let mut out = std::sync::Mutex::new(Vec::new());
    for root in roots {
        let walker = builder(root, opts)?;
        walker.build_parallel().run(|| {
            let out = &out;
            Box::new(move |entry| {
                if let Ok(e) = entry
                    && e.file_type().is_some_and(|t| t.is_file())
                {
                    out.locked().push(e.into_path());
                }
                WalkState::Continue
            })
        });
    }
    let mut files = std::mem::take(out.get_mut().unwrap_or_else(|p| p.into_inner()));
    files.sort();
    files.dedup();
    Ok(files)
}

/// Pick the language (given, or inferred when every candidate agrees) and keep its files.
fn select_language(
    lang: Option<&str>,
    files: Vec<PathBuf>,
) -> ToolResult<(SupportLang, Vec<PathBuf>)> {
    if let Some(name) = lang {
        let lang = parse_lang(name)?;
        let types = lang.file_types();
        let files = files
            .into_iter()
            .filter(|f| types.matched(f, false).is_whitelist())
            .collect();
        return Ok((lang, files));
    }
    let mut seen: BTreeMap<String, SupportLang> = BTreeMap::new();
    for f in &files {
        if let Some(l) = crate::languages::of_path(f) {
            seen.insert(l.to_string(), l);
        }
    }
    match seen.len() {
        1 => {
            let lang = *seen.values().next().unwrap_or(&SupportLang::Rust);
            let files = files
                .into_iter()
                .filter(|f| crate::languages::of_path(f) == Some(lang))
                .collect();
            Ok((lang, files))
        }
        0 => Err(ToolError::invalid_field(
            "lang",
            "no file under the path has an extension of a supported language; give `lang`",
        )),
        _ => Err(ToolError::invalid_field(
            "lang",
            format!(
                "files of several languages found ({}); give `lang` (or narrow with a glob)",
                seen.keys()
                    .map(|k| k.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .with_detail(
            json!({ "languages": seen.keys().map(|k| k.to_lowercase()).collect::<Vec<_>>() }),
        )),
    }
}

fn compile(pattern: &str, lang: SupportLang, field: &str) -> ToolResult<Pattern> {
    args::non_empty(field, pattern.trim(), "")?;
    let invalid = |why: String| {
        ToolError::new(
            ErrorCode::InvalidPattern,
            format!(
                "{field}: not a valid {} pattern: {why}. A pattern must be one complete piece of code, e.g. `foo($A)`.",
                lang.to_string().to_lowercase()
            ),
        )
        .with_detail(json!({ "field": field, "pattern": pattern }))
    };
    let compiled = Pattern::try_new(pattern, lang).map_err(|e| invalid(e.to_string()))?;
    // tree-sitter recovers from syntax errors, so a broken pattern still "parses" and would
    // match garbage: refuse an ERROR root and unbalanced brackets outright.
    if compiled.has_error() {
        return Err(invalid("it does not parse (syntax error)".into()));
    }
    if let Some(why) = unbalanced(pattern) {
        return Err(invalid(why));
    }
    Ok(compiled)
}

/// Why the brackets of `src` do not balance (strings and char literals skipped), if they don't.
fn unbalanced(src: &str) -> Option<String> {
    let mut stack = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in src.chars() {
        if let Some(q) = quote {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, c) if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '`' => quote = Some(c),
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                let open = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if stack.pop() != Some(open) {
                    return Some(format!("unexpected `{c}`"));
                }
            }
            _ => {}
        }
    }
    stack.last().map(|c| format!("`{c}` is never closed"))
}

/// Run `f` over `files` on a few threads; results come back in file order.
fn par_map<T: Send>(files: &[PathBuf], f: impl Fn(&Path) -> T + Sync) -> Vec<T> {
    let threads = crate::walk::threads().min(files.len().max(1));
    let chunk = files.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(|p| f(p)).collect::<Vec<T>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// Read a file the walker found, beneath the root without following links. `Ok(None)`: it is
/// not (or no longer) there — e.g. reached through a directory swapped for a link — and is
/// skipped without a word, since even its name may come from outside the root.
fn read_source(policy: &PathPolicy, path: &Path) -> Result<Option<String>, SourceError> {
    let mut bytes = Vec::new();
    let read = policy
        .beneath()
        .open_read(path)
        .and_then(|mut f| f.read_to_end(&mut bytes));
    match read {
        Ok(_) => {}
        Err(e) if fd::is_gone(&e) => return Ok(None),
        Err(e) => return Err(SourceError::Io(e)),
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| SourceError::NotUtf8)
}

/// Why a file the walker found could not be parsed: reported per file, the search goes on.
#[derive(Debug)]
enum SourceError {
    Io(std::io::Error),
    NotUtf8,
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Io(e) => e.fmt(f),
            SourceError::NotUtf8 => f.write_str("not valid UTF-8"),
        }
    }
}

/// 1-based line and column (in characters) of byte `offset` in `src`.
fn line_col(src: &str, offset: usize) -> (u64, u64) {
    let before = &src.as_bytes()[..offset.min(src.len())];
    let line = memchr::memchr_iter(b'\n', before).count() as u64 + 1;
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |i| i + 1);
    let col = src.get(line_start..offset).map_or(0, |s| s.chars().count()) as u64 + 1;
    (line, col)
}

fn capture_vars(
    nm: &ast_grep_core::NodeMatch<'_, StrDoc<SupportLang>>,
) -> BTreeMap<String, Captured> {
    let env = nm.get_env();
    let mut out = BTreeMap::new();
    // Held to MAX_CAPTURE_BYTES as JSON carries them: a value past it is cut with a marker.
    let mut left = MAX_CAPTURE_BYTES;
    for var in env.get_matched_variables() {
        match var {
            MetaVariable::Capture(name, _) => {
                if let Some(node) = env.get_match(&name) {
                    let mut text = cut(&node.text(), MAX_MATCH_CHARS);
                    let cost = json_len(&text);
                    if cost > left {
                        text = format!("{}…", json_prefix(&text, left.saturating_sub(8)).0);
                    }
                    left = left.saturating_sub(cost.min(left));
                    out.insert(name.clone(), Captured::One(text));
                }
            }
            MetaVariable::MultiCapture(name) => {
                let nodes: Vec<_> = env
                    .get_multiple_matches(&name)
                    .into_iter()
                    .filter(|n| n.is_named())
                    .collect();
                let mut items = Vec::new();
                for n in &nodes {
                    let item = cut(&n.text(), MAX_MATCH_CHARS);
                    let cost = json_len(&item) + 1;
                    if cost > left {
                        items.push(format!("… [{} more]", nodes.len() - items.len()));
                        left = 0;
                        break;
                    }
                    left -= cost;
                    items.push(item);
                }
                out.insert(name.clone(), Captured::Many(items));
            }
            _ => {}
        }
    }
    out
}

fn cut(s: &str, max: usize) -> String {
    truncate_line(s, max).0
}

struct FileMatches {
    matches: Vec<AstMatch>,
    error: Option<ParseError>,
}

impl FileMatches {
    /// Nothing to report: cancelled, or the file is gone.
    fn none() -> Self {
        Self {
            matches: Vec::new(),
            error: None,
        }
    }

    fn failed(path: String, message: String) -> Self {
        Self {
            matches: Vec::new(),
            error: Some(ParseError { path, message }),
        }
    }
}

pub async fn search(
    policy: Arc<PathPolicy>,
    p: SearchParams,
    ctx: CallCtx,
) -> ToolResult<Reply<SearchResult>> {
    let limit = args::opt_range("limit", p.limit, 1, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT) as usize;
    let offset = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    let context = args::opt_range("context", p.context, 0, MAX_CONTEXT)?.unwrap_or(0) as usize;
    if let Some(l) = &p.lang {
        parse_lang(l)?;
    }
    let roots = search_roots(&policy, &p)?;
    let opts = WalkOptions {
        hidden: p.hidden.unwrap_or(false),
        no_ignore: p.no_ignore.unwrap_or(false),
        globs: p.globs.as_ref().map(OneOrMany::to_vec).unwrap_or_default(),
        globs_field: "globs",
        ..Default::default()
    };
    let cancel = ctx.cancel.clone();
    kitbag_shared::blocking(move || {
        let files = candidates(&roots, &opts)?;
        let (lang, files) = select_language(p.lang.as_deref(), files)?;
        let pattern = compile(&p.pattern, lang, "pattern")?;
        let per_file = par_map(&files, |path| {
            if cancel.is_cancelled() {
                return FileMatches::none();
            }
            search_file(&policy, path, lang, &pattern, context)
        });
        Ok(search_reply(
            per_file,
            files.len() as u64,
            offset,
            limit,
            lang,
        ))
    })
    .await
}

/// The `paths` argument resolved: each must exist inside the root.
fn search_roots(policy: &PathPolicy, p: &SearchParams) -> ToolResult<Vec<PathBuf>> {
    let paths = p
        .paths
        .as_ref()
        .map(OneOrMany::to_vec)
        .unwrap_or_else(|| vec![".".into()]);
    let mut roots = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let field = if paths.len() > 1 {
            format!("paths[{i}]")
        } else {
            "paths".into()
        };
        let r = policy.resolve_in_root(path, &field)?;
        if !r.abs.exists() {
            return Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("{path}: no such file or directory"),
            )
            .with_detail(json!({ "field": field })));
        }
        roots.push(r.abs);
    }
    Ok(roots)
}

/// Every match of `pattern` in one file; a file that cannot be read or parsed is reported.
fn search_file(
    policy: &PathPolicy,
    path: &Path,
    lang: SupportLang,
    pattern: &Pattern,
    context: usize,
) -> FileMatches {
    let shown = policy.display(path);
    let src = match read_source(policy, path) {
        Ok(Some(s)) => s,
        Ok(None) => return FileMatches::none(),
        Err(e) => return FileMatches::failed(shown, e.to_string()),
    };
    let grep = match AstGrep::try_new(&src, lang) {
        Ok(g) => g,
        Err(message) => return FileMatches::failed(shown, message),
    };
    // Outside the readable mounts only the position is told: no text, captures or context.
    let outside = !policy.allows(path, Access::Read);
    let lines: Vec<&str> = if context > 0 {
        src.lines().collect()
    } else {
        Vec::new()
    };
    let matches = grep
        .root()
        .find_all(pattern)
        .map(|nm| {
            let range = nm.range();
            let (sl, sc) = line_col(&src, range.start);
            let (el, ec) = line_col(&src, range.end);
            let (before, after) = if context > 0 && !outside {
                let s0 = sl as usize - 1;
                (
                    context_lines(&lines, s0.saturating_sub(context), s0),
                    context_lines(&lines, el as usize, el as usize + context),
                )
            } else {
                (Vec::new(), Vec::new())
            };
            AstMatch {
                file: shown.clone(),
                line: sl,
                start_column: sc,
                end_line: el,
                end_column: ec,
                content: (!outside).then(|| cut(&nm.text(), MAX_MATCH_CHARS)),
                meta_variables: if outside {
                    BTreeMap::new()
                } else {
                    capture_vars(&nm)
                },
                context_before: before,
                context_after: after,
                outside_cage: outside,
            }
        })
        .collect();
    FileMatches {
        matches,
        error: None,
    }
}

/// Lines `from..to` (0-based, clipped to the file), each cut for the answer.
fn context_lines(lines: &[&str], from: usize, to: usize) -> Vec<String> {
    lines
        .get(from..to.min(lines.len()))
        .unwrap_or_default()
        .iter()
        .map(|l| cut(l, MAX_CONTEXT_LINE_CHARS))
        .collect()
}

/// Gather the per-file results in file order, keep the first `limit` matches, and render.
fn search_reply(
    per_file: Vec<FileMatches>,
    files_searched: u64,
    offset: usize,
    limit: usize,
    lang: SupportLang,
) -> Reply<SearchResult> {
    let mut found = Vec::new();
    let mut parse_errors = Vec::new();
    for fm in per_file {
        found.extend(fm.matches);
        parse_errors.extend(fm.error);
    }
    let (parse_errors, parse_errors_unlisted) = list_parse_errors(parse_errors);
    let total = found.len() as u64;
    // A page stops at `limit` or at the match that would pass the budget, as JSON carries it;
    // its first match is always taken, so paging moves on.
    let cap = RESULT_BUDGET_BYTES
        .saturating_sub(RESERVE_BYTES + json_len(&parse_errors) + json_len(&lang.to_string()));
    let mut charged = 0;
    let mut all = Vec::new();
    for m in found.into_iter().skip(offset).take(limit) {
        let cost = json_len(&m) + 1;
        if charged + cost > cap && !all.is_empty() {
            break;
        }
        charged += cost;
        all.push(m);
    }
    let next = offset as u64 + all.len() as u64;
    let truncated = next < total;
    let mut text: String = all.iter().map(match_text).collect();
    if all.is_empty() {
        text = format!(
            "no matches ({files_searched} {} files searched)\n",
            lang.to_string().to_lowercase()
        );
    }
    if truncated {
        text.push_str(&format!(
            "[truncated: {} of {total} matches shown; continue with offset={next}, or narrow paths/globs]\n",
            all.len()
        ));
    }
    skipped_text(&mut text, &parse_errors, parse_errors_unlisted);
    text.pop();
    Reply::new(
        SearchResult {
            count: all.len() as u64,
            matches: all,
            total,
            total_exact: true,
            truncated,
            next_offset: truncated.then_some(next),
            files_searched,
            lang: lang.to_string().to_lowercase(),
            parse_errors,
            parse_errors_unlisted,
        },
        text,
    )
}

/// The skipped files that fit in [`MAX_PARSE_ERROR_BYTES`], and how many more there are.
fn list_parse_errors(mut errors: Vec<ParseError>) -> (Vec<ParseError>, Option<u64>) {
    let mut charged = 0;
    let mut keep = 0;
    for e in &errors {
        charged += json_len(e) + 1;
        if charged > MAX_PARSE_ERROR_BYTES {
            break;
        }
        keep += 1;
    }
    let unlisted = (errors.len() - keep) as u64;
    errors.truncate(keep);
    (errors, (unlisted > 0).then_some(unlisted))
}

/// The skipped files, one line each, in the text answer.
fn skipped_text(text: &mut String, errors: &[ParseError], unlisted: Option<u64>) {
    for e in errors {
        text.push_str(&format!("[skipped {}: {}]\n", e.path, e.message));
    }
    if let Some(n) = unlisted {
        text.push_str(&format!("[skipped {n} more files]\n"));
    }
}

/// One match in the text answer: context, `file:line:col: first line`, captured variables.
fn match_text(m: &AstMatch) -> String {
    let mut text = String::new();
    for c in &m.context_before {
        text.push_str(&format!("  {c}\n"));
    }
    match &m.content {
        Some(t) => text.push_str(&format!(
            "{}:{}:{}: {}\n",
            m.file,
            m.line,
            m.start_column,
            t.lines().next().unwrap_or("")
        )),
        None => text.push_str(&format!(
            "{}:{}:{}: [outside the readable mounts]\n",
            m.file, m.line, m.start_column
        )),
    }
    if !m.meta_variables.is_empty() {
        let vars: Vec<String> = m
            .meta_variables
            .iter()
            .map(|(k, v)| match v {
                Captured::One(s) => format!("${k}={}", s.lines().next().unwrap_or("")),
                Captured::Many(items) => format!("$$${k}=[{}]", items.join(", ")),
            })
            .collect();
        text.push_str(&format!("    {}\n", vars.join("  ")));
    }
    for c in &m.context_after {
        text.push_str(&format!("  {c}\n"));
    }
    text
}

struct Planned {
    path: PathBuf,
    shown: String,
    /// (byte_start, byte_end, replacement) sorted, non-overlapping.
    edits: Vec<(usize, usize, String)>,
    src: String,
    error: Option<ParseError>,
}

pub async fn edit(
    feedback: Option<&Feedback>,
    policy: Arc<PathPolicy>,
    p: EditParams,
    ctx: CallCtx,
) -> ToolResult<Reply<EditResult>> {
    let rules = rewrite_rules(&p)?;
    let max_replacements =
        args::opt_at_least("max_replacements", p.max_replacements, 1)?.map(|n| n as u64);
    let max_files = args::opt_at_least("max_files", p.max_files, 1)?.map(|n| n as u64);
    let offset = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as u64;
    if let Some(l) = &p.lang {
        parse_lang(l)?;
    }
    let dry_run = p.dry_run.unwrap_or(true);
    let path = p.path.clone().unwrap_or_else(|| ".".into());
    let root = policy.resolve_in_root(&path, "path")?;
    if !root.abs.exists() {
        return Err(ToolError::new(
            ErrorCode::FileNotFound,
            format!("{path}: no such file or directory"),
        )
        .with_detail(json!({ "field": "path" })));
    }
    let single_file = root.abs.is_file();
    let opts = WalkOptions {
        hidden: p.hidden.unwrap_or(false),
        no_ignore: p.no_ignore.unwrap_or(false),
        globs: p.glob.iter().cloned().collect(),
        globs_field: "glob",
        ..Default::default()
    };
    let cancel = ctx.cancel.clone();
    let check = p.check;
    let plan_policy = policy.clone();
    let (mut chosen, files_searched, lang) = kitbag_shared::blocking(move || {
        let policy = plan_policy;
        let files = candidates(std::slice::from_ref(&root.abs), &opts)?;
        let (lang, files) = select_language(p.lang.as_deref(), files)?;
        let mut patterns = Vec::new();
        for (pattern, template) in &rules {
            patterns.push((
                compile(pattern, lang, &format!("rewrites.{pattern}"))?,
                template.clone(),
            ));
        }
        let planned = par_map(&files, |path| {
            plan_file(path, &policy, lang, &patterns, &cancel)
        });
        if cancel.is_cancelled() {
            return Err(ToolError::new(
                ErrorCode::Cancelled,
                "the request was cancelled; nothing was written",
            ));
        }
        let files_searched = files.len() as u64;
        let chosen = choose(planned, max_files, max_replacements);
        // A single file the caller named that does not parse is an error, not an empty edit.
        if single_file && !chosen.parse_errors.is_empty() && chosen.writes.is_empty() {
            let e = &chosen.parse_errors[0];
            return Err(ToolError::new(
                ErrorCode::InvalidParams,
                format!("path: {} could not be parsed: {}", e.path, e.message),
            )
            .with_detail(json!({ "field": "path" })));
        }
        Ok((chosen, files_searched, lang))
    })
    .await?;
    let applied = !dry_run && !chosen.writes.is_empty();
    let touched: Vec<PathBuf> = chosen.writes.iter().map(|(p, _)| p.clone()).collect();
    let check = if applied { check } else { Some(false) };
    let pending = kitbag_lsp_client::feedback::before(feedback, &policy, &touched, check).await;
    let write_policy = policy.clone();
    let mut reply = kitbag_shared::blocking(move || {
        if !dry_run {
            write_rewrites(&write_policy, &mut chosen.writes)?;
        }
        Ok(edit_reply(
            chosen,
            offset,
            applied,
            dry_run,
            files_searched,
            lang,
        ))
    })
    .await?;
    let d = kitbag_lsp_client::feedback::after(pending, &policy, &[]).await;
    kitbag_lsp_client::feedback::append(&mut reply.text, d.as_ref());
    reply.data.diagnostics = d;
    Ok(reply)
}

/// The `rewrites` argument as (pattern, template) pairs, in the given order.
fn rewrite_rules(p: &EditParams) -> ToolResult<Vec<(String, String)>> {
    if p.rewrites.is_empty() {
        return Err(ToolError::invalid_field(
            "rewrites",
            "give at least one pattern → template pair",
        ));
    }
    let mut rules: Vec<(String, String)> = Vec::new();
    for (pattern, template) in &p.rewrites {
        let Some(t) = template.as_str() else {
            return Err(ToolError::invalid_field(
                &format!("rewrites.{pattern}"),
                "the template must be a string",
            ));
        };
        rules.push((pattern.clone(), t.to_string()));
    }
    Ok(rules)
}

/// The planned rewrites that fit within `max_files` and `max_replacements`.
struct Chosen {
    parse_errors: Vec<ParseError>,
    /// Each touched file's plan and how many of its edits are made, in path order.
    files: Vec<(Planned, usize)>,
    /// The new content of each touched file.
    writes: Vec<(PathBuf, Vec<u8>)>,
    total: u64,
    limit_reached: bool,
}

/// Take the planned files in order until a limit stops it; the last file may be taken in part.
fn choose(planned: Vec<Planned>, max_files: Option<u64>, max_replacements: Option<u64>) -> Chosen {
    let mut chosen = Chosen {
        parse_errors: Vec::new(),
        files: Vec::new(),
        writes: Vec::new(),
        total: 0,
        limit_reached: false,
    };
    for plan in planned {
        if let Some(e) = plan.error {
            chosen.parse_errors.push(e);
            continue;
        }
        if plan.edits.is_empty() {
            continue;
        }
        if max_files.is_some_and(|m| chosen.files.len() as u64 >= m) {
            chosen.limit_reached = true;
            break;
        }
        let mut take = plan.edits.len();
        if let Some(m) = max_replacements {
            let left = m.saturating_sub(chosen.total) as usize;
            if left < take {
                take = left;
                chosen.limit_reached = true;
            }
        }
        if take == 0 {
            break;
        }
        let out = apply_edits(&plan, 0..take);
        chosen.total += take as u64;
        chosen.writes.push((plan.path.clone(), out.into_bytes()));
        chosen.files.push((plan, take));
        if chosen.limit_reached {
            break;
        }
    }
    chosen
}

/// One page of the listing: the changes from `offset` (counted over every file in path order)
/// that fit the budget, and per file the diff of those changes.
struct Listing {
    changes: Vec<Change>,
    file_changes: Vec<FileChange>,
    next_offset: Option<u64>,
}

/// List the changes from `offset` until MAX_CHANGES_LISTED or the budget (`cap` bytes of
/// JSON) stops it; the first is always listed, so paging moves on.
fn listing(files: &[(Planned, usize)], offset: u64, cap: usize) -> Listing {
    let mut page = Listing {
        changes: Vec::new(),
        file_changes: Vec::new(),
        next_offset: None,
    };
    let mut charged = 0;
    let mut index = 0u64;
    for (plan, take) in files {
        let take = *take as u64;
        if index + take <= offset {
            index += take;
            continue;
        }
        let first = offset.saturating_sub(index) as usize;
        let mut end = first;
        for k in first..take as usize {
            let change = change_record(plan, k);
            // The change's record, and what its hunk can add to the file's diff: the lines it
            // spans before and after, three lines of context each side, a prefix per line.
            let mut cost = json_len(&change) + 1 + hunk_cost(plan, k);
            if k == first {
                cost += 2 * json_len(plan.shown.as_str()) + 64;
            }
            let full = page.changes.len() >= MAX_CHANGES_LISTED || charged + cost > cap;
            if full && !page.changes.is_empty() {
                page.next_offset = Some(index + k as u64);
                break;
            }
            charged += cost;
            page.changes.push(change);
            end = k + 1;
        }
        if end > first {
            page.file_changes.push(FileChange {
                path: plan.shown.clone(),
                count: (end - first) as u64,
                diff: diff_of(plan, first..end),
            });
        }
        if page.next_offset.is_some() {
            break;
        }
        index += take;
    }
    page
}

/// The answer: the structured result and its text (see [`edit_text`]).
fn edit_reply(
    chosen: Chosen,
    offset: u64,
    applied: bool,
    dry_run: bool,
    files_searched: u64,
    lang: SupportLang,
) -> Reply<EditResult> {
    let Chosen {
        parse_errors,
        files,
        writes,
        total,
        limit_reached,
    } = chosen;
    let (parse_errors, parse_errors_unlisted) = list_parse_errors(parse_errors);
    let lang = lang.to_string().to_lowercase();
    let cap = RESULT_BUDGET_BYTES
        .saturating_sub(RESERVE_BYTES + json_len(&parse_errors) + json_len(lang.as_str()));
    let Listing {
        changes,
        mut file_changes,
        next_offset,
    } = listing(&files, offset, cap);
    // One change alone can pass the budget (a rewritten thousand-line function): its diff
    // is then cut, with a note, to what the budget leaves.
    let listed = json_len(&changes) + json_len(&file_changes);
    if listed > cap
        && let Some(fc) = file_changes.iter_mut().max_by_key(|fc| fc.diff.len())
    {
        let keep = json_len(fc.diff.as_str()).saturating_sub(listed - cap + 64);
        fc.diff = format!(
            "{}\n[diff cut: answer cap reached]",
            json_prefix(&fc.diff, keep).0
        );
    }
    let result = EditResult {
        changes_truncated: next_offset.is_some(),
        next_offset,
        changes,
        file_changes,
        total_replacements: total,
        files_touched: if applied || dry_run {
            writes.len() as u64
        } else {
            0
        },
        files_searched,
        applied,
        limit_reached,
        parse_errors,
        parse_errors_unlisted,
        lang,
        diagnostics: None,
    };
    let text = edit_text(&result, offset, dry_run);
    Reply::new(result, text)
}

/// The text answer: a summary line, the diffs listed, skipped files and what to do next.
fn edit_text(r: &EditResult, offset: u64, dry_run: bool) -> String {
    let mut text = format!(
        "{} {} replacement(s) in {} file(s) ({} {} files searched){}\n",
        if r.applied { "applied" } else { "dry run:" },
        r.total_replacements,
        r.files_touched,
        r.files_searched,
        r.lang,
        if r.limit_reached {
            "; a limit stopped further changes"
        } else {
            ""
        }
    );
    for fc in &r.file_changes {
        text.push_str(&fc.diff);
    }
    if let Some(next) = r.next_offset {
        text.push_str(&format!(
            "[changes {}–{} of {} listed; continue with offset={next}]\n",
            offset + 1,
            next,
            r.total_replacements
        ));
    }
    skipped_text(&mut text, &r.parse_errors, r.parse_errors_unlisted);
    if !r.applied && !dry_run {
        text.push_str("nothing to apply\n");
    } else if dry_run && r.total_replacements > 0 {
        text.push_str("(dry run: nothing written; call again with dry_run: false to apply)\n");
    }
    text.pop();
    text
}

/// A planned file's text with the edits in `range` applied (and no others).
fn apply_edits(plan: &Planned, range: std::ops::Range<usize>) -> String {
    let mut out = String::with_capacity(plan.src.len());
    let mut at = 0;
    for (start, end, replacement) in &plan.edits[range] {
        out.push_str(&plan.src[at..*start]);
        out.push_str(replacement);
        at = *end;
    }
    out.push_str(&plan.src[at..]);
    out
}

/// Unified diff of the edits in `range` of a planned file.
fn diff_of(plan: &Planned, range: std::ops::Range<usize>) -> String {
    let out = apply_edits(plan, range);
    similar::TextDiff::from_lines(&plan.src, &out)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{}", plan.shown), &format!("b/{}", plan.shown))
        .to_string()
}

/// Edit `k` of a planned file as listed: its place and its text before and after (each cut
/// at MAX_MATCH_CHARS characters).
fn change_record(plan: &Planned, k: usize) -> Change {
    let (start, end, replacement) = &plan.edits[k];
    let (sl, sc) = line_col(&plan.src, *start);
    let (el, ec) = line_col(&plan.src, *end);
    Change {
        path: plan.shown.clone(),
        before: cut(&plan.src[*start..*end], MAX_MATCH_CHARS),
        after: cut(replacement, MAX_MATCH_CHARS),
        byte_start: *start as u64,
        byte_end: *end as u64,
        start_line: sl,
        start_column: sc,
        end_line: el,
        end_column: ec,
    }
}

/// What edit `k` can add to its file's diff, serialized: the old lines from three before it
/// to three after it, the new lines it makes, a prefix byte per line and a hunk header.
fn hunk_cost(plan: &Planned, k: usize) -> usize {
    let (start, end, replacement) = &plan.edits[k];
    let src = plan.src.as_bytes();
    let line_start = |mut at: usize, back: usize| {
        for i in 0..=back {
            match memchr::memrchr(b'\n', &src[..at]) {
                Some(nl) if i < back => at = nl,
                Some(nl) => return nl + 1,
                None => return 0,
            }
        }
        at
    };
    let line_end = |mut at: usize, ahead: usize| {
        for _ in 0..=ahead {
            match memchr::memchr(b'\n', &src[at.min(src.len())..]) {
                Some(nl) => at += nl + 1,
                None => return src.len(),
            }
        }
        at
    };
    let old = &plan.src[line_start(*start, 3)..line_end(*end, 3)];
    let (head, tail) = (
        &plan.src[line_start(*start, 0)..*start],
        &plan.src[*end..line_end(*end, 0)],
    );
    let lines = |s: &str| memchr::memchr_iter(b'\n', s.as_bytes()).count() + 1;
    json_len(old)
        + json_len(head)
        + json_len(replacement.as_str())
        + json_len(tail)
        + lines(old)
        + lines(head)
        + lines(replacement)
        + lines(tail)
        + 128
}

/// Write every rewritten file, all or nothing, once each is known to be writable.
fn write_rewrites(policy: &PathPolicy, writes: &mut [(PathBuf, Vec<u8>)]) -> ToolResult<()> {
    let denied: Vec<String> = writes
        .iter()
        .filter(|(p, _)| !policy.allows(p, Access::Write))
        .map(|(p, _)| policy.display(p))
        .collect();
    if !denied.is_empty() {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            format!(
                "applying needs rw access to every touched file; not writable: {}",
                denied.join(", ")
            ),
        )
        .with_detail(json!({ "field": "path", "needed": "rw", "files": denied })));
    }
    let failed = |e: std::io::Error| {
        ToolError::new(
            ErrorCode::IoError,
            format!("writing the rewritten files failed; no file was changed: {e}"),
        )
    };
    // Each file is replaced in its directory opened beneath the root without links:
    // a directory swapped for a link since the read fails the whole edit instead.
    let mut targets = Vec::with_capacity(writes.len());
    for (path, bytes) in writes.iter_mut() {
        let parent = policy
            .parent_real(path, Parents::MustExist)
            .map_err(failed)?;
        targets.push((parent, std::mem::take(bytes)));
    }
    let mut journal = kitbag_checkpoints::Recorder::begin(policy, "edit_ast");
    for ((path, _), (parent, _)) in writes.iter().zip(&targets) {
        journal.before(path, kitbag_checkpoints::Content::At(parent));
    }
    kitbag_shared::atomic::write_all_atomic_at(&targets).map_err(failed)?;
    for ((path, _), (_, bytes)) in writes.iter().zip(&targets) {
        journal.after(path, kitbag_checkpoints::Content::Bytes(bytes));
    }
    journal.finish();
    Ok(())
}

fn plan_file(
    path: &Path,
    policy: &PathPolicy,
    lang: SupportLang,
    patterns: &[(Pattern, String)],
    cancel: &tokio_util::sync::CancellationToken,
) -> Planned {
    let shown = policy.display(path);
    let empty = |error: Option<ParseError>| Planned {
        path: path.to_path_buf(),
        shown: shown.clone(),
        edits: Vec::new(),
        src: String::new(),
        error,
    };
    if cancel.is_cancelled() {
        return empty(None);
    }
    let src = match read_source(policy, path) {
        Ok(Some(s)) => s,
        Ok(None) => return empty(None),
        Err(e) => {
            return empty(Some(ParseError {
                path: shown.clone(),
                message: e.to_string(),
            }));
        }
    };
    let grep = match AstGrep::try_new(&src, lang) {
        Ok(g) => g,
        Err(message) => {
            return empty(Some(ParseError {
                path: shown.clone(),
                message,
            }));
        }
    };
    let root = grep.root();
    if root.get_inner_node().has_error() {
        // Rewriting code whose syntax tree is broken could damage it: skip and say so.
        return empty(Some(ParseError {
            path: shown.clone(),
            message: format!("syntax errors in the file as {lang}; not rewritten"),
        }));
    }
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for (pattern, template) in patterns {
        for e in root.replace_all(pattern, template.as_str()) {
            let start = e.position;
            let end = e.position + e.deleted_length;
            let replacement = String::from_utf8_lossy(&e.inserted_text).into_owned();
            // Keep edits of earlier rules when rules overlap.
            if edits.iter().all(|(s, t, _)| end <= *s || start >= *t) {
                edits.push((start, end, replacement));
            }
        }
    }
    edits.sort_by_key(|e| e.0);
    Planned {
        path: path.to_path_buf(),
        shown,
        edits,
        src,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracket_balance() {
        assert_eq!(unbalanced("foo($A)"), None);
        assert_eq!(
            unbalanced("f(\"(\")"),
            None,
            "brackets in strings don't count"
        );
        assert_eq!(
            unbalanced("fn $N<'a>($$$A) { $$$B }"),
            None,
            "lifetimes are not quotes"
        );
        assert!(unbalanced("foo(").is_some());
        assert!(unbalanced("foo)").is_some());
        assert!(unbalanced("[1, 2)").is_some());
    }

    #[test]
    fn line_columns_count_characters() {
        let src = "héllo\n  wörld";
        assert_eq!(line_col(src, 0), (1, 1));
        let w = src.find('w').expect("w");
        assert_eq!(line_col(src, w), (2, 3));
        let d = src.find('d').expect("d");
        assert_eq!(line_col(src, d), (2, 7));
    }
}
