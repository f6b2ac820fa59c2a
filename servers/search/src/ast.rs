//! `search_ast` and `edit_ast`: structural search and rewrite with ast-grep.

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
use kitbag_shared::limits::truncate_line;
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
/// Change records listed in an edit_ast answer (every change is still applied).
pub const MAX_CHANGES_LISTED: usize = 500;
pub const MAX_DIFF_BYTES: usize = 256 * 1024;

pub const SEARCH_DEF: ToolDef = ToolDef::read(
    "search_ast",
    "Structural code search",
    "Search code by syntax tree with an ast-grep pattern: code of `lang` where `$NAME` matches one \
     node and `$$$ARGS` any number (both captured; `$_` matches without capturing), e.g. \
     `console.log($MSG)`, `fn $NAME($$$ARGS) -> Result<$T>`.",
);

pub const EDIT_DEF: ToolDef = ToolDef::write(
    "edit_ast",
    "Structural rewrite",
    "Rewrite code structurally with ast-grep (patterns as in search_ast). DRY RUN BY DEFAULT: returns \
     the changes and a diff per file; set `dry_run: false` to write. Writes every touched file or \
     none (needs write access to each). Files that fail to parse are skipped (`parse_errors`)."
)
.destructive();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Must parse as code of `lang`.
    pub pattern: String,
    /// rust, python, typescript, tsx, javascript, go, java, c, cpp, ...; default: inferred from
    /// file extensions if they agree.
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
    /// Default 100, max 1000.
    #[serde(default)]
    pub limit: Option<i64>,
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
    pub start_line: u64,
    pub start_column: u64,
    pub end_line: u64,
    pub end_column: u64,
    /// The matched code (cut at 2000 characters); absent outside the readable mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Captured meta-variables: `$NAME` → text, `$$$ARGS` → list of texts (separators dropped).
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
    pub truncated: bool,
    pub files_searched: u64,
    /// The language used (given or inferred).
    pub lang: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parse_errors: Vec<ParseError>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// Pattern → template with its meta-variables, applied in order, e.g. {"$A.unwrap()": "$A?"}.
    pub rewrites: serde_json::Map<String, serde_json::Value>,
    /// Default: inferred from file extensions if they agree.
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
    pub hidden: Option<bool>,
    #[serde(default)]
    pub no_ignore: Option<bool>,
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
    pub count: u64,
    /// Unified diff of the file.
    pub diff: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EditResult {
    /// Every replacement (the first 500 listed; see `changes_truncated`).
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub changes_truncated: bool,
    pub file_changes: Vec<FileChange>,
    pub total_replacements: u64,
    pub files_touched: u64,
    pub files_searched: u64,
    /// True when the files were written.
    pub applied: bool,
    /// `max_replacements` or `max_files` stopped further changes.
    pub limit_reached: bool,
    pub parse_errors: Vec<ParseError>,
    pub lang: String,
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
    for var in env.get_matched_variables() {
        match var {
            MetaVariable::Capture(name, _) => {
                if let Some(node) = env.get_match(&name) {
                    out.insert(
                        name.clone(),
                        Captured::One(cut(&node.text(), MAX_MATCH_CHARS)),
                    );
                }
            }
            MetaVariable::MultiCapture(name) => {
                let items: Vec<String> = env
                    .get_multiple_matches(&name)
                    .iter()
                    .filter(|n| n.is_named())
                    .map(|n| cut(&n.text(), MAX_MATCH_CHARS))
                    .collect();
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
        Ok(search_reply(per_file, files.len() as u64, limit, lang))
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
                start_line: sl,
                start_column: sc,
                end_line: el,
                end_column: ec,
                text: (!outside).then(|| cut(&nm.text(), MAX_MATCH_CHARS)),
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
    limit: usize,
    lang: SupportLang,
) -> Reply<SearchResult> {
    let mut all = Vec::new();
    let mut parse_errors = Vec::new();
    for fm in per_file {
        all.extend(fm.matches);
        parse_errors.extend(fm.error);
    }
    let total = all.len() as u64;
    let truncated = all.len() > limit;
    all.truncate(limit);
    let mut text: String = all.iter().map(match_text).collect();
    if all.is_empty() {
        text = format!(
            "no matches ({files_searched} {} files searched)\n",
            lang.to_string().to_lowercase()
        );
    }
    if truncated {
        text.push_str(&format!(
            "[truncated: {} of {total} matches shown; raise limit or narrow paths/globs]\n",
            all.len()
        ));
    }
    for e in &parse_errors {
        text.push_str(&format!("[skipped {}: {}]\n", e.path, e.message));
    }
    text.pop();
    Reply::new(
        SearchResult {
            count: all.len() as u64,
            matches: all,
            total,
            truncated,
            files_searched,
            lang: lang.to_string().to_lowercase(),
            parse_errors,
        },
        text,
    )
}

/// One match in the text answer: context, `file:line:col: first line`, captured variables.
fn match_text(m: &AstMatch) -> String {
    let mut text = String::new();
    for c in &m.context_before {
        text.push_str(&format!("  {c}\n"));
    }
    match &m.text {
        Some(t) => text.push_str(&format!(
            "{}:{}:{}: {}\n",
            m.file,
            m.start_line,
            m.start_column,
            t.lines().next().unwrap_or("")
        )),
        None => text.push_str(&format!(
            "{}:{}:{}: [outside the readable mounts]\n",
            m.file, m.start_line, m.start_column
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
    policy: Arc<PathPolicy>,
    p: EditParams,
    ctx: CallCtx,
) -> ToolResult<Reply<EditResult>> {
    let rules = rewrite_rules(&p)?;
    let max_replacements =
        args::opt_at_least("max_replacements", p.max_replacements, 1)?.map(|n| n as u64);
    let max_files = args::opt_at_least("max_files", p.max_files, 1)?.map(|n| n as u64);
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
    kitbag_shared::blocking(move || {
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
        let mut chosen = choose(planned, max_files, max_replacements);
        // A single file the caller named that does not parse is an error, not an empty edit.
        if single_file && !chosen.parse_errors.is_empty() && chosen.writes.is_empty() {
            let e = &chosen.parse_errors[0];
            return Err(ToolError::new(
                ErrorCode::InvalidParams,
                format!("path: {} could not be parsed: {}", e.path, e.message),
            )
            .with_detail(json!({ "field": "path" })));
        }
        let applied = !dry_run && !chosen.writes.is_empty();
        if !dry_run {
            write_rewrites(&policy, &mut chosen.writes)?;
        }
        Ok(edit_reply(chosen, applied, dry_run, files_searched, lang))
    })
    .await
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
    changes: Vec<Change>,
    file_changes: Vec<FileChange>,
    /// The new content of each touched file.
    writes: Vec<(PathBuf, Vec<u8>)>,
    total: u64,
    limit_reached: bool,
}

/// Take the planned files in order until a limit stops it; the last file may be taken in part.
fn choose(planned: Vec<Planned>, max_files: Option<u64>, max_replacements: Option<u64>) -> Chosen {
    let mut chosen = Chosen {
        parse_errors: Vec::new(),
        changes: Vec::new(),
        file_changes: Vec::new(),
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
        if max_files.is_some_and(|m| chosen.file_changes.len() as u64 >= m) {
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
        let (out, change) = rewrite(&plan, take, &mut chosen.changes);
        chosen.total += take as u64;
        chosen.file_changes.push(change);
        chosen.writes.push((plan.path, out.into_bytes()));
        if chosen.limit_reached {
            break;
        }
    }
    chosen
}

/// The answer: the structured result and its text (see [`edit_text`]).
fn edit_reply(
    mut chosen: Chosen,
    applied: bool,
    dry_run: bool,
    files_searched: u64,
    lang: SupportLang,
) -> Reply<EditResult> {
    let text = edit_text(&mut chosen, applied, dry_run, files_searched, lang);
    let Chosen {
        parse_errors,
        changes,
        file_changes,
        writes,
        total,
        limit_reached,
    } = chosen;
    Reply::new(
        EditResult {
            changes_truncated: total as usize > changes.len(),
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
            lang: lang.to_string().to_lowercase(),
        },
        text,
    )
}

/// The text answer: a summary line, the diffs (those past the cap replaced by a note, in the
/// structured result too), skipped files and what to do next.
fn edit_text(
    chosen: &mut Chosen,
    applied: bool,
    dry_run: bool,
    files_searched: u64,
    lang: SupportLang,
) -> String {
    let mut text = format!(
        "{} {} replacement(s) in {} file(s) ({} {} files searched){}\n",
        if applied { "applied" } else { "dry run:" },
        chosen.total,
        chosen.file_changes.len(),
        files_searched,
        lang.to_string().to_lowercase(),
        if chosen.limit_reached {
            "; a limit stopped further changes"
        } else {
            ""
        }
    );
    let mut diff_bytes = 0;
    for fc in &mut chosen.file_changes {
        diff_bytes += fc.diff.len();
        if diff_bytes > MAX_DIFF_BYTES {
            fc.diff = "[diff omitted: answer cap reached]".into();
        }
        text.push_str(&fc.diff);
    }
    for e in &chosen.parse_errors {
        text.push_str(&format!("[skipped {}: {}]\n", e.path, e.message));
    }
    if !applied && !dry_run {
        text.push_str("nothing to apply\n");
    } else if dry_run && chosen.total > 0 {
        text.push_str("(dry run: nothing written; call again with dry_run: false to apply)\n");
    }
    text.pop();
    text
}

/// The first `take` edits of a planned file applied to its text: the new text and the file's
/// change (with its diff); each edit is also listed in `changes` while there is room.
fn rewrite(plan: &Planned, take: usize, changes: &mut Vec<Change>) -> (String, FileChange) {
    let mut out = String::with_capacity(plan.src.len());
    let mut at = 0;
    for (start, end, replacement) in &plan.edits[..take] {
        out.push_str(&plan.src[at..*start]);
        out.push_str(replacement);
        at = *end;
        if changes.len() < MAX_CHANGES_LISTED {
            let (sl, sc) = line_col(&plan.src, *start);
            let (el, ec) = line_col(&plan.src, *end);
            changes.push(Change {
                path: plan.shown.clone(),
                before: plan.src[*start..*end].to_string(),
                after: replacement.clone(),
                byte_start: *start as u64,
                byte_end: *end as u64,
                start_line: sl,
                start_column: sc,
                end_line: el,
                end_column: ec,
            });
        }
    }
    out.push_str(&plan.src[at..]);
    let diff = similar::TextDiff::from_lines(&plan.src, &out)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{}", plan.shown), &format!("b/{}", plan.shown))
        .to_string();
    let change = FileChange {
        path: plan.shown.clone(),
        count: take as u64,
        diff,
    };
    (out, change)
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
    kitbag_shared::atomic::write_all_atomic_at(&targets).map_err(failed)
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
