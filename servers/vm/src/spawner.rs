//! The one thread that starts sandboxes.
//!
//! bwrap's `--die-with-parent` (PR_SET_PDEATHSIG) fires when the *thread* that forked it
//! exits, not the process (vm.md §2.1, verified). A sandbox spawned from a blocking-pool
//! thread would be SIGKILLed when that thread retires after its idle keep-alive. So every
//! spawn happens on this thread, which lives as long as the server.

use std::process::{Child, Command};
use std::sync::mpsc;

use tokio::sync::oneshot;

type Job = (Command, oneshot::Sender<std::io::Result<Child>>);

#[derive(Clone)]
pub struct Spawner {
    tx: mpsc::Sender<Job>,
}

impl Spawner {
    /// Start the spawner thread. It ends only when every `Spawner` handle is dropped — the
    /// server keeps one for its whole life.
    pub fn start() -> std::io::Result<Spawner> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("vm-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
                // Keep the thread (and the parent-death link of every sandbox it started)
                // alive until the process exits.
                loop {
                    std::thread::park();
                }
            })?;
        Ok(Spawner { tx })
    }

    /// Spawn `cmd` on the spawner thread.
    pub async fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((cmd, reply))
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spawns_on_its_thread() {
        let s = Spawner::start().expect("start");
        let mut cmd = Command::new("true");
        cmd.stdout(std::process::Stdio::null());
        let mut child = s.spawn(cmd).await.expect("spawn");
        assert!(child.wait().expect("wait").success());
    }
}
