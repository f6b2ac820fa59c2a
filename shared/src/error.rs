//! The one error type every kitbag tool returns.
//!
//! A tool failure is not a protocol fault: it becomes a `CallToolResult` with
//! `isError: true`, `structuredContent = {"error": {code, message, detail}}` and the
//! message as text, so a model can read it and recover.

use rmcp::model::{CallToolResult, ContentBlock as Content};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every error code any kitbag tool can answer with (the seed's `ToolErrorCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    // generic
    InvalidParams,
    Internal,
    Timeout,
    Cancelled,
    CapabilityDenied,
    PrincipalScopeViolation,
    FileBusy,
    OutputTooLarge,
    /// The tool asks the operator (MCP elicitation) and the client cannot answer.
    ElicitationUnsupported,
    /// A 2026-07-28 call waits for the client's `inputResponses` (never a final answer: the
    /// call answers `input_required` instead).
    InputRequired,
    /// The client's answer to an elicitation does not fit the form it was asked with.
    InvalidAnswer,
    // workflows
    WorkflowNotFound,
    RunNotFound,
    /// A workflow's file input cannot travel in a tool call.
    FileInputNotSupported,
    // checkpoints
    CheckpointNotFound,
    /// A file a restore would rewind holds what kitbag did not write: nothing is restored.
    ChangedOutsideSession,
    /// A file's earlier content was not kept (too large, not recorded, altered).
    NotRestorable,
    // files
    FileNotFound,
    FileExists,
    FileNotRead,
    FileChangedSinceRead,
    NotAFile,
    NotADirectory,
    DirectoryNotEmpty,
    BinaryFile,
    EncodingUnsupported,
    OldStringNotFound,
    MultipleMatches,
    // A hunk of `edit_patch` matched nowhere (its detail names the closest place).
    HunkNotFound,
    NoChange,
    EncodingMismatch,
    IoError,
    // search
    InvalidPattern,
    // shell
    ShellSpawnFailed,
    JobNotFound,
    JobNotRunning,
    /// As many jobs run as may at once (kitbag's subagent jobs).
    JobLimit,
    // web
    FetchFailed,
    UrlBlocked,
    /// A page needs a browser to render it and none could be started; the message says how
    /// to install one.
    RendererUnavailable,
    // memory
    SecretDetected,
    MemoryFull,
    NotFound,
    // issues and todos
    IssueNotFound,
    InvalidTransition,
    NoBoundIssue,
    TodoNotFound,
    ContentAddressingHint,
    SessionNotFound,
    InvalidAssignment,
    // lsp
    LspServerNotFound,
    LspServerUnavailable,
    /// The language server is still loading the project: an answer now would cover only part
    /// of it. `detail.retry_after_secs` says when to ask again.
    ServerNotReady,
    RenameScopeExceedsCage,
    RenameNotPossible,
    UnsupportedLanguage,
    // dap
    DapAdapterNotFound,
    RuntimeNotFound,
    /// The runtime is there but too old for what was asked (Node before 22.6 for a `.ts`
    /// script): `detail` names `version_found` and `version_needed`.
    RuntimeTooOld,
    DapSessionEnded,
    SessionActive,
    UnsupportedByAdapter,
    /// The adapter refused a request (bad frame, bad expression, unsupported request); the
    /// session is still usable.
    AdapterError,
    /// The program is running: nothing to inspect until it stops.
    NotStopped,
    // host
    ServerUnavailable,
    UnknownTool,
    // vm
    InstanceNotFound,
    InstanceExists,
    InstanceNotRunning,
    InstanceLimit,
    BackendUnavailable,
    SpawnFailed,
    PortInUse,
    PortNotExposed,
    LeaseNotFound,
    Unsupported,
    ConfigInvalid,
    // delegate
    /// The coding CLI a delegation names is not installed where it would run; the message
    /// says how to install it.
    CliNotFound,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = serde_json::to_value(self).unwrap_or(Value::Null);
        match v {
            Value::String(s) => f.write_str(&s),
            _ => f.write_str("internal"),
        }
    }
}

/// A typed tool failure: a code, a sentence for the model, and machine-readable detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

pub type ToolResult<T> = Result<T, ToolError>;

/// The longest error message kept; a bad value quoted in a message is cut to fit (a 50 MB
/// argument once came back as a 105 MB error).
pub const MAX_MESSAGE_BYTES: usize = 2048;
/// The longest string kept in an error's `detail`.
pub const MAX_DETAIL_STRING_BYTES: usize = 1024;

/// `s` cut to at most `max` bytes (on a character boundary), saying how much was cut.
fn bounded(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let (head, _) = crate::limits::truncate_str(&s, max);
    format!("{head}… ({} more bytes)", s.len() - head.len())
}

fn bound_strings(v: &mut Value) {
    match v {
        Value::String(s) if s.len() > MAX_DETAIL_STRING_BYTES => {
            *s = bounded(std::mem::take(s), MAX_DETAIL_STRING_BYTES);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_strings),
        Value::Object(map) => map.values_mut().for_each(bound_strings),
        _ => {}
    }
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: bounded(message.into(), MAX_MESSAGE_BYTES),
            detail: Value::Null,
        }
    }

    /// Attach structured detail (merged when detail is already an object).
    pub fn with_detail(mut self, mut detail: Value) -> Self {
        bound_strings(&mut detail);
        match (&mut self.detail, detail) {
            (Value::Object(existing), Value::Object(extra)) => existing.extend(extra),
            (slot, extra) => *slot = extra,
        }
        self
    }

    /// A bad argument: names the field and says what is accepted.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(ErrorCode::InvalidParams, format!("{field}: {message}"))
            .with_detail(json!({ "field": field }))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// An I/O failure on a path, mapped to the closest typed code.
    pub fn io(path: &str, err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let code = match err.kind() {
            K::NotFound => ErrorCode::FileNotFound,
            K::AlreadyExists => ErrorCode::FileExists,
            K::PermissionDenied => ErrorCode::CapabilityDenied,
            K::IsADirectory => ErrorCode::NotAFile,
            K::NotADirectory => ErrorCode::NotADirectory,
            K::DirectoryNotEmpty => ErrorCode::DirectoryNotEmpty,
            _ => ErrorCode::IoError,
        };
        let message = match code {
            ErrorCode::FileNotFound => format!("{path}: no such file or directory"),
            ErrorCode::CapabilityDenied => {
                format!("{path}: permission denied by the operating system")
            }
            _ => format!("{path}: {err}"),
        };
        Self::new(code, message).with_detail(json!({ "path": path }))
    }

    /// The JSON object placed in `structuredContent`.
    pub fn to_structured(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if !self.detail.is_null() {
            error["detail"] = self.detail.clone();
        }
        json!({ "error": error })
    }

    /// Render as an MCP tool result with `isError: true`.
    pub fn into_call_result(self) -> CallToolResult {
        let mut result = CallToolResult::error(vec![Content::text(format!(
            "error [{}]: {}",
            self.code, self.message
        ))]);
        result.structured_content = Some(self.to_structured());
        result
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_values_are_not_echoed_back() {
        let big = "x".repeat(50 << 20);
        let e = ToolError::invalid_field("pattern", format!("bad pattern {big}"))
            .with_detail(json!({"pattern": big, "list": [big.clone()]}));
        assert!(
            e.message.len() < MAX_MESSAGE_BYTES + 64,
            "{}",
            e.message.len()
        );
        assert!(e.message.ends_with("more bytes)"));
        assert!(e.to_structured().to_string().len() < 8 * 1024);
    }

    #[test]
    fn codes_render_snake_case() {
        assert_eq!(ErrorCode::FileNotFound.to_string(), "file_not_found");
        assert_eq!(
            ErrorCode::OldStringNotFound.to_string(),
            "old_string_not_found"
        );
    }

    #[test]
    fn error_result_shape() {
        let r = ToolError::invalid_field("offset", "must be at least 1").into_call_result();
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.expect("structured");
        assert_eq!(s["error"]["code"], "invalid_params");
        assert_eq!(s["error"]["detail"]["field"], "offset");
        assert!(
            s["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("offset:"))
        );
    }
}
