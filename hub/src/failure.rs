//! Why the hub could not start a child or finish a call through it. The texts are what a
//! client sees (a call's error result, `host_status`'s `last_error`), so each variant words one
//! situation and names the server.

use std::time::Duration;

use crate::oauth_client::OAuthError;
use crate::oauth_client::Store;
use crate::remote::RemoteError;

/// How long a reload lets a removed or changed child finish the calls it is answering before
/// stopping it. A child may answer and then ask for the reload itself (kitbag-vm's
/// `self_restart` sends SIGHUP right after its answer): that answer must not be lost. Bounded,
/// so a call that never ends cannot keep a server the config no longer names alive.
pub const RELOAD_DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// What a call that lost its server says when a reload stopped it.
pub fn stopped_by_reload_message(server: &str) -> String {
    format!(
        "server {server} was stopped by a configuration reload before this call finished (a removed or changed server gets {} s to finish its calls); the call did not complete",
        RELOAD_DRAIN_LIMIT.as_secs()
    )
}

/// A child that did not start (spawn, handshake, tools/list, the startup timeout).
#[derive(Debug, thiserror::Error)]
pub enum StartFailure {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("the child's stdio could not be captured")]
    NoStdio,
    /// `said`: the first lines of the child's stderr, when it wrote any before exiting.
    #[error("MCP handshake failed: {reason}{}", said.as_deref().map(|s| format!("; the server said: {s}")).unwrap_or_default())]
    Handshake {
        reason: String,
        said: Option<String>,
    },
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("tools/list failed: {0}")]
    ToolsList(String),
    #[error("did not finish starting (handshake and tools/list) within {secs} s")]
    Timeout { secs: u64 },
}

impl StartFailure {
    /// The token file whose appearance means the user logged in, when this failure says
    /// they must (`kitbag auth login NAME`).
    pub fn awaited_login(&self) -> Option<std::path::PathBuf> {
        match self {
            StartFailure::Remote(RemoteError::OAuth(OAuthError::LoginNeeded {
                resource, ..
            })) => Store::for_user().ok().map(|s| s.path_of(resource)),
            _ => None,
        }
    }
}

/// A call that ended at the hub, not with the child's own answer.
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    #[error("the server of this tool was removed by a reload")]
    Removed,
    #[error("server {name} is restarting; try again in a few seconds")]
    Restarting { name: String },
    #[error("server {name} is not running")]
    NotRunning { name: String },
    #[error("the request was cancelled")]
    Cancelled,
    #[error("{}", stopped_by_reload_message(name))]
    StoppedByReload { name: String },
    #[error(
        "server {name} exited during the call; it is being restarted — the call did not complete"
    )]
    Exited { name: String },
    #[error("server {name} answered with an unexpected result: {result}")]
    Unexpected { name: String, result: String },
    #[error("server {name}: {reason}")]
    Service { name: String, reason: String },
}

impl CallFailure {
    /// The error code of the call's result.
    pub fn code(&self) -> &'static str {
        match self {
            CallFailure::Cancelled => "cancelled",
            _ => "server_unavailable",
        }
    }
}

/// A reload (`host_reload`, SIGHUP) that changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadFailure {
    #[error("this host has no configuration to reload")]
    NoConfig,
    #[error("the configuration could not be read; nothing changed: {0}")]
    Unreadable(anyhow::Error),
    /// The agent this host serves is no longer valid in the new file.
    #[error("{0}; nothing changed")]
    Agent(anyhow::Error),
}
