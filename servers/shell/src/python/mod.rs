//! `python`: run Python 3 source without shell quoting (seed 003 `tool.python`). The code (and
//! `stdin`) go to scratch files under the shell's state directory, run as
//! `python3 -u FILE ARGS…` in a terminal like any shell_bash command — same timeout, output
//! caps, log, containment and waiting-for-input rules — and are removed when it ends. With
//! `session`, the code runs in a long-lived interpreter of that name instead, whose variables
//! persist between calls ([`session`]).

pub mod session;

use std::path::PathBuf;
use std::sync::Arc;

use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult, args};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ShellState;
use crate::bash::{self, BashParams};

pub const DEF: ToolDef = ToolDef::write(
    "python",
    "Run Python",
    "Run Python 3 source without shell quoting (`args`: sys.argv[1:]), like shell_bash. \
     `session`: a named interpreter keeping its variables.",
)
.destructive()
.open_world()
.exec();

pub const MAX_CODE_BYTES: usize = 1024 * 1024;
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;
pub const MAX_ARGS: usize = 64;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PythonParams {
    pub code: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// ms (default 120000).
    #[serde(default)]
    pub timeout: Option<i64>,
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PythonResult {
    /// Output as a terminal shows it (stdout and stderr merged), possibly head + tail.
    pub stdout: String,
    /// 1 after an uncaught exception (its traceback is in `stdout`).
    pub exit_code: i32,
    pub timed_out: bool,
    pub truncated: bool,
    pub duration_ms: u64,
    pub timeout_ms: u64,
    pub output_bytes: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_path: String,
    /// The session the code ran in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The session's interpreter was started by this call (earlier variables are gone).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub session_new: bool,
    /// A process of the code sleeps reading the terminal: answer with shell_input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// Where snippets, their input and session FIFOs live: the shell's state directory's
/// `python/`, held by descriptor for the server's writes and named by path for the child.
pub struct Scratch {
    held: kitbag_shared::state::StateDir,
    shown: PathBuf,
}

impl Scratch {
    pub fn new(held: kitbag_shared::state::StateDir, shown: PathBuf) -> Scratch {
        Scratch { held, shown }
    }

    /// The path the interpreter opens `name` by.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.shown.join(name)
    }

    /// Write a new private file `name` (0600).
    pub fn write_new(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use rustix::fs::OFlags;
        use std::io::Write;
        let mut f = self
            .held
            .open_file(name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL)?;
        f.write_all(bytes)
    }

    /// Make the FIFO `name` (0600) and open it read-write (an open that never waits for the
    /// other end).
    pub fn fifo(&self, name: &str) -> std::io::Result<std::fs::File> {
        rustix::fs::mknodat(
            self.held.fd(),
            name,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )?;
        let f = self.held.open_file(name, rustix::fs::OFlags::RDWR)?;
        // Writes never wait on an interpreter that stopped reading (see `session::send`).
        rustix::io::ioctl_fionbio(&f, true)?;
        Ok(f)
    }

    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        self.held.remove(name)
    }

    /// Remove the scratch files of this server (at its end: sessions' FIFOs whose watchers
    /// did not get to it) and of servers that are gone (killed ones), leaving other live
    /// servers' alone. Names are `KIND-PID-N.EXT`.
    pub fn sweep(&self) {
        let Ok(entries) = kitbag_shared::paths::fd::list_dir(self.held.fd()) else {
            return;
        };
        let me = std::process::id();
        for (name, _) in entries {
            let name = name.to_string_lossy();
            let pid = name.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
            let Some(pid) = pid else { continue };
            if pid == me || !kitbag_shared::process::running(pid) {
                let _ = self.held.remove(name.as_ref());
            }
        }
    }
}

/// `python3` on `PATH`, else a typed error saying how to get it.
pub fn interpreter() -> ToolResult<PathBuf> {
    let found = kitbag_shared::process::locate("python3");
    found.ok_or_else(|| {
        ToolError::new(
            ErrorCode::RuntimeNotFound,
            "python3 is not on this server's PATH; install Python 3 (Debian/Ubuntu: apt-get \
             install python3; macOS: brew install python) or start the server with it on PATH",
        )
        .with_detail(json!({ "runtime": "python3" }))
    })
}

/// `s` as one single-quoted `sh` word.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn check(p: &PythonParams) -> ToolResult<()> {
    args::max_bytes("code", &p.code, MAX_CODE_BYTES)?;
    if p.code.trim().is_empty() {
        return Err(ToolError::invalid_field("code", "is empty"));
    }
    if let Some(s) = &p.stdin {
        args::max_bytes("stdin", s, MAX_STDIN_BYTES)?;
    }
    let list = p.args.as_deref().unwrap_or_default();
    args::max_count("args", list.len(), MAX_ARGS, "arguments")?;
    for (i, a) in list.iter().enumerate() {
        if a.contains('\0') {
            return Err(ToolError::invalid_field(
                &format!("args[{i}]"),
                "must not contain NUL bytes",
            ));
        }
    }
    if p.code.contains('\0') {
        return Err(ToolError::invalid_field(
            "code",
            "must not contain NUL bytes",
        ));
    }
    Ok(())
}

pub async fn run(
    state: Arc<ShellState>,
    p: PythonParams,
    ctx: CallCtx,
) -> ToolResult<Reply<PythonResult>> {
    check(&p)?;
    let python = interpreter()?;
    if let Some(name) = p.session.clone() {
        return session::run(state, &ctx, python, name, p).await;
    }
    let Some(scratch) = state.scratch.clone() else {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "the shell capability is off: this server was started with --read-only",
        ));
    };
    let n = state.next_scratch();
    let code_name = format!("snippet-{}-{n}.py", std::process::id());
    let stdin_name = format!("stdin-{}-{n}.txt", std::process::id());
    scratch
        .write_new(&code_name, p.code.as_bytes())
        .map_err(|e| ToolError::io("code", &e))?;
    let mut command = format!(
        "exec {} -u -- {}",
        sh_quote(&python.to_string_lossy()),
        sh_quote(&scratch.shown(&code_name).to_string_lossy())
    );
    for a in p.args.as_deref().unwrap_or_default() {
        command.push(' ');
        command.push_str(&sh_quote(a));
    }
    if let Some(input) = &p.stdin {
        scratch
            .write_new(&stdin_name, input.as_bytes())
            .map_err(|e| ToolError::io("stdin", &e))?;
        command.push_str(&format!(
            " <{}",
            sh_quote(&scratch.shown(&stdin_name).to_string_lossy())
        ));
    }
    let bash_params = BashParams {
        command,
        cwd: p.cwd,
        timeout: p.timeout,
        env: None,
        background: None,
    };
    let cleanup = {
        let scratch = scratch.clone();
        move || {
            let _ = scratch.remove(&code_name);
            let _ = scratch.remove(&stdin_name);
        }
    };
    let prepared = match bash::prepare(&state, ctx.policy(), &bash_params) {
        Ok(p) => p,
        Err(e) => {
            cleanup();
            return Err(e);
        }
    };
    let reply = bash::run_foreground(state, &ctx, prepared, Some(Box::new(cleanup))).await?;
    let (b, text) = (reply.data, reply.text);
    Ok(Reply::new(
        PythonResult {
            stdout: b.stdout,
            exit_code: b.exit_code,
            timed_out: b.timed_out,
            truncated: b.truncated,
            duration_ms: b.duration_ms,
            timeout_ms: b.timeout_ms,
            output_bytes: b.output_bytes,
            log_path: b.log_path,
            session: None,
            session_new: false,
            job_id: b.job_id,
        },
        text,
    ))
}
