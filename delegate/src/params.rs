//! `agent_delegate`'s parameters and their checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kitbag_shared::{ToolError, ToolResult};

/// The coding agents a task can go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    // Plain comments: a variant's doc comment would put a `oneOf` in the model's schema.
    // OpenAI Codex: `codex exec --json`.
    Codex,
    // Claude Code: `claude -p --output-format stream-json`.
    Claude,
    // kitbag's own loop: `kitbag run --json`, with an agent pack.
    Kitbag,
}

impl AgentKind {
    pub fn label(self) -> &'static str {
        match self {
            Self::Codex => "Codex",
            Self::Claude => "Claude Code",
            Self::Kitbag => "kitbag",
        }
    }
}

pub const DEFAULT_TIMEOUT_SECONDS: u64 = 900;
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;
/// The longest task accepted (it travels as one argument).
pub const MAX_TASK_BYTES: usize = 100_000;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateParams {
    pub agent: AgentKind,
    pub task: String,
    /// Default the root; in an instance /work.
    #[serde(default)]
    pub cwd: Option<String>,
    /// A kitbag-vm instance.
    #[serde(default)]
    pub instance: Option<String>,
    /// Default 900.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub model: Option<String>,
    /// kitbag: an agent pack.
    #[serde(default)]
    pub pack: Option<String>,
}

impl DelegateParams {
    /// Check every field; nothing runs when one is wrong.
    pub fn check(&self) -> ToolResult<()> {
        if self.task.trim().is_empty() {
            return Err(ToolError::invalid_field("task", "must not be empty"));
        }
        if self.task.len() > MAX_TASK_BYTES {
            return Err(ToolError::invalid_field(
                "task",
                format!(
                    "{} bytes; at most {MAX_TASK_BYTES} (put the rest in a file and name it)",
                    self.task.len()
                ),
            ));
        }
        if let Some(t) = self.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(ToolError::invalid_field(
                "timeout_seconds",
                format!("{t}; accepted: 1 to {MAX_TIMEOUT_SECONDS}"),
            ));
        }
        if let Some(m) = &self.model
            && (m.is_empty()
                || m.len() > 200
                || !m.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@')
                }))
        {
            return Err(ToolError::invalid_field(
                "model",
                "a model name: 1–200 of letters, digits and . _ - : / @",
            ));
        }
        match (&self.pack, self.agent) {
            (Some(_), AgentKind::Codex | AgentKind::Claude) => {
                return Err(ToolError::invalid_field(
                    "pack",
                    "only with agent \"kitbag\" (an agent pack of .kitbag/agents/)",
                ));
            }
            (Some(p), AgentKind::Kitbag) => check_pack(p)?,
            _ => {}
        }
        if let Some(i) = &self.instance
            && i.trim().is_empty()
        {
            return Err(ToolError::invalid_field("instance", "must not be empty"));
        }
        Ok(())
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS))
    }
}

/// A pack name (`.kitbag/agents/NAME.md`): letters, digits, `-`, `_`, `.` (seed packs are
/// named like `code.change`), not starting with a dot.
pub fn check_pack(name: &str) -> ToolResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ToolError::invalid_field(
            "pack",
            "a pack name: letters, digits, '-', '_' and '.', not starting with '.'",
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: serde_json::Value) -> DelegateParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_bad_field_is_named() {
        let bad = [
            (json!({"agent":"codex","task":"  "}), "task"),
            (
                json!({"agent":"codex","task":"x","timeout_seconds":0}),
                "timeout_seconds",
            ),
            (
                json!({"agent":"codex","task":"x","timeout_seconds":3601}),
                "timeout_seconds",
            ),
            (json!({"agent":"claude","task":"x","pack":"p"}), "pack"),
            (json!({"agent":"kitbag","task":"x","pack":"../p"}), "pack"),
            (json!({"agent":"codex","task":"x","model":"a b"}), "model"),
            (
                json!({"agent":"codex","task":"x","instance":""}),
                "instance",
            ),
        ];
        for (v, field) in bad {
            let e = params(v.clone()).check().unwrap_err();
            assert_eq!(e.detail["field"], field, "{v}: {e:?}");
        }
        assert!(
            params(json!({"agent":"kitbag","task":"x","pack":"reviewer"}))
                .check()
                .is_ok()
        );
    }

    #[test]
    fn an_unknown_agent_or_field_does_not_decode() {
        assert!(
            serde_json::from_value::<DelegateParams>(json!({"agent":"cursor","task":"x"})).is_err()
        );
        assert!(
            serde_json::from_value::<DelegateParams>(json!({"agent":"codex","task":"x","extra":1}))
                .is_err()
        );
    }
}
