//! What an edit did to the diagnostics: the language server's view of the changed files is
//! taken before the write and after it, and compared — a diagnostic counts as *introduced*
//! when nothing like it was there before, *fixed* when it is gone. "Like it" means the same
//! severity, code, source and message, at the same place once the lines the edit moved are
//! followed (a diagnostic pushed down by three inserted lines is the same diagnostic), and
//! failing that anywhere in the file: an edit that only moves a problem neither introduces
//! nor fixes it.
//!
//! Files the edit did not touch count too when the server told us about them before and
//! tells us again after (a renamed function breaks its callers in other open files). A file
//! the server never spoke of before is left out: its first diagnostics say nothing about
//! what the edit changed.
//!
//! Bounded: each side waits at most the caller's `wait` for the server to describe the
//! current text and go quiet; a side that did not is reported `settled: false`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kitbag_shared::lock::LockExt;
use kitbag_shared::{Access, PathPolicy};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::diagnostics::{self, Diagnostic, code_string, severity_name};
use crate::pool::{Pool, Server};
use crate::text::{Lines, path_to_uri, uri_to_path};

/// Quiet this long after its diagnostics describe the current text, a server counts as
/// done with an edit. Shorter than `code_lsp`'s [`diagnostics::QUIET`]: an edit's answer
/// is waited for on every write, and work that starts later (rust-analyzer's `cargo
/// check` after a save) shows as progress, which is waited for whatever this is.
pub const QUIET: Duration = Duration::from_millis(150);

/// How long each side of a check waits by default.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(1500);

/// At most this many introduced (and fixed) diagnostics are listed; the counts are whole.
pub const MAX_LISTED: usize = 50;

/// What the listed diagnostics weigh at most, serialized: an edit's answer keeps room for
/// them beside its diff within the result budget.
pub const MAX_BYTES: usize = 6 * 1024;

/// A listed diagnostic's message is cut at this many bytes.
const MAX_MESSAGE_BYTES: usize = 1024;

/// The diagnostics an edit introduced and fixed, as an edit tool's answer carries them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct EditDiagnostics {
    /// Diagnostics present after the change and not before (matched by severity, code,
    /// source and message, at the place the edit moved them to).
    pub introduced: Vec<Diagnostic>,
    /// Diagnostics present before the change and gone after it.
    pub fixed: Vec<Diagnostic>,
    /// How many were introduced in all (`introduced` lists at most 50, within 6 KB
    /// together with `fixed`).
    pub introduced_count: usize,
    /// How many were fixed in all.
    pub fixed_count: usize,
    /// Diagnostics in the changed files after the change, introduced or not.
    pub remaining: usize,
    /// False when a language server had not finished within the wait (on either side): the
    /// lists may be incomplete. Call `code_lsp` `diagnostics` for the full picture later.
    pub settled: bool,
    /// The language servers asked.
    pub languages: Vec<String>,
    /// Time spent waiting for the servers, before and after the write together.
    pub waited_ms: u64,
    /// Files that could not be checked, and why (no server installed, it crashed, it was
    /// still loading): nothing is claimed about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl EditDiagnostics {
    /// One line per introduced diagnostic and a summary, for the answer's text.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        let state = if self.settled {
            ""
        } else {
            " (the language server had not finished: may be incomplete)"
        };
        if self.introduced_count == 0 && self.fixed_count == 0 {
            out.push(format!(
                "diagnostics: none introduced, {} in the changed files{state}",
                self.remaining
            ));
        } else {
            out.push(format!(
                "diagnostics: {} introduced, {} fixed, {} in the changed files{state}",
                self.introduced_count, self.fixed_count, self.remaining
            ));
        }
        for d in &self.introduced {
            out.push(format!("  + {}", d.line()));
        }
        if self.introduced_count > self.introduced.len() {
            out.push(format!(
                "  … and {} more (code_lsp diagnostics lists them all)",
                self.introduced_count - self.introduced.len()
            ));
        }
        for d in &self.fixed {
            out.push(format!(
                "  - {}:{}: {}: {}",
                d.path, d.line, d.severity, d.message
            ));
        }
        if let Some(n) = &self.note {
            out.push(format!("  note: {n}"));
        }
        out.join("\n")
    }
}

/// Edit checks over a pool of language servers.
#[derive(Clone)]
pub struct Checker {
    pub pool: Arc<Pool>,
    /// How long a server must stay quiet for its diagnostics to count as final.
    quiet: Duration,
}

/// A changed file as the server saw it before the write.
struct FileBefore {
    path: PathBuf,
    /// None: the file did not exist (it is being created).
    lines: Option<Arc<Lines>>,
    items: Vec<Value>,
    /// The server had not described this text within the wait: what the edit changed in
    /// this file is unknown.
    unknown: bool,
}

/// One language's side of a check.
struct Group {
    server: Arc<Server>,
    files: Vec<FileBefore>,
    /// What the server had last said about every other file, by URI, and when.
    others: HashMap<String, Vec<Value>>,
    /// The server's event count when the before-state was taken.
    seq: u64,
}

/// The state before an edit, to hand to [`Checker::after`].
pub struct Before {
    groups: Vec<Group>,
    notes: Vec<String>,
    settled: bool,
    waited: Duration,
}

impl Checker {
    pub fn new(pool: Arc<Pool>) -> Self {
        Checker { pool, quiet: QUIET }
    }

    /// With another quiet period than [`QUIET`] (a slow machine, a server that publishes
    /// in pieces).
    pub fn with_quiet(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// Whether a language server is configured for this file.
    pub fn covers(&self, path: &Path) -> bool {
        self.pool.config.for_path(path).is_some()
    }

    /// Start the file's language server and open the file in it, in the background — so
    /// the state before an edit that follows a read is ready when the edit comes.
    pub fn warm(&self, path: &Path) {
        let Some(lang) = self.pool.config.for_path(path).cloned() else {
            return;
        };
        let (pool, path) = (self.pool.clone(), path.to_path_buf());
        tokio::spawn(async move {
            if let Ok(server) = pool.get(&lang).await {
                let _ = server.sync(std::slice::from_ref(&path)).await;
            }
        });
    }

    /// The diagnostics of `files` (absolute paths; a file that does not exist yet counts as
    /// having none) as the servers see them now, waiting at most `wait`.
    pub async fn before(&self, files: &[PathBuf], wait: Duration) -> Before {
        let start = Instant::now();
        let mut out = Before {
            groups: Vec::new(),
            notes: Vec::new(),
            settled: true,
            waited: Duration::ZERO,
        };
        for (lang, paths) in by_language(&self.pool, files) {
            let server = match self.pool.get(&lang).await {
                Ok(s) => s,
                Err(e) => {
                    out.notes.push(format!("{}: {}", lang.name, e.message));
                    continue;
                }
            };
            let existing: Vec<PathBuf> = paths
                .iter()
                .filter(|p| server.open_doc(p).is_ok())
                .cloned()
                .collect();
            let texts = match server.sync(&existing).await {
                Ok(t) => t,
                Err(e) => {
                    out.notes.push(format!("{}: {}", lang.name, e.message));
                    continue;
                }
            };
            let pairs: Vec<(PathBuf, Arc<Lines>)> = existing.into_iter().zip(texts).collect();
            let left = wait.saturating_sub(start.elapsed());
            let got = diagnostics::collect_within(&server, &pairs, left, self.quiet).await;
            out.settled &= got.settled;
            let mut files: Vec<FileBefore> = got
                .by_file
                .into_iter()
                .map(|(path, lines, items)| FileBefore {
                    unknown: got.stale.contains(&path),
                    path,
                    lines: Some(lines),
                    items,
                })
                .collect();
            for p in &paths {
                if !files.iter().any(|f| &f.path == p) {
                    files.push(FileBefore {
                        path: p.clone(),
                        lines: None,
                        items: Vec::new(),
                        unknown: false,
                    });
                }
            }
            let (others, seq) = {
                let ev = server.rpc.events.locked();
                let mine: Vec<String> = paths.iter().map(|p| path_to_uri(p)).collect();
                let others = ev
                    .diagnostics
                    .iter()
                    .filter(|(uri, _)| !mine.contains(uri))
                    .map(|(uri, p)| (uri.clone(), p.items.clone()))
                    .collect();
                (others, ev.seq)
            };
            out.groups.push(Group {
                server,
                files,
                others,
                seq,
            });
        }
        out.waited = start.elapsed();
        out
    }

    /// After the write: the servers are told what changed on disk, their diagnostics
    /// collected (within `wait`) and compared with `before`. `moved` maps a path before the
    /// edit to its path after (a file moved by the edit); a path absent after the edit
    /// (deleted) has nothing after it. Paths in the answer are shown by `policy`, and only
    /// files it lets the caller read are mentioned.
    pub async fn after(
        &self,
        before: Before,
        moved: &[(PathBuf, PathBuf)],
        policy: &PathPolicy,
        wait: Duration,
    ) -> EditDiagnostics {
        let start = Instant::now();
        let mut out = EditDiagnostics {
            settled: before.settled,
            ..Default::default()
        };
        let mut notes = before.notes;
        let mut unknown: Vec<String> = Vec::new();
        let mut introduced = Vec::new();
        let mut fixed = Vec::new();
        for group in before.groups {
            let server = &group.server;
            out.languages.push(server.lang.name.clone());
            let after_path = |p: &PathBuf| {
                moved
                    .iter()
                    .find(|(from, _)| from == p)
                    .map(|(_, to)| to.clone())
                    .unwrap_or_else(|| p.clone())
            };
            let now: Vec<PathBuf> = group
                .files
                .iter()
                .map(|f| after_path(&f.path))
                .filter(|p| server.open_doc(p).is_ok())
                .collect();
            let texts = match server.sync(&now).await {
                Ok(t) => t,
                Err(e) => {
                    notes.push(format!("{}: {}", server.lang.name, e.message));
                    out.settled = false;
                    continue;
                }
            };
            let pairs: Vec<(PathBuf, Arc<Lines>)> = now.into_iter().zip(texts).collect();
            let left = wait.saturating_sub(start.elapsed());
            let got = diagnostics::collect_within(server, &pairs, left, self.quiet).await;
            out.settled &= got.settled;
            let show = |path: &Path, lines: &Lines, d: &Value| {
                diagnostics::entry(policy, path, lines, d, server.encoding)
            };
            for f in &group.files {
                let to = after_path(&f.path);
                // Right or silent: a side the server did not describe in time is no basis
                // for "introduced" or "fixed".
                if f.unknown || got.stale.contains(&to) {
                    unknown.push(policy.display(&to));
                    continue;
                }
                let after = got.by_file.iter().find(|(p, _, _)| *p == to);
                let empty = Vec::new();
                let (after_lines, after_items) = match after {
                    Some((_, l, items)) => (Some(l.clone()), items),
                    None => (None, &empty),
                };
                out.remaining += after_items.len();
                let map = LineMap::new(f.lines.as_deref(), after_lines.as_deref());
                let (new, gone) = compare(&f.items, after_items, &map);
                if let Some(l) = &after_lines {
                    introduced.extend(new.into_iter().map(|d| show(&to, l, d)));
                }
                // A deleted file's diagnostics are not fixed, only gone with it.
                if let (Some(l), Some(_)) = (&f.lines, &after_lines) {
                    fixed.extend(gone.into_iter().map(|d| show(&f.path, l, d)));
                }
            }
            // Files the edit did not touch, which the server spoke of before and again since.
            let again: Vec<(PathBuf, Vec<Value>, Vec<Value>)> = {
                let ev = server.rpc.events.locked();
                ev.diagnostics
                    .iter()
                    .filter(|(_, p)| p.seq > group.seq)
                    .filter_map(|(uri, p)| {
                        let was = group.others.get(uri)?;
                        let path = uri_to_path(uri)?;
                        policy
                            .allows(&path, Access::Read)
                            .then(|| (path, was.clone(), p.items.clone()))
                    })
                    .collect()
            };
            for (path, was, now) in again {
                let Some(lines) = server.text_of(&path).await else {
                    continue;
                };
                let map = LineMap::same();
                let (new, gone) = compare(&was, &now, &map);
                introduced.extend(new.into_iter().map(|d| show(&path, &lines, d)));
                fixed.extend(gone.into_iter().map(|d| show(&path, &lines, d)));
            }
        }
        if !unknown.is_empty() {
            out.settled = false;
            notes.insert(
                0,
                format!(
                    "not compared (the language server had not described the text before or after the write within the wait; still loading?): {}",
                    unknown.join(", ")
                ),
            );
        }
        let order = |a: &Diagnostic, b: &Diagnostic| {
            (&a.path, a.line, a.character).cmp(&(&b.path, b.line, b.character))
        };
        introduced.sort_by(order);
        fixed.sort_by(order);
        out.introduced_count = introduced.len();
        out.fixed_count = fixed.len();
        // Introduced ones first: they are what the caller has to act on.
        let mut room = MAX_BYTES;
        out.introduced = listed(introduced, &mut room);
        out.fixed = listed(fixed, &mut room);
        out.waited_ms = (before.waited + start.elapsed()).as_millis() as u64;
        out.note = (!notes.is_empty())
            .then(|| kitbag_shared::limits::fit_str(&notes.join("; "), 512, "… [cut]").0);
        out
    }
}

/// The first diagnostics of `all` (at most [`MAX_LISTED`]) that fit in `room` bytes,
/// each message cut at [`MAX_MESSAGE_BYTES`]; `room` shrinks by what they weigh.
fn listed(all: Vec<Diagnostic>, room: &mut usize) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for mut d in all.into_iter().take(MAX_LISTED) {
        if d.message.len() > MAX_MESSAGE_BYTES {
            d.message = kitbag_shared::limits::fit_str(&d.message, MAX_MESSAGE_BYTES, "… [cut]").0;
        }
        let weight = kitbag_shared::limits::json_len(&d) + 1;
        if weight > *room {
            break;
        }
        *room -= weight;
        out.push(d);
    }
    out
}

/// `files` grouped by the language configured for each (files with none left out).
fn by_language(
    pool: &Pool,
    files: &[PathBuf],
) -> Vec<(crate::config::LanguageConfig, Vec<PathBuf>)> {
    let mut groups: Vec<(crate::config::LanguageConfig, Vec<PathBuf>)> = Vec::new();
    for f in files {
        let Some(lang) = pool.config.for_path(f) else {
            continue;
        };
        match groups.iter_mut().find(|(l, _)| l.name == lang.name) {
            Some((_, v)) if !v.contains(f) => v.push(f.clone()),
            Some(_) => {}
            None => groups.push((lang.clone(), vec![f.clone()])),
        }
    }
    groups
}

/// Where each line before an edit went after it: lines the edit left alone keep their
/// content and are found by a line diff; lines it changed go nowhere.
pub struct LineMap {
    map: Option<HashMap<usize, usize>>,
}

impl LineMap {
    /// The map from the text before to the text after (either may be missing).
    pub fn new(before: Option<&Lines>, after: Option<&Lines>) -> Self {
        let (Some(b), Some(a)) = (before, after) else {
            return LineMap {
                map: Some(HashMap::new()),
            };
        };
        let old: Vec<&str> = (0..b.len()).filter_map(|i| b.line(i)).collect();
        let new: Vec<&str> = (0..a.len()).filter_map(|i| a.line(i)).collect();
        // Bounded: a diff of two huge, unrelated texts gives up and maps what it found.
        let deadline = Instant::now() + Duration::from_millis(200);
        let ops = similar::capture_diff_slices_deadline(
            similar::Algorithm::Myers,
            &old,
            &new,
            Some(deadline),
        );
        let mut map = HashMap::new();
        for op in ops {
            if let similar::DiffOp::Equal {
                old_index,
                new_index,
                len,
            } = op
            {
                for i in 0..len {
                    map.insert(old_index + i, new_index + i);
                }
            }
        }
        LineMap { map: Some(map) }
    }

    /// Every line stays where it was (a file the edit did not touch).
    pub fn same() -> Self {
        LineMap { map: None }
    }

    fn get(&self, line: usize) -> Option<usize> {
        match &self.map {
            None => Some(line),
            Some(m) => m.get(&line).copied(),
        }
    }
}

/// What identifies a diagnostic apart from its place.
fn key(d: &Value) -> (&'static str, Option<String>, Option<&str>, &str) {
    (
        severity_name(&d["severity"]),
        code_string(&d["code"]),
        d["source"].as_str(),
        d["message"].as_str().unwrap_or(""),
    )
}

fn start_of(d: &Value) -> (usize, usize) {
    let s = &d["range"]["start"];
    (
        s["line"].as_u64().unwrap_or(0) as usize,
        s["character"].as_u64().unwrap_or(0) as usize,
    )
}

/// The diagnostics of `after` with no match in `before` (introduced) and those of `before`
/// with none in `after` (fixed). A match has the same [`key`]; it is looked for first at
/// the place `map` moved the old one to (same line and column), then on the same line,
/// then anywhere — each diagnostic matched at most once.
pub fn compare<'a>(
    before: &'a [Value],
    after: &'a [Value],
    map: &LineMap,
) -> (Vec<&'a Value>, Vec<&'a Value>) {
    let mut used_after = vec![false; after.len()];
    let mut used_before = vec![false; before.len()];
    let moved = |d: &Value| {
        let (l, c) = start_of(d);
        map.get(l).map(|l| (l, c))
    };
    // Exact place, then the same line, then anywhere.
    let same_place = |pass: usize, b: &Value, a: &Value| match pass {
        0 => moved(b) == Some(start_of(a)),
        1 => moved(b).map(|(l, _)| l) == Some(start_of(a).0),
        _ => true,
    };
    for pass in 0..3 {
        for (i, b) in before.iter().enumerate() {
            if used_before[i] {
                continue;
            }
            let found = after
                .iter()
                .enumerate()
                .position(|(j, a)| !used_after[j] && key(a) == key(b) && same_place(pass, b, a));
            if let Some(j) = found {
                used_before[i] = true;
                used_after[j] = true;
            }
        }
    }
    let introduced = after
        .iter()
        .zip(&used_after)
        .filter(|(_, u)| !**u)
        .map(|(a, _)| a)
        .collect();
    let fixed = before
        .iter()
        .zip(&used_before)
        .filter(|(_, u)| !**u)
        .map(|(b, _)| b)
        .collect();
    (introduced, fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diag(line: u64, ch: u64, msg: &str) -> Value {
        json!({"range": {"start": {"line": line, "character": ch},
            "end": {"line": line, "character": ch + 3}},
            "severity": 1, "message": msg, "source": "test"})
    }

    fn lines(text: &str) -> Lines {
        Lines::new(text.to_string())
    }

    #[test]
    fn a_diagnostic_moved_down_by_inserted_lines_is_the_same_one() {
        let before_text = lines("a\nb\nbad\nc\n");
        let after_text = lines("new1\nnew2\na\nb\nbad\nc\n");
        let map = LineMap::new(Some(&before_text), Some(&after_text));
        let before = [diag(2, 0, "undefined name")];
        let after = [diag(4, 0, "undefined name")];
        let (new, gone) = compare(&before, &after, &map);
        assert!(new.is_empty() && gone.is_empty(), "{new:?} {gone:?}");
    }

    #[test]
    fn a_second_identical_message_elsewhere_is_introduced() {
        let t0 = lines("x = y\n");
        let t1 = lines("x = y\nz = y\n");
        let map = LineMap::new(Some(&t0), Some(&t1));
        let before = [diag(0, 4, "\"y\" is not defined")];
        let after = [
            diag(0, 4, "\"y\" is not defined"),
            diag(1, 4, "\"y\" is not defined"),
        ];
        let (new, gone) = compare(&before, &after, &map);
        assert_eq!(new, vec![&after[1]]);
        assert!(gone.is_empty());
    }

    #[test]
    fn a_fixed_one_and_a_new_one_on_the_same_line() {
        let t0 = lines("foo(1)\n");
        let t1 = lines("fooo(1)\n");
        let map = LineMap::new(Some(&t0), Some(&t1));
        let before = [diag(0, 0, "wrong argument type")];
        let after = [diag(0, 0, "\"fooo\" is not defined")];
        let (new, gone) = compare(&before, &after, &map);
        assert_eq!(new, vec![&after[0]]);
        assert_eq!(gone, vec![&before[0]]);
    }

    #[test]
    fn a_problem_only_moved_by_a_rewrite_of_its_line_is_neither() {
        // The line with the problem was itself edited: no line map, matched anywhere.
        let t0 = lines("print(q)\n");
        let t1 = lines("# note\nprint( q )\n");
        let map = LineMap::new(Some(&t0), Some(&t1));
        let before = [diag(0, 6, "\"q\" is not defined")];
        let after = [diag(1, 7, "\"q\" is not defined")];
        let (new, gone) = compare(&before, &after, &map);
        assert!(new.is_empty() && gone.is_empty());
    }

    #[test]
    fn a_created_file_has_everything_introduced() {
        let t1 = lines("import nothing_here\n");
        let map = LineMap::new(None, Some(&t1));
        let after = [diag(0, 7, "import could not be resolved")];
        let (new, gone) = compare(&[], &after, &map);
        assert_eq!(new.len(), 1);
        assert!(gone.is_empty());
    }

    #[test]
    fn the_text_names_each_introduced_one() {
        let d = EditDiagnostics {
            introduced: vec![Diagnostic {
                path: "a.py".into(),
                line: 3,
                character: 4,
                end_line: 3,
                end_character: 5,
                severity: "error".into(),
                message: "\"y\" is not defined".into(),
                code: Some("reportUndefinedVariable".into()),
                source: Some("Pyright".into()),
            }],
            introduced_count: 1,
            remaining: 1,
            settled: true,
            ..Default::default()
        };
        let t = d.text();
        assert!(t.contains("1 introduced, 0 fixed"), "{t}");
        assert!(
            t.contains("+ a.py:3:4: error: \"y\" is not defined [reportUndefinedVariable]"),
            "{t}"
        );
    }
}
