//! The command line each CLI is started with.
//!
//! A delegation has `shell_bash`'s authority: in the root it runs with the root's permissions
//! (Codex's own sandbox is off; Claude Code accepts edits inside the working directory and
//! runs the shell without asking — kitbag's shell asks nobody either); isolation is an
//! `instance`.

use kitbag_shared::{ErrorCode, ToolError};
use serde_json::json;

use crate::params::{AgentKind, DelegateParams};

/// Claude Code's tools a delegated task may use without asking (`--allowedTools`). Its file
/// tools are not among them: `acceptEdits` accepts edits inside the working directory, and
/// one outside it (allowed tools would allow anywhere) waits for a permission nobody gives in
/// `-p` mode — it comes back in `permission_denials`. The shell is as open as kitbag's own.
const CLAUDE_TOOLS: &str = "Bash Read Glob Grep TodoWrite";

/// A program with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
}

impl Launch {
    /// Program and arguments as one argv.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// The CLI's command line for `p`; `kitbag` is the kitbag binary (for `kitbag run`) and
/// `session` the session name a kitbag run records to.
pub fn launch(p: &DelegateParams, kitbag: &str, session: &str) -> Launch {
    let mut args: Vec<String> = Vec::new();
    let mut push = |a: &[&str]| args.extend(a.iter().map(|s| s.to_string()));
    let program = match p.agent {
        AgentKind::Codex => {
            push(&["exec", "--json", "--skip-git-repo-check"]);
            push(&["--sandbox", "danger-full-access"]);
            if let Some(m) = &p.model {
                push(&["--model", m]);
            }
            "codex".to_string()
        }
        AgentKind::Claude => {
            push(&["-p", "--output-format", "stream-json", "--verbose"]);
            push(&[
                "--permission-mode",
                "acceptEdits",
                "--allowedTools",
                CLAUDE_TOOLS,
            ]);
            if let Some(m) = &p.model {
                push(&["--model", m]);
            }
            "claude".to_string()
        }
        AgentKind::Kitbag => {
            push(&["run", "--json", "--session", session]);
            if let Some(pack) = &p.pack {
                push(&["--agent", pack]);
            }
            kitbag.to_string()
        }
    };
    // The task may start with '-': after `--` it is never an option.
    args.push("--".into());
    args.push(p.task.clone());
    Launch { program, args }
}

/// What the CLI's environment adds: `kitbag run` takes its model from `KITBAG_MODEL` (it has
/// no flag for it; the other CLIs get `--model`).
pub fn env(p: &DelegateParams) -> Vec<(String, String)> {
    match (&p.model, p.agent) {
        (Some(m), AgentKind::Kitbag) => vec![("KITBAG_MODEL".into(), m.clone())],
        _ => Vec::new(),
    }
}

/// A subagent job's `kitbag run`: bounded in model calls, read-only unless asked otherwise.
pub fn job_launch(
    kitbag: &str,
    session: &str,
    pack: Option<&str>,
    max_steps: u32,
    read_only: bool,
    prompt: &str,
) -> Launch {
    let mut args: Vec<String> = ["run", "--json", "--session", session]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(p) = pack {
        args.extend(["--agent".to_string(), p.to_string()]);
    }
    args.extend(["--max-steps".to_string(), max_steps.to_string()]);
    if read_only {
        args.push("--read-only".into());
    }
    args.extend(["--".to_string(), prompt.to_string()]);
    Launch {
        program: kitbag.to_string(),
        args,
    }
}

/// The CLI `program` is not where the delegation would run (`place`: "here", "in instance
/// x"); `field` is the parameter that chose that place.
pub fn not_installed(agent: AgentKind, program: &str, place: &str, field: &str) -> ToolError {
    ToolError::new(
        ErrorCode::CliNotFound,
        format!(
            "{} is not installed {place}: `{program}` is not on its PATH (install it: {})",
            agent.label(),
            install_hint(agent)
        ),
    )
    .with_detail(json!({ "field": field, "program": program }))
}

/// How to install the CLI, for the error that says it is missing.
pub fn install_hint(agent: AgentKind) -> &'static str {
    match agent {
        AgentKind::Codex => "npm install -g @openai/codex",
        AgentKind::Claude => "npm install -g @anthropic-ai/claude-code",
        AgentKind::Kitbag => "cargo install kitbag",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_cli_gets_its_streaming_mode_and_the_task_after_a_separator() {
        let p = |v| serde_json::from_value::<DelegateParams>(v).unwrap();
        let codex = launch(
            &p(json!({"agent":"codex","task":"-x","model":"m"})),
            "kb",
            "s",
        );
        assert_eq!(codex.program, "codex");
        assert_eq!(
            &codex.args[..3],
            ["exec", "--json", "--skip-git-repo-check"]
        );
        assert!(codex.args.windows(2).any(|w| w == ["--model", "m"]));
        assert_eq!(&codex.args[codex.args.len() - 2..], ["--", "-x"]);
        let claude = launch(&p(json!({"agent":"claude","task":"t"})), "kb", "s");
        assert!(
            claude
                .args
                .windows(2)
                .any(|w| w == ["--output-format", "stream-json"])
        );
        let kb = launch(
            &p(json!({"agent":"kitbag","task":"t","pack":"rev"})),
            "/bin/kb",
            "d1",
        );
        assert_eq!(
            kb.argv(),
            [
                "/bin/kb",
                "run",
                "--json",
                "--session",
                "d1",
                "--agent",
                "rev",
                "--",
                "t"
            ]
        );
    }
}
