//! Polling briefly before the runtime sleeps, for a process that relays messages.
//!
//! A relay's latency on a virtual machine is mostly wake-ups: a thread that sleeps in
//! `epoll_wait` lets its vCPU halt, and waking a halted vCPU costs an exit to the hypervisor
//! and an interrupt — 20–25 µs each on the project's 2-core VM (whose guest halt-polling is
//! off), two of them per forwarded call. Before the runtime's thread parks, [`before_park`]
//! polls the watched descriptors (the client's input, the children's output) without
//! blocking; when one turns readable, the park's `epoll_wait` returns at once and no wake-up
//! was needed.
//!
//! How long it polls adapts as the kernel's guest halt-polling does: the window grows
//! (doubling from [`GROW_START`], up to the budget) after a sleep that a longer poll would
//! have caught, and halves after a sleep longer than the budget — so a host relaying a burst
//! of calls polls through the gaps between them, and an idle one stops polling after a few
//! wake-ups. Off (budget 0) unless the binary sets a budget (the host: `busy_poll_us`). The
//! cost is CPU time while calls keep coming: at most the window per wake-up.

use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::lock::LockExt;

/// The budget in nanoseconds: the longest a poll may last (0: never poll).
static BUDGET_NS: AtomicU64 = AtomicU64::new(0);
/// How long the next poll lasts, in nanoseconds (adapted, at most the budget).
static WINDOW_NS: AtomicU64 = AtomicU64::new(0);
/// The window a sleep that polling would have caught grows to from nothing.
const GROW_START: Duration = Duration::from_micros(50);
/// The descriptors whose readiness ends a poll: each a duplicate a [`Watch`] owns, by its
/// number.
static WATCHED: Mutex<Vec<(u64, OwnedFd)>> = Mutex::new(Vec::new());
static NEXT_WATCH: AtomicU64 = AtomicU64::new(0);
/// One thread polls at a time (a multi-threaded runtime parks each worker).
static POLLING: AtomicBool = AtomicBool::new(false);

/// Poll for up to `budget` before each park (zero turns polling off).
pub fn set_budget(budget: Duration) {
    BUDGET_NS.store(
        u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// A descriptor watched while this lives (through a duplicate: the original may close
/// first; the duplicate is closed with the guard).
#[must_use = "the descriptor is watched only while the guard lives"]
pub struct Watch(Option<u64>);

/// Watch `fd`: its turning readable ends a poll. A descriptor that cannot be duplicated
/// (out of descriptors) is not watched; its readers still wake the runtime as always.
pub fn watch(fd: impl AsFd) -> Watch {
    let Ok(dup) = rustix::io::fcntl_dupfd_cloexec(fd, 3) else {
        return Watch(None);
    };
    let id = NEXT_WATCH.fetch_add(1, Ordering::Relaxed);
    WATCHED.locked().push((id, dup));
    Watch(Some(id))
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(id) = self.0 else { return };
        let mut watched = WATCHED.locked();
        if let Some(at) = watched.iter().position(|(w, _)| *w == id) {
            watched.swap_remove(at);
        }
    }
}

thread_local! {
    /// When this thread parked after a poll that found nothing (see [`after_unpark`]).
    static PARKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The runtime's park hook: poll the watched descriptors until one is readable or the
/// window is spent.
pub fn before_park() {
    let budget = BUDGET_NS.load(Ordering::Relaxed);
    if budget == 0 || POLLING.swap(true, Ordering::Acquire) {
        return;
    }
    let window = WINDOW_NS.load(Ordering::Relaxed).min(budget);
    let caught = {
        // Held while polling: watching and unwatching are rare, and wait at most the window.
        let watched = WATCHED.locked();
        let mut fds: Vec<PollFd<'_>> = watched
            .iter()
            .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
            .collect();
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let deadline = Instant::now() + Duration::from_nanos(window);
        loop {
            // Ready (or an error, e.g. a closed descriptor): the park's own wait handles it.
            if fds.is_empty() || !matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(0)) {
                break !fds.is_empty();
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::hint::spin_loop();
        }
    };
    PARKED_AT.set((!caught).then(Instant::now));
    POLLING.store(false, Ordering::Release);
}

/// The runtime's unpark hook: learn from how long the thread slept.
pub fn after_unpark() {
    let Some(parked) = PARKED_AT.take() else {
        return;
    };
    let budget = BUDGET_NS.load(Ordering::Relaxed);
    let slept = u64::try_from(parked.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let window = WINDOW_NS.load(Ordering::Relaxed);
    WINDOW_NS.store(next_window(window, slept, budget), Ordering::Relaxed);
}

/// The poll window after a sleep of `slept` that followed a poll of `window` (all in
/// nanoseconds): grown when a poll up to `budget` would have caught what woke the thread,
/// halved when nothing came within the budget.
fn next_window(window: u64, slept: u64, budget: u64) -> u64 {
    let start = GROW_START.as_nanos() as u64;
    if slept <= budget {
        window.saturating_mul(2).max(start).min(budget)
    } else if window / 2 < start {
        0
    } else {
        window / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const US: u64 = 1_000;

    #[test]
    fn the_window_grows_while_polling_would_catch_the_wake_ups_and_shrinks_when_idle() {
        let budget = 500 * US;
        // From nothing, a short sleep starts it; further ones double it up to the budget.
        assert_eq!(next_window(0, 80 * US, budget), 50 * US);
        assert_eq!(next_window(50 * US, 80 * US, budget), 100 * US);
        assert_eq!(next_window(400 * US, 300 * US, budget), budget);
        // A sleep beyond the budget halves it; a small window goes to nothing.
        assert_eq!(next_window(budget, 2_000 * US, budget), 250 * US);
        assert_eq!(next_window(50 * US, 2_000 * US, budget), 0);
        assert_eq!(next_window(0, 2_000 * US, budget), 0);
    }

    // One test for the hooks: the budget, the window and the watched set are process-wide.
    #[test]
    fn a_poll_ends_when_a_watched_descriptor_turns_readable_or_the_window_is_spent() {
        let (reader, mut writer) = std::io::pipe().expect("pipe");
        set_budget(Duration::ZERO);
        let t = Instant::now();
        before_park();
        assert!(t.elapsed() < Duration::from_millis(100), "off: no poll");

        set_budget(Duration::from_millis(200));
        WINDOW_NS.store(200_000 * US, Ordering::Relaxed);
        let watch = watch(&reader);
        let t = Instant::now();
        before_park();
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "nothing readable: the window"
        );
        // Woken 1 ms later: a longer poll would have caught it, the window stays at most the
        // budget.
        std::thread::sleep(Duration::from_millis(1));
        after_unpark();
        assert_eq!(WINDOW_NS.load(Ordering::Relaxed), 200_000 * US);

        writer.write_all(b"x\n").expect("write");
        let t = Instant::now();
        before_park();
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "readable: at once"
        );
        assert!(PARKED_AT.get().is_none(), "caught: nothing to learn");

        drop(watch);
        assert!(WATCHED.locked().is_empty(), "the guard unwatches");
        set_budget(Duration::ZERO);
    }
}
