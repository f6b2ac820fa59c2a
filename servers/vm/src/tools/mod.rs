//! The tools, one module each (ports and keepalive pair their two tools), and the socket on
//! which an instance's guest calls them (`guest_socket`).

pub mod copy;
pub mod copy_tree;
pub mod exec;
pub mod guest_socket;
pub mod keepalive;
pub mod list;
pub mod logs;
pub mod ports;
pub mod selftools;
pub mod spawn;
pub mod stop;
pub mod validate;

use std::sync::Arc;

use kitbag_shared::rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use kitbag_shared::server::decode_args;
use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolError, ToolResult, ToolRouter};
use serde::Serialize;

use crate::{Caller, VmState};

/// The tools as MCP clients call them (the top-level caller).
pub fn router() -> ToolRouter<VmState> {
    ToolRouter::new()
        .tool(spawn::DEF, |s: Arc<VmState>, p, ctx: CallCtx| {
            spawn::run(s, p, ctx, None)
        })
        .tool(list::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| async move {
            list::run(&s, p, &None)
        })
        .tool(stop::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| {
            stop::run(s, p, None)
        })
        .tool(exec::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| {
            exec::run(s, p, None)
        })
        .tool(logs::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| async move {
            logs::run(&s, p, &None).await
        })
        .tool(copy::DEF, |s: Arc<VmState>, p, ctx: CallCtx| {
            copy::run(s, p, ctx, None)
        })
        .tool(ports::EXPOSE_DEF, |s: Arc<VmState>, p, _ctx: CallCtx| {
            ports::expose_tool(s, p, None)
        })
        .tool(
            ports::UNEXPOSE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { ports::unexpose_tool(&s, p, &None) },
        )
        .tool(
            keepalive::ACQUIRE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { keepalive::acquire(&s, p, &None) },
        )
        .tool(
            keepalive::RELEASE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { keepalive::release(&s, p, &None) },
        )
        .tool(
            selftools::INFO_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { selftools::info(&s, p, &None) },
        )
        .tool(
            selftools::RESTART_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| selftools::restart(s, p, None),
        )
}

/// A call from a guest (inside instance `caller`), answered as MCP would answer it.
pub async fn call_as(
    state: &Arc<VmState>,
    name: &str,
    args: JsonObject,
    caller: Caller,
    ctx: CallCtx,
) -> CallToolResult {
    let s = state.clone();
    let result = match name {
        "instance_spawn" => {
            finish(async { spawn::run(s, decode_args(args)?, ctx, caller).await }.await)
        }
        "instance_list" => finish(decode_args(args).and_then(|p| list::run(&s, p, &caller))),
        "instance_stop" => finish(async { stop::run(s, decode_args(args)?, caller).await }.await),
        "instance_exec" => finish(async { exec::run(s, decode_args(args)?, caller).await }.await),
        "instance_logs" => finish(async { logs::run(&s, decode_args(args)?, &caller).await }.await),
        "instance_copy" => {
            finish(async { copy::run(s, decode_args(args)?, ctx, caller).await }.await)
        }
        "expose_port" => {
            finish(async { ports::expose_tool(s, decode_args(args)?, caller).await }.await)
        }
        "unexpose_port" => {
            finish(decode_args(args).and_then(|p| ports::unexpose_tool(&s, p, &caller)))
        }
        "keepalive_acquire" => {
            finish(decode_args(args).and_then(|p| keepalive::acquire(&s, p, &caller)))
        }
        "keepalive_release" => {
            finish(decode_args(args).and_then(|p| keepalive::release(&s, p, &caller)))
        }
        "self_info" => finish(decode_args(args).and_then(|p| selftools::info(&s, p, &caller))),
        "self_restart" => {
            finish(async { selftools::restart(s, decode_args(args)?, caller).await }.await)
        }
        other => Err(ToolError::new(
            ErrorCode::UnknownTool,
            format!("no tool {other}"),
        )),
    };
    result.unwrap_or_else(ToolError::into_call_result)
}

fn finish<O: Serialize>(r: ToolResult<Reply<O>>) -> ToolResult<CallToolResult> {
    let reply = r?;
    let structured = serde_json::to_value(&reply.data)
        .map_err(|e| ToolError::internal(format!("result encoding failed: {e}")))?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(reply.text)]);
    result.structured_content = Some(structured);
    Ok(result)
}
