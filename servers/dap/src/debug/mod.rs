//! The `debug` tool: one session per connection over a real debug adapter — debugpy,
//! lldb-dap, Delve, or kitbag's own CDP bridge for Node.js and Bun.
//!
//! One module per concern: `params` / `result` (the tool's shape), `runtime` (what differs
//! per adapter), `session` (launch, attach, disconnect), `breakpoints`, `control` (continue,
//! steps, pause, and waiting for a stop), `breakpoint_actions`, `inspect` (threads, frames, scopes, variables,
//! evaluate), `memory` (instructions and memory), `expand` (variable paths), `source` (paths
//! and source lines as the model sees them).

mod breakpoint_actions;
mod breakpoints;
mod control;
mod expand;
mod inspect;
mod memory;
pub mod params;
pub mod result;
pub mod runtime;
mod session;
mod source;
mod tree;
pub mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kitbag_shared::audit::AuditLog;
use kitbag_shared::{ErrorCode, PathPolicy, Reply, ToolDef, ToolError, ToolResult};
use tokio::sync::Mutex;

use crate::config::Config;
use crate::dap::Client;

pub use params::{Action, DebugParams};
pub use result::DebugResult;

use breakpoints::Breakpoints;
use runtime::Runtime;

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
pub const MAX_VALUE_CHARS: usize = 1000;
pub const DEFAULT_WAIT_MS: u64 = 10_000;

pub const DEF: ToolDef = ToolDef {
    name: "debug",
    title: "Debug a program",
    description: "Debug a program with a real debugger: launch or attach, breakpoints, \
        stepping, stack, variables, evaluate.",
    read_only: false,
    destructive: true,
    idempotent: false,
    open_world: true,
    exec: true,
    meta: None,
    private_args: &[],
};

/// A live debug session: what the actions share (cheap to clone out of the state's lock, so
/// a long wait for a stop never holds it).
pub struct Core {
    pub id: String,
    pub client: Arc<Client>,
    pub runtime: Runtime,
    pub attached: bool,
    /// The temporary function breakpoint standing for "stop on entry" where the adapter has
    /// no useful entry stop of its own (lldb: `main`, Delve: `main.main`), until the first stop.
    pub entry: std::sync::Mutex<Option<session::EntryBreakpoint>>,
    /// The last stop logged as a `debug.breakpoint_hit` audit event.
    reported_stop: AtomicU64,
    audit: Option<AuditLog>,
    ended_logged: AtomicBool,
}

impl Core {
    fn audit(&self, event: &str, fields: serde_json::Value) {
        if let Some(a) = &self.audit {
            let mut line = serde_json::Map::new();
            line.insert("debug_session_id".into(), self.id.clone().into());
            if let serde_json::Value::Object(extra) = fields {
                line.extend(extra);
            }
            a.event(event, serde_json::Value::Object(line));
        }
    }

    /// Log `debug.session_ended` once.
    fn ended(&self, reason: &str) {
        if !self.ended_logged.swap(true, Ordering::SeqCst) {
            self.audit(
                "debug.session_ended",
                serde_json::json!({"reason": reason, "runtime": self.runtime.name()}),
            );
        }
    }
}

/// The session the state owns: dropping it ends the adapter and the debuggee.
pub struct Session {
    core: Arc<Core>,
    /// Where Delve builds a Go program (removed with the session), so no build product is
    /// ever left in the user's tree, even when the adapter is killed.
    _build_dir: Option<tempfile::TempDir>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.core.ended("closed");
        self.core.client.kill();
    }
}

#[derive(Default)]
pub struct DapState {
    session: Mutex<Option<Session>>,
    breakpoints: Mutex<Breakpoints>,
    config: Config,
    audit: Option<AuditLog>,
    sessions_started: AtomicU64,
}

impl DapState {
    /// A state whose adapters come from a `--config` file.
    pub fn new(config: Config) -> DapState {
        DapState {
            config,
            ..DapState::default()
        }
    }

    /// Log `debug.*` events to this audit log.
    pub fn with_audit(mut self, audit: Option<AuditLog>) -> DapState {
        self.audit = audit;
        self
    }

    /// The live session, without holding the lock.
    async fn live(&self) -> ToolResult<Arc<Core>> {
        let guard = self.session.lock().await;
        guard
            .as_ref()
            .map(|s| s.core.clone())
            .ok_or_else(no_session)
    }
}

pub async fn run(
    state: &DapState,
    policy: Arc<PathPolicy>,
    p: DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    use Action as A;
    match p.action {
        A::Launch => session::launch(state, &policy, &p).await,
        A::Attach => session::attach(state, &policy, &p).await,
        A::Disconnect => session::disconnect(state, &p).await,
        A::Status => session::status(state, &policy, &p).await,
        A::Output => session::output(state, &p).await,
        A::SetBreakpoint | A::RemoveBreakpoint | A::ListBreakpoints => {
            breakpoint_actions::source(state, &policy, &p).await
        }
        A::SetFunctionBreakpoint => breakpoint_actions::function(state, &p).await,
        A::SetExceptionBreakpoints => breakpoint_actions::exceptions(state, &p).await,
        A::SetInstructionBreakpoint | A::RemoveInstructionBreakpoint => {
            breakpoint_actions::instruction(state, &p).await
        }
        A::DataBreakpointInfo => breakpoint_actions::data_info(state, &p).await,
        A::SetDataBreakpoint | A::RemoveDataBreakpoint => breakpoint_actions::data(state, &p).await,
        A::Continue | A::StepOver | A::StepInto | A::StepOut | A::Pause => {
            control::resume(state, &policy, &p).await
        }
        A::Threads => inspect::threads(state, &p).await,
        A::StackTrace => inspect::stack_trace(state, &policy, &p).await,
        A::Scopes => inspect::scopes(state, &p).await,
        A::Variables => inspect::variables(state, &p).await,
        A::Evaluate => inspect::evaluate(state, &p).await,
        A::Disassemble | A::ReadMemory | A::WriteMemory => memory::memory(state, &p).await,
        A::Modules | A::LoadedSources | A::CustomRequest => {
            memory::listing(state, &policy, &p).await
        }
    }
}

/// No session: the one case that calls for a new launch.
fn no_session() -> ToolError {
    ToolError::new(
        ErrorCode::DapSessionEnded,
        "no debug session is active; start one with action \"launch\" or \"attach\"",
    )
}

/// A failed adapter request. Only a gone adapter ends the session; a refusal (bad frame,
/// bad expression, unsupported request) is the adapter's message and the session lives on.
pub fn adapter_failure(client: &Client, message: impl std::fmt::Display) -> ToolError {
    if client.events().is_closed() {
        ToolError::new(
            ErrorCode::DapSessionEnded,
            format!("the debug adapter has ended: {message}"),
        )
    } else {
        ToolError::new(ErrorCode::AdapterError, message.to_string())
    }
}

/// A capability the adapter must advertise for an action.
pub fn require_capability(client: &Client, capability: &str, what: &str) -> ToolResult<()> {
    if client.events().capability(capability) {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorCode::UnsupportedByAdapter,
        format!("{what}: the debug adapter does not advertise {capability}"),
    )
    .with_detail(serde_json::json!({"capability": capability})))
}

/// `need(&p.x, "x", "what it should be")`: a required field, or an error naming it.
fn need<'a, T>(v: &'a Option<T>, field: &str, what: &str) -> ToolResult<&'a T> {
    v.as_ref()
        .ok_or_else(|| ToolError::invalid_field(field, what))
}

/// Room kept under the budget for a list's field name, `truncated`, `next_offset`, `cursor`
/// and `total` (set after the list is cut).
const PAGING_ROOM: usize = 160;

/// The longest prefix of `items` that keeps `r` (serialized with the list added) under
/// [`RESULT_BUDGET_BYTES`](kitbag_shared::limits::RESULT_BUDGET_BYTES) — at least one entry, so
/// paging always moves on. Returns the kept entries and whether any were left out.
pub fn within_budget<T: serde::Serialize>(r: &DebugResult, items: Vec<T>) -> (Vec<T>, bool) {
    kitbag_shared::limits::within_budget(kitbag_shared::limits::json_len(r) + PAGING_ROOM, items)
}

/// A value cut to `MAX_VALUE_CHARS` characters.
pub fn cap(s: &str) -> String {
    if s.chars().count() > MAX_VALUE_CHARS {
        let t: String = s.chars().take(MAX_VALUE_CHARS).collect();
        format!("{t}… [truncated]")
    } else {
        s.to_string()
    }
}
