//! The `code_lsp` tool's result: one flat, typed object. Each action fills the fields it
//! has (the README's table says which); the rest are left out. Positions are the caller's:
//! root-relative paths, 1-based lines, 0-based character columns.
//!
//! Two fields carry a language server's own JSON as it sent it: `capabilities` (its
//! `ServerCapabilities`) and `result` (a raw `request`'s answer). Everything else is ours.
//!
//! A few fields are `Option<Option<T>>`: the outer option says whether the field is there
//! at all, the inner one whether it has a value — `hover` answers `"content": null` when
//! there is nothing at the position, and a code action the server gave no kind has
//! `"kind": null`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool::{Action, LspParams};
use kitbag_lsp_client::pool::ServerStatus;

#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct LspResult {
    /// The action, as called (snake_case).
    pub action: String,

    /// status: one entry per configured language.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<ServerStatus>>,

    /// reload, capabilities: the language.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// reload: the new server's process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// reload: `running`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,

    /// capabilities: the command the server runs as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// capabilities: the server's name and version, null when it gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Option<ServerInfo>>,
    /// capabilities: how the server counts characters (utf-8, utf-16 or utf-32); the tool
    /// converts, so callers always count characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position_encoding: Option<String>,
    /// capabilities: which actions this server supports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supports: Option<Supports>,
    /// capabilities: the server's raw `ServerCapabilities` object, as it sent it in its
    /// `initialize` answer (the LSP specification defines its shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Map<String, Value>>,

    /// request: the LSP method sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// request: the server's raw answer, any JSON the method returns (absent when it was
    /// paged: see `result_text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// request: the answer as JSON text, a page from `offset` (bytes), when it is longer than
    /// the result budget (`truncated`, `next_offset`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_text: Option<String>,

    /// diagnostics: the file or directory checked, root-relative.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// diagnostics: how many files were asked about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_checked: Option<usize>,
    /// diagnostics: whether the servers went quiet before the answer (false: `wait_ms` ran
    /// out and results may be incomplete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<bool>,
    /// diagnostics: how long the servers were waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// diagnostics: only the first 200 files of the directory were checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_truncated: Option<bool>,
    /// diagnostics: why the results may be incomplete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,

    /// definition: where the symbol is defined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definitions: Option<Vec<Location>>,
    /// type_definition: where its type is defined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_definitions: Option<Vec<Location>>,
    /// implementation: its implementations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implementations: Option<Vec<Location>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub references: Option<Vec<Location>>,

    /// hover: whether the server had anything to show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
    /// hover: the text (markdown, capped at 4000 characters); null when nothing was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Option<String>>,
    /// hover: the prose of the text (its doc comment) without the code blocks that state the
    /// signature; null when the server gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub documentation: Option<Option<String>>,
    /// hover: the span the text is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<Range>,

    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbols: Option<Vec<Symbol>>,

    /// code_actions: what the server offers (nothing is applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<CodeAction>>,

    /// rename_file: the old path, root-relative.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// rename_file: the new path, root-relative.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// rename, rename_file: the files written and how many edits each got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<FileChange>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_edits: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_changed: Option<usize>,
    /// rename_file: whether the server updated references (false when it does not take
    /// part in file renames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub references_updated: Option<bool>,
    /// rename, rename_file: the diagnostics the change introduced and fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit_diagnostics: Option<kitbag_lsp_client::check::EditDiagnostics>,

    /// Lists: how many entries there are in all (before paging).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Lists: the same as `count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<usize>,
    /// Lists: false when `total` is a lower bound (diagnostics of part of a directory, or
    /// not settled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_exact: Option<bool>,
    /// A list was cut (page on with `next_offset`; rename's `changes` only name the first
    /// files), a hover text was capped, or a raw answer was paged (see `result_text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// Lists, `result_text`: the `offset` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

impl LspResult {
    pub fn new(action: Action) -> LspResult {
        LspResult {
            action: action.as_str().to_string(),
            ..LspResult::default()
        }
    }
}

/// The `serverInfo` a server gave in its `initialize` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ServerInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Which requests a server answers, from its capabilities.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Supports {
    /// It answers `textDocument/diagnostic` (else diagnostics are the ones it pushes).
    pub diagnostics_pull: bool,
    pub definition: bool,
    pub type_definition: bool,
    pub implementation: bool,
    pub references: bool,
    pub hover: bool,
    pub document_symbols: bool,
    pub workspace_symbols: bool,
    pub rename: bool,
    /// It checks a position before a rename (`textDocument/prepareRename`).
    pub prepare_rename: bool,
    pub code_actions: bool,
}

impl Supports {
    /// The names of what is supported, in field order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("diagnostics_pull", self.diagnostics_pull),
            ("definition", self.definition),
            ("type_definition", self.type_definition),
            ("implementation", self.implementation),
            ("references", self.references),
            ("hover", self.hover),
            ("document_symbols", self.document_symbols),
            ("workspace_symbols", self.workspace_symbols),
            ("rename", self.rename),
            ("prepare_rename", self.prepare_rename),
            ("code_actions", self.code_actions),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}

pub use kitbag_lsp_client::diagnostics::Diagnostic;

/// A place in a file: a definition, a reference. Outside the caller's readable mounts only
/// `path`, `line` and `outside_cage` are given.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Location {
    /// Root-relative (absolute outside the root).
    pub path: String,
    pub line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub character: Option<usize>,
    /// The line's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_cage: Option<bool>,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub character: usize,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Symbol {
    pub name: String,
    /// function, class, method, variable, struct, ... (`unknown` for a kind LSP does not name).
    pub kind: String,
    pub path: String,
    pub line: usize,
    /// The enclosing symbols, dotted (`Outer.Inner`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Absent outside the caller's readable mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub character: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_cage: Option<bool>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeAction {
    pub title: String,
    /// quickfix, refactor.extract, ... — null when the server gave none, absent for a bare
    /// command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<Option<String>>,
    /// The server marks it as the fix to take (absent for a bare command).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred: Option<bool>,
    /// The text edits it would make.
    pub edits: Vec<Edit>,
    /// The command it would run, when it runs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Present when this action alone passed the result budget: how many edits it has; the
    /// edits that fit are given, the last of them with texts cut (ending `… [cut]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edits_total: Option<usize>,
}

/// One text replacement, in caller coordinates.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Edit {
    pub path: String,
    pub line: usize,
    pub character: usize,
    pub end_line: usize,
    pub end_character: usize,
    /// The text replaced.
    pub old: String,
    /// The text put in its place.
    pub new: String,
}

/// A file a rename wrote.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileChange {
    pub path: String,
    pub edits: usize,
}

/// One page of a result list (`limit`/`offset`), and how it relates to the whole.
pub struct Page {
    offset: usize,
    limit: usize,
    pub total: usize,
    /// False when the list may lack entries that were never gathered.
    pub exact: bool,
}

/// Cut `all` to the page the caller asked for.
pub fn page<T>(all: Vec<T>, p: &LspParams, default_limit: u64) -> (Vec<T>, Page) {
    // `validate` refused a `limit` outside 1..=10,000; the clamp only guards the default.
    let limit = p.limit.unwrap_or(default_limit).clamp(1, 10_000) as usize;
    let offset = p.offset.unwrap_or(0) as usize;
    let total = all.len();
    let shown = all.into_iter().skip(offset).take(limit).collect();
    (
        shown,
        Page {
            offset,
            limit,
            total,
            exact: true,
        },
    )
}

/// Room kept under the budget for a list's field name and `count`/`truncated`/`next_offset`
/// (set after the list is cut).
const PAGING_ROOM: usize = 160;

/// The longest prefix of `items` that keeps `r` (serialized with the list added) under
/// [`RESULT_BUDGET_BYTES`](kitbag_shared::limits::RESULT_BUDGET_BYTES) — at least one entry, so paging always moves on. Returns the kept
/// entries and whether any were left out.
pub fn within_budget<T: serde::Serialize>(r: &LspResult, items: Vec<T>) -> (Vec<T>, bool) {
    kitbag_shared::limits::within_budget(kitbag_shared::limits::json_len(r) + PAGING_ROOM, items)
}

impl Page {
    /// Hold `shown` to the result budget beside `r` (the result without the list): a page
    /// cut short ends at the last entry kept, so `next_offset` continues right after it.
    pub fn fit<T: Serialize>(&mut self, r: &LspResult, shown: Vec<T>) -> Vec<T> {
        let (kept, cut) = within_budget(r, shown);
        if cut {
            self.limit = kept.len();
        }
        kept
    }

    /// `count`/`total`/`total_exact`, `truncated` (also when the list itself is partial),
    /// and when more follows: `next_offset` and a line saying how to go on.
    pub fn mark(&self, r: &mut LspResult, text: &mut Vec<String>) {
        r.count = Some(self.total);
        r.total = Some(self.total);
        r.total_exact = Some(self.exact);
        let next = self.offset.saturating_add(self.limit);
        r.truncated = Some(next < self.total || !self.exact);
        if next < self.total {
            r.next_offset = Some(next);
            text.push(format!(
                "… {} more; call again with offset {next}",
                self.total - next
            ));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn present_but_null_fields_and_left_out_ones() {
        let nothing = LspResult {
            found: Some(false),
            content: Some(None),
            documentation: Some(None),
            ..LspResult::new(Action::Hover)
        };
        assert_eq!(
            serde_json::to_value(&nothing).unwrap(),
            json!({"action": "hover", "found": false, "content": null, "documentation": null})
        );
        let bare = CodeAction {
            title: "Organize imports".into(),
            kind: None,
            preferred: None,
            edits: Vec::new(),
            command: Some("_typescript.organizeImports".into()),
            edits_total: None,
        };
        let kindless = CodeAction {
            kind: Some(None),
            preferred: Some(false),
            command: None,
            ..bare.clone()
        };
        assert_eq!(
            serde_json::to_value(&bare).unwrap(),
            json!({"title": "Organize imports", "edits": [], "command": "_typescript.organizeImports"})
        );
        assert_eq!(
            serde_json::to_value(&kindless).unwrap(),
            json!({"title": "Organize imports", "kind": null, "preferred": false, "edits": []})
        );
    }

    #[test]
    fn schema_is_closed_but_for_the_raw_server_answers() {
        let schema = Value::Object(kitbag_shared::schema::output_schema_for::<LspResult>(
            "code_lsp",
        ));
        let props = schema["properties"].as_object().unwrap();
        // Every field of every action is described; only the server's own JSON is open.
        for key in [
            "servers",
            "supports",
            "diagnostics",
            "definitions",
            "range",
            "actions",
        ] {
            assert!(props.contains_key(key), "{key}");
        }
        assert_eq!(
            props["capabilities"]["anyOf"][0]["additionalProperties"],
            true
        );
        let text = schema.to_string();
        assert!(!text.contains("\"format\""), "{text}");
        assert!(!text.contains("$schema"), "{text}");
        assert_eq!(
            text.matches("\"additionalProperties\":true").count(),
            1,
            "{text}"
        );
    }
}
