//! Who may list and call what: the caller of the request being served (an HTTP token's
//! agent and tiers) and the agent policy in force (`--agent`, replaced on reload).
//!
//! Every front asks here — the tool list, the call pipeline on either transport, prompts
//! and resources — so a tool hidden from a caller is also refused to it.

use std::sync::{Arc, RwLock};

use kitbag_config::policy::{Agents, Denial, Policy};
use kitbag_shared::http::Principal;
use kitbag_shared::lock::RwLockExt;
use kitbag_shared::tier::{self, Tier};
use rmcp::model::Tool;

use crate::registry::FlatList;

tokio::task_local! {
    /// The caller of the HTTP request being served: its token's agent and tiers decide what
    /// it may list and call (`kitbag_shared::http::auth`). Unset over stdio and for the loop.
    static CALLER: Option<Principal>;
}

/// Run `work` as `caller`'s request.
pub async fn as_caller<F: std::future::Future>(caller: Option<Principal>, work: F) -> F::Output {
    CALLER.scope(caller, work).await
}

/// [`as_caller`] for synchronous work (the byte path's start).
pub fn as_caller_sync<R>(caller: Option<Principal>, work: impl FnOnce() -> R) -> R {
    CALLER.sync_scope(caller, work)
}

/// The caller of the request being served, if it came with a token.
pub fn caller() -> Option<Principal> {
    CALLER.try_with(Clone::clone).ok().flatten()
}

/// The agent policies in force; cheap to clone (the host's handles share them).
#[derive(Clone, Default)]
pub struct Access {
    /// The agent profile of `--agent`; None = every tool.
    configured: Arc<RwLock<Option<Arc<Policy>>>>,
    /// Every profile of the config, for HTTP callers whose token names their agent.
    agents: Arc<RwLock<Agents>>,
}

impl Access {
    pub fn new(configured: Option<Arc<Policy>>, agents: Agents) -> Self {
        Access {
            configured: Arc::new(RwLock::new(configured)),
            agents: Arc::new(RwLock::new(agents)),
        }
    }

    /// The agent policy of this call: the caller's token's agent, else `--agent`'s.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        if let Some(agent) = caller().and_then(|c| c.agent) {
            return Some(self.agents.read_locked().policy(&agent));
        }
        self.configured.read_locked().clone()
    }

    /// The name of this call's agent, for the audit log.
    pub fn agent_name(&self) -> Option<String> {
        self.policy().map(|p| p.agent.clone())
    }

    /// The `--agent` profile's name (a reload re-reads that profile).
    pub fn configured_agent(&self) -> Option<String> {
        self.configured
            .read_locked()
            .as_ref()
            .map(|p| p.agent.clone())
    }

    /// Replace the `--agent` policy (a reload; the agent loop switching packs).
    pub fn set_configured(&self, policy: Option<Arc<Policy>>) {
        *self.configured.write_locked() = policy;
    }

    /// Replace every profile (a reload).
    pub fn set_agents(&self, agents: Agents) {
        *self.agents.write_locked() = agents;
    }

    /// The agents' grants that match none of the `offered` tools (`kitbag doctor`).
    pub fn unmatched_grants(&self, offered: &[&str]) -> Vec<String> {
        self.agents.read_locked().unmatched(offered)
    }

    /// Check a call of the child tool offered as `name` against the policy and the caller's
    /// tiers; Err is the error result to return. A name no child offers passes (the caller
    /// learns it is unknown).
    pub fn permit(&self, flat: &FlatList, name: &str) -> Result<(), Denial> {
        let policy = self.policy();
        let caller = caller();
        if policy.is_none() && caller.is_none() {
            return Ok(());
        }
        offered(flat, name, |tool| {
            tier_permits(tool, caller.as_ref())?;
            policy.map_or(Ok(()), |p| p.check(tool))
        })
        .unwrap_or(Ok(()))
    }

    /// A host tool (`host_status`, `host_reload`) for this call's caller: the tier its token
    /// grants, and the agent policy unless `policy_exempt`.
    pub fn permit_own(&self, tool: &Tool, policy_exempt: bool) -> Result<(), Denial> {
        tier_permits(tool, caller().as_ref())?;
        match self.policy() {
            Some(p) if !policy_exempt || p.is_unknown() => p.check(tool),
            _ => Ok(()),
        }
    }

    /// Whether this call's caller sees every tool: no agent policy, no caller's tiers.
    pub fn sees_all(&self) -> bool {
        self.policy().is_none() && caller().is_none()
    }

    /// Whether this call's caller may see and call `tool` (agent policy and tiers).
    pub fn visible(&self, tool: &Tool) -> bool {
        self.policy().is_none_or(|p| p.check(tool).is_ok())
            && tier_permits(tool, caller().as_ref()).is_ok()
    }
}

/// Ok when the caller's token grants the tier `tool` needs (always over stdio).
pub fn tier_permits(tool: &Tool, caller: Option<&Principal>) -> Result<(), Denial> {
    let Some(caller) = caller else { return Ok(()) };
    let tier = tier::of_tool(tool);
    if caller.allows(tier) {
        return Ok(());
    }
    let granted: Vec<&str> = caller
        .tiers
        .iter()
        .flatten()
        .map(|t: &Tier| t.as_str())
        .collect();
    Err((
        "capability_denied",
        format!(
            "{} needs the `{tier}` tier; the caller's token grants {}",
            tool.name,
            if granted.is_empty() {
                "none".to_string()
            } else {
                granted.join(", ")
            }
        ),
    ))
}

/// `look` at the child tool a call names (its offered name, or the name sanitized as the
/// flat list offers it); None when no child offers it.
pub fn offered<R>(flat: &FlatList, name: &str, look: impl FnOnce(&Tool) -> R) -> Option<R> {
    let offered = if flat.routes.contains_key(name) {
        name.to_string()
    } else {
        crate::registry::sanitize(name)
    };
    flat.tools().iter().find(|t| t.name == offered).map(look)
}
