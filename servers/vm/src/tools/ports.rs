//! `expose_port` and `unexpose_port`.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::instance::{Port, PortInfo, State};
use crate::tools::validate;
use crate::{Caller, VmState};

pub const EXPOSE_DEF: ToolDef = ToolDef::write(
    "expose_port",
    "Expose instance port",
    "Relay a guest port (its 127.0.0.1) to a host loopback listener; returns its url. A \
     connection resumes a paused instance.",
)
.idempotent();

pub const UNEXPOSE_DEF: ToolDef = ToolDef::write(
    "unexpose_port",
    "Unexpose instance port",
    "Close an exposed port's host listener and its connections.",
)
.destructive()
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExposeParams {
    #[serde(default)]
    pub instance: Option<String>,
    pub port: u32,
    /// Default 0: ephemeral.
    #[serde(default)]
    pub host_port: Option<u32>,
    /// Default 127.0.0.1; or ::1.
    #[serde(default)]
    pub bind: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ExposeResult {
    pub instance: String,
    #[serde(flatten)]
    pub port: PortInfo,
    /// Something accepts on the guest port right now.
    pub listening: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnexposeParams {
    #[serde(default)]
    pub instance: Option<String>,
    pub port: u32,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct UnexposeResult {
    pub instance: String,
    pub guest_port: u16,
    pub host_port: u16,
    pub closed_connections: u64,
}

/// Expose `guest_port` of instance `id` (shared with instance_spawn's `ports`).
pub async fn expose(
    state: &Arc<VmState>,
    id: &str,
    guest_port: u16,
    host_port: u16,
    bind: &str,
) -> ToolResult<PortInfo> {
    {
        let map = state.lock();
        if let Some(inst) = map.get(id)
            && let Some(p) = inst.ports.get(&guest_port)
        {
            return Ok(port_info(guest_port, p));
        }
    }
    let listener = tokio::net::TcpListener::bind((bind, host_port)).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            ToolError::new(ErrorCode::PortInUse, format!("host_port: {bind}:{host_port} is taken; pass another or 0 for an ephemeral port"))
                .with_detail(json!({ "field": "host_port", "host_port": host_port }))
        } else {
            ToolError::new(ErrorCode::IoError, format!("cannot listen on {bind}:{host_port}: {e}"))
        }
    })?;
    let actual = listener.local_addr().map(|a| a.port()).unwrap_or(host_port);
    let connections = Arc::new(AtomicUsize::new(0));
    let close = CancellationToken::new();
    let port = Port {
        host: bind.to_string(),
        host_port: actual,
        connections: connections.clone(),
        close: close.clone(),
    };
    let info = port_info(guest_port, &port);
    {
        let mut map = state.lock();
        let Some(inst) = map.get_mut(id) else {
            return Err(ToolError::new(
                ErrorCode::InstanceNotFound,
                format!("instance {id} is gone"),
            ));
        };
        if !matches!(inst.state, State::Running | State::Paused) {
            return Err(ToolError::new(
                ErrorCode::InstanceNotRunning,
                format!("instance {id} is {}", inst.state.as_str()),
            ));
        }
        if let Some(p) = inst.ports.get(&guest_port) {
            return Ok(port_info(guest_port, p)); // exposed meanwhile: keep that one
        }
        inst.ports.insert(guest_port, port);
        inst.touch();
    }
    crate::ports::serve(
        state.clone(),
        id.to_string(),
        guest_port,
        listener,
        connections,
        close,
    );
    Ok(info)
}

fn port_info(guest_port: u16, p: &Port) -> PortInfo {
    let host = if p.host.contains(':') {
        format!("[{}]", p.host)
    } else {
        p.host.clone()
    };
    PortInfo {
        guest_port,
        host: p.host.clone(),
        host_port: p.host_port,
        url: format!("http://{host}:{}", p.host_port),
        connections: p.connections.load(std::sync::atomic::Ordering::Relaxed) as u64,
    }
}

pub async fn expose_tool(
    state: Arc<VmState>,
    p: ExposeParams,
    caller: Caller,
) -> ToolResult<Reply<ExposeResult>> {
    validate::writable(&state)?;
    let key = VmState::key_or_own(p.instance, &caller)?;
    let guest = validate::range("port", p.port, 1, 65535)? as u16;
    let host_port = validate::range("host_port", p.host_port.unwrap_or(0), 0, 65535)? as u16;
    let bind = p.bind.unwrap_or_else(|| "127.0.0.1".into());
    let addr: std::net::IpAddr = bind.parse().map_err(|_| {
        ToolError::invalid_field(
            "bind",
            format!("{bind:?} is not an IP address; use 127.0.0.1"),
        )
    })?;
    if !addr.is_loopback() && !state.opts.allow_non_loopback {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            format!("bind: {bind} is not a loopback address; the server must be started with --allow-non-loopback to listen there"),
        )
        .with_detail(json!({ "field": "bind" })));
    }
    let (id, sandbox, _) = state.sandbox(&key, false, &caller)?;
    let info = expose(&state, &id, guest, host_port, &bind).await?;
    let listening = crate::ports::guest_listening(&sandbox, guest).await;
    let text = format!(
        "{id}:{guest} → {}{}",
        info.url,
        if listening {
            ""
        } else {
            " (nothing listens inside yet)"
        }
    );
    Ok(Reply::new(
        ExposeResult {
            instance: id,
            port: info,
            listening,
        },
        text,
    ))
}

pub fn unexpose_tool(
    state: &Arc<VmState>,
    p: UnexposeParams,
    caller: &Caller,
) -> ToolResult<Reply<UnexposeResult>> {
    validate::writable(state)?;
    let key = VmState::key_or_own(p.instance, caller)?;
    let guest = validate::range("port", p.port, 1, 65535)? as u16;
    let mut map = state.lock();
    let id = VmState::find(&map, &key, "instance", caller)?;
    let Some(inst) = map.get_mut(&id) else {
        return Err(ToolError::internal("instance vanished"));
    };
    let Some(port) = inst.ports.remove(&guest) else {
        let exposed: Vec<u16> = inst.ports.keys().copied().collect();
        return Err(ToolError::new(
            ErrorCode::PortNotExposed,
            format!("port: guest port {guest} of {id} is not exposed; exposed: {exposed:?}"),
        )
        .with_detail(json!({ "field": "port", "exposed": exposed })));
    };
    port.close.cancel();
    inst.touch();
    let closed = port.connections.load(std::sync::atomic::Ordering::Relaxed) as u64;
    Ok(Reply::new(
        UnexposeResult {
            instance: id.clone(),
            guest_port: guest,
            host_port: port.host_port,
            closed_connections: closed,
        },
        format!(
            "{id}:{guest} no longer exposed (host port {} closed, {closed} connections closed)",
            port.host_port
        ),
    ))
}
