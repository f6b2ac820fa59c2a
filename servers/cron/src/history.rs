//! The run history, newest first when read, trimmed to about `--history-max-bytes`.
//!
//! Beside the SQLite store it is `<root>/.kitbag/cron-runs.jsonl`, one JSON line per run,
//! appended under the `cron.lock` flock and rotated at the limit to `cron-runs.1.jsonl` and
//! `cron-runs.2.jsonl` ([`append`], [`read`]). On PostgreSQL it is the `cron_runs` table that
//! every replica shares, trimmed to the newest 3 x the limit of records ([`record_row`],
//! [`read_rows`]).

use std::io::{BufRead, BufReader, Write};

use kitbag_shared::state::OFlags;
use kitbag_shared::state::sql::Sql;
use kitbag_shared::{ToolError, ToolResult};

use crate::dir::{RUNS, StoreDir, io_err};
use crate::file_lock::FileLock;
use crate::model::RunRecord;

/// Rotated history files kept beside the live one.
const ROTATED_KEEP: usize = 2;

/// The `n`th rotated file (1 the newest).
pub fn rotated(n: usize) -> String {
    format!("cron-runs.{n}.jsonl")
}

fn encode(rec: &RunRecord) -> ToolResult<String> {
    serde_json::to_string(rec).map_err(|e| ToolError::internal(format!("run encoding: {e}")))
}

/// Append one run to the JSON lines, rotating first when the live file holds `max_bytes`.
/// Taking the lock is the caller's: `_lock` shows it is held.
pub fn append(dir: &StoreDir, max_bytes: u64, rec: &RunRecord, _lock: &FileLock) -> ToolResult<()> {
    let shown = dir.shown(RUNS);
    let state = dir.made()?;
    let size = state
        .stat(RUNS)
        .ok()
        .flatten()
        .map_or(0, |st| st.st_size as u64);
    if size >= max_bytes {
        for n in (1..ROTATED_KEEP).rev() {
            let _ = state.rename(rotated(n), rotated(n + 1));
        }
        state
            .rename(RUNS, rotated(1))
            .map_err(|e| io_err("cannot rotate", &shown, &e))?;
    }
    let mut line = encode(rec)?;
    line.push('\n');
    let mut f = state
        .open_file(RUNS, OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND)
        .map_err(|e| io_err("cannot open", &shown, &e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| io_err("cannot append to", &shown, &e))
}

/// Runs in the JSON lines, newest first, optionally for one entry: `(page, total matching)`.
pub fn read(
    dir: &StoreDir,
    id: Option<&str>,
    offset: usize,
    limit: usize,
) -> ToolResult<(Vec<RunRecord>, usize)> {
    let Some(state) = dir.open(false)? else {
        return Ok((Vec::new(), 0));
    };
    // Oldest file first, so the concatenation is in time order.
    let mut files: Vec<String> = (1..=ROTATED_KEEP).rev().map(rotated).collect();
    files.push(RUNS.to_string());
    let mut all = Vec::new();
    for name in files {
        let f = match state.open_file(&name, OFlags::RDONLY) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("cannot read", &dir.shown(&name), &e)),
        };
        for line in BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            let Ok(rec) = serde_json::from_str::<RunRecord>(&line) else {
                continue; // a torn or hand-mangled line
            };
            if id.is_none_or(|want| rec.id == want) {
                all.push(rec);
            }
        }
    }
    let total = all.len();
    let page = all.into_iter().rev().skip(offset).take(limit).collect();
    Ok((page, total))
}

/// Claims kept in `cron_fires` (the newest): far more than any entry's claims can race over.
pub const FIRES_KEPT: i64 = 100_000;

/// Add a run to the `cron_runs` table; every 64th run also trims it to the newest
/// `keep_bytes` of records, and `cron_fires` to the newest [`FIRES_KEPT`] claims.
pub fn record_row(conn: &mut impl Sql, rec: &RunRecord, keep_bytes: i64) -> ToolResult<()> {
    let line = encode(rec)?;
    let seq = conn.int(
        "INSERT INTO cron_runs (entry_id, bytes, record) VALUES (?1, ?2, ?3) RETURNING seq",
        &[&rec.id, &(line.len() as i32), &line],
    )?;
    if seq % 64 == 0 {
        conn.exec(
            "DELETE FROM cron_runs WHERE seq <= (
               SELECT seq FROM (SELECT seq, sum(bytes) OVER (ORDER BY seq DESC) AS kept
                                FROM cron_runs) t
               WHERE kept > ?1 ORDER BY seq DESC LIMIT 1)",
            &[&keep_bytes],
        )?;
        conn.exec(
            "DELETE FROM cron_fires WHERE seq < (SELECT max(seq) FROM cron_fires) - ?1",
            &[&FIRES_KEPT],
        )?;
    }
    Ok(())
}

/// Runs in the `cron_runs` table, newest first, optionally for one entry: `(page, total
/// matching)`.
pub fn read_rows(
    conn: &mut impl Sql,
    id: Option<&str>,
    offset: usize,
    limit: usize,
) -> ToolResult<(Vec<RunRecord>, usize)> {
    let (offset, limit) = (offset.min(i64::MAX as usize) as i64, limit as i64);
    let rows = conn.rows(
        "SELECT record FROM cron_runs WHERE (?1::text IS NULL OR entry_id = ?1)
         ORDER BY seq DESC OFFSET ?2 LIMIT ?3",
        &[&id, &offset, &limit],
    )?;
    let total = conn.int(
        "SELECT count(*) FROM cron_runs WHERE (?1::text IS NULL OR entry_id = ?1)",
        &[&id],
    )?;
    let mut page = Vec::with_capacity(rows.len());
    for row in rows {
        if let Ok(rec) = serde_json::from_str(&row.text(0)?) {
            page.push(rec);
        }
    }
    Ok((page, total.max(0) as usize))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::file_lock::LOCK_WAIT;
    use crate::model::Outcome;
    use chrono::{DateTime, Utc};
    use kitbag_shared::paths::PathPolicy;

    fn lock(dir: &StoreDir) -> FileLock {
        let file = dir
            .made()
            .unwrap()
            .open_file("cron.lock", OFlags::WRONLY | OFlags::CREATE)
            .unwrap();
        FileLock::take(file, &dir.shown("cron.lock"), LOCK_WAIT).unwrap()
    }

    fn run(i: i64, t0: DateTime<Utc>) -> RunRecord {
        RunRecord {
            id: format!("cron-{}", i % 2 + 1),
            session: "s".into(),
            scheduled_at: t0 + chrono::TimeDelta::minutes(i),
            fired_at: t0 + chrono::TimeDelta::minutes(i),
            outcome: Outcome::Fired,
            delivered: true,
            command: None,
            pid: 1,
        }
    }

    #[test]
    fn nothing_recorded_reads_empty_and_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = StoreDir::new(&PathPolicy::new(d.path(), &[], false).unwrap());
        assert_eq!(read(&dir, None, 0, 10).unwrap().1, 0);
        assert!(!dir.path.exists());
    }

    #[test]
    fn history_rotates_keeps_two_old_files_and_reads_newest_first() {
        let d = tempfile::tempdir().unwrap();
        let dir = StoreDir::new(&PathPolicy::new(d.path(), &[], false).unwrap());
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        for i in 0..60 {
            let held = lock(&dir);
            append(&dir, 1024, &run(i, t0), &held).unwrap();
        }
        assert!(dir.path.join(rotated(1)).exists() && dir.path.join(rotated(2)).exists());
        assert!(
            !dir.path.join(rotated(3)).exists(),
            "only two rotated files are kept"
        );
        let live = std::fs::metadata(dir.path.join(RUNS)).unwrap().len();
        assert!(live <= 1024 + 300, "{live}");
        // Each rotated file was full when it was moved away.
        assert!(std::fs::metadata(dir.path.join(rotated(1))).unwrap().len() >= 1024);
        let (page, total) = read(&dir, None, 0, 5).unwrap();
        assert!(
            total < 60 && total > 10,
            "old generations were dropped: {total}"
        );
        assert_eq!(page.len(), 5);
        assert_eq!(page[0].scheduled_at, t0 + chrono::TimeDelta::minutes(59));
        assert!(
            page.windows(2)
                .all(|w| w[0].scheduled_at > w[1].scheduled_at)
        );
        let (only, n) = read(&dir, Some("cron-1"), 0, 100).unwrap();
        assert!(only.iter().all(|r| r.id == "cron-1"));
        assert_eq!(only.len(), n);
        let (second, _) = read(&dir, None, 5, 5).unwrap();
        assert_eq!(second[0].scheduled_at, t0 + chrono::TimeDelta::minutes(54));
    }

    #[test]
    fn torn_and_mangled_lines_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let dir = StoreDir::new(&PathPolicy::new(d.path(), &[], false).unwrap());
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let held = lock(&dir);
        append(&dir, 1 << 20, &run(0, t0), &held).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path.join(RUNS))
            .unwrap();
        f.write_all(b"not json\n{\"id\": \"cron-1\"\n").unwrap();
        append(&dir, 1 << 20, &run(1, t0), &held).unwrap();
        let (page, total) = read(&dir, None, 0, 10).unwrap();
        assert_eq!(total, 2);
        assert_eq!(page[0].scheduled_at, t0 + chrono::TimeDelta::minutes(1));
    }
}
