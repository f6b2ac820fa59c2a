//! Argument validation, in two steps that both run before any language server is spawned:
//!
//! 1. [`validate`]: the arguments on their own — which fields each action needs, identifiers,
//!    refused methods;
//! 2. [`preflight`]: the arguments against the file on disk — the path exists and is a file
//!    (or, for diagnostics, a directory), a server is configured for it, and the position
//!    ([`position`]) lies inside the file.

use kitbag_shared::{PathPolicy, ToolError, ToolResult};

use super::open::{is_dir, language_for, open_path};
use super::params::{Action, LspParams, Scope};
use kitbag_lsp_client::pool::Pool;
use kitbag_lsp_client::text::{Lines, find_word, preview_of};

/// The most entries one page of a list may ask for.
pub const MAX_LIMIT: u64 = 10_000;

/// The value of an optional parameter an action requires, or `invalid_params` naming it.
pub fn need<'a, T>(v: &'a Option<T>, field: &str, what: &str) -> ToolResult<&'a T> {
    v.as_ref()
        .ok_or_else(|| ToolError::invalid_field(field, what))
}

/// Check what can be checked without a language server, so bad input never spawns one.
pub fn validate(p: &LspParams) -> ToolResult<()> {
    if let Some(limit) = p.limit
        && !(1..=MAX_LIMIT).contains(&limit)
    {
        return Err(ToolError::invalid_field(
            "limit",
            format!("{limit} is out of range; 1–{MAX_LIMIT} is accepted"),
        ));
    }
    required_path(p)?;
    required_position(p)?;
    match p.action {
        Action::RenameFile => {
            need(
                &p.new_path,
                "new_path",
                "required for action `rename_file`: where the file goes",
            )?;
        }
        Action::Rename => new_name(p)?,
        Action::Symbols => workspace_query(p)?,
        Action::Request => request_method(p)?,
        _ => {}
    }
    Ok(())
}

/// Every action but status, workspace symbols and the by-language ones needs `path`.
fn required_path(p: &LspParams) -> ToolResult<()> {
    let needs_path = match p.action {
        Action::Status => false,
        Action::Reload | Action::Capabilities | Action::Request => p.language.is_none(),
        Action::Symbols => p.scope != Some(Scope::Workspace),
        _ => true,
    };
    if needs_path && p.path.is_none() {
        return Err(ToolError::invalid_field(
            "path",
            format!("required for action `{}`", p.action.as_str()),
        ));
    }
    Ok(())
}

/// Position actions need `line` or `symbol`; code_actions needs at least the line.
fn required_position(p: &LspParams) -> ToolResult<()> {
    if p.line.is_some() || p.symbol.is_some() {
        return Ok(());
    }
    if p.action.needs_position() {
        return Err(ToolError::invalid_field(
            "line",
            format!(
                "required for action `{}`: the 1-based line (or give `symbol`)",
                p.action.as_str()
            ),
        ));
    }
    if p.action == Action::CodeActions {
        return Err(ToolError::invalid_field(
            "line",
            "required for action `code_actions`: the 1-based line",
        ));
    }
    Ok(())
}

/// rename: `new_name` is given and is an identifier.
fn new_name(p: &LspParams) -> ToolResult<()> {
    let name = need(&p.new_name, "new_name", "required for action `rename`")?;
    if !kitbag_lsp_client::text::is_identifier(name) {
        return Err(ToolError::invalid_field(
            "new_name",
            format!(
                "`{name}` is not an identifier (letters, digits and `_`, not starting with a digit)"
            ),
        ));
    }
    Ok(())
}

/// Workspace symbols search by a non-empty `query`.
fn workspace_query(p: &LspParams) -> ToolResult<()> {
    if p.scope == Some(Scope::Workspace) && p.query.as_deref().is_none_or(str::is_empty) {
        return Err(ToolError::invalid_field(
            "query",
            "required for workspace symbols: the name to search",
        ));
    }
    Ok(())
}

/// request: a `method`, and not one of the lifecycle methods the pool owns.
fn request_method(p: &LspParams) -> ToolResult<()> {
    let m = need(
        &p.method,
        "method",
        "required for action `request`, e.g. `textDocument/foldingRange`",
    )?;
    if m.is_empty()
        || m.starts_with("$/")
        || matches!(m.as_str(), "initialize" | "shutdown" | "exit")
    {
        return Err(ToolError::invalid_field(
            "method",
            format!(
                "`{m}` cannot be sent through `request`: the pool manages the server's lifecycle"
            ),
        ));
    }
    Ok(())
}

/// Check the path, its language and the position against the file on disk, so that
/// bad input never spawns (or waits for) a language server.
pub fn preflight(pool: &Pool, policy: &PathPolicy, p: &LspParams) -> ToolResult<()> {
    let Some(path) = &p.path else { return Ok(()) };
    let (r, file) = open_path(policy, path)?;
    if is_dir(&r, &file)? {
        if p.action == Action::Diagnostics {
            return Ok(());
        }
        return Err(ToolError::invalid_field(
            "path",
            format!(
                "`{}` is a directory; action `{}` needs a file",
                r.rel,
                p.action.as_str()
            ),
        ));
    }
    if p.language.is_none() {
        language_for(pool, &r.abs, &r.rel)?;
    }
    if p.action.needs_position() || p.action == Action::CodeActions {
        let bytes =
            kitbag_lsp_client::pool::read_all(file).map_err(|e| ToolError::io(&r.rel, &e))?;
        let lines = Lines::new(String::from_utf8_lossy(&bytes).into_owned());
        position(&lines, p, p.action)?;
    }
    Ok(())
}

/// The (0-based line, character) a position action is about.
pub fn position(lines: &Lines, p: &LspParams, action: Action) -> ToolResult<(usize, usize)> {
    let line0 = line_index(lines, p.line)?;
    if let Some(sym) = &p.symbol {
        return symbol_position(lines, line0, sym);
    }
    let Some(l) = line0 else {
        return Err(ToolError::invalid_field(
            "line",
            format!(
                "required for action `{}`: the 1-based line (or give `symbol` alone to use its first occurrence)",
                action.as_str()
            ),
        ));
    };
    let width = lines.line(l).unwrap_or("").chars().count();
    match p.character {
        None if action == Action::CodeActions => Ok((l, 0)),
        None => Err(ToolError::invalid_field(
            "character",
            "give `character` (0-based, in characters) or `symbol` (a name on the line)",
        )),
        Some(c) if c as usize > width => Err(ToolError::invalid_field(
            "character",
            format!(
                "character {c} is past the end of line {} ({width} characters)",
                l + 1
            ),
        )),
        Some(c) => Ok((l, c as usize)),
    }
}

/// The 0-based index of a 1-based `line`, checked against the file's length.
fn line_index(lines: &Lines, line: Option<u64>) -> ToolResult<Option<usize>> {
    let total = lines.visible_len();
    match line {
        Some(0) => Err(ToolError::invalid_field(
            "line",
            "lines are 1-based; the first line is 1",
        )),
        Some(l) if l as usize > total => Err(ToolError::invalid_field(
            "line",
            format!("line {l} is past the end of the file ({total} lines)"),
        )),
        Some(l) => Ok(Some(l as usize - 1)),
        None => Ok(None),
    }
}

/// Where `symbol` is: on the given line, or its first occurrence in the file.
fn symbol_position(lines: &Lines, line0: Option<usize>, sym: &str) -> ToolResult<(usize, usize)> {
    if sym.is_empty() {
        return Err(ToolError::invalid_field("symbol", "must not be empty"));
    }
    match line0 {
        Some(l) => {
            let text = lines.line(l).unwrap_or("");
            find_word(text, sym).map(|c| (l, c)).ok_or_else(|| {
                ToolError::invalid_field(
                    "symbol",
                    format!(
                        "`{sym}` does not occur on line {}: {}",
                        l + 1,
                        preview_of(text)
                    ),
                )
            })
        }
        None => (0..lines.len())
            .find_map(|l| find_word(lines.line(l).unwrap_or(""), sym).map(|c| (l, c)))
            .ok_or_else(|| {
                ToolError::invalid_field("symbol", format!("`{sym}` does not occur in the file"))
            }),
    }
}
