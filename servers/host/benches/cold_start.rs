//! Cold start and idle memory, side by side in one run: `kitbag serve` (every family
//! configured) from start to its `tools/list` answer, and its resident memory summed over its
//! processes once it idles; the same for each single server binary; and the first call to a
//! family that waits for it.
//!
//! Run: `cargo bench -p kitbag --bench cold_start` (the single servers are measured when their
//! binaries sit beside this one: `cargo build --release --bins` first, as `scripts/bench`
//! does). Medians of 9 starts; memory read 2 s after `tools/list`, a second after each process
//! gave back the pages only its start-up used (`kitbag_shared::working_set`). Nothing here
//! asserts on time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{
    Summary, mb, median, model_visible_bytes, ms, summary, tree_memory_kb,
};
use kitbag_testkit::{Era, McpClient, RawClient};
use serde_json::json;

const STARTS: usize = 9;

/// One start of `bin args` in `dir`: time to the `tools/list` answer, then (RSS, PSS) of its
/// processes after `settle`.
fn start(bin: &Path, args: &[&str], dir: &Path, settle: Duration) -> (Duration, (u64, u64)) {
    // A raw client: the time is the answer line's arrival. The test client's own work on it
    // (parsing 170 KB of tool list, compiling a validator per outputSchema) is ~3 ms more.
    let t = Instant::now();
    let mut c = RawClient::spawn(bin, args, dir, &[]);
    c.request("tools/list", "{}");
    let took = t.elapsed();
    let listed: serde_json::Value = serde_json::from_slice(c.line()).expect("a JSON answer");
    let tools = listed["result"]["tools"].as_array().map_or(0, Vec::len);
    assert!(tools > 0, "{} {args:?}: no tools", bin.display());
    std::thread::sleep(settle);
    let memory = tree_memory_kb(c.pid());
    c.shutdown();
    (took, memory)
}

struct Figures {
    start: Duration,
    rss_kb: u64,
    pss_kb: u64,
}

fn measure(bin: &Path, args: &[&str], dir: &Path) -> Figures {
    // One start first, not counted: the binary's pages are then in the page cache for all.
    start(bin, args, dir, Duration::ZERO);
    let (mut times, mut rss, mut pss) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let (t, (r, p)) = start(bin, args, dir, Duration::from_secs(2));
        times.push(t);
        rss.push(r);
        pss.push(p);
    }
    rss.sort();
    pss.sort();
    Figures {
        start: median(times),
        rss_kb: rss[rss.len() / 2],
        pss_kb: pss[pss.len() / 2],
    }
}

/// A root with one enabled cron entry, so that cron's scheduler starts with the host.
fn root_with_a_cron_entry(bin: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin, &["serve"], d.path(), Era::Handshake);
    let r = c.call(
        "cron_create",
        json!({"schedule": "@daily", "message": "digest"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    c.shutdown();
    d
}

fn single_servers(dir: &Path) -> Vec<(String, PathBuf)> {
    let families = [
        "files", "search", "shell", "web", "memory", "lsp", "dap", "issues", "cron", "vm",
    ];
    families
        .iter()
        .map(|f| (f.to_string(), dir.join(format!("kitbag-{f}"))))
        .filter(|(_, p)| p.exists())
        .collect()
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    // No agent.json here: the host runs its embedded default, every family configured.
    let empty = tempfile::tempdir().expect("tmp");
    std::fs::write(empty.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    let host = measure(bin, &["serve"], empty.path());
    println!(
        "kitbag serve (every family, none started): tools/list {}, idle {} RSS ({} PSS)",
        ms(host.start),
        mb(host.rss_kb),
        mb(host.pss_kb)
    );
    let cron_root = root_with_a_cron_entry(bin);
    let with_cron = measure(bin, &["serve"], cron_root.path());
    println!(
        "kitbag serve with a cron entry (cron starts with it): tools/list {}, idle {} RSS ({} PSS)",
        ms(with_cron.start),
        mb(with_cron.rss_kb),
        mb(with_cron.pss_kb)
    );

    // The first call to a waiting family pays its start; the second does not.
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let mut c = McpClient::spawn(bin, &["serve"], empty.path(), Era::Handshake);
        c.list_tools();
        let args = json!({"path": "a.txt"});
        first.push(c.timed_call_ok("file_read", args.clone()).1);
        second.push(c.timed_call_ok("file_read", args).1);
        c.shutdown();
    }
    let (first, second) = (median(first), median(second));
    println!(
        "first file_read through a fresh host (starts the files server): {}, the next: {}",
        ms(first),
        ms(second)
    );

    // What the default list costs a model's context.
    let mut c = McpClient::spawn(bin, &["serve"], empty.path(), Era::Handshake);
    let tools = c.list_tools();
    c.shutdown();
    let bytes: usize = tools.iter().map(model_visible_bytes).sum();
    let per_tool = bytes / tools.len().max(1);

    let dir = bin.parent().expect("the binary's directory");
    let mut singles = Vec::new();
    for (family, path) in single_servers(dir) {
        let root = empty.path().to_str().expect("utf8");
        let f = measure(&path, &["--root", root], empty.path());
        println!(
            "kitbag-{family} alone: tools/list {}, idle {} RSS ({} PSS)",
            ms(f.start),
            mb(f.rss_kb),
            mb(f.pss_kb)
        );
        singles.push((family, f));
    }

    summary(Summary {
        area: "host",
        measure: "kitbag serve cold start to tools/list",
        kitbag: ms(host.start),
        reference: String::new(),
        compared: String::new(),
        target: "≤ 10 ms",
        met: Some(host.start <= Duration::from_millis(10)),
    });
    summary(Summary {
        area: "host",
        measure: "kitbag serve idle RSS, all processes",
        kitbag: mb(host.rss_kb),
        reference: format!("with cron started: {}", mb(with_cron.rss_kb)),
        compared: String::new(),
        target: "≤ 20 MB",
        met: Some(host.rss_kb <= 20 * 1024),
    });
    summary(Summary {
        area: "host",
        measure: "first call to a waiting family (file_read)",
        kitbag: ms(first),
        reference: format!("the next call {}", ms(second)),
        compared: format!("+{}", ms(first.saturating_sub(second))),
        target: "start ≤ 10 ms",
        met: Some(first.saturating_sub(second) <= Duration::from_millis(10)),
    });
    summary(Summary {
        area: "host",
        measure: &format!(
            "model-visible schema per tool ({} tools, {bytes} bytes)",
            tools.len()
        ),
        kitbag: format!("{per_tool} bytes"),
        reference: String::new(),
        compared: String::new(),
        target: "≤ 700 bytes",
        met: Some(per_tool <= 700),
    });
    if singles.is_empty() {
        println!(
            "(no single server binaries beside {}: `cargo build --release --bins` to measure them)",
            bin.display()
        );
    }
    for (family, f) in singles {
        summary(Summary {
            area: "single server",
            measure: &format!("kitbag-{family} idle RSS (cold start {})", ms(f.start)),
            kitbag: mb(f.rss_kb),
            reference: String::new(),
            compared: String::new(),
            target: "≤ 8 MB",
            met: Some(f.rss_kb <= 8 * 1024),
        });
    }
}
