//! [`AdapterFailure`]: why the inspector bridge could not start or reach a runtime, or answer
//! a request. Its text is what the client sees — a DAP response's `message`, which the debug
//! tool passes on — so every variant words one situation.

use std::path::PathBuf;

use tokio_tungstenite::tungstenite;

#[derive(Debug, thiserror::Error)]
pub enum AdapterFailure {
    // ---- the runtime binary and its start (process.rs)
    /// `KITBAG_DAP_NODE` / `KITBAG_DAP_BUN` names something that is not a file.
    #[error("{var}={} is not a file", .path.display())]
    NotAFile { var: &'static str, path: PathBuf },
    #[error("{name} is not installed ({install})")]
    NotInstalled {
        name: &'static str,
        install: &'static str,
    },
    #[error(
        "{} is Node {major}.{minor}, which cannot run TypeScript; Node 22.6 or later strips types (set KITBAG_DAP_NODE to one)",
        .bin.display()
    )]
    NoTypeScript {
        bin: PathBuf,
        major: u32,
        minor: u32,
    },
    #[error("cannot start {}: {source}", .bin.display())]
    Spawn {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("no stderr")]
    NoStderr,
    /// The runtime ended before printing its inspector address; `output` is what it printed.
    #[error("{} exited ({status}) before its inspector listened: {output}", .bin.display())]
    ExitedEarly {
        bin: PathBuf,
        status: String,
        output: String,
    },
    #[error("{} did not open its inspector within {secs}s", .bin.display())]
    NoInspector { bin: PathBuf, secs: u64 },

    // ---- attach: finding a running inspector's address (process::discover)
    #[error("no answer")]
    NoAnswer,
    /// The connection to `host:port` failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no HTTP answer from the inspector")]
    NoListAnswer,
    #[error("no inspector there (/json/list is not JSON)")]
    NotAnInspector,
    #[error("the inspector lists no target")]
    NoTarget,
    #[error("{}", super::BUN_NEEDS_URL)]
    BunNeedsUrl,

    // ---- the WebSocket (ws.rs)
    #[error("the inspector at {0} did not answer")]
    ConnectTimeout(String),
    #[error("cannot connect to the inspector at {url}: {source}")]
    Connect {
        url: String,
        source: tungstenite::Error,
    },
    #[error("the inspector connection closed")]
    Closed,
    #[error("the inspector did not answer {0}")]
    NoReply(String),
    /// The runtime refused a command: its own message.
    #[error("{0}")]
    Refused(String),

    // ---- DAP requests (adapter/)
    #[error("the program is not running under the inspector")]
    NotRunning,
    #[error("the runtime did not pause at its first line")]
    NoFirstPause,
    /// The program ended while it loaded, before its first line ran (a module it imports
    /// cannot be found, a syntax error): its exit code, its output quoted by the caller.
    #[error("the program exited{} before its first line ran; its output says why", .0.map(|c| format!(" with code {c}")).unwrap_or_default())]
    ExitedAtStart(Option<i64>),
    #[error("the program is not paused")]
    NotPaused,
    #[error("no frame {0}")]
    NoFrame(i64),
    #[error("no variables reference {0} in this stop")]
    NoReference(i64),
    #[error("the program is not stopped on an exception")]
    NoException,
    /// An evaluated expression threw: the first line of what it threw.
    #[error("{0}")]
    Threw(String),
    #[error("hit condition `{0}`: use >=N, >N, ==N, <N, <=N or %N")]
    BadHitCondition(String),
    #[error("{0} is not supported by kitbag's inspector bridge")]
    Unsupported(String),
}

pub type AdapterResult<T> = Result<T, AdapterFailure>;

impl From<kitbag_cdp::CdpError> for AdapterFailure {
    fn from(e: kitbag_cdp::CdpError) -> Self {
        match e {
            kitbag_cdp::CdpError::Refused { message, .. } => AdapterFailure::Refused(message),
            kitbag_cdp::CdpError::Closed => AdapterFailure::Closed,
            kitbag_cdp::CdpError::NoReply(method) => AdapterFailure::NoReply(method),
        }
    }
}
