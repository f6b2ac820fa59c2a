//! Applying context hunks to a file's text, as `patch` does but stricter about where.
//!
//! Each hunk's old lines (context and removed) are looked for from where the previous hunk
//! ended: exactly first, then ignoring trailing whitespace, then ignoring whitespace at both
//! ends. Among the places that match at the strictest level, the one nearest the line the
//! hunk names wins (unified diffs), else the first after its `@@` anchors (apply_patch). A
//! context line keeps the file's own text, so a loose match never rewrites what it did not
//! remove. A hunk found nowhere fails the whole patch with the closest place and how it
//! differs.

use super::model::{Hunk, Kind};

/// Where a hunk landed: for the result, when it is not exactly where the patch said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// 1-based, among the file's hunks.
    pub hunk: usize,
    /// 1-based line of the text it applied to where its old lines started (or after which it
    /// inserted).
    pub line: usize,
    /// Lines away from where the patch put it (unified diffs and inserts; `None` when the
    /// patch named no line).
    pub offset: Option<i64>,
    /// Matched only when whitespace was ignored.
    pub loose: bool,
}

/// Why a hunk did not apply, for the error.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    pub hunk: usize,
    pub message: String,
    /// The closest place: its 1-based line and how many old lines are equal there (ignoring
    /// whitespace at both ends).
    pub closest: Option<(usize, usize)>,
}

/// Why a hunk has no place in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPlaced {
    Anchor {
        anchor: String,
        after: usize,
    },
    InsertPastEnd {
        at: usize,
        lines: usize,
    },
    InsertBeforePrevious {
        at: usize,
        cursor: usize,
    },
    Lines {
        count: usize,
        context: usize,
        removed: usize,
        after: usize,
    },
}

impl std::fmt::Display for NotPlaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotPlaced::Anchor { anchor, after } => {
                write!(
                    f,
                    "its `@@ {anchor}` line is not in the file after line {after}"
                )
            }
            NotPlaced::InsertPastEnd { at, lines } => write!(
                f,
                "it inserts after line {at}, past the end of the file ({lines} lines)"
            ),
            NotPlaced::InsertBeforePrevious { at, cursor } => write!(
                f,
                "it inserts after line {at}, inside or before the previous hunk (which ended at line {cursor})"
            ),
            NotPlaced::Lines {
                count,
                context,
                removed,
                after,
            } => {
                write!(
                    f,
                    "its {count} line(s) ({context} context, {removed} removed) are not in the file"
                )?;
                if *after > 0 {
                    write!(f, " after line {after}")?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Exact,
    TrailingSpace,
    Whitespace,
}

fn same(level: Level, file: &str, patch: &str) -> bool {
    match level {
        Level::Exact => file == patch,
        Level::TrailingSpace => file.trim_end() == patch.trim_end(),
        Level::Whitespace => file.trim() == patch.trim(),
    }
}

/// `text` (LF line ends) with `hunks` applied, and where each landed.
pub fn apply(text: &str, hunks: &[Hunk]) -> Result<(String, Vec<Placed>), Miss> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let lines: Vec<&str> = if text.is_empty() {
        Vec::new()
    } else {
        body.split('\n').collect()
    };
    // An empty file counts as ending in a newline: lines added to it get one.
    let mut final_newline = text.is_empty() || text.ends_with('\n');
    let mut out: Vec<&str> = Vec::with_capacity(lines.len() + 16);
    let mut placed = Vec::new();
    let mut cursor = 0usize;
    for (i, h) in hunks.iter().enumerate() {
        let n = i + 1;
        let old: Vec<&str> = h.old_lines().collect();
        let (pos, offset, loose) = locate(&lines, cursor, h, &old).map_err(|why| Miss {
            hunk: n,
            closest: closest(&lines, &old),
            message: why.to_string(),
        })?;
        out.extend_from_slice(&lines[cursor..pos]);
        let mut k = pos;
        for (kind, l) in &h.lines {
            match kind {
                Kind::Context => {
                    out.push(lines[k]);
                    k += 1;
                }
                Kind::Remove => k += 1,
                Kind::Add => out.push(l),
            }
        }
        cursor = k;
        if cursor == lines.len() {
            if h.new_no_newline {
                final_newline = false;
            } else if h.old_no_newline || h.at_end {
                final_newline = true;
            }
        }
        if offset != Some(0) || loose {
            placed.push(Placed {
                hunk: n,
                line: if old.is_empty() { pos } else { pos + 1 },
                offset,
                loose,
            });
        }
    }
    out.extend_from_slice(&lines[cursor..]);
    let mut s = out.join("\n");
    if final_newline && !out.is_empty() {
        s.push('\n');
    }
    Ok((s, placed))
}

/// Where hunk `h` (old lines `old`) starts in `lines`, at or after `cursor`: the index, how
/// far it is from where the patch put it, and whether whitespace had to be ignored.
fn locate(
    lines: &[&str],
    cursor: usize,
    h: &Hunk,
    old: &[&str],
) -> Result<(usize, Option<i64>, bool), NotPlaced> {
    let mut from = cursor;
    for anchor in &h.anchors {
        let found = [Level::Exact, Level::TrailingSpace, Level::Whitespace]
            .iter()
            .find_map(|&lv| (from..lines.len()).find(|&j| same(lv, lines[j], anchor)));
        match found {
            Some(j) => from = j + 1,
            None => {
                return Err(NotPlaced::Anchor {
                    anchor: anchor.clone(),
                    after: from,
                });
            }
        }
    }
    if old.is_empty() {
        // Pure insertion: after the line the patch names, else where the anchors lead, else
        // at the end.
        let at = match h.old_start {
            Some(line) => line,
            None if !h.anchors.is_empty() => from,
            None => lines.len(),
        };
        if at > lines.len() {
            return Err(NotPlaced::InsertPastEnd {
                at,
                lines: lines.len(),
            });
        }
        if at < cursor {
            return Err(NotPlaced::InsertBeforePrevious { at, cursor });
        }
        return Ok((at, h.old_start.map(|_| 0), false));
    }
    let expected = h.old_start.map(|s| s.saturating_sub(1));
    if old.len() <= lines.len() {
        let last = lines.len() - old.len();
        for level in [Level::Exact, Level::TrailingSpace, Level::Whitespace] {
            let fits = |p: usize| {
                old.iter()
                    .enumerate()
                    .all(|(k, o)| same(level, lines[p + k], o))
            };
            let mut found: Vec<usize> = (from..=last).filter(|&p| fits(p)).collect();
            if h.at_end && found.contains(&last) {
                found = vec![last];
            }
            let best = match expected {
                Some(e) => found.iter().copied().min_by_key(|&p| (p.abs_diff(e), p)),
                None => found.first().copied(),
            };
            if let Some(p) = best {
                let offset = expected.map(|e| p as i64 - e as i64);
                return Ok((p, offset, level != Level::Exact));
            }
        }
    }
    let (context, removed) = h.lines.iter().fold((0, 0), |(c, r), (k, _)| match k {
        Kind::Context => (c + 1, r),
        Kind::Remove => (c, r + 1),
        Kind::Add => (c, r),
    });
    Err(NotPlaced::Lines {
        count: old.len(),
        context,
        removed,
        after: from,
    })
}

/// The place where most of `old` is found (lines equal but for whitespace at both ends):
/// 1-based line and the count; `None` when nothing is equal or the search would be too long.
fn closest(lines: &[&str], old: &[&str]) -> Option<(usize, usize)> {
    if old.is_empty() || lines.len().saturating_mul(old.len()) > 20_000_000 {
        return None;
    }
    let span = old.len().min(lines.len());
    let mut best: Option<(usize, usize)> = None;
    for p in 0..=lines.len() - span {
        let equal = (0..span)
            .filter(|&k| lines[p + k].trim() == old[k].trim())
            .count();
        if equal > 0 && best.is_none_or(|(_, b)| equal > b) {
            best = Some((p + 1, equal));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hunk(old_start: Option<usize>, spec: &str) -> Hunk {
        Hunk {
            old_start,
            lines: spec
                .lines()
                .map(|l| {
                    let kind = match &l[..1] {
                        " " => Kind::Context,
                        "-" => Kind::Remove,
                        _ => Kind::Add,
                    };
                    (kind, l[1..].to_string())
                })
                .collect(),
            ..Hunk::default()
        }
    }

    #[test]
    fn an_exact_hunk_applies_where_it_says() {
        let (t, placed) = apply("a\nb\nc\n", &[hunk(Some(1), " a\n-b\n+B\n c")]).expect("apply");
        assert_eq!(t, "a\nB\nc\n");
        assert!(placed.is_empty());
    }

    #[test]
    fn moved_code_is_found_and_the_offset_reported() {
        let text = "x\nx\nx\na\nb\nc\n";
        let (t, placed) = apply(text, &[hunk(Some(1), " a\n-b\n+B\n c")]).expect("apply");
        assert_eq!(t, "x\nx\nx\na\nB\nc\n");
        assert_eq!(
            placed,
            [Placed {
                hunk: 1,
                line: 4,
                offset: Some(3),
                loose: false
            }]
        );
    }

    #[test]
    fn whitespace_is_ignored_last_and_context_keeps_the_files_text() {
        let text = "fn f() {\n    let x = 1;  \n}\n";
        let (t, placed) = apply(
            text,
            &[hunk(None, " fn f() {\n-  let x = 1;\n+    let x = 2;\n }")],
        )
        .expect("apply");
        assert_eq!(t, "fn f() {\n    let x = 2;\n}\n");
        assert!(placed[0].loose);
    }

    #[test]
    fn the_nearest_of_several_matches_wins() {
        let text = "a\nb\na\nb\na\nb\n";
        let (t, _) = apply(text, &[hunk(Some(5), "-a\n+A\n b")]).expect("apply");
        assert_eq!(t, "a\nb\na\nb\nA\nb\n");
    }

    #[test]
    fn anchors_lead_to_the_right_function() {
        let text = "fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n";
        let mut h = hunk(None, "-    x();\n+    y();");
        h.anchors = vec!["fn b() {".into()];
        let (t, _) = apply(text, &[h]).expect("apply");
        assert_eq!(t, "fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n");
    }

    #[test]
    fn final_newline_follows_the_markers() {
        let mut h = hunk(Some(1), "-a\n+b");
        h.new_no_newline = true;
        assert_eq!(apply("a\n", &[h]).expect("apply").0, "b");
        let mut h = hunk(Some(1), "-a\n+b");
        h.old_no_newline = true;
        assert_eq!(apply("a", &[h]).expect("apply").0, "b\n");
        assert_eq!(
            apply("", &[hunk(Some(0), "+new")]).expect("apply").0,
            "new\n"
        );
    }

    #[test]
    fn a_missing_hunk_points_at_the_closest_place() {
        let text = "one\ntwo\nthree\nfour\n";
        let miss = apply(text, &[hunk(Some(1), " two\n-THREE\n four")]).expect_err("miss");
        assert_eq!(miss.hunk, 1);
        assert_eq!(miss.closest, Some((2, 2)));
        assert!(
            miss.message.contains("2 context, 1 removed"),
            "{}",
            miss.message
        );
    }

    #[test]
    fn hunks_never_go_back_over_the_previous_one() {
        let text = "a\nb\nc\n";
        let miss =
            apply(text, &[hunk(Some(2), "-b\n+B"), hunk(Some(1), "-a\n+A")]).expect_err("miss");
        assert_eq!(miss.hunk, 2);
    }
}
