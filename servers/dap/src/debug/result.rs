//! The `debug` tool's result: one flat, typed object shaped like seed 004's examples. Each
//! action fills the fields it has; the rest are left out.

use schemars::JsonSchema;
use serde::Serialize;

use super::params::Action;

#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct DebugResult {
    /// The action, as called (snake_case).
    pub action: String,
    /// stopped, running, exited, no_session or ok.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug_session_id: Option<String>,
    /// Why the program stopped: entry, breakpoint, step, exception, pause, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_reason: Option<String>,
    /// The breakpoint that was hit (its `breakpoint_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakpoint_id: Option<i64>,
    /// The thread that stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<i64>,
    /// Where the program stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// The exception or stop description, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<Vec<Thread>>,
    /// set_breakpoint and friends: the breakpoint's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_line: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The adapter's reason for an unverified breakpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakpoints: Option<Vec<BreakpointEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<Vec<Frame>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_frames: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<Scope>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<Vec<Variable>>,
    /// variables, threads, modules, loaded_sources: how many in all (before paging).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// A list was cut to fit: the `offset` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// variables with depth > 1: whether nested values stopped at the overall bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_truncated: Option<bool>,
    /// evaluate: the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// evaluate: its type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub value_type: Option<String>,
    /// evaluate: expand it with variables `expand`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables_reference: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<OutputChunk>>,
    /// output: pass as `offset` to read on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debuggee_terminated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_breakpoint: Option<DataBreakpointInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Vec<Instruction>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// write_memory: bytes written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<Vec<Module>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<SourceEntry>>,
    /// custom_request: the adapter's response body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Map<String, serde_json::Value>>,
    /// The body or a list was cut to fit (page on: `next_offset`, output's `cursor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

impl DebugResult {
    pub fn new(action: Action, status: &str) -> DebugResult {
        DebugResult {
            action: action.name(),
            status: status.into(),
            ..DebugResult::default()
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, JsonSchema, PartialEq)]
pub struct Location {
    /// Root-relative (absolute when outside the root; empty without a source).
    pub path: String,
    pub line: i64,
    pub column: i64,
    /// The line's text.
    pub source_preview: String,
    /// The function.
    pub function: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Thread {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BreakpointEntry {
    pub id: i64,
    /// source, function, exception, instruction or data.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    /// Function name, exception filter, instruction address or data id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub condition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hit_count: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_message: Option<String>,
    /// Whether the adapter bound it (false until a session has confirmed it).
    pub verified: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Frame {
    /// The seed's frame id: 0 is the top frame, 1 its caller, ...
    pub id: i64,
    pub name: String,
    pub path: String,
    pub line: i64,
    pub column: i64,
    /// The adapter's own frame id.
    pub adapter_frame_id: i64,
    /// For disassemble / read_memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instruction_pointer: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Scope {
    pub name: String,
    /// local, closure, global or other.
    pub kind: String,
    pub variables_reference: i64,
}

#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Variable {
    /// Name; under `expand`, the full path (`user.name`).
    pub name: String,
    pub value: String,
    #[serde(rename = "type")]
    pub value_type: String,
    /// Has children: expand it by name (or by variables_reference).
    pub expandable: bool,
    pub variables_reference: i64,
    /// For read_memory / data breakpoints, when the adapter gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_reference: Option<String>,
    /// depth > 1: the nested values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<Variable>>,
    /// depth > 1: children left out by the per-value bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children_omitted: Option<u64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OutputChunk {
    /// stdout, stderr, console, ...
    pub category: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DataBreakpointInfo {
    /// Pass to set_data_breakpoint; absent when no data breakpoint is possible.
    pub data_id: Option<String>,
    pub description: String,
    pub access_types: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Instruction {
    pub address: String,
    pub instruction: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Memory {
    pub address: String,
    /// The bytes, base64.
    pub data: String,
    /// Hex, for reading.
    pub hex: String,
    pub unreadable_bytes: i64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Module {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SourceEntry {
    pub name: String,
    pub path: String,
}
