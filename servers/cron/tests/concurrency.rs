//! Several real `kitbag-cron` processes on one store: concurrent creates (on both backends),
//! the import of an old `cron.json` by servers starting at the same time (issue #22 §5; a
//! file of the SQLite store, so SQLite only).

mod common;
use common::Backend;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use kitbag_testkit::on_both_backends;
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn spawn(args: &[String], dir: &Path) -> McpClient {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c =
        McpClient::spawn_with_env(common::bin(), &args, dir, Era::Handshake, &[("TZ", "UTC")]);
    c.timeout = Duration::from_secs(60);
    c
}

/// Start `n` servers on the store of `args` at the same instant (their stores open, and on
/// PostgreSQL migrate, concurrently).
fn spawn_together(args: &[String], dir: &Path, n: usize) -> Vec<McpClient> {
    let gate = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (args, dir, gate) = (args.to_vec(), dir.to_path_buf(), gate.clone());
            std::thread::spawn(move || {
                gate.wait();
                spawn(&args, &dir)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("spawn"))
        .collect()
}

fn list_all(c: &mut McpClient) -> Value {
    let r = c.call("cron_list", json!({"limit": 1000}));
    assert!(!r.is_error, "{}", r.text);
    r.structured
}

on_both_backends!(concurrent_creates_from_eight_processes_all_land_once);

fn concurrent_creates_from_eight_processes_all_land_once(b: &Backend) {
    const PROCS: usize = 8;
    const EACH: usize = 25;
    // A fresh store: the first calls also race to create the database.
    let clients = spawn_together(&b.args(), b.dir.path(), PROCS);
    let gate = Arc::new(Barrier::new(PROCS));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(p, mut c)| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.wait();
                let mut ids = Vec::new();
                for i in 0..EACH {
                    let r = c.call(
                        "cron_create",
                        json!({"schedule": "0 3 * * *", "message": format!("p{p} n{i}"), "timezone": "UTC"}),
                    );
                    assert!(!r.is_error, "p{p} n{i}: {}", r.text);
                    ids.push(r.structured["entry"]["id"].as_str().expect("id").to_string());
                }
                (c, ids)
            })
        })
        .collect();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for t in threads {
        let (c, mine) = t.join().expect("creator");
        clients.push(c);
        ids.extend(mine);
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "an id was handed out twice");
    // Every process sees every entry, each exactly once.
    for c in &mut clients {
        let l = list_all(c);
        assert_eq!(l["total"], PROCS * EACH);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for e in l["entries"].as_array().expect("entries") {
            *seen
                .entry(e["message"].as_str().expect("message").to_string())
                .or_default() += 1;
        }
        assert_eq!(seen.len(), PROCS * EACH);
        assert!(seen.values().all(|&k| k == 1), "{seen:?}");
        let listed: Vec<&str> = l["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["id"].as_str().expect("id"))
            .collect();
        let mut listed_sorted = listed.clone();
        listed_sorted.sort();
        assert_eq!(listed_sorted, ids);
    }
}

#[test]
fn an_old_cron_json_is_imported_once_by_servers_starting_together() {
    for round in 0..3 {
        let d = tempfile::tempdir().expect("tmp");
        let kitbag = d.path().join(".kitbag");
        std::fs::create_dir_all(&kitbag).expect("dir");
        let mut entries: Vec<Value> = (1..=60)
            .map(|i| {
                json!({"id": format!("cron-{i}"), "schedule": "0 4 * * *", "message": format!("old {i}"),
                       "session": "s", "enabled": i % 2 == 0, "timezone": "UTC"})
            })
            .collect();
        entries.push(json!({"schedule": "not an entry"}));
        // The shape earlier versions wrote (`next_id` beyond the highest id: ids are not reused).
        let text = serde_json::to_string_pretty(&json!({"next_id": 75, "entries": entries}))
            .expect("json");
        std::fs::write(kitbag.join("cron.json"), &text).expect("write");

        let root = vec!["--root".to_string(), d.path().display().to_string()];
        let mut clients = spawn_together(&root, d.path(), 4);
        // The first calls of all four race to import.
        let gate = Arc::new(Barrier::new(clients.len()));
        let threads: Vec<_> = clients
            .drain(..)
            .map(|mut c| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    gate.wait();
                    let l = list_all(&mut c);
                    (c, l)
                })
            })
            .collect();
        for t in threads {
            let (c, l) = t.join().expect("lister");
            assert_eq!(l["total"], 60, "round {round}: {}", l["total"]);
            assert_eq!(l["problems"].as_array().map(Vec::len), Some(1));
            assert_eq!(l["problems"][0]["index"], 60);
            assert_eq!(l["entries"][0]["id"], "cron-1");
            assert_eq!(l["entries"][0]["enabled"], false);
            assert_eq!(l["entries"][59]["message"], "old 60");
            clients.push(c);
        }
        assert!(!kitbag.join("cron.json").exists());
        assert!(!kitbag.join("cron.json.importing").exists());
        assert_eq!(
            std::fs::read_to_string(kitbag.join("cron.json.bak")).expect("backup"),
            text,
            "the old file is kept as it was"
        );
        assert!(
            !kitbag.join("cron.json.bak.2").exists(),
            "imported by one process only"
        );
        let r = clients[3].call(
            "cron_create",
            json!({"schedule": "@daily", "message": "new"}),
        );
        assert_eq!(r.structured["entry"]["id"], "cron-75");
        let r = clients[0].call("cron_enable", json!({"id": "cron-1"}));
        assert_eq!(r.structured["changed"], true);
        let s = clients[1].call("cron_status", json!({}));
        assert_eq!(s.structured["total_entries"], 61);
        assert_eq!(s.structured["enabled_entries"], 32);
    }
}
