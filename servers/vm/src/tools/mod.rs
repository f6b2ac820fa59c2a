//! The tools, one module each (ports and keepalive pair their two tools).

pub mod copy;
pub mod exec;
pub mod keepalive;
pub mod list;
pub mod logs;
pub mod ports;
pub mod selftools;
pub mod spawn;
pub mod stop;
pub mod validate;

use std::sync::Arc;

use kitbag_shared::{CallCtx, ToolRouter};

use crate::VmState;

pub fn router() -> ToolRouter<VmState> {
    ToolRouter::new()
        .tool(spawn::DEF, |s: Arc<VmState>, p, ctx: CallCtx| {
            spawn::run(s, p, ctx)
        })
        .tool(list::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| async move {
            list::run(&s, p)
        })
        .tool(stop::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| {
            stop::run(s, p)
        })
        .tool(exec::DEF, |s: Arc<VmState>, p, ctx: CallCtx| {
            exec::run(s, p, ctx)
        })
        .tool(logs::DEF, |s: Arc<VmState>, p, _ctx: CallCtx| async move {
            logs::run(&s, p)
        })
        .tool(copy::DEF, |s: Arc<VmState>, p, ctx: CallCtx| {
            copy::run(s, p, ctx)
        })
        .tool(ports::EXPOSE_DEF, |s: Arc<VmState>, p, _ctx: CallCtx| {
            ports::expose_tool(s, p)
        })
        .tool(
            ports::UNEXPOSE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { ports::unexpose_tool(&s, p) },
        )
        .tool(
            keepalive::ACQUIRE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { keepalive::acquire(&s, p) },
        )
        .tool(
            keepalive::RELEASE_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { keepalive::release(&s, p) },
        )
        .tool(
            selftools::INFO_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| async move { selftools::info(&s, p) },
        )
        .tool(
            selftools::RESTART_DEF,
            |s: Arc<VmState>, p, _ctx: CallCtx| selftools::restart(s, p),
        )
}
