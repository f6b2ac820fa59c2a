//! One running instance, whatever engine runs it: a bubblewrap sandbox or a QEMU VM. The
//! tools, ports, idle timers and leases speak to this; only start-up is engine-specific.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::bwrap::Sandbox;
use crate::error::VmResult;
use crate::proto::{self, Answer, ExitStatus, Request, Stream, WriteHalf};
use crate::qemu::QemuVm;

/// How long a VM's or pod's processes get to end once its main command has: the instance ends
/// with its command, as a sandbox does.
const MAIN_ENDED_GRACE: Duration = Duration::from_secs(2);

pub enum Engine {
    Bwrap(Arc<Sandbox>),
    Qemu(Arc<QemuVm>),
    #[cfg(feature = "backend-docker")]
    Docker(Arc<crate::docker::Container>),
    #[cfg(feature = "backend-kube")]
    Kube(Arc<crate::kube::pod::KubePod>),
}

impl Engine {
    /// A QEMU VM whose main command has ended is stopped like any instance
    /// ([`crate::remote::MainEnded`]).
    pub fn qemu_main_ended(vm: Arc<QemuVm>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = Engine::Qemu(vm).stop(MAIN_ENDED_GRACE).await;
        })
    }

    /// A pod whose main command has ended is stopped like any instance
    /// ([`crate::remote::MainEnded`]).
    #[cfg(feature = "backend-kube")]
    pub fn kube_main_ended(pod: Arc<crate::kube::pod::KubePod>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = Engine::Kube(pod).stop(MAIN_ENDED_GRACE).await;
        })
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Engine::Bwrap(_) => "bwrap",
            Engine::Qemu(_) => "qemu",
            #[cfg(feature = "backend-docker")]
            Engine::Docker(_) => "docker",
            #[cfg(feature = "backend-kube")]
            Engine::Kube(_) => "kube",
        }
    }

    /// The instance's directory on the host (`<state>/instances/<id>`).
    pub fn dir(&self) -> &Path {
        match self {
            Engine::Bwrap(s) => &s.dir,
            Engine::Qemu(v) => &v.dir,
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => &d.dir,
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => &k.dir,
        }
    }

    /// The process that is the instance, as the host sees it.
    pub fn pid(&self) -> i32 {
        match self {
            Engine::Bwrap(s) => s.child_pid,
            Engine::Qemu(v) => v.pid,
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.pid,
            // Its processes run on a cluster node, not here.
            #[cfg(feature = "backend-kube")]
            Engine::Kube(_) => 0,
        }
    }

    pub async fn agent(&self) -> std::io::Result<Stream> {
        match self {
            Engine::Bwrap(s) => s.agent().await,
            Engine::Qemu(v) => v.agent().await,
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.agent().await,
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.agent().await,
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
        #[cfg(feature = "backend-kube")]
        if let Engine::Kube(k) = self
            && let Err(e) = k.sync_logs().await
        {
            tracing::debug!(instance = k.id, "log sync: {e}");
        }
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        match self {
            Engine::Bwrap(s) => s.exit_status(),
            Engine::Qemu(v) => v.exit_status(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.exit_status(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.exit_status(),
        }
    }

    pub async fn wait(&self) -> ExitStatus {
        match self {
            Engine::Bwrap(s) => s.wait().await,
            Engine::Qemu(v) => v.wait().await,
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.wait().await,
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.wait().await,
        }
    }

    pub fn is_frozen(&self) -> bool {
        match self {
            Engine::Bwrap(s) => s.is_frozen(),
            Engine::Qemu(v) => v.is_frozen(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.is_frozen(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.is_frozen(),
        }
    }

    /// How pause works: `freezer`, `sigstop` or `qmp_stop` (the VM's CPUs halt).
    pub fn pause_method(&self) -> &'static str {
        match self {
            Engine::Bwrap(s) => s.pause_method(),
            Engine::Qemu(_) => "qmp_stop",
            #[cfg(feature = "backend-docker")]
            Engine::Docker(_) => "engine_pause",
            #[cfg(feature = "backend-kube")]
            Engine::Kube(_) => "sandbox_suspend",
        }
    }

    pub fn pause(&self) -> VmResult<()> {
        match self {
            Engine::Bwrap(s) => s.pause(),
            Engine::Qemu(v) => v.pause(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.pause(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.pause(),
        }
    }

    pub fn resume(&self) -> VmResult<()> {
        match self {
            Engine::Bwrap(s) => s.resume(),
            Engine::Qemu(v) => v.resume(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.resume(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.resume(),
        }
    }

    pub fn usage(&self) -> crate::cgroup::Usage {
        match self {
            Engine::Bwrap(s) => s.usage(),
            Engine::Qemu(v) => v.usage(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.usage(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.usage(),
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
            #[cfg(feature = "backend-docker")]
            Engine::Docker(_) => (
                true,
                Some("the engine's cgroups (Memory, NanoCpus, PidsLimit)".into()),
            ),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(_) => (
                true,
                Some("the pod's resources.limits (memory, cpu), enforced by its node".into()),
            ),
        }
    }

    /// Stop, the same way for every engine: resumed if paused, its logs collected, then the
    /// agent stops every process (SIGTERM, `grace`, SIGKILL) and exits, which ends the
    /// instance; an instance that does not end within 5 s more is ended by its engine.
    pub async fn stop(&self, grace: Duration) -> ExitStatus {
        // A suspended Sandbox has no processes to stop: resuming it would start a pod only to
        // stop it again.
        #[cfg(feature = "backend-kube")]
        if let Engine::Kube(k) = self
            && k.is_frozen()
        {
            k.force_end().await;
        }
        if self.exit_status().is_none() {
            if self.is_frozen() {
                let _ = self.resume();
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), self.sync_logs()).await;
            let shutdown = Request::Shutdown {
                grace_ms: grace.as_millis() as u64,
            };
            let _ =
                tokio::time::timeout(grace + Duration::from_secs(2), self.request(&shutdown)).await;
            if tokio::time::timeout(Duration::from_secs(5), self.wait())
                .await
                .is_err()
            {
                match self {
                    Engine::Bwrap(s) => s.kill(),
                    Engine::Qemu(v) => v.force_end().await,
                    #[cfg(feature = "backend-docker")]
                    Engine::Docker(d) => d.force_end().await,
                    #[cfg(feature = "backend-kube")]
                    Engine::Kube(k) => k.force_end().await,
                }
            }
        }
        let status = tokio::time::timeout(Duration::from_secs(5), self.wait())
            .await
            .unwrap_or(ExitStatus {
                code: -1,
                signal: Some(9),
            });
        self.cleanup();
        status
    }

    pub fn kill(&self) {
        match self {
            Engine::Bwrap(s) => s.kill(),
            Engine::Qemu(v) => v.kill(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.kill(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.kill(),
        }
    }

    pub fn cleanup(&self) {
        match self {
            Engine::Bwrap(s) => s.cleanup(),
            Engine::Qemu(v) => v.cleanup(),
            #[cfg(feature = "backend-docker")]
            Engine::Docker(d) => d.cleanup(),
            #[cfg(feature = "backend-kube")]
            Engine::Kube(k) => k.cleanup(),
        }
    }
}
