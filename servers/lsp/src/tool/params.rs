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
    /// File (diagnostics: or directory).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
    #[serde(default)]
    pub character: Option<u64>,
    /// Instead of `character`: a name on `line` (or first in the file).
    #[serde(default)]
    pub symbol: Option<String>,
    /// diagnostics: this and worse (default all).
    #[serde(default)]
    pub severity: Option<Severity>,
    #[serde(default)]
    pub include_declaration: Option<bool>,
    /// symbols: document (`path`'s outline, default) or workspace.
    #[serde(default)]
    pub scope: Option<Scope>,
    /// symbols: name filter (required for workspace).
    #[serde(default)]
    pub query: Option<String>,
    /// Page size (default 100; symbols 50).
    #[serde(default)]
    pub limit: Option<u64>,
    /// A result's `next_offset` (request: bytes of `result_text`).
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub new_name: Option<String>,
    /// rename_file: must not exist.
    #[serde(default)]
    pub new_path: Option<String>,
    /// code_actions: with that line's diagnostics (default true).
    #[serde(default)]
    pub include_diagnostics: Option<bool>,
    /// reload/capabilities/request without `path`.
    #[serde(default)]
    pub language: Option<String>,
    /// request: e.g. `textDocument/foldingRange`.
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Value>,
    /// diagnostics: ms to await analysis (default 20000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// rename*: report new/fixed diagnostics.
    #[serde(default)]
    pub check: Option<bool>,
}

impl LspParams {
    /// rename, rename_file: how long each side of the edit's check waits (`wait_ms`, else
    /// the check's default); None when the call said `check: false`.
    pub fn check_wait(&self) -> Option<Duration> {
        (self.check != Some(false)).then(|| {
            self.wait_ms
                .map_or(kitbag_lsp_client::check::DEFAULT_WAIT, |ms| {
                    Duration::from_millis(ms.min(120_000))
                })
        })
    }

    /// diagnostics: how long to wait for the server to finish analysing.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.unwrap_or(20_000).min(120_000))
    }
}
