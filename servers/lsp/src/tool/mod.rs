//! The `code_lsp` tool: its definition and the per-root state. The parameters are in
//! [`params`], their validation in [`validate`], and the steps every action shares (open a file
//! in its server, map RPC failures) in [`open`]; `dispatch.rs` hands a call to its action.

pub mod open;
pub mod params;
pub mod validate;

use kitbag_shared::ToolDef;

pub use open::{Opened, language_for, language_named, open, rpc_error};
pub use params::{Action, LspParams, Scope, Severity};
pub use validate::{need, position};

pub const DEF: ToolDef = ToolDef {
    name: "code_lsp",
    title: "Code intelligence",
    description: "Code intelligence from language servers (rust, python, TS/JS, go, C/C++). \
        Position: `path`, 1-based `line`, 0-based `character` or `symbol`. rename is \
        atomic; rename_file fixes imports; request: any LSP method.",
    read_only: false,
    destructive: false,
    idempotent: false,
    open_world: false,
    exec: false,
    meta: None,
    private_args: &[],
};

/// The `code_lsp` state: one pool of language servers per project root.
pub type LspState = kitbag_lsp_client::pools::Pools;
