//! What the adapter tells us on its own — events, output, capabilities — and the program's run
//! state that follows from them. One owner: the client's reader records, the `debug` tool asks
//! and waits, and neither decides on its own what "stopped" or "ended" means.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kitbag_shared::lock::LockExt;
use serde_json::Value;
use tokio::sync::Notify;

/// How often a wait for a stop looks again without a wake-up (a backstop: every change wakes).
const STOP_TICK: Duration = Duration::from_millis(100);
/// The same for the start-up wait for `initialized`.
const START_TICK: Duration = Duration::from_millis(200);

/// A breakpoint's state as the adapter's last `breakpoint` event gave it: (verified, line).
pub type BreakpointChange = (bool, Option<i64>);

/// Everything recorded; only [`Events`] reaches it, under its lock.
#[derive(Default)]
struct Record {
    initialized: bool,
    /// The last `stopped` body, until `continued` or a resume with no stop since.
    stopped: Option<Value>,
    /// `stopped` events so far: tells a new stop from one already seen.
    stop_count: u64,
    exited: Option<i64>,
    terminated: bool,
    /// The adapter's stream ended: no response will ever arrive.
    closed: bool,
    output: Vec<(String, String)>,
    /// The adapter's capabilities from the `initialize` response.
    caps: Value,
    /// `breakpoint` events: the adapter's breakpoint id → its state as last told.
    breakpoint_changes: HashMap<i64, BreakpointChange>,
}

impl Record {
    fn ended(&self) -> bool {
        self.exited.is_some() || self.terminated
    }

    /// What the start-up wait ends on: `initialized`, or the end (which the start-up reports).
    fn started(&self) -> Option<()> {
        (self.initialized || self.terminated).then_some(())
    }

    fn stop(&self) -> Option<Stop> {
        self.stopped.as_ref().map(|body| Stop {
            body: body.clone(),
            count: self.stop_count,
        })
    }

    /// What a wait for a stop ends on. A stop still on record comes before the end: the
    /// adapter may end (or its stream close) without a `continued`, and the stop is then the
    /// last place the program was seen, which is what `status` has always answered.
    fn settled(&self) -> Option<RunState> {
        if let Some(stop) = self.stop() {
            Some(RunState::Stopped(stop))
        } else if self.ended() {
            Some(RunState::Ended {
                exit_code: self.exited,
            })
        } else {
            None
        }
    }
}

/// A stop: the `stopped` event's body, and which stop it was (1 for the first).
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub body: Value,
    pub count: u64,
}

impl Stop {
    /// The thread the program stopped in, when the adapter named one.
    pub fn thread_id(&self) -> Option<i64> {
        self.body["threadId"].as_i64()
    }
}

/// Where the program is.
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    Stopped(Stop),
    /// It exited (with its code, when the adapter said) or the adapter terminated.
    Ended {
        exit_code: Option<i64>,
    },
    Running,
}

/// The stops seen so far, taken before a resume (see [`Events::resumed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopMark(u64);

/// The adapter's asynchronous side, and waiting on it.
#[derive(Default)]
pub struct Events {
    record: Mutex<Record>,
    /// Woken on every change, so waiters need not poll.
    changed: Notify,
}

impl Events {
    // --- Recording: the client's reader (the parent module) only.

    /// Record one adapter event.
    pub(super) fn on_event(&self, event: &str, body: &Value) {
        {
            let mut r = self.record.locked();
            match event {
                "initialized" => r.initialized = true,
                "breakpoint" => {
                    let b = &body["breakpoint"];
                    if let Some(id) = b["id"].as_i64() {
                        let change = (b["verified"].as_bool().unwrap_or(false), b["line"].as_i64());
                        r.breakpoint_changes.insert(id, change);
                    }
                }
                "stopped" => {
                    r.stopped = Some(body.clone());
                    r.stop_count += 1;
                }
                "continued" => r.stopped = None,
                "exited" => r.exited = body["exitCode"].as_i64(),
                "terminated" => r.terminated = true,
                "output" => {
                    let category = body["category"].as_str().unwrap_or("console");
                    // Telemetry is the adapter talking to its vendor, not the program's output.
                    if category != "telemetry" {
                        let text = body["output"].as_str().unwrap_or("").to_string();
                        r.output.push((category.to_string(), text));
                    }
                }
                _ => {}
            }
        }
        self.changed.notify_waiters();
    }

    /// Keep the `initialize` response's capabilities.
    pub(super) fn set_capabilities(&self, caps: Value) {
        self.record.locked().caps = caps;
    }

    /// Record a line the adapter (or the program it runs) printed outside the protocol.
    pub(super) fn push_output(&self, category: &str, text: String) {
        self.record
            .locked()
            .output
            .push((category.to_string(), text));
        self.changed.notify_waiters();
    }

    /// The adapter's stream ended: nothing more will come, so the session is over too.
    pub(super) fn close(&self) {
        {
            let mut r = self.record.locked();
            r.terminated = true;
            r.closed = true;
        }
        self.changed.notify_waiters();
    }

    // --- Transitions the tool asks for.

    /// Which stops have been seen, before asking the adapter to resume.
    pub fn stop_mark(&self) -> StopMark {
        StopMark(self.record.locked().stop_count)
    }

    /// The adapter accepted a resume: the program runs, unless it stopped again since `mark`
    /// (a quick step can stop before its answer arrives). Not every adapter says `continued`.
    pub fn resumed(&self, mark: StopMark) {
        let mut r = self.record.locked();
        if r.stop_count == mark.0 {
            r.stopped = None;
        }
    }

    // --- Questions.

    /// Whether the adapter's stream has ended: no answer will ever come.
    pub fn is_closed(&self) -> bool {
        self.record.locked().closed
    }

    /// Whether the program has ended: exited, terminated, or its adapter gone (a closed
    /// stream counts as terminated).
    pub fn has_ended(&self) -> bool {
        self.record.locked().ended()
    }

    /// Where the program is, for an action that would move it: an ended program is ended,
    /// whatever stop is still on record.
    pub fn run_state(&self) -> RunState {
        let r = self.record.locked();
        if r.ended() {
            RunState::Ended {
                exit_code: r.exited,
            }
        } else if let Some(stop) = r.stop() {
            RunState::Stopped(stop)
        } else {
            RunState::Running
        }
    }

    /// The stop the program is in, if it is stopped.
    pub fn stop(&self) -> Option<Stop> {
        self.record.locked().stop()
    }

    pub fn is_stopped(&self) -> bool {
        self.record.locked().stopped.is_some()
    }

    /// Whether the adapter advertised `capability` (`supportsX: true`) in `initialize`.
    pub fn capability(&self, capability: &str) -> bool {
        self.record.locked().caps[capability].as_bool() == Some(true)
    }

    /// The exception filter ids the adapter offers.
    pub fn exception_filters(&self) -> Vec<String> {
        self.record.locked().caps["exceptionBreakpointFilters"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["filter"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every breakpoint the adapter reported on by event, as last told.
    pub fn breakpoint_changes(&self) -> HashMap<i64, BreakpointChange> {
        self.record.locked().breakpoint_changes.clone()
    }

    /// Up to `max` output chunks (category, text) from cursor `since`, and whether more follow.
    /// Output is kept for the session: a cursor can be read again.
    pub fn output_page(&self, since: usize, max: usize) -> (Vec<(String, String)>, bool) {
        let r = self.record.locked();
        let items: Vec<_> = r.output.iter().skip(since).take(max).cloned().collect();
        let more = r.output.len() > since + items.len();
        (items, more)
    }

    /// Everything printed so far, as one text.
    pub fn output_text(&self) -> String {
        let r = self.record.locked();
        r.output.iter().map(|(_, text)| text.as_str()).collect()
    }

    // --- Waiting.

    /// Wait up to `wait` for the program to stop or end; `Running` when it did neither.
    pub async fn settle(&self, wait: Duration) -> RunState {
        let deadline = Instant::now() + wait;
        self.wait_until(deadline, STOP_TICK.min(wait), Record::settled)
            .await
            .unwrap_or(RunState::Running)
    }

    /// Wait until `deadline` for the adapter's `initialized` event (or its end, which the
    /// start-up then reports); whether either came.
    pub async fn started(&self, deadline: Instant) -> bool {
        self.wait_until(deadline, START_TICK, Record::started)
            .await
            .is_some()
    }

    /// Wait until `check` finds what it looks for, or `deadline`. The wake-up is armed before
    /// each look, so a change between the look and the wait is never missed.
    async fn wait_until<T>(
        &self,
        deadline: Instant,
        tick: Duration,
        check: impl Fn(&Record) -> Option<T>,
    ) -> Option<T> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = check(&self.record.locked());
            if found.is_some() {
                return found;
            }
            if Instant::now() >= deadline {
                return None;
            }
            let _ = tokio::time::timeout(tick, notified).await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    const LONG: Duration = Duration::from_secs(3600);

    fn stopped(events: &Events, thread: i64) {
        events.on_event(
            "stopped",
            &json!({"reason": "breakpoint", "threadId": thread}),
        );
    }

    #[tokio::test]
    async fn a_stop_recorded_before_the_wait_is_seen_at_once() {
        let events = Events::default();
        stopped(&events, 7);
        let state = tokio::time::timeout(Duration::from_secs(5), events.settle(LONG))
            .await
            .expect("a stop already on record must end the wait");
        let RunState::Stopped(stop) = state else {
            panic!("expected a stop, got {state:?}");
        };
        assert_eq!(stop.count, 1);
        assert_eq!(stop.thread_id(), Some(7));
        assert_eq!(stop.body["reason"], "breakpoint");
    }

    #[tokio::test]
    async fn a_wait_with_nothing_to_see_says_running_at_its_deadline() {
        let events = Events::default();
        assert_eq!(events.settle(Duration::ZERO).await, RunState::Running);
        let t = Instant::now();
        assert_eq!(
            events.settle(Duration::from_millis(150)).await,
            RunState::Running
        );
        assert!(t.elapsed() >= Duration::from_millis(150));
    }

    #[tokio::test]
    async fn an_exit_wakes_every_waiter() {
        let events = Arc::new(Events::default());
        // A tick of an hour: only the wake-up can end these waits in time.
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let e = events.clone();
                tokio::spawn(async move {
                    let deadline = Instant::now() + LONG;
                    e.wait_until(deadline, LONG, Record::settled).await
                })
            })
            .collect();
        // Let every waiter reach its wait first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        events.on_event("exited", &json!({"exitCode": 3}));
        for w in waiters {
            let got = tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("the exit must wake the waiter")
                .unwrap();
            assert_eq!(got, Some(RunState::Ended { exit_code: Some(3) }));
        }
    }

    #[tokio::test]
    async fn a_closed_stream_ends_the_start_up_wait_and_the_session() {
        let events = Arc::new(Events::default());
        let e = events.clone();
        // A tick of an hour, as above.
        let waiter = tokio::spawn(async move {
            e.wait_until(Instant::now() + LONG, LONG, Record::started)
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!events.is_closed() && !events.has_ended());
        events.close();
        let started = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("closing must wake the start-up wait")
            .unwrap();
        assert_eq!(started, Some(()));
        assert!(events.is_closed());
        assert!(events.has_ended());
        assert_eq!(events.run_state(), RunState::Ended { exit_code: None });
    }

    #[tokio::test]
    async fn the_start_up_wait_gives_up_at_its_deadline() {
        let events = Events::default();
        assert!(!events.started(Instant::now()).await);
        events.on_event("initialized", &json!({}));
        assert!(events.started(Instant::now()).await);
    }

    #[test]
    fn a_resume_clears_the_stop_unless_a_new_one_came() {
        let events = Events::default();
        stopped(&events, 1);
        let mark = events.stop_mark();
        events.resumed(mark);
        assert_eq!(events.run_state(), RunState::Running);
        assert!(!events.is_stopped());

        stopped(&events, 1);
        let mark = events.stop_mark();
        // The step stopped again before the adapter answered it.
        stopped(&events, 2);
        events.resumed(mark);
        let RunState::Stopped(stop) = events.run_state() else {
            panic!("the newer stop must stay");
        };
        assert_eq!((stop.count, stop.thread_id()), (3, Some(2)));
    }

    #[test]
    fn continued_clears_the_stop() {
        let events = Events::default();
        stopped(&events, 1);
        assert!(events.is_stopped());
        events.on_event("continued", &json!({"threadId": 1}));
        assert_eq!(events.stop(), None);
        assert_eq!(events.run_state(), RunState::Running);
    }

    #[tokio::test]
    async fn an_end_after_a_stop_is_ended_to_actions_and_stopped_to_a_wait() {
        let events = Events::default();
        stopped(&events, 4);
        events.on_event("terminated", &json!({}));
        assert!(events.has_ended());
        assert_eq!(events.run_state(), RunState::Ended { exit_code: None });
        assert!(matches!(
            events.settle(Duration::ZERO).await,
            RunState::Stopped(Stop { count: 1, .. })
        ));
    }

    #[test]
    fn output_is_paged_by_cursor_and_telemetry_left_out() {
        let events = Events::default();
        events.on_event("output", &json!({"category": "stdout", "output": "a\n"}));
        events.on_event(
            "output",
            &json!({"category": "telemetry", "output": "ping"}),
        );
        events.on_event("output", &json!({"output": "b\n"}));
        events.push_output("stderr", "c\n".to_string());
        let (page, more) = events.output_page(0, 2);
        assert_eq!(
            page,
            [
                ("stdout".to_string(), "a\n".to_string()),
                ("console".to_string(), "b\n".to_string())
            ]
        );
        assert!(more);
        // From the cursor on, only what came after; a page past the end is empty.
        let (page, more) = events.output_page(2, 2);
        assert_eq!(page, [("stderr".to_string(), "c\n".to_string())]);
        assert!(!more);
        assert_eq!(events.output_page(3, 2), (Vec::new(), false));
        // Reading does not consume.
        assert_eq!(events.output_page(2, 2).0.len(), 1);
        assert_eq!(events.output_text(), "a\nb\nc\n");
    }

    #[test]
    fn breakpoint_events_keep_the_last_word_per_id() {
        let events = Events::default();
        events.on_event(
            "breakpoint",
            &json!({"breakpoint": {"id": 5, "verified": false}}),
        );
        events.on_event(
            "breakpoint",
            &json!({"breakpoint": {"id": 5, "verified": true, "line": 12}}),
        );
        events.on_event("breakpoint", &json!({"breakpoint": {"verified": true}}));
        let changes = events.breakpoint_changes();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[&5], (true, Some(12)));
    }

    #[test]
    fn capabilities_are_read_as_advertised() {
        let events = Events::default();
        assert!(!events.capability("supportsStepBack"));
        assert!(events.exception_filters().is_empty());
        events.set_capabilities(json!({
            "supportsStepBack": true,
            "supportsReadMemoryRequest": "yes",
            "exceptionBreakpointFilters": [{"filter": "raised"}, {"filter": "uncaught"}, {"label": "x"}]
        }));
        assert!(events.capability("supportsStepBack"));
        // Only a JSON `true` counts.
        assert!(!events.capability("supportsReadMemoryRequest"));
        assert_eq!(events.exception_filters(), ["raised", "uncaught"]);
    }

    #[test]
    fn an_exit_code_is_kept_and_the_program_ended() {
        let events = Events::default();
        assert_eq!(events.run_state(), RunState::Running);
        events.on_event("exited", &json!({"exitCode": 0}));
        assert!(events.has_ended());
        assert!(!events.is_closed());
        assert_eq!(events.run_state(), RunState::Ended { exit_code: Some(0) });
    }
}
