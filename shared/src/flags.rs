//! The flags every server takes, and logging set-up from them.

use std::path::PathBuf;

use clap::Args;

use crate::paths::{MountSpec, PathPolicy};

#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Root directory every path is confined to (default: the working directory, or the
    /// client's first MCP root when the client offers roots).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Allow access below PATH: `ro:PATH` or `rw:PATH` (repeatable). Default `rw:.`.
    #[arg(long = "allow", value_name = "MODE:PATH")]
    pub allow: Vec<MountSpec>,

    /// Make every mount read-only.
    #[arg(long)]
    pub read_only: bool,

    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, default_value = "warn", value_name = "LEVEL")]
    pub log_level: String,

    /// Write logs to this file instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,

    /// Append an audit event (JSON line) per tool call to this file.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,

    #[cfg(feature = "serving")]
    #[command(flatten)]
    pub serving: crate::http::HttpArgs,
}

impl CommonArgs {
    /// The policy for these flags (root defaults to the working directory).
    pub fn policy(&self) -> anyhow::Result<PathPolicy> {
        let root = match &self.root {
            Some(r) => r.clone(),
            None => std::env::current_dir()?,
        };
        PathPolicy::new(&root, &self.allow, self.read_only)
            .map_err(|e| anyhow::anyhow!("--root {}: {e}", root.display()))
    }

    /// Set up tracing to stderr or `--log-file`. stdout is the protocol: never log there.
    pub fn init_logging(&self) -> anyhow::Result<()> {
        let filter = log_filter(&self.log_level)?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false);
        let result = match &self.log_file {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                builder.with_writer(std::sync::Mutex::new(file)).try_init()
            }
            None => builder.with_writer(std::io::stderr).try_init(),
        };
        // A second init (tests calling twice) is harmless.
        let _ = result;
        Ok(())
    }
}

/// The log filter for `--log-level LEVEL`, the same for every server and the host.
///
/// rmcp logs every JSON-RPC error answer (an unknown tool, bad params) as a warning: a client's
/// mistake, already answered, filling the client's server log — shown at debug and below. Its
/// debug lines dump every request with its arguments (file contents, a memory refused as a
/// secret): only when asked for by name (`--log-level rmcp=debug`).
pub fn log_filter(level: &str) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    let mut filter = tracing_subscriber::EnvFilter::try_new(level)
        .map_err(|e| anyhow::anyhow!("--log-level {level}: {e}"))?;
    if !level.contains("rmcp") {
        let verbose = ["debug", "trace"].contains(&level);
        let directive = if verbose {
            "rmcp=info"
        } else {
            "rmcp::service=error"
        };
        if let Ok(quiet) = directive.parse() {
            filter = filter.add_directive(quiet);
        }
    }
    Ok(filter)
}
