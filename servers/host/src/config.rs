//! Host configuration: our `agent.json` (`mcp` block, strict) and the foreign formats
//! (Claude Code `.mcp.json`, Claude Desktop `mcpServers`, lenient), with `${VAR}` and
//! `${VAR:-default}` expansion in command, args, env and cwd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::settings::{FileSettings, Setting, Source};

/// One server entry as written in a config file.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// A local server: the program to run (stdio). Empty for a remote one.
    #[serde(default)]
    pub command: String,
    /// A remote server: its MCP Streamable HTTP endpoint (`https://…/mcp`), instead of
    /// `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers sent to a remote server (`${VAR}` expanded): an `Authorization: Bearer
    /// ${TOKEN}`, a tenant header, ….
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// TLS to a remote server: a CA to trust instead of the system's, and a client
    /// certificate for mutual TLS (a gateway reaching its runner).
    #[serde(default)]
    pub tls: Option<RemoteTls>,
    /// OAuth to a remote server: tokens from its authorization server (`kitbag auth login`,
    /// or the client-credentials grant), kept in the user's token store and refreshed.
    #[serde(default)]
    pub oauth: Option<RemoteOAuth>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Only these tools (globs) are offered.
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools (globs) are hidden.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// Prepended to every tool name of this server.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Original tool name → offered name.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    #[serde(default)]
    pub startup_timeout_sec: Option<u64>,
    #[serde(default)]
    pub tool_timeout_sec: Option<u64>,
}

fn yes() -> bool {
    true
}

/// A remote entry's `tls`: PEM files (`${VAR}` expanded).
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RemoteTls {
    /// Trust only this CA for the server's certificate.
    #[serde(default)]
    pub ca: Option<String>,
    /// The client certificate (chain) presented to the server.
    #[serde(default)]
    pub cert: Option<String>,
    /// The client certificate's key.
    #[serde(default)]
    pub key: Option<String>,
}

/// A remote entry's `oauth` (`${VAR}` expanded).
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RemoteOAuth {
    /// `authorization_code` (a person logs in with `kitbag auth login NAME`) or
    /// `client_credentials` (a service account: `client_id` + `client_secret`).
    #[serde(default)]
    pub grant: Grant,
    /// A client registered with the authorization server; without one, kitbag registers
    /// itself (RFC 7591) when the server allows it.
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Scopes to ask for (default: the server's `scopes_supported`).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// The server's canonical resource URL, when it is reached at another address (a
    /// port-forward, a proxy): its protected-resource metadata must name this one.
    #[serde(default)]
    pub resource: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    #[default]
    AuthorizationCode,
    ClientCredentials,
}

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
    #[serde(default)]
    agents: BTreeMap<String, AgentProfile>,
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
    max_tool_result_bytes: Option<u64>,
    #[serde(default)]
    memory: Option<crate::settings::MemorySettings>,
}

/// What one agent may use (`kitbag serve --agent NAME`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// Allowlist of tool names (globs); absent = every tool the other rules permit.
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    /// Privilege groups the agent belongs to.
    #[serde(default)]
    pub privilege_groups: Vec<String>,
    /// Privileged tools granted individually, beyond the groups.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The root principal may use root-only tools (`_meta` `kitbag/principal_scope: root-only`).
    #[serde(default)]
    pub root: bool,
}

/// A server ready to start: variables expanded, or the reason it cannot start.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub name: String,
    pub entry: ServerEntry,
    /// Set when expansion failed: the server is reported, not started.
    pub error: Option<String>,
    /// Set when the entry would start this host again (`recursion`): reported, not started.
    pub skipped: Option<String>,
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
        for (name, profile) in &file.agents {
            for g in &profile.privilege_groups {
                if !file.tool_privileges.contains_key(g) {
                    anyhow::bail!(
                        "{}: agents.{name}.privilege_groups: no group `{g}` in tool_privileges",
                        path.display()
                    );
                }
            }
        }
        agents = file.agents;
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
            max_tool_result_bytes: file.max_tool_result_bytes,
            memory: file.memory,
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
    })
}

/// Read a config file and apply the `KITBAG_*` overrides of the process environment.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut cfg = with_env(parse(path, &text)?, |k| std::env::var(k).ok())?;
    crate::recursion::skip_self_references(&mut cfg);
    Ok(cfg)
}

/// Resolve the settings (environment > file > default) and give every server without
/// its own timeouts the resolved ones.
pub fn with_env(mut cfg: Config, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
    cfg.settings = crate::settings::resolve(&cfg.file_settings, env)?;
    let secs = |key: &str| {
        crate::settings::get(&cfg.settings, key)
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

fn expand_spec(name: String, mut entry: ServerEntry) -> ServerSpec {
    let mut error = None;
    let mut exp = |s: &str, what: &str| match expand(s) {
        Ok(v) => v,
        Err(UnsetVar(var)) => {
            error.get_or_insert(
                EntryError::Unset {
                    field: what.to_owned(),
                    var,
                }
                .to_string(),
            );
            s.to_string()
        }
    };
    entry.command = exp(&entry.command, "command");
    entry.args = entry.args.iter().map(|a| exp(a, "args")).collect();
    entry.env = entry
        .env
        .iter()
        .map(|(k, v)| (k.clone(), exp(v, &format!("env.{k}"))))
        .collect();
    entry.cwd = entry.cwd.as_ref().map(|c| exp(c, "cwd"));
    entry.url = entry.url.as_ref().map(|u| exp(u, "url"));
    entry.headers = entry
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), exp(v, &format!("headers.{k}"))))
        .collect();
    if let Some(tls) = &mut entry.tls {
        for (field, value) in [
            ("tls.ca", &mut tls.ca),
            ("tls.cert", &mut tls.cert),
            ("tls.key", &mut tls.key),
        ] {
            *value = value.as_ref().map(|v| exp(v, field));
        }
    }
    if let Some(oauth) = &mut entry.oauth {
        for (field, value) in [
            ("oauth.client_id", &mut oauth.client_id),
            ("oauth.client_secret", &mut oauth.client_secret),
            ("oauth.resource", &mut oauth.resource),
        ] {
            *value = value.as_ref().map(|v| exp(v, field));
        }
    }
    if error.is_none() {
        error = check_remote(&entry).err().map(|e| e.to_string());
    }
    ServerSpec {
        name,
        entry,
        error,
        skipped: None,
    }
}

/// Why a server entry is refused (its shape) or cannot start (its expanded fields).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EntryError {
    #[error("give `command` (a local server) or `url` (a remote one)")]
    Neither,
    #[error("`command` and `url` both given: one server is one or the other")]
    Both,
    #[error("`headers`, `tls` and `oauth` apply to a remote server (`url`), not a command")]
    HeadersOnCommand,
    #[error("oauth: the token comes from the authorization server; remove headers.Authorization")]
    OAuthAndBearer,
    #[error("oauth: the client_credentials grant needs `client_id` and `client_secret`")]
    ClientCredentialsNeedSecret,
    #[error("tls: `cert` and `key` go together (a client certificate and its key)")]
    TlsPair,
    #[error("tls: applies to an https:// url")]
    TlsOnHttp,
    #[error("`args`, `env` and `cwd` apply to a command, not a remote `url`")]
    CommandFieldsOnUrl,
    #[error("url `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("url `{url}`: expected http:// or https://HOST/PATH")]
    NotHttp { url: String },
    #[error("headers: `{name}` is not a header name")]
    BadHeaderName { name: String },
    #[error("headers.{name}: not a valid header value")]
    BadHeaderValue { name: String },
    #[error("{field}: ${{{var}}} is not set and has no default (write ${{{var}:-default}})")]
    Unset { field: String, var: String },
}

/// `${VAR}` without a default, and `VAR` unset: [`expand`]'s refusal, naming the variable.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("${{{0}}} is not set")]
pub struct UnsetVar(pub String);

/// A local server names a `command`, a remote one a `url` — never both, never neither — and
/// each takes only its own fields. A config breaking this is refused whole (a reload changes
/// nothing), like one with an unknown field.
fn check_shape(entry: &ServerEntry) -> Result<(), EntryError> {
    match (&entry.url, entry.command.is_empty()) {
        (None, true) => Err(EntryError::Neither),
        (Some(_), false) => Err(EntryError::Both),
        (None, false)
            if !entry.headers.is_empty() || entry.tls.is_some() || entry.oauth.is_some() =>
        {
            Err(EntryError::HeadersOnCommand)
        }
        (Some(_), true)
            if !entry.args.is_empty() || !entry.env.is_empty() || entry.cwd.is_some() =>
        {
            Err(EntryError::CommandFieldsOnUrl)
        }
        _ => Ok(()),
    }
}

/// A remote entry's URL and headers, once expanded: http(s) with a host, valid headers.
fn check_remote(entry: &ServerEntry) -> Result<(), EntryError> {
    let Some(url) = &entry.url else { return Ok(()) };
    let parsed = url::Url::parse(url).map_err(|e| EntryError::BadUrl {
        url: url.clone(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(EntryError::NotHttp { url: url.clone() });
    }
    if let Some(tls) = &entry.tls {
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(EntryError::TlsPair);
        }
        if parsed.scheme() != "https" {
            return Err(EntryError::TlsOnHttp);
        }
    }
    if let Some(oauth) = &entry.oauth {
        if entry
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return Err(EntryError::OAuthAndBearer);
        }
        if oauth.grant == Grant::ClientCredentials
            && (oauth.client_id.is_none() || oauth.client_secret.is_none())
        {
            return Err(EntryError::ClientCredentialsNeedSecret);
        }
    }
    for (name, value) in &entry.headers {
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| EntryError::BadHeaderName { name: name.clone() })?;
        http::HeaderValue::from_str(value)
            .map_err(|_| EntryError::BadHeaderValue { name: name.clone() })?;
    }
    Ok(())
}

/// Expand `${VAR}` and `${VAR:-default}`; an unset variable without default is refused.
pub fn expand(s: &str) -> Result<String, UnsetVar> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(var), default) {
            (Ok(v), _) if !v.is_empty() || default.is_none() => out.push_str(&v),
            (_, Some(d)) => out.push_str(d),
            (Err(_), None) => return Err(UnsetVar(var.to_string())),
            (Ok(v), None) => out.push_str(&v),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_rules() {
        // SAFETY-free: tests use unique variable names.
        assert_eq!(
            expand("a-${KITBAG_TEST_UNSET_1:-dflt}-b"),
            Ok("a-dflt-b".into())
        );
        assert_eq!(
            expand("${KITBAG_TEST_UNSET_2}"),
            Err(UnsetVar("KITBAG_TEST_UNSET_2".into()))
        );
        assert_eq!(expand("no vars"), Ok("no vars".into()));
        assert_eq!(expand("${PATH}").map(|p| !p.is_empty()), Ok(true));
    }

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

    #[test]
    fn the_example_config_is_valid() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent.json.example");
        let text = std::fs::read_to_string(&p).expect("agent.json.example");
        let c = parse(&p, &text).expect("valid");
        let names: Vec<&str> = c.servers.iter().map(|s| s.name.as_str()).collect();
        for family in crate::families::FAMILIES.iter().map(|(n, _)| *n) {
            assert!(
                names.contains(&family),
                "{family} missing from agent.json.example"
            );
        }
        assert_eq!(c.file_settings.max_tokens, Some(8192));
    }
}
