//! Replicas: several real `kitbag-cron` processes on one PostgreSQL database, each with its
//! own scheduler, on one shared virtual clock (`--test-clock-anchor`, as replicas on
//! synchronised machines). Every due (entry, instant) must be fired exactly once in total,
//! the work must be shared, and killing a replica with SIGKILL must lose no fire the other
//! can still make. PostgreSQL only (skipped where it is not installed, required under CI).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::Backend;
use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::{Value, json};

/// Clock flags shared by every replica of a test: `start` at the same real instant, `rate`
/// times faster than real time.
fn clock(start: &str, rate: u32) -> Vec<String> {
    let anchor = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    [
        "--test-clock-start",
        start,
        "--test-clock-rate",
        &rate.to_string(),
        "--test-clock-anchor",
        &anchor.to_string(),
    ]
    .map(str::to_string)
    .to_vec()
}

fn spawn(b: &Backend, clock: &[String]) -> McpClient {
    let extra: Vec<&str> = clock.iter().map(String::as_str).collect();
    let mut c = b.spawn(Era::Handshake, &extra);
    c.timeout = Duration::from_secs(60);
    // A tool call makes the client known to the scheduler (for delivery).
    c.call_ok("cron_status", json!({}));
    c
}

/// Create `n` entries (through `c`) with `schedule`; checks they exist before `before`.
fn create(c: &mut McpClient, n: usize, schedule: &str, before: &str) {
    for i in 0..n {
        c.call_ok(
            "cron_create",
            json!({"schedule": schedule, "message": format!("e{i}"), "timezone": "UTC"}),
        );
    }
    let now = c.call_ok("cron_status", json!({})).structured["now"]
        .as_str()
        .expect("now")
        .to_string();
    assert!(
        now.as_str() < before,
        "creating took too long on this machine: {now}"
    );
}

fn count(b: &Backend, q: &str) -> i64 {
    b.sql(q).parse().unwrap_or_else(|e| panic!("{q}: {e}"))
}

fn wait_for_fires(b: &Backend, want: i64, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while count(b, "SELECT count(*) FROM cron_fires") < want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} fires after {secs} s",
            count(b, "SELECT count(*) FROM cron_fires")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every entry was fired once at each of its `per_entry` instants (08:00, 08:01, …), and at
/// nothing else.
fn assert_each_instant_once(b: &Backend, entries: i64, per_entry: i64) {
    assert_eq!(
        count(b, "SELECT count(*) FROM cron_fires"),
        entries * per_entry
    );
    assert_eq!(
        count(
            b,
            "SELECT count(DISTINCT (entry_id, scheduled_at)) FROM cron_fires"
        ),
        entries * per_entry
    );
    let last = format!("2026-05-01 08:{:02}:00+00", per_entry - 1);
    let full = count(
        b,
        &format!(
            "SELECT count(*) FROM (SELECT entry_id FROM cron_fires GROUP BY entry_id
               HAVING count(*) = {per_entry} AND min(scheduled_at) = '2026-05-01 08:00:00+00'
                  AND max(scheduled_at) = '{last}') t"
        ),
    );
    assert_eq!(full, entries, "an entry missed an instant");
    assert_eq!(
        count(
            b,
            "SELECT count(*) FROM cron_fires WHERE outcome NOT IN ('fired', 'caught_up')"
        ),
        0
    );
}

/// Fires claimed by the replica with this pid.
fn fires_of(b: &Backend, pid: u32) -> i64 {
    count(
        b,
        &format!("SELECT count(*) FROM cron_fires WHERE replica LIKE '%:{pid}'"),
    )
}

fn fired_notifications(c: &McpClient) -> Vec<Value> {
    c.take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/kitbag/cron_fired")
        .collect()
}

#[test]
fn two_replicas_fire_a_thousand_due_times_exactly_once() {
    let Some(b) = Backend::postgres() else {
        return;
    };
    // 100 entries x 08:00..08:09 = 1,000 due instants; 30x: a virtual minute is 2 s.
    let clock = clock("2026-05-01T07:57:00Z", 30);
    let mut a = spawn(&b, &clock);
    let mut r = spawn(&b, &clock);
    create(&mut a, 100, "0-9 8 * * *", "2026-05-01T08:00");
    wait_for_fires(&b, 1000, 60);
    std::thread::sleep(Duration::from_secs(2));
    assert_each_instant_once(&b, 100, 10);
    let (by_a, by_r) = (fires_of(&b, a.pid()), fires_of(&b, r.pid()));
    assert_eq!(by_a + by_r, 1000);
    // Which replica wins each minute's race is up to the machine (usually both win some);
    // exactly once is what must hold.
    eprintln!("fires: replica a {by_a}, replica b {by_r}");
    let claimers: HashSet<u64> = [(a.pid(), by_a), (r.pid(), by_r)]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(pid, _)| u64::from(*pid))
        .collect();

    // Each fire reached a client once, from the replica that claimed it.
    let mut seen = HashSet::new();
    let mut deadline = Instant::now() + Duration::from_secs(20);
    let mut got = (0, 0);
    while seen.len() < 1000 {
        for (n, from_a) in fired_notifications(&a)
            .into_iter()
            .map(|n| (n, true))
            .chain(fired_notifications(&r).into_iter().map(|n| (n, false)))
        {
            let key = format!("{} {}", n["params"]["id"], n["params"]["scheduled_at"]);
            assert!(seen.insert(key.clone()), "delivered twice: {key}");
            if from_a { got.0 += 1 } else { got.1 += 1 }
        }
        assert!(
            Instant::now() < deadline,
            "{} of 1000 delivered",
            seen.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(got, (by_a, by_r));
    // The history is shared: either replica lists every replica's runs.
    deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let runs = r.call_ok("cron_runs", json!({"limit": 500}));
        if runs.structured["total"] == 1000 {
            // Every page: the newest 500 alone may all be one replica's.
            let older = r.call_ok("cron_runs", json!({"limit": 500, "offset": 500}));
            let pids: HashSet<u64> = [&runs, &older]
                .iter()
                .flat_map(|page| page.structured["runs"].as_array().expect("runs").clone())
                .map(|x| x["pid"].as_u64().expect("pid"))
                .collect();
            assert_eq!(pids, claimers, "the history names every claimer");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "history: {}",
            runs.structured["total"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pids = [a.pid(), r.pid()];
    assert_eq!(a.shutdown(), Some(0));
    assert_eq!(r.shutdown(), Some(0));
    assert!(pids.iter().all(|p| !process_alive(*p)));
}

#[test]
fn a_killed_replica_loses_no_fire_the_other_can_make() {
    let Some(b) = Backend::postgres() else {
        return;
    };
    // 30 entries x 08:00..08:11 = 360 due instants; 60x: a virtual minute is 1 s.
    let clock = clock("2026-05-01T07:57:00Z", 60);
    let mut a = spawn(&b, &clock);
    let r = spawn(&b, &clock);
    create(&mut a, 30, "0-11 8 * * *", "2026-05-01T08:00");
    // Mid-run: about a third done.
    wait_for_fires(&b, 120, 30);
    let victim = a.pid();
    let killed = std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    kitbag_testkit::wait_until("the killed replica to be gone", 10, || {
        !process_alive(victim)
    });
    let at_kill = count(&b, "SELECT count(*) FROM cron_fires");
    wait_for_fires(&b, 360, 40);
    std::thread::sleep(Duration::from_secs(1));
    assert_each_instant_once(&b, 30, 12);
    let (by_a, by_r) = (fires_of(&b, victim), fires_of(&b, r.pid()));
    assert_eq!(by_a + by_r, 360);
    assert!(by_a <= at_kill, "the killed replica fired after its death");
    assert!(by_r >= 360 - at_kill);
    // Every fire the survivor claimed is in the shared history.
    let survivor = r.pid();
    kitbag_testkit::wait_until("the survivor's history", 20, || {
        count(
            &b,
            &format!(
                "SELECT count(*) FROM cron_runs WHERE (record::json ->> 'pid')::int = {survivor}"
            ),
        ) == by_r
    });
    drop(a);
    assert_eq!(r.shutdown(), Some(0));
    // Nothing started for this test outlives it.
    let root = b.dir.path().display().to_string();
    let left = kitbag_testkit::pids_with_cmdline(&root);
    assert!(left.is_empty(), "left running: {left:?}");
}
