//! One running instance, whatever engine runs it: a bubblewrap sandbox or a QEMU VM. The
//! tools, ports, idle timers and leases speak to this; only start-up is engine-specific.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::bwrap::Sandbox;
use crate::proto::{self, Answer, ExitStatus, Request, Stream, WriteHalf};
use crate::qemu::QemuVm;

pub enum Engine {
    Bwrap(Arc<Sandbox>),
    Qemu(Arc<QemuVm>),
}

impl Engine {
    pub fn backend(&self) -> &'static str {
        match self {
            Engine::Bwrap(_) => "bwrap",
            Engine::Qemu(_) => "qemu",
        }
    }

    /// The instance's directory on the host (`<state>/instances/<id>`).
    pub fn dir(&self) -> &Path {
        match self {
            Engine::Bwrap(s) => &s.dir,
            Engine::Qemu(v) => &v.dir,
        }
    }

    /// The process that is the instance, as the host sees it.
    pub fn pid(&self) -> i32 {
        match self {
            Engine::Bwrap(s) => s.child_pid,
            Engine::Qemu(v) => v.pid,
        }
    }

    /// Whether the instance's /work is a directory on the host (a VM's is inside the guest).
    pub fn work_on_host(&self) -> bool {
        matches!(self, Engine::Bwrap(_))
    }

    pub async fn agent(&self) -> std::io::Result<Stream> {
        match self {
            Engine::Bwrap(s) => s.agent().await,
            Engine::Qemu(v) => v.agent().await,
        }
    }

    pub async fn request(&self, req: &Request) -> std::io::Result<Answer> {
        proto::request(self.agent().await?, req).await
    }

    pub async fn request_with_body<F, Fut>(&self, req: &Request, body: F) -> std::io::Result<Answer>
    where
        F: FnOnce(WriteHalf) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<WriteHalf>>,
    {
        proto::request_with_body(self.agent().await?, req, body).await
    }

    /// Bring the logs to the host directory instance_logs reads (a sandbox writes them there
    /// itself).
    pub async fn sync_logs(&self) {
        if let Engine::Qemu(v) = self
            && let Err(e) = v.sync_logs().await
        {
            tracing::debug!(instance = v.id, "log sync: {e}");
        }
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        match self {
            Engine::Bwrap(s) => s.exit_status(),
            Engine::Qemu(v) => v.exit_status(),
        }
    }

    pub async fn wait(&self) -> ExitStatus {
        match self {
            Engine::Bwrap(s) => s.wait().await,
            Engine::Qemu(v) => v.wait().await,
        }
    }

    pub fn is_frozen(&self) -> bool {
        match self {
            Engine::Bwrap(s) => s.is_frozen(),
            Engine::Qemu(v) => v.is_frozen(),
        }
    }

    /// How pause works: `freezer`, `sigstop` or `qmp_stop` (the VM's CPUs halt).
    pub fn pause_method(&self) -> &'static str {
        match self {
            Engine::Bwrap(s) => s.pause_method(),
            Engine::Qemu(_) => "qmp_stop",
        }
    }

    pub fn pause(&self) -> Result<(), String> {
        match self {
            Engine::Bwrap(s) => s.pause(),
            Engine::Qemu(v) => v.pause(),
        }
    }

    pub fn resume(&self) -> Result<(), String> {
        match self {
            Engine::Bwrap(s) => s.resume(),
            Engine::Qemu(v) => v.resume(),
        }
    }

    pub fn usage(&self) -> crate::cgroup::Usage {
        match self {
            Engine::Bwrap(s) => s.usage(),
            Engine::Qemu(v) => v.usage(),
        }
    }

    pub fn limits_enforced(&self) -> (bool, Option<String>) {
        match self {
            Engine::Bwrap(s) => s.limits_enforced(),
            Engine::Qemu(v) => (
                true,
                Some(format!(
                    "a {} virtual machine: memory and CPUs are its size (-m, -smp); processes are limited only by the guest kernel",
                    v.accel.to_uppercase()
                )),
            ),
        }
    }

    pub async fn stop(&self, grace: Duration) -> ExitStatus {
        match self {
            Engine::Bwrap(s) => s.stop(grace).await,
            Engine::Qemu(v) => v.stop(grace).await,
        }
    }

    pub fn kill(&self) {
        match self {
            Engine::Bwrap(s) => s.kill(),
            Engine::Qemu(v) => v.kill(),
        }
    }

    pub fn cleanup(&self) {
        match self {
            Engine::Bwrap(s) => s.cleanup(),
            Engine::Qemu(v) => v.cleanup(),
        }
    }
}
