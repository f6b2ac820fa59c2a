//! The `debug` tool's input: seed 004's parameter names, plus kitbag's additions.

use std::collections::BTreeMap;

use kitbag_shared::{ToolError, ToolResult, args};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Launch,
    Attach,
    SetBreakpoint,
    RemoveBreakpoint,
    ListBreakpoints,
    SetFunctionBreakpoint,
    SetExceptionBreakpoints,
    SetInstructionBreakpoint,
    RemoveInstructionBreakpoint,
    DataBreakpointInfo,
    SetDataBreakpoint,
    RemoveDataBreakpoint,
    Continue,
    StepOver,
    StepInto,
    StepOut,
    Pause,
    Threads,
    StackTrace,
    Scopes,
    Variables,
    Evaluate,
    Disassemble,
    ReadMemory,
    WriteMemory,
    Modules,
    LoadedSources,
    CustomRequest,
    Output,
    Status,
    Disconnect,
}

impl Action {
    /// The action as the client wrote it (snake_case), echoed in results.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EvalContext {
    Watch,
    Repl,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AccessType {
    Read,
    Write,
    ReadWrite,
}

impl AccessType {
    pub fn dap(self) -> &'static str {
        match self {
            AccessType::Read => "read",
            AccessType::Write => "write",
            AccessType::ReadWrite => "readWrite",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebugParams {
    pub action: Action,
    /// python (default), node, bun, lldb (C/C++/Rust), go, or configured.
    #[serde(default)]
    pub runtime: Option<String>,
    /// launch: entry point.
    #[serde(default, alias = "program")]
    pub script: Option<String>,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Default true.
    #[serde(default)]
    pub stop_on_entry: Option<bool>,
    /// Default the root.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Default 127.0.0.1.
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    /// attach (node, bun): the ws:// address.
    #[serde(default)]
    pub url: Option<String>,
    /// Default true.
    #[serde(default)]
    pub terminate_debuggee: Option<bool>,
    #[serde(default)]
    pub path: Option<String>,
    /// 1-based.
    #[serde(default)]
    pub line: Option<i64>,
    /// Break only if true.
    #[serde(default)]
    pub condition: Option<String>,
    /// Log it ({expr} expanded), don't stop.
    #[serde(default)]
    pub log_message: Option<String>,
    /// N (from hit N on) or e.g. "%2".
    #[serde(default)]
    pub hit_count: Option<HitCount>,
    /// set_function_breakpoint: function; data_breakpoint_info: variable.
    #[serde(default)]
    pub name: Option<String>,
    /// set_exception_breakpoints: uncaught, raised, all, ...
    #[serde(default)]
    pub filters: Option<Vec<String>>,
    #[serde(default)]
    pub thread_id: Option<i64>,
    /// Default 20.
    #[serde(default)]
    pub levels: Option<u64>,
    /// 0 = top (default), 1 = caller, ...
    #[serde(default)]
    pub frame_id: Option<i64>,
    /// local (default), closure, global, or e.g. registers.
    #[serde(default)]
    pub scope: Option<String>,
    /// A name, dotted path ("a.b") or variables_reference.
    #[serde(default)]
    pub expand: Option<Expand>,
    /// 1-4 (default 1).
    #[serde(default)]
    pub depth: Option<u64>,
    /// Name substring.
    #[serde(default)]
    pub filter: Option<String>,
    #[serde(default)]
    pub expression: Option<String>,
    /// evaluate: watch (default, no side effects) or repl.
    #[serde(default)]
    pub context: Option<EvalContext>,
    /// A result's next_offset, or from the address.
    #[serde(default)]
    pub offset: Option<i64>,
    /// Default 100.
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub memory_reference: Option<String>,
    /// disassemble: instructions; read_memory: bytes (default 32).
    #[serde(default)]
    pub count: Option<u64>,
    /// Base64.
    #[serde(default)]
    pub data: Option<String>,
    /// From data_breakpoint_info.
    #[serde(default)]
    pub data_id: Option<String>,
    /// Default write.
    #[serde(default)]
    pub access_type: Option<AccessType>,
    /// custom_request.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, Value>>,
    /// ms to await a stop (default 10000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// A hit count: a number, or a string in the adapter's hitCondition syntax.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(
    untagged,
    expecting = "a hit count: a number such as 3, or a string such as \">=3\" or \"%2\""
)]
pub enum HitCount {
    Number(i64),
    Text(String),
}

/// How an adapter writes "break from the Nth hit on" (seed: "break after N hits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitSyntax {
    /// Python-style operators: debugpy takes `>=N`.
    Operators,
    /// A bare number means "from the Nth hit on" already (lldb-dap ignores the first N-1
    /// hits; Delve's bare number means `>= N` too).
    Number,
}

impl HitCount {
    /// The hitCondition string for an adapter, or an error naming `hit_count`. A number N
    /// means "break on the Nth hit and every later one"; a string is passed through.
    pub fn condition(&self, syntax: HitSyntax) -> ToolResult<String> {
        match self {
            HitCount::Number(n) => {
                let n = args::at_least("hit_count", *n, 1)?;
                Ok(match syntax {
                    HitSyntax::Operators => format!(">={n}"),
                    HitSyntax::Number => n.to_string(),
                })
            }
            HitCount::Text(t) if t.trim().is_empty() => Err(ToolError::invalid_field(
                "hit_count",
                "a hit count such as 3, \">=3\" or \"%2\" (it is empty)",
            )),
            HitCount::Text(t) => {
                args::max_chars("hit_count", t, 100)?;
                Ok(t.trim().to_string())
            }
        }
    }
}

/// What `variables` expands: a variable by name or dotted path, or an adapter reference.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(
    untagged,
    expecting = "a variable name or dotted path such as \"user.address\", or a variables_reference number"
)]
pub enum Expand {
    Reference(i64),
    Path(String),
}

/// The scope a `variables` call reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeWanted {
    Local,
    Closure,
    Global,
    /// An adapter's own scope name (e.g. `registers`), matched case-insensitively.
    Named(String),
}

impl ScopeWanted {
    pub fn parse(s: Option<&str>) -> ScopeWanted {
        match s.map(|s| s.trim().to_lowercase()).as_deref() {
            None | Some("") | Some("local") | Some("locals") => ScopeWanted::Local,
            Some("closure") => ScopeWanted::Closure,
            Some("global") | Some("globals") => ScopeWanted::Global,
            Some(other) => ScopeWanted::Named(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hit_count_means_from_the_nth_hit_on() {
        let three = HitCount::Number(3);
        assert_eq!(three.condition(HitSyntax::Operators).unwrap(), ">=3");
        assert_eq!(three.condition(HitSyntax::Number).unwrap(), "3");
        let raw = HitCount::Text(" %2 ".into());
        assert_eq!(raw.condition(HitSyntax::Operators).unwrap(), "%2");
        for bad in [
            HitCount::Number(0),
            HitCount::Number(-1),
            HitCount::Text("  ".into()),
        ] {
            let e = bad.condition(HitSyntax::Number).unwrap_err();
            assert_eq!(e.detail["field"], "hit_count");
        }
        let long = HitCount::Text("9".repeat(101));
        assert!(long.condition(HitSyntax::Number).is_err());
    }

    #[test]
    fn seed_examples_decode() {
        let p: DebugParams = serde_json::from_value(serde_json::json!({
            "action": "launch", "runtime": "bun", "script": "./src/main.ts",
            "args": ["--port", "3000"], "env": {"NODE_ENV": "test"}, "stop_on_entry": true
        }))
        .unwrap();
        assert_eq!(p.script.as_deref(), Some("./src/main.ts"));
        let alias: DebugParams =
            serde_json::from_value(serde_json::json!({"action": "launch", "program": "a.py"}))
                .unwrap();
        assert_eq!(alias.script.as_deref(), Some("a.py"));
        let e: DebugParams =
            serde_json::from_value(serde_json::json!({"action": "variables", "expand": "user"}))
                .unwrap();
        assert_eq!(e.expand, Some(Expand::Path("user".into())));
        let n: DebugParams =
            serde_json::from_value(serde_json::json!({"action": "variables", "expand": 7}))
                .unwrap();
        assert_eq!(n.expand, Some(Expand::Reference(7)));
        assert_eq!(Action::StepOver.name(), "step_over");
    }

    #[test]
    fn scope_names() {
        assert_eq!(ScopeWanted::parse(None), ScopeWanted::Local);
        assert_eq!(ScopeWanted::parse(Some("Globals")), ScopeWanted::Global);
        assert_eq!(
            ScopeWanted::parse(Some("Registers")),
            ScopeWanted::Named("registers".into())
        );
    }
}
