//! One running instance, whatever engine runs it (`backend.rs`: bubblewrap, QEMU, Docker,
//! Kubernetes). The tools, ports, idle timers and leases speak to this; only start-up is
//! engine-specific.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::backend::Backend;
use crate::error::VmResult;
use crate::proto::{Answer, ExitStatus, Request, Stream, WriteHalf};
use crate::qemu::QemuVm;

/// How long a VM's or pod's processes get to end once its main command has: the instance ends
/// with its command, as a sandbox does.
const MAIN_ENDED_GRACE: Duration = Duration::from_secs(2);

pub struct Engine {
    backend: Arc<dyn Backend>,
}

impl Engine {
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Engine { backend }
    }

    /// A QEMU VM whose main command has ended is stopped like any instance
    /// ([`crate::remote::MainEnded`]).
    pub fn qemu_main_ended(vm: Arc<QemuVm>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = Engine::new(vm).stop(MAIN_ENDED_GRACE).await;
        })
    }

    /// The same for a pod.
    #[cfg(feature = "backend-kube")]
    pub fn kube_main_ended(pod: Arc<crate::kube::pod::KubePod>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = Engine::new(Arc::new(pod)).stop(MAIN_ENDED_GRACE).await;
        })
    }

    pub fn backend(&self) -> &'static str {
        self.backend.name()
    }

    pub fn dir(&self) -> &Path {
        self.backend.dir()
    }

    pub fn pid(&self) -> i32 {
        self.backend.pid()
    }

    pub async fn agent(&self) -> std::io::Result<Stream> {
        self.backend.agent().await
    }

    pub async fn request(&self, req: &Request) -> std::io::Result<Answer> {
        self.backend.request(req).await
    }

    pub async fn request_with_body<F, Fut>(&self, req: &Request, body: F) -> std::io::Result<Answer>
    where
        F: FnOnce(WriteHalf) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<WriteHalf>>,
    {
        crate::backend::request_with_body(&*self.backend, req, body).await
    }

    /// Bring the logs to the host directory instance_logs reads.
    pub async fn sync_logs(&self) {
        if let Err(e) = self.backend.sync_logs().await {
            tracing::debug!(dir = %self.dir().display(), "log sync: {e}");
        }
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.backend.exit_status()
    }

    pub async fn wait(&self) -> ExitStatus {
        self.backend.wait().await
    }

    pub fn is_frozen(&self) -> bool {
        self.backend.is_frozen()
    }

    pub fn pause_method(&self) -> &'static str {
        self.backend.pause_method()
    }

    pub fn pause(&self) -> VmResult<()> {
        self.backend.pause()
    }

    pub fn resume(&self) -> VmResult<()> {
        self.backend.resume()
    }

    pub fn usage(&self) -> crate::cgroup::Usage {
        self.backend.usage()
    }

    pub fn limits_enforced(&self) -> (bool, Option<String>) {
        self.backend.limits_enforced()
    }

    pub fn disk(&self) -> Option<crate::disk::DiskInfo> {
        self.backend.disk()
    }

    pub fn work_on_host(&self) -> bool {
        self.backend.work_on_host()
    }

    /// Stop, the same way for every engine: resumed if paused, its logs collected, then the
    /// agent stops every process (SIGTERM, `grace`, SIGKILL) and exits, which ends the
    /// instance; an instance that does not end within 5 s more is ended by its engine.
    pub async fn stop(&self, grace: Duration) -> ExitStatus {
        self.backend.before_stop().await;
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
                self.backend.force_end().await;
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
        self.backend.kill()
    }

    pub fn cleanup(&self) {
        self.backend.cleanup()
    }
}
