//! Per-agent tool policy (seed 003's privilege model plus an allowlist and root-only tools),
//! enforced both when listing and when calling.

use std::collections::BTreeMap;

use rmcp::model::Tool;

use crate::AgentProfile;
use crate::profile::matches;

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

    /// Each agent's grants that match none of the `offered` tools, as
    /// "agents.NAME.tools: `KEY` matches no tool" lines.
    pub fn unmatched(&self, offered: &[&str]) -> Vec<String> {
        self.policies
            .iter()
            .flat_map(|(name, p)| {
                p.profile.unmatched(offered).into_iter().map(move |key| {
                    format!("agents.{name}: `{key}` matches no tool this host offers")
                })
            })
            .collect()
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
        if let Some(enabled) = &self.profile.enabled {
            let why = if let Some(off) = self
                .profile
                .disabled
                .iter()
                .find(|k| matches(std::slice::from_ref(k), name))
            {
                Some(format!(
                    "its `tools` map turns it off (\"{off}\": {{\"enabled\": false}})"
                ))
            } else if !matches(enabled, name) {
                Some(format!(
                    "its `tools` map enables {}",
                    if enabled.is_empty() {
                        "nothing".to_string()
                    } else {
                        enabled.join(", ")
                    }
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err((
                    "capability_denied",
                    format!("{name} is not enabled for agent `{}`: {why}", self.agent),
                ));
            }
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
    #![allow(clippy::unwrap_used)]
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

    /// A config file on disk, loaded as the host loads it.
    fn load_text(name: &str, text: &str) -> anyhow::Result<crate::Config> {
        let dir = std::env::temp_dir().join(format!("kitbag-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("agent.json");
        std::fs::write(&path, text).expect("write");
        let cfg = crate::load(&path);
        let _ = std::fs::remove_dir_all(&dir);
        cfg
    }

    fn allowed(cfg: &crate::Config, agent: &str, name: &str) -> bool {
        let p = for_agent(cfg, Some(agent)).expect("agent").expect("policy");
        let root_only = crate::profile::ROOT_ONLY_TOOLS.contains(&name);
        p.check(&tool(name, root_only)).is_ok()
    }

    /// Seed 004's per-agent resolution, written in agent.json: the `tools` map with dotted
    /// globs gives the coder the file and search tools and nothing else.
    #[test]
    fn seed_tools_map_with_dotted_globs_loads_and_resolves() {
        let cfg = load_text(
            "map",
            r#"{
  "tool_privileges": {"writers": ["file_write", "edit_text"]},
  "agents": {
    "primary": {"root": true},
    "coder": {
      "tools": {
        "file.*": { "enabled": true },
        "search.*": { "enabled": true },
        "lsp.*": { "enabled": true }
      }
    }
  }
}"#,
        )
        .expect("the seed's tools map loads");
        for t in [
            "file_read",
            "file_write",
            "file_list",
            "search_grep",
            "search_glob",
        ] {
            assert!(allowed(&cfg, "coder", t), "coder gets {t}");
        }
        for t in ["shell_bash", "web_fetch", "edit_text", "issue_list", "todo"] {
            assert!(!allowed(&cfg, "coder", t), "coder does not get {t}");
        }
        let p = for_agent(&cfg, Some("coder")).unwrap().unwrap();
        let (code, why) = p.check(&tool("shell_bash", false)).unwrap_err();
        assert_eq!(code, "capability_denied");
        assert!(why.contains("file.*") && why.contains("`coder`"), "{why}");
        // `root: true` with `tools` omitted keeps kitbag's default: every tool.
        for t in ["file_read", "shell_bash", "issue_create"] {
            assert!(allowed(&cfg, "primary", t), "primary gets {t}");
        }
    }

    /// Role defaults (seed 004): with a `tools` map, the root agent starts from the issue
    /// tools, any other agent from nothing; `enabled: false` suppresses a default.
    #[test]
    fn a_tools_map_starts_from_the_role_defaults() {
        let cfg = load_text(
            "roles",
            r#"{"agents": {
  "primary": {"root": true, "tools": {}},
  "quiet": {"root": true, "tools": {"kaged.issue.*": {"enabled": false}, "file.read": {"enabled": true}}},
  "sub": {"tools": {}}
}}"#,
        )
        .expect("loads");
        assert!(allowed(&cfg, "primary", "issue_create") && allowed(&cfg, "primary", "todo"));
        assert!(!allowed(&cfg, "primary", "file_read"));
        assert!(!allowed(&cfg, "quiet", "issue_list"), "default suppressed");
        assert!(allowed(&cfg, "quiet", "todo") && allowed(&cfg, "quiet", "file_read"));
        let p = for_agent(&cfg, Some("quiet")).unwrap().unwrap();
        let why = p.check(&tool("issue_list", true)).unwrap_err().1;
        assert!(
            why.contains(r#""kaged.issue.*": {"enabled": false}"#),
            "{why}"
        );
        for t in ["file_read", "issue_list", "shell_bash"] {
            assert!(!allowed(&cfg, "sub", t), "sub gets nothing: {t}");
        }
    }

    /// Seed 004: enabling a root-only tool on a non-root agent is a load error naming the
    /// agent and the tool — in the map form, in the list form, and through a glob.
    #[test]
    fn root_only_tools_on_a_non_root_agent_are_refused_at_load() {
        let e = load_text(
            "rootonly",
            r#"{"agents": {"coder": {"tools": {
        "file.*": { "enabled": true },
        "kaged.issue.create": { "enabled": true }
}}}}"#,
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains("agents.coder.tools")
                && e.contains("`kaged.issue.create`")
                && e.contains("`issue_create`")
                && e.contains("root-only")
                && e.contains(r#""root": true"#),
            "{e}"
        );
        let e = load_text(
            "rootlist",
            r#"{"agents": {"helper": {"tools": ["issue_create"]}}}"#,
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains("`helper`") && e.contains("`issue_create`"),
            "{e}"
        );
        let e = load_text(
            "rootglob",
            r#"{"agents": {"helper": {"tools": {"*": {"enabled": true}}}}}"#,
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains("`*` grants `ask`") && e.contains(r#""form": {"enabled": false}"#),
            "{e}"
        );
        // Turning them off again, or being the root, loads.
        load_text(
            "rootok",
            r#"{"agents": {
  "helper": {"tools": {"*": {"enabled": true}, "issue.*": {"enabled": false}, "todo": {"enabled": false},
             "ask": {"enabled": false}, "form": {"enabled": false}, "workflow.*": {"enabled": false}}},
  "boss": {"root": true, "tools": ["issue_create"]}
}}"#,
        )
        .expect("loads");
    }

    /// The dotted spelling works in `allow` and `tool_privileges` too.
    #[test]
    fn dotted_globs_work_in_allow_and_privilege_groups() {
        let cfg = load_text(
            "allow",
            r#"{"tool_privileges": {"exec": ["shell.*"]},
  "agents": {"reader": {"allow": ["file.*", "shell.bash"]}, "runner": {"privilege_groups": ["exec"]}}}"#,
        )
        .expect("loads");
        assert!(allowed(&cfg, "reader", "file_read"));
        assert!(!allowed(&cfg, "reader", "search_grep"));
        assert!(
            !allowed(&cfg, "reader", "shell_bash"),
            "privileged: group exec"
        );
        assert!(allowed(&cfg, "runner", "shell_bash"));
    }
}
