//! One server entry of a config file: its fields as written, the checks of its shape, and
//! `${VAR}` / `${VAR:-default}` expansion into a [`ServerSpec`] ready to start.

use std::collections::BTreeMap;

use serde::Deserialize;

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
    /// When the server starts: on its first call (`true`) or with the host (`false`). This
    /// binary's own families start on their first call unless `false` (their tools are
    /// compiled in); another server only when `true`, and only once the host has kept its
    /// catalog from an earlier start (its first start is with the host).
    #[serde(default)]
    pub lazy: Option<bool>,
    /// A server that started on its first call stops again after this many seconds without
    /// a call, and starts again on the next (0: never). Default: the `idle_stop_secs`
    /// setting for the families that keep nothing between calls (search, web, memory);
    /// never for the others — what they hold (files' read record, shell jobs, warm language
    /// servers, a debug session, instances, the bound issue, cron's scheduler) would be lost.
    #[serde(default)]
    pub idle_stop_secs: Option<u64>,
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

pub(crate) fn expand_spec(name: String, mut entry: ServerEntry) -> ServerSpec {
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
pub(crate) fn check_shape(entry: &ServerEntry) -> Result<(), EntryError> {
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
}
