//! What every engine that runs instances implements — bubblewrap, QEMU, Docker, Kubernetes —
//! and what they share. [`crate::engine::Engine`] holds one and speaks only to this.

use std::path::Path;

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::cgroup::Usage;
use crate::disk::DiskInfo;
use crate::error::VmResult;
use crate::proto::{self, Answer, ExitStatus, Request, Stream, WriteHalf};

/// One running instance as its engine sees it.
pub trait Backend: Send + Sync {
    /// `bwrap`, `qemu`, `docker`, `kube`.
    fn name(&self) -> &'static str;

    /// The instance's directory on the host (`<state>/instances/<id>`).
    fn dir(&self) -> &Path;

    /// The process on this host the record keeps (0: none here, a pod).
    fn pid(&self) -> i32;

    /// The instance's end, published once it has ended.
    fn exit(&self) -> &watch::Receiver<Option<ExitStatus>>;

    /// A connection to the instance's agent, past the engine's check that it is the agent.
    fn agent(&self) -> BoxFuture<'_, std::io::Result<Stream>>;

    /// Bring the logs to the host directory `instance_logs` reads. A sandbox writes them
    /// there itself: nothing to do.
    fn sync_logs(&self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn is_frozen(&self) -> bool;

    /// How `pause` stops the instance (`freezer`, `sigstop`, `qmp_stop`, …).
    fn pause_method(&self) -> &'static str;

    fn pause(&self) -> VmResult<()>;

    fn resume(&self) -> VmResult<()>;

    fn usage(&self) -> Usage;

    /// Whether the spawn's limits hold, and how.
    fn limits_enforced(&self) -> (bool, Option<String>);

    /// `/work`'s size limit and how it is held, when one was asked for.
    fn disk(&self) -> Option<DiskInfo> {
        None
    }

    /// Whether this instance's `/work` is its directory's `work/` on this host, where the
    /// engine's capabilities have it so (a size limit can make it a file system of its own).
    fn work_on_host(&self) -> bool {
        true
    }

    /// Before the agent is asked to stop the instance: the engine's own first step, if any.
    fn before_stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// End the instance when its agent did not.
    fn force_end(&self) -> BoxFuture<'_, ()>;

    /// End it at once, without waiting (the synchronous paths).
    fn kill(&self);

    /// After the end: what the engine set up on the host is removed.
    fn cleanup(&self);

    /// How the instance ended, once it has.
    fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit().borrow()
    }

    /// Wait until the instance ends.
    fn wait(&self) -> BoxFuture<'_, ExitStatus> {
        Box::pin(proto::wait_exit(self.exit()))
    }

    /// One request to the agent, on a connection of its own.
    fn request<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, std::io::Result<Answer>> {
        Box::pin(async move { proto::request(self.agent().await?, req).await })
    }
}

/// One request with a body the caller writes (copies into the instance).
pub async fn request_with_body<F, Fut>(
    backend: &dyn Backend,
    req: &Request,
    body: F,
) -> std::io::Result<Answer>
where
    F: FnOnce(WriteHalf) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<WriteHalf>>,
{
    proto::request_with_body(backend.agent().await?, req, body).await
}
