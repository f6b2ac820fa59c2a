//! kitbag-shared: what every kitbag MCP server shares.
//!
//! - [`server`]: the tool router, per-call context and the rmcp `ServerHandler`;
//! - [`aliases`]: the seeds' tool names (`file.read`, `kaged.issue.list`, `read_file`) resolved
//!   to kitbag's in `tools/call`;
//! - [`error`]: the one error enum, rendered as `isError` results;
//! - [`paths`]: root confinement, symlink-safe resolution, ro/rw mounts;
//! - [`flags`]: `--root`, `--allow`, `--read-only`, logging and audit flags;
//! - [`atomic`], [`lock`], [`limits`], [`audit`]: atomic writes, per-path locks,
//!   output caps, audit events;
//! - [`framing`], [`process`]: Content-Length framing and process-tree kills for the
//!   LSP and DAP bridges;
//! - [`proc_stat`]: the one reader of `/proc/<pid>/stat` (state, parent, group, start time);
//! - [`transport`], [`json_out`], [`salvage`]: the stdio line transport, its fast JSON writer,
//!   and the id finder that lets undecodable requests be answered;
//! - [`http`]: MCP Streamable HTTP serving (`--http`, `--unix`), its Host/Origin guard and
//!   bearer token, `/metrics`;
//! - [`otel`]: a span per MCP request, exported over OTLP/HTTP (feature `otel`);
//! - [`schema`]: tool schemas cleaned for every client (and admitting the error object);
//! - [`budget`]: the bound on requests in flight per connection (backpressure);
//! - [`contain`]: every process a shell or cron command starts, found and killed (cgroup,
//!   else child subreaper + environment tag);
//! - [`runtime`]: every binary's start (a cleared signal mask, then the runtime);
//! - [`blocking`]: filesystem work from async code, on tokio's blocking threads;
//! - [`vmlink`]: a call from inside a kitbag-vm instance to the kitbag-vm running it.

pub mod aliases;
pub mod args;
pub mod atomic;
pub mod audit;
pub mod blocking;
pub mod budget;
pub mod contain;
pub mod error;
pub mod flags;
pub mod framing;
pub mod http;
pub mod json_out;
pub mod limits;
pub mod lock;
pub mod otel;
pub mod paths;
pub mod proc_stat;
pub mod process;
pub mod runtime;
pub mod salvage;
pub mod schema;
pub mod server;
pub mod state;
pub mod stdin;
pub mod tier;
pub mod transport;
pub mod vmlink;

/// Every kitbag binary allocates with mimalloc: glibc's allocator handed the pages of each
/// large answer back to the kernel and faulted them in again on the next call (a 50 KB file
/// read cost 40% more in-process).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use error::{ErrorCode, ToolError, ToolResult};
pub use flags::CommonArgs;
pub use paths::{Access, Parents, PathPolicy, Resolved};
pub use server::{
    CallCtx, Extras, Identity, McpServer, Reply, ToolDef, ToolRouter, blocking, serve, serve_stdio,
};

// Re-exported so servers use the same versions without naming them.
pub use rmcp;
pub use rustix;
pub use schemars;
