//! kitbag-shared: what every kitbag MCP server shares, in two parts.
//!
//! **Core** — what any server, and the crates beside them (config, deploy, the agent loop), use:
//! - [`error`], [`args`]: the one error enum, rendered as `isError` results; argument
//!   decoding that names the field at fault;
//! - [`paths`], [`state`]: root confinement and symlink-safe resolution; a server's own state
//!   directory held by descriptor, and its stores on SQLite or PostgreSQL (features `sqlite`,
//!   `postgres`, `sql`);
//! - [`atomic`], [`lock`], [`limits`], [`budget`]: atomic writes, per-path locks, output caps,
//!   the bound on requests in flight;
//! - [`process`], [`proc_stat`], [`contain`], [`runtime`], [`blocking`]: process-tree stops,
//!   the one `/proc/<pid>/stat` reader, containment of what commands start, every binary's
//!   start, filesystem work from async code;
//! - [`server`], [`transport`], [`stdin`], [`framing`], [`json_out`], [`salvage`],
//!   [`schema`], [`aliases`]: the tool router and rmcp `ServerHandler`, the stdio line
//!   transport and its fast writer, Content-Length framing (LSP, DAP), tool schemas every
//!   client accepts, the seeds' tool names;
//! - [`flags`], [`audit`], [`caller`], [`tier`], [`metrics`], [`otel`]: common CLI flags, the
//!   audit log, who is calling and what tiers they hold, call counters, a span per request
//!   (exported over OTLP/HTTP with feature `otel`);
//! - [`random`]: random bytes from the kernel (secrets, trace-id seeds);
//! - [`vmlink`]: a call from inside a kitbag-vm instance to the kitbag-vm running it.
//!
//! **Serving** (feature `serving`, with the dependencies only it needs — hyper, rustls, reqwest,
//! the JWT and OAuth code): [`http`], MCP Streamable HTTP (`--http`, `--unix`) with its
//! Host/Origin guard, bearer token or OAuth resource server, TLS and mTLS, sessions and
//! `/metrics`. Without it a server speaks stdio only.

pub mod aliases;
pub mod args;
pub mod atomic;
pub mod audit;
pub mod blocking;
pub mod budget;
pub mod busy_poll;
pub mod caller;
pub mod clock;
pub mod contain;
pub mod diff;
pub mod elicit;
pub mod error;
pub mod flags;
pub mod framing;
#[cfg(feature = "serving")]
pub mod http;
pub mod json_out;
pub mod limits;
pub mod lock;
pub mod metrics;
pub mod otel;
pub mod paths;
pub mod proc_stat;
pub mod process;
pub mod random;
pub mod runtime;
pub mod salvage;
pub mod schema;
pub mod server;
pub mod state;
pub mod stdin;
pub mod subscribers;
pub mod tier;
pub mod transport;
pub mod vmlink;
pub mod working_set;

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
    CallCtx, ClientLog, Extras, Identity, McpServer, Reply, ToolDef, ToolRouter, blocking, serve,
    serve_stdio,
};

// Re-exported so servers use the same versions without naming them.
pub use rmcp;
pub use rustix;
pub use schemars;
