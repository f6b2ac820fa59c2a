//! Host configuration: our `agent.json` (`mcp` block, strict) and the foreign formats
//! (Claude Code `.mcp.json`, Claude Desktop `mcpServers`, lenient), with `${VAR}` and
//! `${VAR:-default}` expansion in command, args, env and cwd.
//!
//! The crate is agent.json as the host and the agent loop read it: the server entries
//! (`entry`), the top-level settings and their `KITBAG_*` overrides (`settings`), the agent
//! profiles' tool policy (`policy`), and the rule that the host never starts itself
//! (`recursion`). It knows nothing of running servers or models.

pub mod entry;
pub mod policy;
pub mod profile;
pub mod recursion;
pub mod settings;
pub mod workflow;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::entry::{ServerEntry, ServerSpec, check_shape, expand_spec};
use crate::settings::{FileSettings, Setting, Source};

pub use crate::profile::AgentProfile;

/// Foreign entries: extra fields (description, ...) are ignored.
#[derive(Debug, Clone, Deserialize)]
struct ForeignEntry {
    #[serde(default)]
    command: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `stdio`, `http` (Streamable HTTP) or `sse` (the retired HTTP+SSE transport).
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    #[serde(default)]
    mcp: serde_json::Map<String, serde_json::Value>,
    /// Agent profiles, read by [`profile::parse_agents`] (two forms of `tools`).
    #[serde(default)]
    agents: BTreeMap<String, serde_json::Value>,
    /// Privilege groups: group name → tool names (globs) that only its members may use.
    #[serde(default)]
    tool_privileges: BTreeMap<String, Vec<String>>,
    // Top-level settings; `KITBAG_*` variables override them (see `settings`).
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    router_model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    context_chars: Option<u64>,
    #[serde(default)]
    context_turns: Option<u64>,
    #[serde(default)]
    context_window: Option<u64>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    startup_timeout_sec: Option<u64>,
    #[serde(default)]
    tool_timeout_sec: Option<u64>,
    #[serde(default)]
    idle_stop_secs: Option<u64>,
    #[serde(default)]
    busy_poll_us: Option<u64>,
    #[serde(default)]
    max_tool_result_bytes: Option<u64>,
    #[serde(default)]
    memory: Option<settings::MemorySettings>,
    #[serde(default)]
    prompt_includes: Option<settings::PromptIncludeSettings>,
    /// Declared workflows, read by [`workflow::parse_map`].
    #[serde(default)]
    workflows: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default)]
pub struct Config {
    /// In config order (which decides tool-name collisions).
    pub servers: Vec<ServerSpec>,
    pub source: Option<PathBuf>,
    pub agents: BTreeMap<String, AgentProfile>,
    pub tool_privileges: BTreeMap<String, Vec<String>>,
    /// Top-level settings as the file wrote them.
    pub file_settings: FileSettings,
    /// The settings in force after `KITBAG_*` overrides (filled by [`with_env`]).
    pub settings: Vec<Setting>,
    /// The file has a server list (`mcp`, or a foreign `mcpServers`), empty or not. Without
    /// one the host serves its embedded default; `"mcp": {}` means no server.
    pub servers_given: bool,
    /// The workflows the file declares (`.kitbag/workflows/` adds more: [`workflow::with_files`]).
    pub workflows: Vec<workflow::Workflow>,
}

/// Where a config error is: file, line, column.
fn syntax_error(path: &Path, e: &serde_json::Error) -> anyhow::Error {
    anyhow::anyhow!("{}:{}:{}: {}", path.display(), e.line(), e.column(), e)
}

/// Parse a config file's text: our `mcp` format or a foreign `mcpServers` one.
pub fn parse(path: &Path, text: &str) -> anyhow::Result<Config> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| syntax_error(path, &e))?;
    let mut servers = Vec::new();
    let (mut agents, mut tool_privileges) = (BTreeMap::new(), BTreeMap::new());
    let mut file_settings = FileSettings::default();
    let servers_given = value.get("mcp").is_some() || value.get("mcpServers").is_some();
    let mut workflows = Vec::new();
    if value.get("mcpServers").is_some() && value.get("mcp").is_none() {
        let map = value["mcpServers"].as_object().cloned().unwrap_or_default();
        for (name, v) in map {
            let f: ForeignEntry = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: mcpServers.{name}: {e}", path.display()))?;
            if f.kind.as_deref() == Some("sse") {
                anyhow::bail!(
                    "{}: mcpServers.{name}: type `sse`: the retired HTTP+SSE transport is not spoken; give the server's Streamable HTTP endpoint (usually …/mcp)",
                    path.display()
                );
            }
            let entry = ServerEntry {
                command: f.command,
                url: f.url,
                headers: f.headers,
                args: f.args,
                env: f.env,
                cwd: f.cwd,
                enabled: true,
                ..Default::default()
            };
            check_shape(&entry)
                .map_err(|e| anyhow::anyhow!("{}: mcpServers.{name}: {e}", path.display()))?;
            servers.push(expand_spec(name, entry));
        }
    } else {
        let file: AgentFile = serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let profiles = profile::parse_agents(file.agents)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for (name, profile) in &profiles {
            for g in &profile.privilege_groups {
                if !file.tool_privileges.contains_key(g) {
                    anyhow::bail!(
                        "{}: agents.{name}.privilege_groups: no group `{g}` in tool_privileges",
                        path.display()
                    );
                }
            }
        }
        agents = profiles;
        workflows = workflow::parse_map(file.workflows)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        tool_privileges = file.tool_privileges;
        file_settings = FileSettings {
            model: file.model,
            router_model: file.router_model,
            max_tokens: file.max_tokens,
            context_chars: file.context_chars,
            context_turns: file.context_turns,
            context_window: file.context_window,
            system_prompt: file.system_prompt,
            startup_timeout_sec: file.startup_timeout_sec,
            tool_timeout_sec: file.tool_timeout_sec,
            idle_stop_secs: file.idle_stop_secs,
            busy_poll_us: file.busy_poll_us,
            max_tool_result_bytes: file.max_tool_result_bytes,
            memory: file.memory,
            prompt_includes: file.prompt_includes,
        };
        for (name, v) in file.mcp {
            let entry: ServerEntry = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: mcp.{name}: {e}", path.display()))?;
            check_shape(&entry)
                .map_err(|e| anyhow::anyhow!("{}: mcp.{name}: {e}", path.display()))?;
            servers.push(expand_spec(name, entry));
        }
    }
    Ok(Config {
        servers,
        source: Some(path.to_path_buf()),
        agents,
        tool_privileges,
        file_settings,
        settings: Vec::new(),
        servers_given,
        workflows,
    })
}

/// Read a config file and apply the `KITBAG_*` overrides of the process environment.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut cfg = with_env(parse(path, &text)?, |k| std::env::var(k).ok())?;
    crate::recursion::skip_self_references(&mut cfg.servers);
    Ok(cfg)
}

/// Resolve the settings (environment > file > default) and give every server without
/// its own timeouts the resolved ones.
pub fn with_env(mut cfg: Config, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
    cfg.settings = settings::resolve(&cfg.file_settings, env)?;
    let secs = |key: &str| {
        settings::get(&cfg.settings, key)
            .filter(|s| s.source != Source::Default)
            .and_then(|s| s.value.as_u64())
    };
    let (startup, tool) = (secs("startup_timeout_sec"), secs("tool_timeout_sec"));
    // kitbag-memory reads its limit from the environment: `memory.max_total` reaches every
    // child that does not set its own.
    let max_total = secs("memory.max_total");
    for spec in &mut cfg.servers {
        spec.entry.startup_timeout_sec = spec.entry.startup_timeout_sec.or(startup);
        spec.entry.tool_timeout_sec = spec.entry.tool_timeout_sec.or(tool);
        if let Some(n) = max_total {
            spec.entry
                .env
                .entry("KITBAG_MEMORY_MAX_TOTAL".into())
                .or_insert_with(|| n.to_string());
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_json_strict_foreign_lenient() {
        let p = Path::new("agent.json");
        let c = parse(p, r#"{"mcp": {"files": {"command": "kitbag-files", "args": ["--root", "${KITBAG_TEST_UNSET_3:-.}"]}}}"#).expect("ok");
        assert_eq!(c.servers[0].entry.args, ["--root", "."]);
        let e = parse(
            p,
            r#"{"mcp": {"files": {"command": "x", "colour": "red"}}}"#,
        )
        .expect_err("unknown field");
        assert!(e.to_string().contains("colour"), "{e}");
        let e = parse(
            p,
            "{\n  \"mcp\": {\n    \"files\": {\"command\": \"x\",}\n  }\n}",
        )
        .expect_err("syntax");
        assert!(e.to_string().starts_with("agent.json:3:"), "{e}");
        let c = parse(
            Path::new(".mcp.json"),
            r#"{"mcpServers": {"gh": {"type": "stdio", "command": "gh-mcp", "description": "x"}}}"#,
        )
        .expect("ok");
        assert_eq!(c.servers[0].entry.command, "gh-mcp");
        let c = parse(
            p,
            r#"{"mcp": {"s": {"command": "${KITBAG_TEST_UNSET_4}"}}}"#,
        )
        .expect("parsed");
        assert!(
            c.servers[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("KITBAG_TEST_UNSET_4"))
        );
    }
}
