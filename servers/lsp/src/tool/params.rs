//! The `code_lsp` parameters: one flat object, `action` plus the fields each action reads.
//! Only the types live here; what a valid combination is, is `validate`'s.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Diagnostics,
    Definition,
    TypeDefinition,
    Implementation,
    References,
    Hover,
    Symbols,
    Rename,
    RenameFile,
    CodeActions,
    Capabilities,
    Status,
    Reload,
    Request,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Diagnostics => "diagnostics",
            Action::Definition => "definition",
            Action::TypeDefinition => "type_definition",
            Action::Implementation => "implementation",
            Action::References => "references",
            Action::Hover => "hover",
            Action::Symbols => "symbols",
            Action::Rename => "rename",
            Action::RenameFile => "rename_file",
            Action::CodeActions => "code_actions",
            Action::Capabilities => "capabilities",
            Action::Status => "status",
            Action::Reload => "reload",
            Action::Request => "request",
        }
    }

    /// Actions about one position in a file (`line` + `character` or `symbol`).
    pub fn needs_position(self) -> bool {
        matches!(
            self,
            Action::Definition
                | Action::TypeDefinition
                | Action::Implementation
                | Action::References
                | Action::Hover
                | Action::Rename
        )
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
    Information,
    Hint,
    All,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "information",
            Severity::Hint => "hint",
            Severity::All => "all",
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Document,
    Workspace,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspParams {
    pub action: Action,
    /// File (or, for diagnostics, directory), root-relative. Required except for status,
    /// reload with `language`, and workspace symbols.
    #[serde(default)]
    pub path: Option<String>,
    /// 1-based line.
    #[serde(default)]
    pub line: Option<u64>,
    /// 0-based column, in characters (Unicode scalar values).
    #[serde(default)]
    pub character: Option<u64>,
    /// Instead of `character`: a name on `line` (or the first occurrence in the file).
    #[serde(default)]
    pub symbol: Option<String>,
    /// diagnostics: keep this severity and worse (default all).
    #[serde(default)]
    pub severity: Option<Severity>,
    /// references: include the declaration itself (default false).
    #[serde(default)]
    pub include_declaration: Option<bool>,
    /// symbols: document (outline of `path`, default) or workspace (search by `query`).
    #[serde(default)]
    pub scope: Option<Scope>,
    /// symbols: name to search (required for workspace scope; filters the outline otherwise).
    #[serde(default)]
    pub query: Option<String>,
    /// references/symbols/diagnostics: most results to return (default 100, 50 for symbols).
    #[serde(default)]
    pub limit: Option<u64>,
    /// references/symbols/diagnostics: results to skip, for paging.
    #[serde(default)]
    pub offset: Option<u64>,
    /// rename: the new name (an identifier).
    #[serde(default)]
    pub new_name: Option<String>,
    /// rename_file: where the file goes (root-relative; must not exist).
    #[serde(default)]
    pub new_path: Option<String>,
    /// code_actions: send the diagnostics on that line with the request (default true).
    #[serde(default)]
    pub include_diagnostics: Option<bool>,
    /// reload/capabilities/request: the language (rust, python, typescript, go, c, ...)
    /// when no path is given.
    #[serde(default)]
    pub language: Option<String>,
    /// request: the LSP method, e.g. `textDocument/foldingRange`.
    #[serde(default)]
    pub method: Option<String>,
    /// request: the LSP params object.
    #[serde(default)]
    pub params: Option<Value>,
    /// diagnostics: longest wait for the server to finish analysing, in ms (default
    /// 20000, max 120000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl LspParams {
    /// diagnostics: how long to wait for the server to finish analysing.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.unwrap_or(20_000).min(120_000))
    }
}
