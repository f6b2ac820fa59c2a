//! The symlink-swap race of issue #22: a helper thread exchanges a real directory inside the
//! root with a symbolic link pointing outside, as fast as it can, while a test drives a server
//! against paths under that directory. A server that resolves a path string and then opens the
//! string again reads, writes or deletes outside the root in the gap; one that acts on file
//! descriptors never does.
//!
//! `renameat2(RENAME_EXCHANGE)` swaps both names in one step, so at every instant `dir` is
//! either the real directory or the link — the worst case for a check-then-use server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{CWD, RenameFlags, renameat_with};

/// A marker unlikely to occur anywhere else: `OUTSIDE_SENTINEL_<pid>_<nanos>` (a valid identifier in
/// most languages, so AST tools can match it too).
pub fn sentinel() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // Decimal and upper case only: a mixed-case hex tail sometimes looked like a random
    // credential to kitbag-memory's secret detector, which then refused to store it.
    format!("OUTSIDE_SENTINEL_{}_{}", std::process::id(), nanos)
}

/// A running swapper; it stops by itself at its deadline (or when dropped).
pub struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    deadline: Instant,
    handle: Option<JoinHandle<()>>,
}

impl Swapper {
    /// Exchange `dir` (a real directory) and `link` (a symbolic link) for `run` at most.
    pub fn start(dir: &Path, link: &Path, run: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + run;
        let (dir, link) = (dir.to_path_buf(), link.to_path_buf());
        let (stop2, swaps2) = (stop.clone(), swaps.clone());
        let handle = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                // Two exchanges per round so each state lasts about as long as the other.
                for _ in 0..2 {
                    renameat_with(CWD, &dir, CWD, &link, RenameFlags::EXCHANGE)
                        .expect("renameat2(RENAME_EXCHANGE)");
                    swaps2.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Swapper {
            stop,
            swaps,
            deadline,
            handle: Some(handle),
        }
    }

    /// Whether the swapper is still within its time.
    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Stop (if still running) and return the number of exchanges made. An even number of
    /// exchanges per round leaves `dir` the real directory again.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("swapper thread");
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Every entry under `dir` (not following links) with its content: `name/` for directories,
/// `name@` with the target for links, the bytes for files. For "byte-for-byte unchanged".
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap_or(&p).to_path_buf();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            let target = std::fs::read_link(&p).unwrap_or_default();
            out.insert(rel, format!("@{}", target.display()).into_bytes());
        } else if ft.is_dir() {
            out.insert(rel, b"/".to_vec());
            walk(base, &p, out);
        } else {
            out.insert(rel, std::fs::read(&p).unwrap_or_default());
        }
    }
}

/// Describe how two snapshots differ (empty when equal).
pub fn diff(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (p, b) in before {
        match after.get(p) {
            None => out.push(format!("removed {}", p.display())),
            Some(a) if a != b => out.push(format!("changed {}", p.display())),
            Some(_) => {}
        }
    }
    for p in after.keys() {
        if !before.contains_key(p) {
            out.push(format!("created {}", p.display()));
        }
    }
    out
}

/// One short-lived server run: start `bin` in `cwd`, send `initialize`, then each call, then
/// close stdin (a server answers what is in flight, then exits). Returns stdout and how many
/// calls succeeded. A server that is still running after 15 s is killed (and that counts as
/// no success), so a stuck run cannot hang the test.
pub fn one_shot(
    bin: &Path,
    args: &[&str],
    cwd: &Path,
    calls: &[(&str, serde_json::Value)],
) -> (String, usize) {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let mut input = String::new();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "race", "version": "0"}}});
    input.push_str(&format!("{init}\n"));
    input.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    for (i, (name, arguments)) in calls.iter().enumerate() {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        input.push_str(&format!("{call}\n"));
    }
    let Ok(mut child) = Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return (String::new(), 0);
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        out
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.kill();
    let _ = child.wait();
    let out = reader.join().unwrap_or_default();
    let ok = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["id"].as_u64().is_some_and(|id| id >= 2))
        .filter(|v| v["result"].is_object() && v["result"]["isError"] != true)
        .count();
    (out, ok)
}

/// What [`state_dir_race`] saw.
#[derive(Debug, Default)]
pub struct StateRace {
    pub swaps: u64,
    /// Server runs (each: start, the calls, exit).
    pub runs: u64,
    pub calls_ok: u64,
    /// Runs whose output carried the outside sentinel.
    pub leaks: u64,
    /// How the outside directory differs from before (must be empty).
    pub outside_changed: Vec<String>,
}

/// Issue #22 §1 for a server's own state (`.kitbag`): `root/.kitbag` is exchanged with a link
/// to `outside` (state made elsewhere, holding `mark`) as fast as possible for `run`, while
/// the server is started, called (`calls(i)` for run `i`) and stopped over and over — so the
/// race covers opening the state at start, every call, and closing at exit (SQLite removes
/// its WAL then). Nothing may read or change anything in `outside`.
pub fn state_dir_race(
    bin: &Path,
    args: &[&str],
    root: &Path,
    outside: &Path,
    mark: &str,
    run: Duration,
    calls: &dyn Fn(u64) -> Vec<(&'static str, serde_json::Value)>,
) -> StateRace {
    let before = snapshot(outside);
    let state = root.join(".kitbag");
    std::fs::create_dir_all(&state).expect("mkdir .kitbag");
    let link = root.join("kitbag-link");
    std::os::unix::fs::symlink(outside, &link).expect("ln");
    let swapper = Swapper::start(&state, &link, run);
    let mut out = StateRace::default();
    while swapper.running() {
        let calls = calls(out.runs);
        let (stdout, ok) = one_shot(bin, args, root, &calls);
        out.runs += 1;
        out.calls_ok += ok as u64;
        if stdout.contains(mark) {
            out.leaks += 1;
        }
    }
    out.swaps = swapper.finish();
    out.outside_changed = diff(&before, &snapshot(outside));
    out
}

impl StateRace {
    /// Print the counts, then fail unless calls succeeded, nothing leaked and nothing
    /// outside changed.
    pub fn assert_clean(&self, server: &str) {
        eprintln!(
            "{server} state race: {} swaps, {} runs, {} calls succeeded, {} runs with the outside sentinel, {} outside entries changed",
            self.swaps,
            self.runs,
            self.calls_ok,
            self.leaks,
            self.outside_changed.len()
        );
        assert!(self.swaps > 0 && self.calls_ok > 0, "no call succeeded");
        assert_eq!(self.leaks, 0, "{server} read state outside the root");
        assert!(
            self.outside_changed.is_empty(),
            "{server} changed the outside directory: {}",
            self.outside_changed.join(", ")
        );
    }
}

/// State made by a real run of the server in a root of its own (`calls` store `mark`):
/// returns that root; its `.kitbag` is the "outside" of [`state_dir_race`].
pub fn seeded_state(
    bin: &Path,
    args: &[&str],
    calls: &[(&str, serde_json::Value)],
) -> tempfile::TempDir {
    let seed = tempfile::tempdir().expect("tmp");
    let (out, ok) = one_shot(bin, args, seed.path(), calls);
    assert_eq!(ok, calls.len(), "seeding failed: {out}");
    seed
}
