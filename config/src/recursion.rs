//! The host never starts itself.
//!
//! A client's project file (Claude Code's `.mcp.json`) lists `kitbag serve`; a host that read
//! that file and started its entries would start itself, which would start itself again —
//! thousands of processes in seconds. Two guards, each enough for the case it covers:
//! - an entry whose command is this very executable run as a host (`serve`, `tools`, `call`,
//!   `doctor`, or no subcommand) is skipped and reported, whatever config named it;
//! - every child gets [`DEPTH_VAR`], so a host started under a host through any wrapper
//!   (`sh -c`, `npx`, a script) refuses to start.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::entry::{ServerEntry, ServerSpec};

/// How many hosts are above this process. Children of a host get one more.
pub use kitbag_shared::process::HOST_DEPTH_VAR as DEPTH_VAR;

/// The depth this process was started at (0 when no host started it).
pub fn depth() -> u32 {
    std::env::var(DEPTH_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Refuse to run as a host under another host.
pub fn refuse_nested_host() -> anyhow::Result<()> {
    let depth = depth();
    if depth == 0 {
        return Ok(());
    }
    anyhow::bail!(
        "refusing to start a kitbag host inside another kitbag host ({DEPTH_VAR}={depth}): \
         a server entry of the outer host's config runs `kitbag serve` (perhaps through a \
         wrapper), which would start hosts without end. Point that entry at one server \
         (`kitbag server files`, `kitbag-files`) or remove it."
    )
}

/// Mark every entry that would run this executable as a host: it is reported, not started.
pub fn skip_self_references(servers: &mut [ServerSpec]) {
    let Some(me) = this_executable() else {
        return;
    };
    for spec in servers {
        if spec.skipped.is_none()
            && let Some(why) = runs_host(&spec.entry, &me)
        {
            spec.skipped = Some(why);
        }
    }
}

fn this_executable() -> Option<PathBuf> {
    std::fs::canonicalize(std::env::current_exe().ok()?).ok()
}

/// Whether `entry` runs one of this executable's own servers (`kitbag server FAMILY`): its
/// output is written by kitbag-shared's serializer, so the host may take its answers apart
/// by their known framing instead of parsing them (`fastpath.rs`).
pub fn runs_own_server(entry: &ServerEntry) -> bool {
    static ME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let Some(me) = ME.get_or_init(this_executable) else {
        return false;
    };
    entry.url.is_none()
        && subcommand(&entry.args) == Some("server")
        && resolve_command(entry)
            .and_then(|c| std::fs::canonicalize(c).ok())
            .as_ref()
            == Some(me)
}

/// Why `entry` would start this executable as a host, or `None` when it would not.
pub fn runs_host(entry: &ServerEntry, me: &Path) -> Option<String> {
    if entry.url.is_some() {
        return None; // remote: not a process of ours
    }
    let command = resolve_command(entry)?;
    if std::fs::canonicalize(&command).ok()? != me {
        return None;
    }
    let sub = subcommand(&entry.args);
    match sub {
        Some("server") | Some("help") => None,
        Some(s) if s.starts_with('-') => None, // --help, --version: print and exit
        _ => Some(format!(
            "skipped: this entry runs kitbag itself as a host (`{} {}`), which would start \
             itself without end; the host serves its own servers — list them instead \
             (`kitbag server files`, `kitbag-files`, ...)",
            entry.command,
            entry.args.join(" ")
        )),
    }
}

/// The first word that is not a global flag or a flag's value.
fn subcommand(args: &[String]) -> Option<&str> {
    const TAKES_VALUE: [&str; 4] = ["--config", "--agent", "--audit-log", "--log-level"];
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if TAKES_VALUE.contains(&arg.as_str()) {
            i += 2;
        } else if TAKES_VALUE
            .iter()
            .any(|f| arg.starts_with(f) && arg[f.len()..].starts_with('='))
        {
            i += 1;
        } else {
            return Some(arg);
        }
    }
    None
}

/// Where the command would be found when the entry is started: a path with a slash is taken
/// relative to the entry's cwd; a bare name is looked up in the entry's (or our) PATH.
fn resolve_command(entry: &ServerEntry) -> Option<PathBuf> {
    let command = Path::new(&entry.command);
    if entry.command.contains('/') {
        if command.is_absolute() {
            return Some(command.to_path_buf());
        }
        let base = match &entry.cwd {
            Some(cwd) => PathBuf::from(cwd),
            None => std::env::current_dir().ok()?,
        };
        return Some(base.join(command));
    }
    let path = match entry.env.get("PATH") {
        Some(p) => p.into(),
        None => std::env::var_os("PATH")?,
    };
    std::env::split_paths(&path)
        .map(|dir| dir.join(OsStr::new(&entry.command)))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(command: &str, args: &[&str]) -> ServerEntry {
        ServerEntry {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn subcommand_skips_global_flags() {
        let s = |a: &[&str]| {
            subcommand(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()).map(String::from)
        };
        assert_eq!(s(&[]), None);
        assert_eq!(s(&["serve"]).as_deref(), Some("serve"));
        assert_eq!(
            s(&["--config", "x.json", "--log-level=info", "serve"]).as_deref(),
            Some("serve")
        );
        assert_eq!(s(&["server", "files"]).as_deref(), Some("server"));
        assert_eq!(s(&["--version"]).as_deref(), Some("--version"));
    }

    #[test]
    fn an_entry_running_this_executable_as_a_host_is_found() {
        let me = this_executable().expect("exe");
        let exe = me.to_string_lossy().into_owned();
        for args in [
            &[][..],
            &["serve"],
            &["--config", "a.json", "serve"],
            &["doctor"],
        ] {
            assert!(runs_host(&entry(&exe, args), &me).is_some(), "{args:?}");
        }
        for args in [&["server", "files"][..], &["--help"]] {
            assert!(runs_host(&entry(&exe, args), &me).is_none(), "{args:?}");
        }
        // Found through PATH under another spelling of the directory.
        let dir = me.parent().expect("dir");
        let name = me.file_name().expect("name").to_string_lossy().into_owned();
        let mut by_name = entry(&name, &["serve"]);
        by_name
            .env
            .insert("PATH".into(), format!("/nonexistent:{}", dir.display()));
        assert!(runs_host(&by_name, &me).is_some());
        // Another program is never a self-reference.
        assert!(runs_host(&entry("/bin/sh", &["-c", "true"]), &me).is_none());
        assert!(runs_host(&entry("no-such-program-here", &["serve"]), &me).is_none());
    }
}
