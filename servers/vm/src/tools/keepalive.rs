//! `keepalive_acquire` and `keepalive_release`: leases that hold an instance's idle timer.

use kitbag_shared::lock::LockExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::instance::{Lease, rfc3339};
use crate::tools::validate;
use crate::{Caller, VmState};

pub const ACQUIRE_DEF: ToolDef = ToolDef::write(
    "keepalive_acquire",
    "Keep instance alive",
    "Hold an instance's idle timer with a lease (renew: pass lease_id); never extends its TTL.",
);

pub const RELEASE_DEF: ToolDef = ToolDef::write(
    "keepalive_release",
    "Release keepalive lease",
    "Release a keepalive lease; an expired one answers released: false.",
)
.idempotent();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireParams {
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Default 3600.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    pub lease_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct AcquireResult {
    pub lease_id: String,
    pub instance: String,
    pub expires_at: String,
    pub active_leases: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseParams {
    pub lease_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReleaseResult {
    pub lease_id: String,
    pub released: bool,
    pub instance: String,
    pub active_leases: u64,
    /// When the idle action happens now, if nothing else holds it.
    pub idle_deadline: Option<String>,
    /// Set when the lease had already expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<String>,
}

fn new_lease_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("l-{:012x}", h.finish() & 0xffff_ffff_ffff)
}

pub fn acquire(
    state: &Arc<VmState>,
    p: AcquireParams,
    caller: &Caller,
) -> ToolResult<Reply<AcquireResult>> {
    validate::writable(state)?;
    let key = VmState::key_or_own(p.instance, caller)?;
    let reason = p.reason.unwrap_or_default();
    if reason.chars().count() > 200 {
        return Err(ToolError::invalid_field("reason", "at most 200 characters"));
    }
    let ttl = validate::range("ttl_seconds", p.ttl_seconds.unwrap_or(3600), 1, 86_400)?;
    // Resumes a paused instance and counts as activity.
    let (id, _, _) = state.sandbox(&key, false, caller)?;
    let mut map = state.lock();
    let Some(inst) = map.get_mut(&id) else {
        return Err(ToolError::internal("instance vanished"));
    };
    let expires = SystemTime::now() + Duration::from_secs(ttl);
    let lease_id = match p.lease_id {
        Some(l) => {
            let Some(lease) = inst.leases.get_mut(&l) else {
                return Err(ToolError::new(
                    ErrorCode::LeaseNotFound,
                    format!("lease_id: {l} is not a live lease of {id} (expired or released); acquire a new one without lease_id"),
                )
                .with_detail(json!({ "field": "lease_id" })));
            };
            lease.expires = expires;
            if !reason.is_empty() {
                lease.reason = reason;
            }
            l
        }
        None => {
            let l = new_lease_id();
            inst.leases.insert(
                l.clone(),
                Lease {
                    holder: match caller {
                        Some(me) => format!("a process in {me}"),
                        None => "client".into(),
                    },
                    reason,
                    expires,
                },
            );
            l
        }
    };
    inst.touch();
    let active = inst.leases.len() as u64;
    Ok(Reply::new(
        AcquireResult {
            lease_id: lease_id.clone(),
            instance: id.clone(),
            expires_at: rfc3339(expires),
            active_leases: active,
        },
        format!("lease {lease_id} holds {id} until {}", rfc3339(expires)),
    ))
}

pub fn release(
    state: &Arc<VmState>,
    p: ReleaseParams,
    caller: &Caller,
) -> ToolResult<Reply<ReleaseResult>> {
    validate::writable(state)?;
    let mut map = state.lock();
    let visible: Vec<String> = map
        .keys()
        .filter(|k| crate::visible(&map, k, caller))
        .cloned()
        .collect();
    for inst in map.values_mut().filter(|i| visible.contains(&i.id)) {
        if inst.leases.remove(&p.lease_id).is_some() {
            inst.touch();
            let result = ReleaseResult {
                lease_id: p.lease_id.clone(),
                released: true,
                instance: inst.id.clone(),
                active_leases: inst.leases.len() as u64,
                idle_deadline: inst.idle_deadline().map(rfc3339),
                expired_at: None,
            };
            let text = format!(
                "lease {} released; {} leases left on {}",
                p.lease_id, result.active_leases, inst.id
            );
            return Ok(Reply::new(result, text));
        }
    }
    let expired = state.expired_leases.locked().get(&p.lease_id).cloned();
    match expired {
        Some((id, at)) => {
            let (active, deadline) = map
                .get(&id)
                .map(|i| (i.leases.len() as u64, i.idle_deadline().map(rfc3339)))
                .unwrap_or((0, None));
            Ok(Reply::new(
                ReleaseResult {
                    lease_id: p.lease_id.clone(),
                    released: false,
                    instance: id,
                    active_leases: active,
                    idle_deadline: deadline,
                    expired_at: Some(rfc3339(at)),
                },
                format!(
                    "lease {} had already expired at {}",
                    p.lease_id,
                    rfc3339(at)
                ),
            ))
        }
        None => Err(ToolError::new(
            ErrorCode::LeaseNotFound,
            format!("lease_id: no lease {}", p.lease_id),
        )
        .with_detail(json!({ "field": "lease_id" }))),
    }
}
