//! Per-agent tool policy (seed 003's privilege model plus an allowlist and root-only tools),
//! enforced both when listing and when calling.

use std::collections::BTreeMap;

use rmcp::model::Tool;

use crate::AgentProfile;

/// The `_meta` key a server uses to declare a tool root-only.
pub const PRINCIPAL_SCOPE: &str = "kitbag/principal_scope";

#[derive(Debug, Clone)]
pub struct Policy {
    pub agent: String,
    profile: AgentProfile,
    privileges: BTreeMap<String, Vec<String>>,
    /// Named by a token but absent from the config: every tool refused, with the names
    /// that exist.
    unknown: Option<String>,
}

/// Every agent profile of the config as a policy, for tokens that name their agent
/// (`--oauth-agent-claim`). Rebuilt on reload.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    policies: BTreeMap<String, std::sync::Arc<Policy>>,
}

impl Agents {
    pub fn new(cfg: &crate::Config) -> Self {
        let policies = cfg
            .agents
            .iter()
            .map(|(name, profile)| {
                let policy = Policy::new(name, profile.clone(), cfg.tool_privileges.clone());
                (name.clone(), std::sync::Arc::new(policy))
            })
            .collect();
        Self { policies }
    }

    /// The policy of `agent`; an agent the config does not define may call nothing.
    pub fn policy(&self, agent: &str) -> std::sync::Arc<Policy> {
        match self.policies.get(agent) {
            Some(p) => p.clone(),
            None => std::sync::Arc::new(Policy {
                agent: agent.to_string(),
                profile: AgentProfile::default(),
                privileges: BTreeMap::new(),
                unknown: Some(if self.policies.is_empty() {
                    "none".to_string()
                } else {
                    self.policies.keys().cloned().collect::<Vec<_>>().join(", ")
                }),
            }),
        }
    }
}

/// Why a tool is refused: the error code and a sentence.
pub type Denial = (&'static str, String);

fn matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| {
        globset::Glob::new(p)
            .map(|g| g.compile_matcher().is_match(name))
            .unwrap_or(p == name)
    })
}

impl Policy {
    pub fn new(
        agent: &str,
        profile: AgentProfile,
        privileges: BTreeMap<String, Vec<String>>,
    ) -> Self {
        Self {
            agent: agent.to_string(),
            profile,
            privileges,
            unknown: None,
        }
    }

    /// Named by a token but not defined by the config.
    pub fn is_unknown(&self) -> bool {
        self.unknown.is_some()
    }

    /// Ok when this agent may see and call `tool`.
    pub fn check(&self, tool: &Tool) -> Result<(), Denial> {
        let name = tool.name.as_ref();
        if let Some(known) = &self.unknown {
            return Err((
                "capability_denied",
                format!(
                    "the caller's token names agent `{}`, which this host's config does not define (agents: {known})",
                    self.agent
                ),
            ));
        }
        let root_only = tool
            .meta
            .as_ref()
            .and_then(|m| m.0.get(PRINCIPAL_SCOPE))
            .is_some_and(|v| v.as_str() == Some("root-only"));
        if root_only && !self.profile.root {
            return Err((
                "principal_scope_violation",
                format!(
                    "{name} is root-only; agent `{}` is not the root principal",
                    self.agent
                ),
            ));
        }
        if let Some(allow) = &self.profile.allow
            && !matches(allow, name)
        {
            return Err((
                "capability_denied",
                format!("{name} is not in agent `{}`'s allowlist", self.agent),
            ));
        }
        let groups: Vec<&String> = self
            .privileges
            .iter()
            .filter(|(_, tools)| matches(tools, name))
            .map(|(g, _)| g)
            .collect();
        let privileged = !groups.is_empty();
        let granted = groups
            .iter()
            .any(|g| self.profile.privilege_groups.contains(g))
            || matches(&self.profile.tools, name);
        if privileged && !granted {
            return Err((
                "capability_denied",
                format!(
                    "{name} needs privilege group {}; agent `{}` has {}",
                    groups
                        .iter()
                        .map(|g| g.as_str())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    self.agent,
                    if self.profile.privilege_groups.is_empty() {
                        "none".to_string()
                    } else {
                        self.profile.privilege_groups.join(", ")
                    }
                ),
            ));
        }
        Ok(())
    }
}

/// The policy of `agent` in `cfg` (None without `--agent`), or why there is none.
pub fn for_agent(
    cfg: &crate::Config,
    agent: Option<&str>,
) -> anyhow::Result<Option<std::sync::Arc<Policy>>> {
    let Some(name) = agent else { return Ok(None) };
    match cfg.agents.get(name) {
        Some(profile) => Ok(Some(std::sync::Arc::new(Policy::new(
            name,
            profile.clone(),
            cfg.tool_privileges.clone(),
        )))),
        None => anyhow::bail!(
            "--agent {name}: no such agent in the config (agents: {})",
            cfg.agents.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, root_only: bool) -> Tool {
        let mut t = Tool::new(
            name.to_string(),
            "d",
            std::sync::Arc::new(serde_json::Map::new()),
        );
        if root_only {
            let mut m = serde_json::Map::new();
            m.insert(PRINCIPAL_SCOPE.into(), "root-only".into());
            t = t.with_meta(rmcp::model::MetaObject(m));
        }
        t
    }

    #[test]
    fn public_privileged_allowlisted_and_root_only() {
        let privileges = BTreeMap::from([(
            "writers".to_string(),
            vec!["file_write".to_string(), "edit_*".to_string()],
        )]);
        let reader = Policy::new("reader", AgentProfile::default(), privileges.clone());
        assert!(reader.check(&tool("file_read", false)).is_ok(), "public");
        assert_eq!(
            reader.check(&tool("edit_text", false)).map_err(|d| d.0),
            Err("capability_denied")
        );
        assert_eq!(
            reader.check(&tool("issue_create", true)).map_err(|d| d.0),
            Err("principal_scope_violation")
        );
        let writer = Policy::new(
            "w",
            AgentProfile {
                privilege_groups: vec!["writers".into()],
                ..Default::default()
            },
            privileges.clone(),
        );
        assert!(writer.check(&tool("edit_text", false)).is_ok());
        let one = Policy::new(
            "o",
            AgentProfile {
                tools: vec!["file_write".into()],
                ..Default::default()
            },
            privileges.clone(),
        );
        assert!(
            one.check(&tool("file_write", false)).is_ok(),
            "individual override"
        );
        assert!(one.check(&tool("edit_text", false)).is_err());
        let narrow = Policy::new(
            "n",
            AgentProfile {
                allow: Some(vec!["search_*".into()]),
                root: true,
                ..Default::default()
            },
            privileges,
        );
        assert!(narrow.check(&tool("search_grep", false)).is_ok());
        assert!(narrow.check(&tool("file_read", false)).is_err());
        assert!(
            narrow.check(&tool("search_root", true)).is_ok(),
            "root may use root-only tools"
        );
    }

    #[test]
    fn a_token_naming_an_undefined_agent_may_call_nothing() {
        let agents = Agents::default();
        let (code, message) = agents
            .policy("ghost")
            .check(&tool("file_read", false))
            .expect_err("denied");
        assert_eq!(code, "capability_denied");
        assert!(
            message.contains("`ghost`") && message.contains("agents: none"),
            "{message}"
        );
    }
}
