//! What the benchmarks share: medians, memory figures from `/proc`, and the summary rows that
//! `scripts/bench` gathers from every benchmark into one table.
//!
//! A benchmark prints its own detail, and calls [`summary`] for each headline figure: the row
//! is printed, and appended to the file `$KITBAG_BENCH_SUMMARY` names (tab-separated) when
//! set. Nothing here asserts on time.

use std::io::Write;
use std::time::Duration;

/// The median of the samples (the upper one of an even count); zero for none.
pub fn median(v: Vec<Duration>) -> Duration {
    percentile(v, 50)
}

/// The sample at `p` percent of the sorted samples (index `len × p / 100`, so `p` = 50 is
/// the median); zero for none.
pub fn percentile(mut v: Vec<Duration>, p: usize) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let at = (v.len() * p / 100).min(v.len() - 1);
    v[at]
}

pub fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

pub fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

/// A `/proc/PID/status` field in kB (`VmRSS:`, `VmHWM:`); 0 when the process is gone.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The proportional set size of a process in kB (its share of pages it shares with others,
/// such as one binary's text mapped by several processes); 0 when it is gone.
pub fn pss_kb(pid: u32) -> u64 {
    kitbag_shared::proc_stat::proportional_bytes(pid).map_or(0, |b| b / 1024)
}

/// `pid` and every process below it.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        all.extend(crate::child_pids(all[i]));
        i += 1;
    }
    all
}

/// Resident memory of `pid` and every process below it, summed: (RSS, PSS) in kB.
pub fn tree_memory_kb(pid: u32) -> (u64, u64) {
    process_tree(pid)
        .into_iter()
        .map(|p| (status_kb(p, "VmRSS:"), pss_kb(p)))
        .fold((0, 0), |(r, s), (a, b)| (r + a, s + b))
}

/// One headline figure of a benchmark, for the table `scripts/bench` prints.
pub struct Summary<'a> {
    /// What is measured, e.g. `host` or `shell`.
    pub area: &'a str,
    /// The measure, e.g. `cold start to tools/list`.
    pub measure: &'a str,
    /// kitbag's figure, formatted.
    pub kitbag: String,
    /// The reference it is set beside (`bash -c true 1.50 ms`), or empty.
    pub reference: String,
    /// How the two compare (`1.07×`, `+12.1 µs`), or empty.
    pub compared: String,
    /// The target (`≤ 1.2×`), or empty.
    pub target: &'a str,
    /// Whether the target is met, when there is one.
    pub met: Option<bool>,
}

/// Print a summary row and append it to `$KITBAG_BENCH_SUMMARY` (tab-separated).
pub fn summary(s: Summary<'_>) {
    let met = match s.met {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "",
    };
    let cells = [
        s.area,
        s.measure,
        &s.kitbag,
        &s.reference,
        &s.compared,
        s.target,
        met,
    ];
    println!("summary: {}", cells.join(" | "));
    let Some(path) = std::env::var_os("KITBAG_BENCH_SUMMARY") else {
        return;
    };
    let line = cells
        .iter()
        .map(|c| c.replace(['\t', '\n'], " "))
        .collect::<Vec<_>>()
        .join("\t");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path);
    match file {
        Ok(mut f) => {
            let _ = writeln!(f, "{line}");
        }
        Err(e) => eprintln!("{}: {e}", std::path::Path::new(&path).display()),
    }
}

/// The bytes of a tool a model sees: `{"name", "description", "inputSchema"}` as compact
/// JSON, which is what a client puts in the prompt (`outputSchema`, annotations and titles
/// are left out).
pub fn model_visible_bytes(tool: &serde_json::Value) -> usize {
    let mut seen = serde_json::Map::new();
    for key in ["name", "description", "inputSchema"] {
        if let Some(v) = tool.get(key) {
            seen.insert(key.into(), v.clone());
        }
    }
    serde_json::to_vec(&serde_json::Value::Object(seen)).map_or(0, |v| v.len())
}

/// `a / b` as a ratio, e.g. `1.07×`.
pub fn ratio(a: Duration, b: Duration) -> (f64, String) {
    let r = a.as_secs_f64() / b.as_secs_f64().max(1e-12);
    (r, format!("{r:.2}×"))
}

/// A temporary project made of `files` (relative path, text), directories included.
pub fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let p = d.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, text).expect("write");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(median(v.clone()), Duration::from_millis(6));
        assert_eq!(percentile(v.clone(), 90), Duration::from_millis(10));
        assert_eq!(percentile(v.clone(), 0), Duration::from_millis(1));
        assert_eq!(percentile(v.clone(), 100), Duration::from_millis(10));
        assert_eq!(
            percentile(vec![Duration::from_millis(3)], 50),
            Duration::from_millis(3)
        );
        assert_eq!(median(Vec::new()), Duration::ZERO);
    }

    #[test]
    fn this_process_has_memory_and_is_its_own_tree() {
        let me = std::process::id();
        assert!(status_kb(me, "VmRSS:") > 0);
        let (rss, pss) = tree_memory_kb(me);
        assert!(rss > 0 && pss > 0 && pss <= rss + 1);
        assert_eq!(process_tree(me)[0], me);
    }
}
