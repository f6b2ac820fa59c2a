//! Who wants to hear about which `issues://` resources ([`Subscribers`]), and the state of the
//! change-log watcher that tells them. Every tool call's state holds one; `resources.rs`
//! watches the change log and announces through it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use kitbag_shared::subscribers::Subscribers;

#[derive(Default)]
pub struct Notifier {
    pub subscribers: Subscribers,
    watching: AtomicBool,
    /// Change-log position below which everything was announced (or predates every
    /// subscription): where a (re)started watcher begins.
    pub cursor: AtomicI64,
    poke: tokio::sync::Notify,
}

impl Notifier {
    /// A change was committed by this process: look at the change log now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Resolves once `poke` was called (since the last time this resolved).
    pub async fn poked(&self) {
        self.poke.notified().await
    }

    /// Mark the change-log watcher as running: false when it runs already.
    pub fn start_watching(&self) -> bool {
        !self.watching.swap(true, Ordering::SeqCst)
    }

    /// The watcher has stopped (it could not open the database): the next subscriber starts
    /// another.
    pub fn stop_watching(&self) {
        self.watching.store(false, Ordering::SeqCst);
    }
}

/// How long a hole in the change log's sequence is waited for. A hole is a change whose
/// transaction took its number but has not committed yet (on PostgreSQL, numbers are taken
/// in one order and committed in another), or one that rolled back and never will.
const GAP_WAIT: Duration = Duration::from_secs(60);
/// Holes wider than this are not waited for (a restored or truncated log, not transactions
/// in flight).
const GAP_MAX: i64 = 10_000;

/// Where the watcher is in the change log. Reading `seq > floor` alone would skip a change
/// that commits after a later one was read; so the floor stays below each hole until it
/// fills or [`GAP_WAIT`] passes, and the entries read above it are remembered, to announce
/// each change once.
pub struct ChangeCursor {
    floor: i64,
    seen: BTreeSet<i64>,
    holes: BTreeMap<i64, Instant>,
}

impl ChangeCursor {
    /// Every change up to `floor` counts as announced.
    pub fn new(floor: i64) -> Self {
        ChangeCursor {
            floor,
            seen: BTreeSet::new(),
            holes: BTreeMap::new(),
        }
    }

    /// Read the change log after this (`seq > floor`).
    pub fn floor(&self) -> i64 {
        self.floor
    }

    /// Take in the entries read after [`Self::floor`], `(seq, number, ours)`: the numbers of
    /// our issues changed that were not announced yet, each once.
    pub fn advance(&mut self, rows: &[(i64, i64, bool)], now: Instant) -> Vec<i64> {
        let mut numbers = Vec::new();
        for &(seq, number, ours) in rows {
            if seq <= self.floor || !self.seen.insert(seq) {
                continue;
            }
            self.holes.remove(&seq);
            if ours && !numbers.contains(&number) {
                numbers.push(number);
            }
        }
        let top = self.seen.last().copied().unwrap_or(self.floor);
        if top - self.floor <= GAP_MAX {
            for seq in self.floor + 1..top {
                if !self.seen.contains(&seq) {
                    self.holes.entry(seq).or_insert(now);
                }
            }
        }
        self.holes
            .retain(|_, noticed| now.saturating_duration_since(*noticed) < GAP_WAIT);
        self.floor = match self.holes.first_key_value() {
            Some((&hole, _)) => hole - 1,
            None => top,
        };
        let floor = self.floor;
        self.seen.retain(|&seq| seq > floor);
        numbers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_committed_after_a_later_one_is_announced_once() {
        let t0 = Instant::now();
        let mut cursor = ChangeCursor::new(4);
        // Change 5 took its number first but commits last.
        assert_eq!(cursor.advance(&[(6, 2, true)], t0), [2]);
        assert_eq!(cursor.floor(), 4, "waits below the hole at 5");
        // Reading from the floor again returns 6, already announced.
        assert_eq!(cursor.advance(&[(5, 1, true), (6, 2, true)], t0), [1]);
        assert_eq!(cursor.floor(), 6);
        assert_eq!(cursor.advance(&[], t0), Vec::<i64>::new());
    }

    #[test]
    fn other_projects_changes_move_the_floor_and_are_not_announced() {
        let mut cursor = ChangeCursor::new(0);
        let found = cursor.advance(&[(1, 7, false), (2, 3, true), (3, 3, true)], Instant::now());
        assert_eq!(found, [3]);
        assert_eq!(cursor.floor(), 3);
    }

    #[test]
    fn a_hole_never_filled_is_given_up_after_a_while() {
        let t0 = Instant::now();
        let mut cursor = ChangeCursor::new(0);
        assert_eq!(cursor.advance(&[(2, 1, true)], t0), [1]);
        assert_eq!(cursor.floor(), 0);
        assert_eq!(
            cursor.advance(&[(2, 1, true)], t0 + GAP_WAIT / 2),
            Vec::<i64>::new()
        );
        assert_eq!(cursor.floor(), 0, "still waiting for 1");
        cursor.advance(&[(2, 1, true), (3, 4, true)], t0 + GAP_WAIT);
        assert_eq!(cursor.floor(), 3, "1 rolled back: given up");
    }
}
