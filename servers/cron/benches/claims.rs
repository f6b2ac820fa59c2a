//! Claim throughput, side by side in one run: 1 and 3 concurrent claimers on PostgreSQL (a
//! private cluster on a Unix socket, fsync off — the bench measures the claim, not the disk)
//! and on the SQLite file, for comparison.
//!
//! Each claimer is a replica's state over its own connection, driving the scheduler's own
//! claim (`scheduler::claim_only`: re-read under lock, unique claim, cursor advanced, in one
//! transaction per pass). Every round all claimers race for the same due instant of every
//! entry, as replicas on synchronised clocks do; exactly one claim per (entry, instant) wins.
//! Figures are winning claims per second of wall time.
//!
//! Run: `cargo bench -p kitbag-cron --bench claims`. `KITBAG_BENCH_ENTRIES` (100, due per
//! instant) and `KITBAG_BENCH_ROUNDS` (50 instants) change the workload. Without PostgreSQL
//! installed only the SQLite lines are printed, with a SKIPPED line.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use kitbag_cron::backend::Backend;
use kitbag_cron::clock::Clock;
use kitbag_cron::model::{Entry, Outcome};
use kitbag_cron::scheduler::{Due, claim_only};
use kitbag_cron::state::{CronState, Options};
use kitbag_cron::store::Store;
use kitbag_shared::paths::PathPolicy;
use kitbag_testkit::pg::PgServer;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A clock every claimer shares, moved by the bench from instant to instant.
struct StepClock(AtomicI64);

impl Clock for StepClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.0.load(Ordering::SeqCst)).unwrap_or_default()
    }
    fn real_wait(&self, _at: DateTime<Utc>) -> Duration {
        Duration::ZERO
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-05-01T08:00:00Z")
        .expect("t0")
        .with_timezone(&Utc)
}

fn state(store: Backend, root: &std::path::Path, clock: Arc<StepClock>) -> CronState {
    CronState::new(
        store,
        root.to_path_buf(),
        clock,
        Options {
            claude_channel: false,
            commands_enabled: true,
            writable: true,
            machine_tz: "UTC".into(),
        },
    )
}

fn fill(store: &Backend, entries: usize) {
    store
        .write(|tx| {
            for _ in 0..entries {
                let id = tx.allocate_id()?;
                let e: Entry = serde_json::from_value(serde_json::json!({
                    "id": id, "schedule": "* * * * *", "message": "m", "timezone": "UTC",
                    "created_at": (t0() - TimeDelta::seconds(30)).to_rfc3339(),
                }))
                .expect("entry");
                tx.insert(&e)?;
            }
            Ok(())
        })
        .expect("fill");
}

/// Claims per second with `open()` called once per claimer (each its own connection).
fn run(claimers: usize, open: &dyn Fn() -> Backend, entries: usize, rounds: usize) -> f64 {
    let root = tempfile::tempdir().expect("tmp");
    let clock = Arc::new(StepClock(AtomicI64::new(t0().timestamp_micros())));
    fill(&open(), entries);
    let states: Vec<Arc<CronState>> = (0..claimers)
        .map(|_| Arc::new(state(open(), root.path(), clock.clone())))
        .collect();
    let ids: Arc<Vec<String>> = Arc::new((1..=entries).map(|i| format!("cron-{i}")).collect());
    let start = Barrier::new(claimers + 1);
    let done = Barrier::new(claimers + 1);
    let (start, done) = (Arc::new(start), Arc::new(done));
    let workers: Vec<_> = states
        .into_iter()
        .map(|st| {
            let (ids, start, done, clock) =
                (ids.clone(), start.clone(), done.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut won = 0;
                for _ in 0..rounds {
                    start.wait();
                    let at = clock.now() - TimeDelta::seconds(1);
                    let due: Vec<(String, Due)> = ids
                        .iter()
                        .map(|id| {
                            let due = Due {
                                scheduled_at: at,
                                outcome: Outcome::Fired,
                            };
                            (id.clone(), due)
                        })
                        .collect();
                    won += claim_only(&st, &due).expect("claim");
                    done.wait();
                }
                won
            })
        })
        .collect();
    let mut busy = Duration::ZERO;
    for k in 0..rounds {
        // One second past the k-th minute: that instant is due for every entry.
        let now = t0() + TimeDelta::minutes(k as i64) + TimeDelta::seconds(1);
        clock.0.store(now.timestamp_micros(), Ordering::SeqCst);
        let t = Instant::now();
        start.wait();
        done.wait();
        busy += t.elapsed();
    }
    let won: usize = workers
        .into_iter()
        .map(|w| w.join().expect("claimer"))
        .sum();
    assert_eq!(won, entries * rounds, "every due run claimed exactly once");
    won as f64 / busy.as_secs_f64()
}

fn main() {
    let entries = env_usize("KITBAG_BENCH_ENTRIES", 100);
    let rounds = env_usize("KITBAG_BENCH_ROUNDS", 50);
    println!("claims: {entries} entries due per instant, {rounds} instants, one pass per claimer");
    let sqlite_root = tempfile::tempdir().expect("tmp");
    let pg = PgServer::start();
    for claimers in [1, 3] {
        // A fresh SQLite store per configuration: each `open` is another connection to it.
        let dir = sqlite_root.path().join(format!("c{claimers}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let policy = PathPolicy::new(&dir, &[], false).expect("policy");
        let sqlite = || Backend::Sqlite(Store::new(&policy, 1 << 20));
        let rate = run(claimers, &sqlite, entries, rounds);
        println!("sqlite     {claimers} claimer(s): {rate:>8.0} claims/s");
        match &pg {
            Some(server) => {
                let url = server.database(&format!("claims{claimers}"));
                let open = || {
                    let store = kitbag_cron::pg::open(&url, true, 1 << 20).expect("pg");
                    Backend::Postgres(Arc::new(store))
                };
                let rate = run(claimers, &open, entries, rounds);
                println!("postgresql {claimers} claimer(s): {rate:>8.0} claims/s");
            }
            None => println!("postgresql {claimers} claimer(s): SKIPPED (no PostgreSQL)"),
        }
    }
}
