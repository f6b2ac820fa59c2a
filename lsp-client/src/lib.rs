//! kitbag-lsp-client: what talking to real language servers takes, for every crate that
//! does — kitbag-lsp's `code_lsp` and kitbag-files' edit feedback.
//!
//! - [`config`]: which server serves which files (built-ins, a TOML file, `--server` flags);
//! - [`pools`]: a pool per project root; [`pool`]: spawning, sharing, idle-stopping and restarting servers, and keeping their
//!   documents in sync with the disk; [`rpc`]: JSON-RPC over a server's stdio;
//! - [`diagnostics`]: waiting for diagnostics that describe the current text; [`ready`]:
//!   waiting for a project to load; [`check`]: what an edit introduced and fixed, and
//!   [`feedback`]: the flags and steps a server that writes files wraps its writes in;
//! - [`text`]: lines, position encodings, URIs; [`edits`]: workspace edits; [`stamp`]: when
//!   a file's metadata proves it unchanged.

pub mod check;
pub mod config;
pub mod diagnostics;
pub mod edits;
pub mod feedback;
pub mod pool;
pub mod pools;
pub mod ready;
pub mod rpc;
pub mod stamp;
pub mod text;
