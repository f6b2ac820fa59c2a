//! Sessions: `.kitbag/sessions/<name>.jsonl`, append-only and never rewritten (seed 000). One
//! record per line — `user`, `assistant`, `tool_result`, `usage`, `compaction`,
//! `session_prompt` — each written with a single `write` to a file opened with `O_APPEND`, so
//! a crash leaves at worst a torn last line, which loading skips (and the next append starts a
//! line of its own after it).

use kitbag_shared::lock::LockExt;
use std::io::Write;
use std::path::Path;

use kitbag_shared::paths::PathPolicy;
use kitbag_shared::state::{OFlags, StateDir};

use kitbag_llm::Usage;

use crate::record::{MAX_SESSION_PROMPT, Record, SessionTotals, check_name, now, parse, totals};

pub struct Session {
    pub name: String,
    store: Store,
    pub records: Vec<Record>,
    /// Lines that could not be read (a torn last line after a crash, or damage).
    pub skipped_lines: usize,
}

/// Where a session's records live.
enum Store {
    /// `.kitbag/sessions/<name>.jsonl`, opened for appending.
    File { dir: StateDir, file: std::fs::File },
    /// Rows of a shared PostgreSQL (`KITBAG_DATABASE_URL`), in one workspace; `root` is the
    /// project whose `.kitbag/sessions` keeps the session's files (cut tool results).
    Pg {
        db: std::sync::Arc<super::session_pg::PgSessions>,
        workspace: String,
        root: std::path::PathBuf,
    },
}

impl Session {
    /// Open (creating if needed) the session `name` of the project at `root` — rows in the
    /// shared database when `KITBAG_DATABASE_URL` is set, else
    /// `<root>/.kitbag/sessions/<name>.jsonl` — and read it.
    pub fn open(root: &Path, name: &str) -> anyhow::Result<Self> {
        check_name(name)?;
        if let Some(url) = super::session_pg::database_url() {
            let db = super::session_pg::PgSessions::shared(&url)?;
            let workspace = super::session_pg::workspace(root);
            let (records, skipped_lines) = db.load(&workspace, name)?;
            return Ok(Self {
                name: name.to_owned(),
                store: Store::Pg {
                    db,
                    workspace,
                    root: root.to_owned(),
                },
                records,
                skipped_lines,
            });
        }
        let dir = sessions_dir(root, true)?;
        let file_name = format!("{name}.jsonl");
        let file = dir
            .open_file(
                &file_name,
                OFlags::RDWR | OFlags::CREATE | OFlags::APPEND | OFlags::CLOEXEC,
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.shown_path(&file_name).display()))?;
        let text = std::io::read_to_string(&file)?;
        let (records, skipped_lines) = parse(&text);
        if skipped_lines > 0 {
            tracing::warn!(
                session = name,
                skipped_lines,
                "unreadable session lines skipped"
            );
        }
        Ok(Self {
            name: name.to_owned(),
            store: Store::File { dir, file },
            records,
            skipped_lines,
        })
    }

    /// Where the session is, for messages.
    pub fn shown_path(&self) -> String {
        match &self.store {
            Store::File { dir, .. } => dir
                .shown_path(format!("{}.jsonl", self.name))
                .display()
                .to_string(),
            Store::Pg { workspace, .. } => {
                format!("{} in the sessions database ({workspace})", self.name)
            }
        }
    }

    /// The session's own directory, `.kitbag/sessions/<name>.results` (made on first use): where
    /// the whole text of a tool result too long for the model is kept. Local to this machine
    /// also when the records are in the database.
    pub fn results_dir(&self) -> anyhow::Result<StateDir> {
        let sub = format!("{}.results", self.name);
        let parent;
        let dir = match &self.store {
            Store::File { dir, .. } => dir,
            Store::Pg { root, .. } => {
                parent = sessions_dir(root, true)?;
                &parent
            }
        };
        dir.subdir(&sub, true)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.shown_path(&sub).display()))
    }

    /// Append one record: one `write` of the whole line, or one row.
    pub fn append(&mut self, record: Record) -> anyhow::Result<()> {
        match &mut self.store {
            Store::File { file, .. } => {
                // A torn last line (a crash mid-write) would swallow this record: start a new
                // line first, in the same write.
                let torn = match ends_torn(file) {
                    Ok(t) => t,
                    Err(e) => anyhow::bail!("session {}: could not read: {e}", self.shown_path()),
                };
                let mut line = Vec::new();
                if torn {
                    line.push(b'\n');
                }
                serde_json::to_writer(&mut line, &record)?;
                line.push(b'\n');
                if let Err(e) = file.write_all(&line) {
                    anyhow::bail!("session {}: could not append: {e}", self.shown_path());
                }
            }
            // One row per record, inserted whole or not at all: no torn record there.
            Store::Pg { db, workspace, .. } => db.append(workspace, &self.name, &record)?,
        }
        self.records.push(record);
        Ok(())
    }

    /// The session prompt in force: the newest `session_prompt` record's, unless empty.
    pub fn prompt(&self) -> Option<&str> {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                Record::SessionPrompt { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .filter(|t| !t.trim().is_empty())
    }

    /// Set (or, with an empty text, clear) the session prompt; nothing is appended when it
    /// would not change. Returns whether it changed.
    pub fn set_prompt(&mut self, text: &str) -> anyhow::Result<bool> {
        let text = text.trim();
        if self.prompt().unwrap_or("") == text {
            return Ok(false);
        }
        if text.len() > MAX_SESSION_PROMPT {
            anyhow::bail!(
                "session prompt: {} bytes; at most {MAX_SESSION_PROMPT} (put longer instructions in .kitbag/prompt.md or a skill)",
                text.len()
            );
        }
        self.append(Record::SessionPrompt {
            text: text.to_owned(),
            ts: now(),
        })?;
        Ok(true)
    }

    /// The issue the session works on: the newest `issue_bound` record's, unless 0.
    pub fn issue(&self) -> Option<i64> {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                Record::IssueBound { number, .. } => Some(*number),
                _ => None,
            })
            .filter(|n| *n > 0)
    }

    /// Bind the session to issue `number` (0 unbinds); nothing is appended when it would not
    /// change. Returns whether it changed.
    pub fn set_issue(&mut self, number: i64) -> anyhow::Result<bool> {
        if number < 0 {
            anyhow::bail!("issue: {number}; an issue number is 1 or more (0 unbinds)");
        }
        if self.issue().unwrap_or(0) == number {
            return Ok(false);
        }
        self.append(Record::IssueBound { number, ts: now() })?;
        Ok(true)
    }

    /// Token totals of every model call in the session.
    pub fn totals(&self) -> (Usage, usize) {
        totals(&self.records)
    }
}

/// A session file's totals as of its first `len` bytes (whole lines only).
struct Counted {
    len: u64,
    totals: SessionTotals,
}

/// Totals already counted, per session file: sessions are append-only, so a later count reads
/// only the lines appended since (`host_status` and `kitbag sessions` no longer re-read every
/// session in full on every call). Keyed by length, which only an append changes; a file that
/// shrank is counted again from the start.
static COUNTED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Counted>>,
> = std::sync::LazyLock::new(Default::default);

/// One session file's totals, reading only what was appended since the last count.
fn file_totals(path: &Path, name: &str) -> Option<SessionTotals> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut counted = COUNTED.locked();
    let (from, mut totals) = match counted.get(path) {
        Some(c) if c.len == len => return Some(c.totals.clone()),
        Some(c) if c.len < len => (c.len, c.totals.clone()),
        _ => (0, SessionTotals::of(name, &[])),
    };
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::new();
    file.take(len - from).read_to_end(&mut tail).ok()?;
    // Whole lines only: a line still being written is counted next time.
    let whole = tail.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    totals.add(&parse(&String::from_utf8_lossy(&tail[..whole])).0);
    counted.insert(
        path.to_path_buf(),
        Counted {
            len: from + whole as u64,
            totals: totals.clone(),
        },
    );
    Some(totals)
}

/// Whether the file's last byte is not a newline: a line cut off by a crash. Checked at every
/// append, not once at open, so that a line torn by another process since is caught too.
fn ends_torn(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] != b'\n')
}

/// Every session under `root`, sorted by name, read without creating anything.
pub fn all_totals(root: &Path) -> Vec<SessionTotals> {
    if let Some(url) = super::session_pg::database_url() {
        let listed = super::session_pg::PgSessions::shared(&url)
            .map_err(anyhow::Error::from)
            .and_then(|db| db.totals(&super::session_pg::workspace(root)));
        return listed.unwrap_or_else(|e| {
            tracing::warn!("session totals: {e:#}");
            Vec::new()
        });
    }
    let dir = root.join(".kitbag").join("sessions");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<SessionTotals> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let file = e.file_name();
            let name = file.to_str()?.strip_suffix(".jsonl")?.to_owned();
            check_name(&name).ok()?;
            file_totals(&e.path(), &name)
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether the project at `root` has a session `name` (a file, or rows in the database).
pub fn exists(root: &Path, name: &str) -> anyhow::Result<bool> {
    check_name(name)?;
    match super::session_pg::database_url() {
        Some(url) => super::session_pg::PgSessions::shared(&url)?
            .exists(&super::session_pg::workspace(root), name),
        None => Ok(root
            .join(".kitbag/sessions")
            .join(format!("{name}.jsonl"))
            .exists()),
    }
}

pub fn sessions_dir(root: &Path, create: bool) -> anyhow::Result<StateDir> {
    let policy = PathPolicy::new(root, &[], false)?;
    let path = root.join(".kitbag").join("sessions");
    StateDir::open(&policy, &path, create).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use kitbag_llm::{Block, StopReason};
    use serde_json::json;

    /// Counting what was appended since gives what a full count gives, a line still being
    /// written is left for later, and a file that shrank is counted again.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn totals_count_only_what_was_appended() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join(".kitbag/sessions");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s.jsonl");
        let usage = |n: u64| {
            serde_json::to_string(&Record::Usage {
                input_tokens: n,
                output_tokens: 1,
                cache_read: 0,
                cache_creation: 0,
                model: "m".into(),
                ts: "t".into(),
                purpose: None,
            })
            .unwrap()
        };
        let line = |r: &Record| serde_json::to_string(r).unwrap() + "\n";
        std::fs::write(&file, line(&user("a")) + &usage(10) + "\n").unwrap();
        let first = all_totals(d.path());
        assert_eq!((first[0].turns, first[0].input_tokens), (1, 10));
        // An append and a torn, unfinished line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all((line(&user("b")) + &usage(5) + "\n" + &usage(7)[..9]).as_bytes())
            .unwrap();
        let second = all_totals(d.path());
        assert_eq!(
            (
                second[0].turns,
                second[0].input_tokens,
                second[0].model_calls
            ),
            (2, 15, 2)
        );
        // The line finished: counted now, exactly once.
        f.write_all(&usage(7).as_bytes()[9..]).unwrap();
        f.write_all(b"\n").unwrap();
        let third = all_totals(d.path());
        assert_eq!((third[0].input_tokens, third[0].model_calls), (22, 3));
        let full = SessionTotals::of("s", &parse(&std::fs::read_to_string(&file).unwrap()).0);
        assert_eq!(third[0].input_tokens, full.input_tokens);
        assert_eq!(third[0].turns, full.turns);
        // A shorter file (replaced): counted from the start.
        std::fs::write(&file, line(&user("c")) + &usage(3) + "\n").unwrap();
        let fourth = all_totals(d.path());
        assert_eq!((fourth[0].turns, fourth[0].input_tokens), (1, 3));
    }

    pub(crate) fn user(t: &str) -> Record {
        Record::User {
            content: vec![Block::text(t)],
            ts: now(),
            origin: None,
        }
    }

    pub(crate) fn call(id: &str) -> Record {
        Record::Assistant {
            content: vec![Block::ToolUse {
                id: id.into(),
                name: "file_read".into(),
                input: json!({"path": "a"}),
                invalid_input: None,
            }],
            stop: StopReason::ToolUse,
            model: "m".into(),
            ts: now(),
        }
    }

    pub(crate) fn result(id: &str, text: &str) -> Record {
        Record::ToolResult {
            content: vec![Block::ToolResult {
                tool_use_id: id.into(),
                content: vec![kitbag_llm::ResultPart::Text { text: text.into() }],
                is_error: false,
            }],
            ts: now(),
        }
    }

    pub(crate) fn answer(t: &str) -> Record {
        Record::Assistant {
            content: vec![Block::text(t)],
            stop: StopReason::EndTurn,
            model: "m".into(),
            ts: now(),
        }
    }

    #[test]
    fn records_round_trip_one_per_line_and_torn_lines_are_skipped() {
        let records = vec![user("hi"), call("t1"), result("t1", "x"), answer("done")];
        let mut text = String::new();
        for r in &records {
            text.push_str(&serde_json::to_string(r).expect("json"));
            text.push('\n');
        }
        text.push_str("{\"role\":\"assistant\",\"content\":[{\"ty");
        let (back, skipped) = parse(&text);
        assert_eq!(back, records);
        assert_eq!(skipped, 1);
        assert!(
            text.starts_with(
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]"
            )
        );
    }

    /// A torn last line stays one unreadable line: the records appended after it (N12) and
    /// after them are read back, and a clean file gets no blank lines.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn an_append_after_a_torn_line_starts_a_line_of_its_own() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join(".kitbag/sessions/s.jsonl");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let torn = "{\"role\":\"assistant\",\"content\":[{\"ty";
        let first = serde_json::to_string(&user("a")).unwrap();
        std::fs::write(&file, format!("{first}\n{torn}")).unwrap();
        let mut s = Session::open(d.path(), "s").unwrap();
        assert_eq!(s.skipped_lines, 1);
        s.append(user("b")).unwrap();
        s.append(user("c")).unwrap();
        let back = Session::open(d.path(), "s").unwrap();
        let texts: Vec<String> = back
            .records
            .iter()
            .map(|r| match r {
                Record::User { content, .. } => kitbag_llm::types::blocks_text(content),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert_eq!(back.skipped_lines, 1);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().nth(1), Some(torn));
        assert!(!text.contains("\n\n"));
    }

    #[test]
    fn session_names_are_file_names() {
        assert!(check_name("daily-report_2.v1").is_ok());
        assert!(check_name("cron-3").is_ok() && check_name("team:nightly").is_ok());
        for bad in ["", ".hidden", "a/b", "../x", "sp ace", &"x".repeat(129)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
