//! Prompt includes (seed 002): `{file:PATH}` brings a root-relative file into the workspace
//! prompt (`.kitbag/prompt.md`), an agent pack or a skill; `{cmd:COMMAND}` — off unless
//! `prompt_includes.cmd` is true — the output of an allowlisted read-only command.
//!
//! `{file:PATH|maxBytes=N|head}`: at most N bytes (default and ceiling
//! `prompt_includes.max_bytes`); a longer file keeps its head and tail with a marker between
//! (`head` or `tail`: that end only). Paths are root-relative only — an absolute path or a `..`
//! is refused — and opened through the path policy (no link out of the root). `\{` writes a
//! literal `{`. An include that cannot be made is replaced by a visible `[include …: why]`
//! note and reported on stderr: the agent runs, and neither it nor the operator is left
//! believing the text was there.
//!
//! `{cmd:git log --oneline -5}`: the words (no shell: no pipes, no expansion) must start with an
//! entry of `prompt_includes.cmd_allow`; it runs in the root with stdin closed for at most 5 s,
//! and every run is logged: command, cwd, exit code, stdout and stderr lengths.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kitbag_config::settings::{Setting, get};
use kitbag_shared::{Access, PathPolicy};

/// How long a `{cmd:…}` may run.
const CMD_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an include could not be made (shown in its place and on stderr).
#[derive(Debug, thiserror::Error)]
pub enum IncludeError {
    #[error("option {0:?} is not one of maxBytes=N (N > 0), head, tail")]
    Option(String),
    #[error("no path")]
    NoPath,
    #[error("the path must be relative to the project root, without `..`")]
    NotRelative,
    #[error("the project root cannot be opened")]
    NoRoot,
    #[error("{0}")]
    Refused(String),
    #[error("is a directory")]
    Directory,
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error(
        "{{cmd:…}} is off (set prompt_includes.cmd: true and list the command in prompt_includes.cmd_allow)"
    )]
    CommandsOff,
    #[error("no command")]
    NoCommand,
    #[error("not allowed: prompt_includes.cmd_allow has no entry that `{0}` starts with")]
    NotAllowed(String),
    #[error("cannot run {0}: {1}")]
    CannotRun(String, std::io::Error),
    #[error("exit {0}")]
    Exit(i32),
    #[error("exit none: stopped after 5 s")]
    Stopped,
}

/// Which end of a long include is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Head,
    Tail,
    Both,
}

/// How includes are made for one run.
pub struct Includes {
    root: PathBuf,
    policy: Option<PathPolicy>,
    max_bytes: usize,
    /// Allowed command prefixes (as words); `None`: `{cmd:…}` is off.
    commands: Option<Vec<Vec<String>>>,
}

impl Includes {
    /// From the resolved settings, for the project at `root`.
    pub fn new(settings: &[Setting], root: &Path) -> Includes {
        let max_bytes = get(settings, "prompt_includes.max_bytes")
            .and_then(|s| s.value.as_u64())
            .unwrap_or(kitbag_config::settings::DEFAULT_INCLUDE_MAX_BYTES)
            as usize;
        let on = get(settings, "prompt_includes.cmd").is_some_and(|s| s.value == true);
        let allow: Vec<Vec<String>> = get(settings, "prompt_includes.cmd_allow")
            .and_then(|s| s.value.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .map(|c| c.split_whitespace().map(String::from).collect::<Vec<_>>())
                    .filter(|w| !w.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Includes {
            root: root.to_path_buf(),
            policy: PathPolicy::new(root, &[], true).ok(),
            max_bytes,
            commands: on.then_some(allow),
        }
    }

    /// `text` with its includes made; `source` names the file in notes and logs.
    pub fn expand(&self, text: &str, source: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            if at > 0 && rest.as_bytes()[at - 1] == b'\\' {
                out.push_str(&rest[..at - 1]);
                out.push('{');
                rest = &rest[at + 1..];
                continue;
            }
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            let kind = ["{file:", "{cmd:"]
                .into_iter()
                .find(|k| tail.starts_with(k));
            let (Some(kind), Some(end)) = (kind, tail.find('}')) else {
                out.push('{');
                rest = &tail[1..];
                continue;
            };
            let body = &tail[kind.len()..end];
            let made = if kind == "{file:" {
                self.file(body)
            } else {
                self.command(body, source)
            };
            match made {
                Ok(t) => out.push_str(&t),
                Err(why) => {
                    let token = &tail[..=end];
                    eprintln!("[prompt] {source}: {token}: {why}");
                    out.push_str(&format!("[include {token}: {why}]"));
                }
            }
            rest = &tail[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `PATH|maxBytes=N|head|tail`.
    fn file(&self, body: &str) -> Result<String, IncludeError> {
        let mut parts = body.split('|');
        let path = parts.next().unwrap_or_default().trim();
        let (mut max, mut keep) = (self.max_bytes, Keep::Both);
        for opt in parts.map(str::trim) {
            match opt {
                "head" => keep = Keep::Head,
                "tail" => keep = Keep::Tail,
                _ => match opt.strip_prefix("maxBytes=").map(str::parse::<usize>) {
                    Some(Ok(n)) if n > 0 => max = n.min(self.max_bytes),
                    _ => return Err(IncludeError::Option(opt.to_string())),
                },
            }
        }
        if path.is_empty() {
            return Err(IncludeError::NoPath);
        }
        if path.starts_with('/') || Path::new(path).components().any(|c| c.as_os_str() == "..") {
            return Err(IncludeError::NotRelative);
        }
        let policy = self.policy.as_ref().ok_or(IncludeError::NoRoot)?;
        let (_, mut f) = policy
            .open_file(path, "file", Access::Read)
            .map_err(|e| IncludeError::Refused(e.message))?;
        if f.metadata()?.is_dir() {
            return Err(IncludeError::Directory);
        }
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(cut(&String::from_utf8_lossy(&bytes), max, keep))
    }

    /// Run an allowlisted command; its stdout, cut like a file.
    fn command(&self, body: &str, source: &str) -> Result<String, IncludeError> {
        let Some(allow) = &self.commands else {
            return Err(IncludeError::CommandsOff);
        };
        let words: Vec<String> = body.split_whitespace().map(String::from).collect();
        if words.is_empty() {
            return Err(IncludeError::NoCommand);
        }
        if !allow.iter().any(|a| words.starts_with(a)) {
            return Err(IncludeError::NotAllowed(words.join(" ")));
        }
        let ran = run_bounded(&words, &self.root)?;
        let line = format!(
            "[prompt] {source}: ran {{cmd:{}}} in {}: exit {}, stdout {} bytes, stderr {} bytes",
            words.join(" "),
            self.root.display(),
            ran.code.map_or("none (stopped)".into(), |c| c.to_string()),
            ran.stdout.len(),
            ran.stderr_len
        );
        eprintln!("{line}");
        tracing::info!("{line}");
        match ran.code {
            Some(0) => {}
            Some(c) => return Err(IncludeError::Exit(c)),
            None => return Err(IncludeError::Stopped),
        }
        Ok(cut(
            String::from_utf8_lossy(&ran.stdout).trim_end(),
            self.max_bytes,
            Keep::Both,
        ))
    }
}

struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr_len: usize,
}

/// Run `words` in `cwd` with stdin closed, at most [`CMD_TIMEOUT`], its process group killed
/// after that.
fn run_bounded(words: &[String], cwd: &Path) -> Result<Ran, IncludeError> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| IncludeError::CannotRun(words[0].clone(), e))?;
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = child.stdout.take().map(|o| read_all(Box::new(o)));
    let err = child.stderr.take().map(|e| read_all(Box::new(e)));
    let deadline = Instant::now() + CMD_TIMEOUT;
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr_len = err.and_then(|h| h.join().ok()).map_or(0, |v| v.len());
    Ok(Ran {
        code,
        stdout,
        stderr_len,
    })
}

/// `text` within `max` bytes (on character boundaries), keeping `keep`, a marker for the cut.
pub fn cut(text: &str, max: usize, keep: Keep) -> String {
    use kitbag_shared::limits::{head_tail, truncate_str};
    match keep {
        Keep::Both => head_tail(text, max).0,
        Keep::Head => match truncate_str(text, max) {
            (head, true) => format!("{head}\n[… {} bytes left out]", text.len() - head.len()),
            (all, false) => all.to_string(),
        },
        Keep::Tail => {
            if text.len() <= max {
                return text.to_string();
            }
            let mut start = text.len() - max;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            format!("[{start} bytes left out …]\n{}", &text[start..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(pairs: &[(&'static str, serde_json::Value)]) -> Vec<Setting> {
        pairs
            .iter()
            .map(|(k, v)| Setting {
                key: k,
                env: "",
                value: v.clone(),
                source: kitbag_config::settings::Source::File,
            })
            .collect()
    }

    #[test]
    fn files_are_included_cut_and_confined() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(d.path().join("docs")).expect("mkdir");
        std::fs::write(d.path().join("docs/style.md"), "Use tabs.\n").expect("w");
        std::fs::write(d.path().join("big.txt"), "a".repeat(50) + &"z".repeat(50)).expect("w");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("secret"), "s3cret").expect("w");
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("link"))
            .expect("ln");
        let inc = Includes::new(
            &settings(&[("prompt_includes.max_bytes", json!(40))]),
            d.path(),
        );
        assert_eq!(
            inc.expand(
                "Style: {file:docs/style.md} \\{file:x} {not an include}",
                "prompt.md"
            ),
            "Style: Use tabs.\n {file:x} {not an include}"
        );
        let big = inc.expand("{file:big.txt}", "p");
        assert!(
            big.starts_with(&"a".repeat(20)) && big.ends_with(&"z".repeat(20)),
            "{big}"
        );
        assert!(big.contains("… [60 bytes elided] …"), "{big}");
        let head = inc.expand("{file:big.txt|maxBytes=10|head}", "p");
        assert_eq!(head, format!("{}\n[… 90 bytes left out]", "a".repeat(10)));
        let tail = inc.expand("{file:big.txt|tail|maxBytes=5}", "p");
        assert_eq!(tail, "[95 bytes left out …]\nzzzzz");
        for bad in [
            "{file:/etc/passwd}",
            "{file:../x}",
            "{file:link}",
            "{file:nope.md}",
            "{file:docs}",
            "{file:big.txt|size=3}",
        ] {
            let out = inc.expand(bad, "p");
            assert!(
                out.starts_with(&format!("[include {bad}: ")),
                "{bad} → {out}"
            );
            assert!(!out.contains("s3cret") && !out.contains("root:"), "{out}");
        }
    }

    #[test]
    fn commands_run_only_when_on_and_allowed() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::write(d.path().join("f.txt"), "x").expect("w");
        let off = Includes::new(&settings(&[]), d.path());
        assert!(off.expand("{cmd:ls}", "p").contains("{cmd:…} is off"));
        let on = Includes::new(
            &settings(&[
                ("prompt_includes.cmd", json!(true)),
                ("prompt_includes.cmd_allow", json!(["ls", "sleep"])),
            ]),
            d.path(),
        );
        assert_eq!(on.expand("files: {cmd:ls}", "p"), "files: f.txt");
        let refused = on.expand("{cmd:rm -rf f.txt}", "p");
        assert!(refused.contains("not allowed"), "{refused}");
        assert!(d.path().join("f.txt").exists());
        let started = Instant::now();
        let slow = on.expand("{cmd:sleep 30}", "p");
        assert!(slow.contains("stopped after 5 s"), "{slow}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(on.expand("{cmd:ls no-such}", "p").contains(": exit 2]"));
    }
}
