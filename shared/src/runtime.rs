//! How every kitbag binary starts: a clean signal mask, then the tokio runtime; and how it
//! hears that it should stop ([`shutdown_signal`]).
//!
//! Claude Code (through Bun) starts MCP servers with SIGINT, SIGTERM and SIGCHLD blocked, an
//! inherited mask that survives `exec`. A server that keeps it never sees the client's
//! shutdown signals and is killed with SIGKILL half a second later, leaving its children
//! behind. The mask must be cleared before the runtime starts its threads: threads inherit
//! the mask of the thread that creates them.

use std::future::Future;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

/// The signals a server must receive to shut down (or reap, or reload) when asked.
const SHUTDOWN_SIGNALS: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGCHLD,
];

/// Unblock the shutdown signals in the calling thread (and so in every thread it creates).
pub fn unblock_shutdown_signals() {
    let mut set = SigSet::empty();
    for s in SHUTDOWN_SIGNALS {
        set.add(s);
    }
    // Best effort: this only fails for an invalid `how`, which a constant rules out.
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
}

/// How long blocking work may still run once a server's body returned.
pub const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// Which tokio runtime a binary runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One thread: a request read, answered and written without crossing threads.
    Current,
    /// A worker per core.
    Multi,
}

/// A binary's `main`: clear the signal mask, build the runtime, run `body` to completion.
pub fn main<F>(threads: Threads, body: impl FnOnce() -> F) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    unblock_shutdown_signals();
    let runtime = match threads {
        Threads::Current => tokio::runtime::Builder::new_current_thread(),
        Threads::Multi => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    // Off unless the binary sets a budget (the host: `busy_poll_us`).
    .on_thread_park(crate::busy_poll::before_park)
    .on_thread_unpark(crate::busy_poll::after_unpark)
    .build()?;
    let result = runtime.block_on(async {
        // Once the server idles after its start, the pages start-up alone needed go back.
        crate::working_set::trim_after_start();
        body().await
    });
    // Dropping the runtime would wait for every blocking task — among them a read of stdin
    // that only ends when the client closes it (on a socket or a tty stdin is read blocking,
    // as Claude Code's stdio is a Unix socket): a server told to stop by SIGTERM while its
    // client keeps stdin open would never exit. What is left after a short grace is
    // abandoned; the process ends. The grace is short because a client gives a server about
    // 500 ms between SIGTERM and SIGKILL.
    runtime.shutdown_timeout(EXIT_GRACE);
    result
}

/// Resolves on the first SIGTERM or SIGINT (never, if the handlers cannot be installed).
///
/// The handlers are installed when this is called, not when it is first awaited: a server
/// calls it at start, so a signal during the handshake is heard too — also when SIGINT came
/// ignored from the parent (a shell starts background jobs so), which until the handler
/// exists would drop it and leave the server running. Call it inside the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_mask_is_cleared() {
        // In a thread of its own, so the test harness's threads keep their mask.
        std::thread::spawn(|| {
            let mut set = SigSet::empty();
            set.add(Signal::SIGTERM);
            set.add(Signal::SIGINT);
            pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).expect("block");
            unblock_shutdown_signals();
            let now = SigSet::thread_get_mask().expect("mask");
            for s in SHUTDOWN_SIGNALS {
                assert!(!now.contains(s), "{s:?} still blocked");
            }
        })
        .join()
        .expect("thread");
    }
}
