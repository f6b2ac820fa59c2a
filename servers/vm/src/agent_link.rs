//! The server's line to an agent whose socket lives in a directory the instance can write
//! (a sandbox's or a container's control directory, `/run/kitbag` inside).
//!
//! From inside, the instance can rename `agent.sock`, put a link or a FIFO in its place, or
//! bind a listener of its own there — and then read every request (argv, environment, stdin,
//! files copied in) and forge every answer. So the socket is opened through the directory's
//! descriptor without following links and must be a socket, and then the process at the
//! other end must be the agent: `SO_PEERCRED` names the process that bound the listener, and
//! it must be the one that answered first — before anything of the instance's ran — with the
//! same start time (a pid reused later is someone else). The agent makes itself non-dumpable,
//! so no other process of the instance can take its listening socket (`pidfd_getfd`, ptrace
//! and `/proc/<pid>/fd` need `CAP_SYS_PTRACE`, which no process in a sandbox has).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use kitbag_shared::lock::LockExt;

use kitbag_shared::rustix::fs::{FileType, Mode, OFlags, fstat, openat};
use tokio::net::UnixStream;

use crate::error::{VmError, VmResult};
use crate::proto::{AGENT_SOCKET, Stream};
use kitbag_shared::proc_stat::{parent_pid, start_time};

/// Who may answer on an instance's agent socket.
#[derive(Debug, Default)]
pub struct AgentPeer {
    /// (host pid, start time) of the agent, learned on first contact.
    known: OnceLock<(i32, u64)>,
    /// The agent's parent as the host sees it (a sandbox's first process), when the engine
    /// knows it: first contact must come from its child (or itself).
    parent: Option<i32>,
}

impl AgentPeer {
    /// An agent started as a child of `parent` (a host pid), when known.
    pub fn new(parent: Option<i32>) -> Self {
        AgentPeer {
            known: OnceLock::new(),
            parent,
        }
    }

    /// The agent's host pid, once it answered.
    pub fn pid(&self) -> Option<i32> {
        self.known.get().map(|(pid, _)| *pid)
    }

    /// Whether the listener behind `stream` is the agent's.
    pub fn check(&self, stream: &UnixStream) -> std::io::Result<()> {
        let refused = |why: String| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("not the instance's agent on its socket: {why}; refusing to talk to it"),
            )
        };
        let cred = stream.peer_cred()?;
        // A pid the kernel cannot show us (another pid namespace): an engine without a
        // parent to check (a container of a remote engine) takes the socket's word; a
        // sandbox of ours never does.
        let Some(pid) = cred.pid().filter(|p| *p > 0) else {
            return match self.parent {
                None => Ok(()),
                Some(_) => Err(refused("its pid is not visible here".into())),
            };
        };
        let started = start_time(pid).ok_or_else(|| refused(format!("pid {pid} is gone")))?;
        if let Some(&(agent, agent_start)) = self.known.get() {
            return if (agent, agent_start) == (pid, started) {
                Ok(())
            } else {
                Err(refused(format!(
                    "the listener is pid {pid}, the agent is pid {agent} (was agent.sock replaced from inside?)"
                )))
            };
        }
        if let Some(parent) = self.parent
            && pid != parent
            && parent_pid(pid) != Some(parent)
        {
            return Err(refused(format!(
                "pid {pid} is not a child of the sandbox's first process {parent}"
            )));
        }
        let _ = self.known.set((pid, started));
        Ok(())
    }
}

/// A connection to the agent socket in a control directory held open by descriptor: the
/// socket is opened without following links, must be a socket, and its listener must be
/// the agent (see [`AgentPeer`]).
pub async fn connect_agent(ctl_fd: &OwnedFd, peer: &AgentPeer) -> std::io::Result<Stream> {
    let fd = openat(
        ctl_fd,
        AGENT_SOCKET,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode as _) != FileType::Socket {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the agent socket was replaced by something else",
        ));
    }
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let stream = UnixStream::connect(&path).await;
    drop(fd);
    let stream = stream?;
    peer.check(&stream)?;
    Ok(Box::new(stream))
}

/// What `kitbag-vm-agent --version` prints: the server runs only an agent of its own version
/// and of the same agent and protocol source (a fingerprint of `agent.rs` and `proto.rs`, so
/// a stale binary of the same version number beside a rebuilt server is not used either).
pub fn agent_version() -> String {
    format!(
        "kitbag-vm-agent {} ({:016x})",
        env!("CARGO_PKG_VERSION"),
        AGENT_SOURCE_FINGERPRINT
    )
}

/// FNV-1a over the agent's and the protocol's source, computed at compile time.
const AGENT_SOURCE_FINGERPRINT: u64 = {
    const fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
        let mut i = 0;
        while i < bytes.len() {
            h ^= bytes[i] as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            i += 1;
        }
        h
    }
    let h = fnv(0xcbf2_9ce4_8422_2325, include_bytes!("agent.rs"));
    fnv(h, include_bytes!("proto.rs"))
};

/// The agent alone (`kitbag-vm-agent`), when it was installed beside the server `exe` (both
/// are binaries of this package) and answers `--version` with this server's version — an
/// agent left from another install would not speak this server's protocol. A tenth of the
/// server's size, so a guest boots and a sandbox's agent starts faster. `None`: the server
/// serves as agent (`kitbag-vm __agent`). Checked once per binary (it runs the agent, ~2 ms).
pub fn agent_alone(exe: &Path) -> Option<PathBuf> {
    if let Some(known) = known_agent_alone(exe) {
        return known;
    }
    let found = exe
        .parent()
        .map(|d| d.join("kitbag-vm-agent"))
        .filter(|a| a.is_file())
        .filter(|a| {
            std::process::Command::new(a)
                .arg("--version")
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .is_ok_and(|o| {
                    o.status.success()
                        && String::from_utf8_lossy(&o.stdout).trim() == agent_version()
                })
        });
    let mut known = AGENTS_ALONE.locked();
    // Two first spawns may both have checked: the first answer stays.
    match known.iter().find(|(e, _)| e == exe) {
        Some((_, first)) => first.clone(),
        None => {
            known.push((exe.to_path_buf(), found.clone()));
            found
        }
    }
}

/// What [`agent_alone`] found for `exe` before, without running anything.
pub fn known_agent_alone(exe: &Path) -> Option<Option<PathBuf>> {
    AGENTS_ALONE
        .locked()
        .iter()
        .find(|(e, _)| e == exe)
        .map(|(_, a)| a.clone())
}

/// [`agent_alone`]'s answers: (server binary, its agent alone).
static AGENTS_ALONE: Mutex<Vec<(PathBuf, Option<PathBuf>)>> = Mutex::new(Vec::new());

/// The binary to run as agent: [`agent_alone`], else the server itself.
pub fn agent_binary(exe: &Path) -> PathBuf {
    agent_alone(exe).unwrap_or_else(|| exe.to_path_buf())
}

/// The control directory, opened once by descriptor (the agent socket is reached through it).
pub fn open_ctl(ctl: &Path) -> VmResult<OwnedFd> {
    openat(
        kitbag_shared::rustix::fs::CWD,
        ctl,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| VmError::io(ctl.display(), e.into()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory with a server binary (a stand-in: only its directory matters) and a
    /// `kitbag-vm-agent` script answering `--version` with `version`.
    fn install(version: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("kitbag-vm");
        std::fs::write(&exe, "").unwrap();
        let agent = d.path().join("kitbag-vm-agent");
        std::fs::write(&agent, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        (d, exe)
    }

    #[test]
    fn only_an_agent_of_this_very_build_is_used() {
        let (_d, exe) = install(&agent_version());
        assert_eq!(known_agent_alone(&exe), None, "not checked yet");
        let found = agent_alone(&exe);
        assert_eq!(found, Some(exe.with_file_name("kitbag-vm-agent")));
        assert_eq!(known_agent_alone(&exe), Some(found));

        // Another version (or a stale build of this one): the server serves as agent.
        let (_d, exe) = install(&format!(
            "kitbag-vm-agent {} (0)",
            env!("CARGO_PKG_VERSION")
        ));
        assert_eq!(agent_alone(&exe), None);
        assert_eq!(agent_binary(&exe), exe);
        let lonely = tempfile::tempdir().unwrap();
        assert_eq!(agent_alone(&lonely.path().join("kitbag-vm")), None);
    }
}
