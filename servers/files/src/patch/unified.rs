//! Unified diffs: `diff -u`, `diff -ruN`, `git diff` / `git format-patch` (renames, new and
//! deleted files, quoted names), several files in one text. Text around the file sections
//! (a commit message, `index` lines, mode changes) is skipped.

use super::ParseError;
use super::model::{Edits, FileChange, Hunk, Kind, Op};

/// Whether `text` looks like a unified diff: a `--- `/`+++ ` pair or a `diff --git` line.
pub fn detect(text: &str) -> bool {
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("diff --git ")
            || (l.starts_with("--- ") && lines.peek().is_some_and(|n| n.starts_with("+++ ")))
        {
            return true;
        }
    }
    false
}

/// One file section while it is read.
#[derive(Default)]
struct Section {
    git: bool,
    /// `diff --git a/X b/Y`'s names, used when no `---`/`+++` pair follows (a pure rename).
    git_names: Option<(String, String)>,
    old: Option<String>,
    new: Option<String>,
    rename_from: Option<String>,
    rename_to: Option<String>,
    created: bool,
    deleted: bool,
    /// `diff -N`'s way to say "absent": the epoch as the old (new) side's timestamp.
    old_epoch: bool,
    new_epoch: bool,
    hunks: Vec<Hunk>,
}

pub fn parse(text: &str) -> Result<Vec<FileChange>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let err = |line: usize, msg: String| ParseError {
        line: line + 1,
        msg,
    };
    let mut out = Vec::new();
    let mut cur: Option<Section> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            finish(cur.take(), &mut out, i)?;
            cur = Some(Section {
                git: true,
                git_names: split_git_names(rest),
                ..Section::default()
            });
        } else if line.starts_with("--- ")
            && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "))
        {
            // A `---` pair outside a git section starts a section of its own.
            let s = match cur.take() {
                Some(s) if s.git && s.old.is_none() && s.hunks.is_empty() => s,
                other => {
                    finish(other, &mut out, i)?;
                    Section::default()
                }
            };
            let mut s = s;
            s.old = Some(header_path(&line[4..]));
            s.new = Some(header_path(&lines[i + 1][4..]));
            s.old_epoch = is_epoch(&line[4..]);
            s.new_epoch = is_epoch(&lines[i + 1][4..]);
            cur = Some(s);
            i += 1;
        } else if line.starts_with("@@ ") {
            let Some(s) = &mut cur else {
                return Err(err(i, "a hunk before any `---`/`+++` file header".into()));
            };
            let (hunk, next) = hunk(&lines, i).map_err(|(l, m)| err(l, m))?;
            s.hunks.push(hunk);
            i = next;
            continue;
        } else if line.starts_with("Binary files ") || line == "GIT binary patch" {
            return Err(err(
                i,
                "binary patches are not supported; edit_patch changes text files".into(),
            ));
        } else if let Some(s) = &mut cur {
            if let Some(p) = line.strip_prefix("rename from ") {
                s.rename_from = Some(unquote(p));
            } else if let Some(p) = line.strip_prefix("rename to ") {
                s.rename_to = Some(unquote(p));
            } else if line.starts_with("new file mode ") {
                s.created = true;
            } else if line.starts_with("deleted file mode ") {
                s.deleted = true;
            }
        }
        i += 1;
    }
    finish(cur, &mut out, lines.len())?;
    if out.is_empty() {
        return Err(err(
            0,
            "the diff changes no file (no `---`/`+++` header with hunks)".into(),
        ));
    }
    Ok(out)
}

/// `@@ -a[,b] +c[,d] @@` and its lines from `lines[i]`: the hunk and the index after it.
fn hunk(lines: &[&str], i: usize) -> Result<(Hunk, usize), (usize, String)> {
    let header = lines[i];
    let bad = || {
        (
            i,
            format!("not a hunk header (`@@ -a,b +c,d @@` expected): {header:?}"),
        )
    };
    let inner = header[3..].split(" @@").next().ok_or_else(bad)?;
    let mut parts = inner.split_whitespace();
    let (old_start, mut old_left) =
        range(parts.next().and_then(|p| p.strip_prefix('-'))).ok_or_else(bad)?;
    let (_, mut new_left) =
        range(parts.next().and_then(|p| p.strip_prefix('+'))).ok_or_else(bad)?;
    let mut h = Hunk {
        // `-N,0`: inserted after line N; else it starts at line N.
        old_start: Some(old_start),
        ..Hunk::default()
    };
    let mut j = i + 1;
    let mut last = Kind::Context;
    while j < lines.len() && (old_left > 0 || new_left > 0) {
        let l = lines[j];
        let (kind, text) = match l.as_bytes().first() {
            Some(b' ') => (Kind::Context, &l[1..]),
            Some(b'-') => (Kind::Remove, &l[1..]),
            Some(b'+') => (Kind::Add, &l[1..]),
            // An empty line: a context line whose space an editor or mailer removed.
            None => (Kind::Context, ""),
            Some(b'\\') => {
                no_newline(&mut h, last);
                j += 1;
                continue;
            }
            Some(_) => break,
        };
        match kind {
            Kind::Context if old_left > 0 && new_left > 0 => {
                old_left -= 1;
                new_left -= 1;
            }
            Kind::Remove if old_left > 0 => old_left -= 1,
            Kind::Add if new_left > 0 => new_left -= 1,
            _ => break,
        }
        h.lines.push((kind, text.to_string()));
        last = kind;
        j += 1;
    }
    if old_left > 0 || new_left > 0 {
        return Err((
            j.min(lines.len().saturating_sub(1)),
            format!(
                "the hunk at {header:?} ends early: {old_left} old and {new_left} new line(s) missing"
            ),
        ));
    }
    if lines.get(j).is_some_and(|l| l.starts_with('\\')) {
        no_newline(&mut h, last);
        j += 1;
    }
    Ok((h, j))
}

/// `\ No newline at end of file` after a line of kind `last`.
fn no_newline(h: &mut Hunk, last: Kind) {
    match last {
        Kind::Remove => h.old_no_newline = true,
        Kind::Add => h.new_no_newline = true,
        Kind::Context => {
            h.old_no_newline = true;
            h.new_no_newline = true;
        }
    }
}

/// `N` or `N,M` → (start, count); a count left out is 1.
fn range(s: Option<&str>) -> Option<(usize, usize)> {
    let s = s?;
    match s.split_once(',') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => Some((s.parse().ok()?, 1)),
    }
}

/// The path of a `---`/`+++` line: a timestamp after a tab dropped, a quoted name unquoted.
fn header_path(s: &str) -> String {
    let s = s.split('\t').next().unwrap_or(s);
    let s = if s.starts_with('"') { s } else { s.trim_end() };
    unquote(s)
}

/// Whether a `---`/`+++` line's timestamp is the epoch (in any zone): how `diff -N` marks a
/// file absent on that side, and what GNU patch reads as "create" or "delete".
fn is_epoch(header: &str) -> bool {
    let Some(stamp) = header.split('\t').nth(1).map(str::trim) else {
        return false;
    };
    // `1970-01-01 00:00:00.000000000 +0000`, or `-0500` and the local date before it.
    let mut parts = stamp.split_whitespace();
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    let zone = parts.next().unwrap_or("+0000");
    let num = |s: &str| s.parse::<i64>().ok();
    let d: Vec<i64> = date.split('-').filter_map(num).collect();
    let t: Vec<i64> = time.split(['.', ':']).take(3).filter_map(num).collect();
    let (sign, zh, zm) = match (zone.as_bytes().first(), zone.get(1..3), zone.get(3..5)) {
        (Some(b'+'), Some(h), Some(m)) => (1, num(h), num(m)),
        (Some(b'-'), Some(h), Some(m)) => (-1, num(h), num(m)),
        _ => return false,
    };
    let ([y, mo, day], [h, mi, sec], Some(zh), Some(zm)) = (d.as_slice(), t.as_slice(), zh, zm)
    else {
        return false;
    };
    // Days from 1970-01-01 to the date (proleptic Gregorian).
    let (y, m) = if *mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (*y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + h * 3600 + mi * 60 + sec - sign * (zh * 3600 + zm * 60);
    seconds == 0
}

/// `a/X b/Y` of a `diff --git` line (names without spaces, or quoted).
fn split_git_names(rest: &str) -> Option<(String, String)> {
    if rest.starts_with('"') {
        let end = quoted_end(rest)?;
        let (a, b) = rest.split_at(end);
        return Some((unquote(a), unquote(b.trim_start())));
    }
    // Unquoted: the two halves are equal for anything but a rename; split at " b/".
    let at = rest.find(" b/").or_else(|| rest.find(' '))?;
    Some((rest[..at].to_string(), unquote(rest[at + 1..].trim())))
}

/// The byte after the closing quote of a C-quoted string at the start of `s`.
fn quoted_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// git's C-style quoting (`"a/sp ace\tx"`, octal bytes for non-ASCII) undone.
fn unquote(s: &str) -> String {
    let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return s.to_string();
    };
    let b = inner.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            let c = b[i + 1];
            i += 2;
            match c {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'0'..=b'7' => {
                    let digits: Vec<u8> = std::iter::once(c)
                        .chain(
                            b[i..]
                                .iter()
                                .copied()
                                .take(2)
                                .take_while(|d| (b'0'..=b'7').contains(d)),
                        )
                        .collect();
                    i += digits.len() - 1;
                    let v = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                    out.push(v as u8);
                }
                other => out.push(other),
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a/x` → `x` when the section is git's (its names carry the `a/`, `b/` prefixes).
fn strip(path: &str, git: bool, prefix: &str) -> String {
    if git {
        path.strip_prefix(prefix).unwrap_or(path).to_string()
    } else {
        path.to_string()
    }
}

const DEV_NULL: &str = "/dev/null";

/// A finished section as a file change (a section with no change — a mode change — adds none).
fn finish(s: Option<Section>, out: &mut Vec<FileChange>, line: usize) -> Result<(), ParseError> {
    let Some(s) = s else { return Ok(()) };
    let err = |msg: &str| ParseError {
        line: line + 1,
        msg: msg.to_string(),
    };
    let git = s.git
        || (s
            .old
            .as_deref()
            .is_some_and(|p| p.starts_with("a/") || p == DEV_NULL)
            && s.new
                .as_deref()
                .is_some_and(|p| p.starts_with("b/") || p == DEV_NULL));
    let old = s
        .rename_from
        .clone()
        .or_else(|| {
            s.old
                .as_deref()
                .filter(|p| *p != DEV_NULL)
                .map(|p| strip(p, git, "a/"))
        })
        .or_else(|| s.git_names.as_ref().map(|(a, _)| strip(a, git, "a/")));
    let new = s
        .rename_to
        .clone()
        .or_else(|| {
            s.new
                .as_deref()
                .filter(|p| *p != DEV_NULL)
                .map(|p| strip(p, git, "b/"))
        })
        .or_else(|| s.git_names.as_ref().map(|(_, b)| strip(b, git, "b/")));
    let only = |kind: Kind| {
        s.hunks
            .iter()
            .all(|h| h.lines.iter().all(|(k, _)| *k == kind))
    };
    let created =
        s.created || s.old.as_deref() == Some(DEV_NULL) || (s.old_epoch && only(Kind::Add));
    let deleted =
        s.deleted || s.new.as_deref() == Some(DEV_NULL) || (s.new_epoch && only(Kind::Remove));
    if created {
        let path = new.ok_or_else(|| err("a new file without a name"))?;
        let mut text = String::new();
        let mut no_newline = false;
        for h in &s.hunks {
            for (k, l) in &h.lines {
                if *k != Kind::Add {
                    return Err(err(&format!(
                        "{path}: a new file's hunk may only add lines"
                    )));
                }
                text.push_str(l);
                text.push('\n');
            }
            no_newline = h.new_no_newline;
        }
        if no_newline {
            text.pop();
        }
        out.push(FileChange {
            path,
            op: Op::Add(text),
        });
    } else if deleted {
        let path = old.ok_or_else(|| err("a deleted file without a name"))?;
        out.push(FileChange {
            path,
            op: Op::Delete,
        });
    } else {
        let (Some(old), Some(new)) = (old, new) else {
            return Err(err("a file section without names"));
        };
        let move_to = (old != new).then_some(new);
        if s.hunks.is_empty() && move_to.is_none() {
            return Ok(()); // a mode change, or `index` lines only
        }
        let edits = if s.hunks.is_empty() {
            Vec::new()
        } else {
            vec![Edits::Hunks(s.hunks)]
        };
        out.push(FileChange {
            path: old,
            op: Op::Update { move_to, edits },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_sections_with_renames_new_and_deleted_files() {
        let d = "commit message\n\ndiff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n\
                 +++ b/src/a.rs\n@@ -1,3 +1,3 @@ fn x\n one\n-two\n+TWO\n three\n\
                 diff --git a/old.txt b/new.txt\nsimilarity index 100%\nrename from old.txt\nrename to new.txt\n\
                 diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n\
                 diff --git a/gone b/gone\ndeleted file mode 100644\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n\
                 diff --git a/m.sh b/m.sh\nold mode 100644\nnew mode 100755\n";
        assert!(detect(d));
        let c = parse(d).expect("parse");
        assert_eq!(c.len(), 4, "{c:?}");
        assert_eq!(c[0].path, "src/a.rs");
        let Op::Update {
            move_to: None,
            edits,
        } = &c[0].op
        else {
            panic!("{c:?}")
        };
        let [Edits::Hunks(h)] = edits.as_slice() else {
            panic!()
        };
        assert_eq!(h[0].old_start, Some(1));
        assert_eq!(h[0].lines.len(), 4);
        assert_eq!(
            c[1],
            FileChange {
                path: "old.txt".into(),
                op: Op::Update {
                    move_to: Some("new.txt".into()),
                    edits: vec![]
                }
            }
        );
        assert_eq!(
            c[2],
            FileChange {
                path: "n.txt".into(),
                op: Op::Add("x\ny".into())
            }
        );
        assert_eq!(
            c[3],
            FileChange {
                path: "gone".into(),
                op: Op::Delete
            }
        );
    }

    #[test]
    fn plain_diff_u_keeps_its_paths_and_drops_timestamps() {
        let d = "--- notes.txt\t2026-01-01 10:00:00.000 +0000\n+++ notes.txt\t2026-01-02 10:00:00.000 +0000\n\
                 @@ -2 +2,2 @@\n-b\n+B\n+C\n";
        let c = parse(d).expect("parse");
        assert_eq!(c[0].path, "notes.txt");
        let Op::Update { edits, .. } = &c[0].op else {
            panic!()
        };
        let [Edits::Hunks(h)] = edits.as_slice() else {
            panic!()
        };
        assert_eq!(h[0].old_start, Some(2));
    }

    #[test]
    fn epoch_timestamps_mark_absent_files_in_any_zone() {
        assert!(is_epoch("old/a\t1970-01-01 00:00:00.000000000 +0000"));
        assert!(is_epoch("old/a\t1969-12-31 19:00:00.000000000 -0500"));
        assert!(is_epoch("old/a\t1970-01-01 01:00:00 +0100"));
        assert!(!is_epoch("old/a\t2026-11-29 22:16:37.177063797 +0000"));
        assert!(!is_epoch("old/a"));
        assert!(!is_epoch("old/a\tgarbage"));
        let d = "--- old/added\t1970-01-01 00:00:00.000000000 +0000\n+++ new/added\t2026-11-29 22:16:37.1 +0000\n@@ -0,0 +1 @@\n+x\n\
                 --- old/deleted\t2026-11-29 22:16:37.1 +0000\n+++ new/deleted\t1970-01-01 00:00:00.000000000 +0000\n@@ -1 +0,0 @@\n-gone\n";
        let c = parse(d).expect("parse");
        assert_eq!(
            c[0],
            FileChange {
                path: "new/added".into(),
                op: Op::Add("x\n".into())
            }
        );
        assert_eq!(
            c[1],
            FileChange {
                path: "old/deleted".into(),
                op: Op::Delete
            }
        );
    }

    #[test]
    fn quoted_names_and_short_hunks() {
        assert_eq!(unquote(r#""a/sp ace\tx\303\251""#), "a/sp ace\txé");
        let d = "--- \"a/with space\"\n+++ \"b/with space\"\n@@ -1,2 +1,2 @@\n x\n";
        let e = parse(d).expect_err("short");
        assert!(e.msg.contains("ends early"), "{}", e.msg);
    }
}
