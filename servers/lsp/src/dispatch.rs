//! A `code_lsp` call handed to its action, once its arguments are checked: above the tool's
//! definition and parameters ([`crate::tool`]) and the actions that use them.

use std::sync::Arc;

use kitbag_shared::{PathPolicy, Reply, ToolResult};

use crate::result::LspResult;
use crate::tool::{self, Action, LspParams, LspState};

pub async fn run(
    state: &LspState,
    policy: Arc<PathPolicy>,
    p: LspParams,
) -> ToolResult<Reply<LspResult>> {
    tool::validate::validate(&p)?;
    let pool = &state.pool_for(policy.root());
    tool::validate::preflight(pool, &policy, &p)?;
    let (data, text) = match p.action {
        Action::Status => crate::actions::status(pool).await?,
        Action::Reload => crate::actions::reload(pool, &policy, &p).await?,
        Action::Capabilities => crate::actions::capabilities(pool, &policy, &p).await?,
        Action::Request => crate::actions::raw_request(pool, &policy, &p).await?,
        Action::Diagnostics => crate::actions::diagnostics(pool, &policy, &p).await?,
        Action::Definition | Action::TypeDefinition | Action::Implementation => {
            crate::actions::goto(pool, &policy, &p).await?
        }
        Action::References => crate::actions::references(pool, &policy, &p).await?,
        Action::Hover => crate::actions::hover(pool, &policy, &p).await?,
        Action::Symbols => crate::actions::symbols(pool, &policy, &p).await?,
        Action::CodeActions => crate::actions::code_actions(pool, &policy, &p).await?,
        Action::Rename => crate::rename::rename(pool, &policy, &p).await?,
        Action::RenameFile => crate::rename::rename_file(pool, &policy, &p).await?,
    };
    Ok(Reply::new(data, text))
}
