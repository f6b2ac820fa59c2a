//! What the change journal adds to a kitbag write, and what a checkpoint and a restore cost,
//! side by side in one run: a write alone (`atomic::write_atomic_at`, the reference) against
//! the same write journaled with no checkpoint kept (the path only) and with one kept (the
//! replaced content hashed and stored); a checkpoint of 100 changed files and its restore
//! against what a git-based checkpoint does (`git add -A && git commit`, `git checkout`), the
//! way shadow-repository checkpoints work. Interleaved round by round; medians printed.
//!
//! Run: `cargo bench -p kitbag-checkpoints --bench journal`. Nothing here asserts on time.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kitbag_checkpoints::{Content, Recorder, checkpoint, restore};
use kitbag_shared::paths::{Access, Parents};
use kitbag_shared::{PathPolicy, atomic};
use kitbag_testkit::bench::{Summary, summary};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn policy(root: &Path) -> PathPolicy {
    PathPolicy::new(root, &[], false).expect("policy")
}

/// One kitbag write of `bytes` to `rel`, journaled when `journal`.
fn write(p: &PathPolicy, rel: &str, bytes: &[u8], journal: bool) -> Duration {
    let t = Instant::now();
    let (r, parent) = p
        .parent(rel, "path", Access::Write, Parents::Create)
        .expect("parent");
    if journal {
        let mut rec = Recorder::begin(p, "file_write");
        rec.before(&r.abs, Content::At(&parent));
        atomic::write_atomic_at(&parent, bytes).expect("write");
        rec.after(&r.abs, Content::Bytes(bytes));
        rec.finish();
    } else {
        atomic::write_atomic_at(&parent, bytes).expect("write");
    }
    t.elapsed()
}

fn text(size: usize, tag: &str) -> Vec<u8> {
    let mut s = String::with_capacity(size + 64);
    let mut i = 0;
    while s.len() < size {
        i += 1;
        s.push_str(&format!("let value_{i} = compute({i}); // {tag}\n"));
    }
    s.into_bytes()
}

fn writes() {
    for (label, size, rounds) in [("4 KB", 4 << 10, 400), ("1 MB", 1 << 20, 60)] {
        let (bare, off, on) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        let (pb, poff, pon) = (policy(bare.path()), policy(off.path()), policy(on.path()));
        let (a, b) = (text(size, "a"), text(size, "b"));
        for p in [&pb, &poff, &pon] {
            write(p, "f.rs", &a, true);
        }
        checkpoint::create(&pon, "bench", None).expect("checkpoint");
        let (mut t_bare, mut t_off, mut t_on) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..rounds {
            let bytes = if k % 2 == 0 { &b } else { &a };
            t_bare.push(write(&pb, "f.rs", bytes, false));
            t_off.push(write(&poff, "f.rs", bytes, true));
            t_on.push(write(&pon, "f.rs", bytes, true));
        }
        let (bare_m, off_m, on_m) = (median(t_bare), median(t_off), median(t_on));
        println!(
            "write of a {label} file: alone {}, journaled without a checkpoint {}, with one kept {}",
            fmt(bare_m),
            fmt(off_m),
            fmt(on_m)
        );
        let plus = |m: Duration| format!("+{}", fmt(m.saturating_sub(bare_m)));
        summary(Summary {
            area: "checkpoints",
            measure: &format!("{label} write journaled, no checkpoint"),
            kitbag: fmt(off_m),
            reference: format!("write alone {}", fmt(bare_m)),
            compared: plus(off_m),
            target: "",
            met: None,
        });
        summary(Summary {
            area: "checkpoints",
            measure: &format!("{label} write journaled, checkpoint kept"),
            kitbag: fmt(on_m),
            reference: format!("write alone {}", fmt(bare_m)),
            compared: plus(on_m),
            target: "",
            met: None,
        });
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost")
        .output()
        .expect("git")
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// 100 files changed, then a checkpoint; then 100 more changes rewound: kitbag's journal
/// against a git repository doing the same.
fn snapshots() {
    if Command::new("git").arg("--version").output().is_err() {
        println!("git not installed: the snapshot comparison is skipped");
        return;
    }
    const FILES: usize = 100;
    const ROUNDS: usize = 15;
    let (mut cp, mut commit, mut rs, mut checkout) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut durable = Vec::new();
    for round in 0..ROUNDS {
        let (ours, theirs) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        let p = policy(ours.path());
        git(theirs.path(), &["init", "-q"]);
        let name = |i: usize| format!("src/m{i}.rs");
        for i in 0..FILES {
            let v = text(4 << 10, &format!("v0 {i} {round}"));
            std::fs::create_dir_all(theirs.path().join("src")).expect("mkdir");
            std::fs::write(theirs.path().join(name(i)), &v).expect("w");
            write(&p, &name(i), &v, true);
        }
        git(theirs.path(), &["add", "-A"]);
        git(theirs.path(), &["commit", "-qm", "base"]);
        // The checkpoint: the first one stores the current content of every changed file.
        let t = Instant::now();
        checkpoint::create(&p, "bench", None).expect("checkpoint");
        cp.push(t.elapsed());
        for i in 0..FILES {
            let v = text(4 << 10, &format!("v1 {i} {round}"));
            std::fs::write(theirs.path().join(name(i)), &v).expect("w");
            write(&p, &name(i), &v, true);
        }
        let t = Instant::now();
        git(theirs.path(), &["add", "-A"]);
        git(theirs.path(), &["commit", "-qm", "next"]);
        commit.push(t.elapsed());
        // Rewind all 100 files.
        let t = Instant::now();
        let r = restore::restore(&p, 1, None, false).expect("restore");
        rs.push(t.elapsed());
        assert_eq!(r.files.len(), FILES);
        let t = Instant::now();
        git(theirs.path(), &["checkout", "-q", "HEAD~1", "--", "."]);
        checkout.push(t.elapsed());
        // git does not fsync what it writes; a restore fsyncs every file before its rename,
        // as every kitbag write does. The same checkout made durable, for a like-for-like.
        let t = Instant::now();
        git(theirs.path(), &["checkout", "-q", "HEAD", "--", "."]);
        let synced = Command::new("sync")
            .args(["-f", "."])
            .current_dir(theirs.path())
            .status()
            .is_ok_and(|s| s.success());
        if synced {
            durable.push(t.elapsed());
        }
    }
    let (cp, commit, rs, checkout) = (median(cp), median(commit), median(rs), median(checkout));
    let durable = (!durable.is_empty()).then(|| median(durable));
    println!(
        "{FILES} changed files of 4 KB: checkpoint {} (git add -A + commit {}); restore {} (git checkout {}; made durable with sync -f: {})",
        fmt(cp),
        fmt(commit),
        fmt(rs),
        fmt(checkout),
        durable.map_or("-".to_string(), fmt)
    );
    let ratio = |a: Duration, b: Duration| format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64());
    summary(Summary {
        area: "checkpoints",
        measure: "checkpoint of 100 changed 4 KB files",
        kitbag: fmt(cp),
        reference: format!("git add -A && git commit {}", fmt(commit)),
        compared: ratio(cp, commit),
        target: "",
        met: None,
    });
    if let Some(durable) = durable {
        summary(Summary {
            area: "checkpoints",
            measure: "restore of 100 files, both durable",
            kitbag: fmt(rs),
            reference: format!("git checkout + sync -f {}", fmt(durable)),
            compared: ratio(rs, durable),
            target: "",
            met: None,
        });
    }
    summary(Summary {
        area: "checkpoints",
        measure: "restore of 100 files",
        kitbag: fmt(rs),
        reference: format!("git checkout HEAD~1 -- . {}", fmt(checkout)),
        compared: ratio(rs, checkout),
        target: "",
        met: None,
    });
}

fn main() {
    println!("kitbag-checkpoints: the journal's cost on writes, checkpoints and restores\n");
    writes();
    snapshots();
}
