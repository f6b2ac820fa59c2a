//! What goes wrong inside an engine (vm.md §3.4's `VmError`), typed so a tool answers with the
//! right code: a missing prerequisite is the machine's, a refused image the caller's, the rest
//! a failed start or operation.

use kitbag_shared::{ErrorCode, ToolError};
use serde_json::json;

#[derive(Debug)]
pub enum VmError {
    /// Something this machine lacks: a program, a package, a kernel module, a loader.
    Missing(String),
    /// An argument the engine cannot accept (an image it does not have).
    Invalid {
        field: &'static str,
        message: String,
    },
    /// The engine (bwrap, QEMU, the Docker engine, cgroups, the agent) failed or refused.
    Engine(String),
    /// What this engine cannot do at all (a plain Kubernetes Pod cannot pause).
    Unsupported(String),
    /// A file, socket or process operation failed.
    Io {
        context: String,
        source: std::io::Error,
    },
}

pub type VmResult<T> = Result<T, VmError>;

impl VmError {
    pub fn engine(message: impl Into<String>) -> VmError {
        VmError::Engine(message.into())
    }

    pub fn missing(message: impl Into<String>) -> VmError {
        VmError::Missing(message.into())
    }

    pub fn io(context: impl std::fmt::Display, source: std::io::Error) -> VmError {
        VmError::Io {
            context: context.to_string(),
            source,
        }
    }

    /// The tool error for an operation on a running instance (pause, resume) that failed.
    pub fn operation_error(self, what: &str) -> ToolError {
        match self {
            VmError::Unsupported(m) => ToolError::new(ErrorCode::Unsupported, m),
            other => ToolError::internal(format!("{what} failed: {other}")),
        }
    }

    /// The tool error for a spawn that failed this way on `backend`: the caller's mistake
    /// names its field; anything else is `spawn_failed` (or `backend_unavailable` when the
    /// machine lacks something).
    pub fn spawn_error(self, backend: &str, what: &str) -> ToolError {
        match self {
            VmError::Invalid { field, message } => {
                ToolError::invalid_field(field, message).with_detail(json!({ "backend": backend }))
            }
            VmError::Missing(m) => ToolError::new(
                ErrorCode::BackendUnavailable,
                format!("{what} did not start: {m}"),
            )
            .with_detail(json!({ "backend": backend })),
            other => ToolError::new(
                ErrorCode::SpawnFailed,
                format!("{what} did not start: {other}"),
            )
            .with_detail(json!({ "backend": backend })),
        }
    }
}

impl std::fmt::Display for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmError::Missing(m) | VmError::Engine(m) | VmError::Unsupported(m) => f.write_str(m),
            VmError::Invalid { field, message } => write!(f, "{field}: {message}"),
            VmError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for VmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VmError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<std::io::Error> for VmError {
    fn from(e: std::io::Error) -> VmError {
        VmError::Io {
            context: "I/O".into(),
            source: e,
        }
    }
}

impl From<serde_json::Error> for VmError {
    fn from(e: serde_json::Error) -> VmError {
        VmError::Engine(format!("JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_errors_carry_the_right_code() {
        let invalid = VmError::Invalid {
            field: "image",
            message: "no such image".into(),
        };
        assert_eq!(
            invalid.spawn_error("docker", "the container").code,
            ErrorCode::InvalidParams
        );
        let missing = VmError::missing("busybox is needed");
        assert_eq!(
            missing.spawn_error("qemu", "the VM").code,
            ErrorCode::BackendUnavailable
        );
        let failed = VmError::io("qmp", std::io::Error::other("reset"));
        let e = failed.spawn_error("qemu", "the VM");
        assert_eq!(e.code, ErrorCode::SpawnFailed);
        assert!(e.message.contains("qmp: reset"), "{}", e.message);
    }
}
