//! kitbag-memory's secret detector beside detect-secrets (Yelp's, from PyPI) and gitleaks on
//! the same corpus (`tests/corpus`: 204 fake credentials in 68 providers' formats, 168
//! look-alike benign notes), in one run: caught and false-positive rates, and kitbag's time
//! per note. detect-secrets is installed into `target/detect-secrets-venv` when missing;
//! gitleaks is used when it is on PATH (it is not in this machine's registries).
//!
//! Run: `cargo bench -p kitbag-memory --bench secrets`. Prints a table; asserts nothing.

#[path = "../tests/corpus/mod.rs"]
mod corpus;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kitbag_memory::secrets::scan;

/// One note per file, named `s<N>.txt` (secret) or `b<N>.txt` (benign).
fn write_notes(dir: &Path, secrets: &[String], benign: &[String]) {
    for (i, s) in secrets.iter().enumerate() {
        std::fs::write(dir.join(format!("s{i}.txt")), s).expect("write");
    }
    for (i, b) in benign.iter().enumerate() {
        std::fs::write(dir.join(format!("b{i}.txt")), b).expect("write");
    }
}

fn detect_secrets() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/detect-secrets-venv");
    let bin = venv.join("bin/detect-secrets");
    if !bin.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "detect-secrets==1.5.0"])
                .status()
                .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
    }
    Some(bin)
}

/// The files a tool flagged.
fn flagged_by_detect_secrets(bin: &Path, dir: &Path) -> BTreeSet<String> {
    let out = Command::new(bin)
        .current_dir(dir)
        .args(["scan", "--all-files", "."])
        .output()
        .expect("detect-secrets");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["results"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, hits)| hits.as_array().is_some_and(|a| !a.is_empty()))
                .map(|(f, _)| f.trim_start_matches("./").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn flagged_by_gitleaks(dir: &Path) -> Option<BTreeSet<String>> {
    let report = dir.join("gitleaks.json");
    let status = Command::new("gitleaks")
        .args([
            "detect",
            "--no-git",
            "--exit-code",
            "0",
            "--report-format",
            "json",
        ])
        .arg("--source")
        .arg(dir)
        .arg("--report-path")
        .arg(&report)
        .output()
        .ok()?;
    if !status.status.success() {
        return None;
    }
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).ok()?).unwrap_or_default();
    Some(
        v.as_array()?
            .iter()
            .filter_map(|f| f["File"].as_str())
            .filter_map(|f| Path::new(f).file_name()?.to_str().map(String::from))
            .collect(),
    )
}

fn row(name: &str, flagged: &BTreeSet<String>, n_secrets: usize, n_benign: usize) {
    let caught = (0..n_secrets)
        .filter(|i| flagged.contains(&format!("s{i}.txt")))
        .count();
    let fp = (0..n_benign)
        .filter(|i| flagged.contains(&format!("b{i}.txt")))
        .count();
    println!(
        "{name:<16} {caught:>4} / {n_secrets} caught ({:>5.1} %)   {fp:>3} / {n_benign} benign refused ({:>4.1} %)",
        100.0 * caught as f64 / n_secrets as f64,
        100.0 * fp as f64 / n_benign as f64
    );
}

fn main() {
    let secrets: Vec<String> = corpus::secrets().into_iter().map(|s| s.text).collect();
    let benign = corpus::benign();
    let dir = tempfile::tempdir().expect("tmp");
    write_notes(dir.path(), &secrets, &benign);

    let t = Instant::now();
    let mut ours = BTreeSet::new();
    for _ in 0..20 {
        ours.clear();
        for (i, s) in secrets.iter().enumerate() {
            if scan(s).is_some() {
                ours.insert(format!("s{i}.txt"));
            }
        }
        for (i, b) in benign.iter().enumerate() {
            if scan(b).is_some() {
                ours.insert(format!("b{i}.txt"));
            }
        }
    }
    let per_note = t.elapsed() / (20 * (secrets.len() + benign.len()) as u32);
    println!(
        "corpus: {} secrets, {} benign notes",
        secrets.len(),
        benign.len()
    );
    row("kitbag-memory", &ours, secrets.len(), benign.len());
    match detect_secrets() {
        Some(bin) => row(
            "detect-secrets",
            &flagged_by_detect_secrets(&bin, dir.path()),
            secrets.len(),
            benign.len(),
        ),
        None => println!("detect-secrets   not installable here"),
    }
    match flagged_by_gitleaks(dir.path()) {
        Some(f) => row("gitleaks", &f, secrets.len(), benign.len()),
        None => println!("gitleaks         not on PATH (not in this machine's registries)"),
    }
    println!(
        "kitbag-memory scan time per note: {:.1} µs",
        per_note.as_secs_f64() * 1e6
    );
}
