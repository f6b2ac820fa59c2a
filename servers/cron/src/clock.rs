//! The scheduler's clock: the system clock, or a scaled test clock.
//!
//! The scheduler never polls: it asks the clock how long to really wait until the next due
//! instant and sleeps that long. The test clock starts at a chosen instant and runs `rate`
//! times faster than real time, so an integration test sees an every-minute entry fire
//! every second (`--test-clock-start 2026-03-08T06:58:00Z --test-clock-rate 60`).

use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, TimeDelta, Utc};

pub trait Clock: Send + Sync + 'static {
    /// The current instant on this clock.
    fn now(&self) -> DateTime<Utc>;
    /// How long to really wait for this clock to reach `at` (zero when already past).
    fn real_wait(&self, at: DateTime<Utc>) -> Duration;
}

/// Wall-clock time.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn real_wait(&self, at: DateTime<Utc>) -> Duration {
        (at - Utc::now()).to_std().unwrap_or(Duration::ZERO)
    }
}

/// A clock that starts at `start` and runs `rate` times faster than real time.
pub struct ScaledClock {
    start: DateTime<Utc>,
    origin: Instant,
    rate: f64,
}

impl ScaledClock {
    pub fn new(start: DateTime<Utc>, rate: f64) -> Self {
        Self {
            start,
            origin: Instant::now(),
            rate: if rate.is_finite() && rate > 0.0 {
                rate
            } else {
                1.0
            },
        }
    }
}

impl ScaledClock {
    /// A scaled clock that read `start` at the real instant `anchor` (in the past): processes
    /// given the same anchor share one virtual time, like replicas on synchronised machines.
    pub fn anchored(start: DateTime<Utc>, rate: f64, anchor: SystemTime) -> Self {
        let mut c = Self::new(start, rate);
        let since = SystemTime::now()
            .duration_since(anchor)
            .unwrap_or(Duration::ZERO);
        c.origin = c.origin.checked_sub(since).unwrap_or(c.origin);
        c
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> DateTime<Utc> {
        let virt = self.origin.elapsed().as_secs_f64() * self.rate;
        let micros = (virt * 1e6).min(i64::MAX as f64 / 2.0) as i64;
        self.start + TimeDelta::microseconds(micros)
    }

    fn real_wait(&self, at: DateTime<Utc>) -> Duration {
        let ahead = (at - self.now()).to_std().unwrap_or(Duration::ZERO);
        Duration::from_secs_f64(ahead.as_secs_f64() / self.rate)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn scaled_clock_runs_faster_and_waits_shorter() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = ScaledClock::new(start, 60.0);
        let t = c.now();
        assert!(t >= start && t < start + TimeDelta::seconds(5));
        // One virtual minute ahead is about one real second.
        let w = c.real_wait(start + TimeDelta::seconds(60));
        assert!(
            w <= Duration::from_secs(1) && w > Duration::from_millis(500),
            "{w:?}"
        );
        assert_eq!(c.real_wait(start - TimeDelta::seconds(1)), Duration::ZERO);
        // Anchored 10 real seconds ago: 600 virtual seconds past its start already.
        let anchor = SystemTime::now() - Duration::from_secs(10);
        let a = ScaledClock::anchored(start, 60.0, anchor);
        let ahead = (a.now() - start).num_seconds();
        assert!((600..610).contains(&ahead), "{ahead}");
        let s = SystemClock;
        assert_eq!(
            s.real_wait(Utc::now() - TimeDelta::seconds(1)),
            Duration::ZERO
        );
    }
}
