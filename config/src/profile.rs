//! One agent profile of `agent.json` (`agents.<name>`), as written and as the policy uses it.
//!
//! `tools` takes two forms:
//!
//! - a list of tool names or globs: privileged tools granted individually (seed 003's
//!   individual overrides); every public tool stays available;
//! - seed 004's map `{"<tool or glob>": {"enabled": true | false}}`: the agent's whole tool
//!   set. It starts from the role's defaults (the root agent: the issue tools; every other
//!   agent: nothing), adds what `enabled: true` names and takes away what `enabled: false`
//!   names. An enabled tool is also granted, as in the list.
//!
//! Names and globs may be spelled as the seeds spell them: `file.*`, `search.grep`,
//! `kaged.issue.*` mean `file_*`, `search_grep`, `issue_*` — the mapping the host applies
//! to dotted tool names at call time (`kaged.` dropped, `.` → `_`).
//!
//! A root-only tool granted or enabled for an agent that is not the root is refused when the
//! config loads, naming the agent and the tool.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// The tools kitbag's servers declare root-only (`_meta` `kitbag/principal_scope`): every
/// tool of kitbag-issues but the checkpoint ones, and the host's workflow tools. Checked
/// against the tool catalogs in `manifests/` by a test.
pub const ROOT_ONLY_TOOLS: &[&str] = &[
    "ask",
    "form",
    "issue_bind",
    "issue_comment",
    "issue_create",
    "issue_get",
    "issue_list",
    "issue_transition",
    "issue_update",
    "todo",
    "workflow_list",
    "workflow_status",
    "workflow_trigger",
];

/// What the root agent has enabled before its `tools` map says anything (seed 004: the root
/// agent receives the issue and workflow tools by default),
/// and the questions to the operator (`ask`, `form`). These keys also turn every root-only
/// tool off, as a refusal advises.
/// Every other agent starts with none.
pub const ROOT_DEFAULTS: &[&str] = &["issue_*", "todo", "ask", "form", "workflow_*"];

/// The namespace seed 004 puts the issue, todo and workflow tools under.
const KAGED: &str = "kaged.";

/// A tool name or glob as kitbag spells it: seed 004's `kaged.` namespace dropped and `.`
/// made `_` (`file.*` → `file_*`, `kaged.issue.create` → `issue_create`), as the host
/// resolves dotted names in calls.
pub fn kitbag_glob(pattern: &str) -> String {
    pattern
        .strip_prefix(KAGED)
        .unwrap_or(pattern)
        .replace('.', "_")
}

/// Whether `name` matches one of `patterns`, each taken as written and as [`kitbag_glob`]
/// spells it (a server may offer dotted names of its own).
pub fn matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| {
        let one = |p: &str| {
            globset::Glob::new(p)
                .map(|g| g.compile_matcher().is_match(name))
                .unwrap_or(p == name)
        };
        one(p) || (p.contains('.') && one(&kitbag_glob(p)))
    })
}

/// What one agent may use (`kitbag serve --agent NAME`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentProfile {
    /// Allowlist of tool names (globs); absent = every tool the other rules permit.
    pub allow: Option<Vec<String>>,
    /// Privilege groups the agent belongs to.
    pub privilege_groups: Vec<String>,
    /// Privileged tools granted individually, beyond the groups (the list form of `tools`,
    /// or what the map form enables).
    pub tools: Vec<String>,
    /// The root principal may use root-only tools (`_meta` `kitbag/principal_scope: root-only`).
    pub root: bool,
    /// The map form of `tools`: the only tools this agent has (role defaults included);
    /// None for the list form, which leaves every public tool available.
    pub enabled: Option<Vec<String>>,
    /// What the map form turned off with `enabled: false`; wins over `enabled`.
    pub disabled: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    privilege_groups: Vec<String>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    root: bool,
}

/// An `agents` entry that cannot be read, in words naming the field and what to write.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProfileError(String);

const MAP_VALUE: &str = r#"each value is {"enabled": true} or {"enabled": false}"#;

impl AgentProfile {
    /// Read `agents.<name>`; errors name the field (`agents.coder.tools.file.*: …`).
    pub fn parse(name: &str, value: Value) -> Result<AgentProfile, ProfileError> {
        let raw: RawProfile = serde_json::from_value(value)
            .map_err(|e| ProfileError(format!("agents.{name}: {e}")))?;
        let mut p = AgentProfile {
            allow: raw.allow,
            privilege_groups: raw.privilege_groups,
            root: raw.root,
            ..Default::default()
        };
        match raw.tools {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => p.tools.push(s),
                        other => {
                            return Err(ProfileError(format!(
                                "agents.{name}.tools[{i}]: expected a tool name or glob (a string), found {other}"
                            )));
                        }
                    }
                }
            }
            Some(Value::Object(map)) => {
                let mut enabled: Vec<String> = if p.root {
                    ROOT_DEFAULTS.iter().map(|s| s.to_string()).collect()
                } else {
                    Vec::new()
                };
                for (key, v) in map {
                    let on = match &v {
                        Value::Object(o) if o.len() == 1 => {
                            o.get("enabled").and_then(Value::as_bool)
                        }
                        _ => None,
                    };
                    let Some(on) = on else {
                        return Err(ProfileError(format!(
                            "agents.{name}.tools.{key}: {MAP_VALUE}, found {v}"
                        )));
                    };
                    if key.trim().is_empty() {
                        return Err(ProfileError(format!(
                            "agents.{name}.tools: a key is empty; keys are tool names or globs such as \"file.*\""
                        )));
                    }
                    if on {
                        enabled.push(key.clone());
                        p.tools.push(key);
                    } else {
                        p.disabled.push(key);
                    }
                }
                p.enabled = Some(enabled);
            }
            Some(other) => {
                return Err(ProfileError(format!(
                    "agents.{name}.tools: expected a list of tool names (privileged tools granted one by one) or a map {{\"<tool or glob>\": {{\"enabled\": true}}}}, found {other}"
                )));
            }
        }
        Ok(p)
    }

    /// Whether this profile grants `tool` by name (the list form, or what the map form
    /// enables and does not disable).
    fn grants(&self, tool: &str) -> bool {
        matches(&self.tools, tool) && !matches(&self.disabled, tool)
    }

    /// The names and globs of `tools` and `allow` that match none of the `offered` tools: a
    /// grant that does nothing (seed 004's `"lsp.*"` — kitbag's language-server tool is
    /// `code_lsp`), reported by `kitbag doctor` rather than dropped without a word.
    pub fn unmatched<'a>(&'a self, offered: &[&str]) -> Vec<&'a str> {
        self.tools
            .iter()
            .chain(&self.disabled)
            .chain(self.allow.iter().flatten())
            .filter(|key| {
                !offered
                    .iter()
                    .any(|t| matches(std::slice::from_ref(*key), t))
            })
            .map(String::as_str)
            .collect()
    }

    /// The agent is not the root, yet its `tools` grant a root-only tool: the first such
    /// tool and the key that grants it.
    pub fn root_only_grant(&self) -> Option<(&'static str, &str)> {
        if self.root {
            return None;
        }
        ROOT_ONLY_TOOLS.iter().find_map(|tool| {
            if !self.grants(tool) {
                return None;
            }
            let key = self
                .tools
                .iter()
                .find(|k| matches(std::slice::from_ref(k), tool))?;
            Some((*tool, key.as_str()))
        })
    }
}

/// Read every profile of the `agents` block and refuse root-only tools on agents that are
/// not the root; errors name the agent and the tool.
pub fn parse_agents(
    agents: BTreeMap<String, Value>,
) -> Result<BTreeMap<String, AgentProfile>, ProfileError> {
    let mut out = BTreeMap::new();
    for (name, v) in agents {
        let profile = AgentProfile::parse(&name, v)?;
        if let Some((tool, key)) = profile.root_only_grant() {
            let fix = if profile.enabled.is_some() && key != tool && kitbag_glob(key) != tool {
                let off: Vec<String> = ROOT_DEFAULTS
                    .iter()
                    .map(|t| format!("\"{t}\": {{\"enabled\": false}}"))
                    .collect();
                format!(
                    "narrow the glob, turn the root-only tools off with {{{}}}, or make `{name}` the root agent with \"root\": true",
                    off.join(", ")
                )
            } else {
                format!("remove it, or make `{name}` the root agent with \"root\": true")
            };
            return Err(ProfileError(format!(
                "agents.{name}.tools: `{key}` grants `{tool}`, which is root-only, and agent `{name}` is not the root agent; {fix}"
            )));
        }
        out.insert(name, profile);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_globs_become_kitbag_globs() {
        assert_eq!(kitbag_glob("file.*"), "file_*");
        assert_eq!(kitbag_glob("kaged.issue.create"), "issue_create");
        assert_eq!(kitbag_glob("kaged.issue.*"), "issue_*");
        assert_eq!(kitbag_glob("search_grep"), "search_grep");
        let p = vec!["file.*".to_string()];
        assert!(matches(&p, "file_read") && matches(&p, "file_write"));
        assert!(!matches(&p, "search_grep"));
        // A dotted name a server offers itself still matches as written.
        assert!(matches(&["gh.pulls".to_string()], "gh.pulls"));
    }

    /// The list of root-only tools is the one kitbag's servers declare in their catalogs.
    #[test]
    fn root_only_tools_are_those_the_catalogs_declare() {
        let manifests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
        let mut declared = Vec::new();
        for family in std::fs::read_dir(&manifests).unwrap() {
            let path = family.unwrap().path().join("tools.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            for t in v["tools"].as_array().unwrap() {
                if t["_meta"]["kitbag/principal_scope"] == "root-only" {
                    declared.push(t["name"].as_str().unwrap().to_string());
                }
            }
        }
        // The host offers the workflow tools only when workflows are declared: its catalog,
        // made without any, does not list them.
        declared.extend(crate::workflow::TOOLS.iter().map(|t| t.to_string()));
        declared.sort();
        assert_eq!(declared, ROOT_ONLY_TOOLS);
    }

    #[test]
    fn a_map_value_that_is_not_enabled_says_what_to_write() {
        let e = AgentProfile::parse("coder", json!({"tools": {"file.*": true}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agents.coder.tools.file.*") && e.contains(r#"{"enabled": true}"#),
            "{e}"
        );
        let e = AgentProfile::parse("coder", json!({"tools": "file.*"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.coder.tools") && e.contains("map"), "{e}");
    }
}
