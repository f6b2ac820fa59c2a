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
    /// Root-relative file (diagnostics: or directory). Required except for status, workspace
    /// symbols, or with `language`.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
    #[serde(default)]
    pub character: Option<u64>,
    /// Instead of `character`: a name on `line` (no `line`: first in the file).
    #[serde(default)]
    pub symbol: Option<String>,
    /// diagnostics: this severity and worse (default all).
    #[serde(default)]
    pub severity: Option<Severity>,
    /// references (default false).
    #[serde(default)]
    pub include_declaration: Option<bool>,
    /// symbols: document (`path`'s outline, default) or workspace (by `query`).
    #[serde(default)]
    pub scope: Option<Scope>,
    /// symbols: name filter (required for workspace).
    #[serde(default)]
    pub query: Option<String>,
    /// Lists: page size (references/diagnostics 100, symbols 50, else all).
    #[serde(default)]
    pub limit: Option<u64>,
    /// Lists: skip this many; request: bytes of `result_text` (a result's `next_offset`).
    #[serde(default)]
    pub offset: Option<u64>,
    /// rename: an identifier.
    #[serde(default)]
    pub new_name: Option<String>,
    /// rename_file: root-relative; must not exist.
    #[serde(default)]
    pub new_path: Option<String>,
    /// code_actions: send that line's diagnostics (default true).
    #[serde(default)]
    pub include_diagnostics: Option<bool>,
    /// reload/capabilities/request without `path`: a language name.
    #[serde(default)]
    pub language: Option<String>,
    /// request: e.g. `textDocument/foldingRange`.
    #[serde(default)]
    pub method: Option<String>,
    /// request: its params.
    #[serde(default)]
    pub params: Option<Value>,
    /// diagnostics: ms to wait for analysis (default 20000, max 120000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

impl LspParams {
    /// diagnostics: how long to wait for the server to finish analysing.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.unwrap_or(20_000).min(120_000))
    }
}
