//! Codex's apply_patch envelope:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path        then `+line` lines
//! *** Delete File: path
//! *** Update File: path     then an optional `*** Move to: path`, then hunks:
//! @@ [a line the hunk follows]
//!  context / -removed / +added lines, and `*** End of File` when the hunk ends the file
//! *** End Patch
//! ```
//!
//! As lenient as Codex itself where models slip: a heredoc wrapper (`<<'EOF' … EOF`) and
//! surrounding blank lines are dropped, the first hunk of a file may leave out its `@@`, and
//! an empty line inside a hunk is an empty context line.

use super::ParseError;
use super::model::{Edits, FileChange, Hunk, Kind, Op};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// Whether `text` looks like an apply_patch envelope.
pub fn detect(text: &str) -> bool {
    body_lines(text).first().is_some_and(|l| l.trim() == BEGIN)
}

/// The envelope's lines, heredoc wrapper and surrounding blank lines dropped.
fn body_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let start = lines.iter().take_while(|l| l.trim().is_empty()).count();
    let mut lines = lines.split_off(start);
    // `apply_patch <<'EOF'` … `EOF`, as models sometimes send the shell form.
    if lines
        .first()
        .is_some_and(|l| l.contains("<<") && !l.trim_start().starts_with("***"))
    {
        let delimiter = lines[0]
            .rsplit("<<")
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches(['\'', '"'])
            .to_string();
        lines.remove(0);
        if lines.last().is_some_and(|l| l.trim() == delimiter) {
            lines.pop();
        }
    }
    lines
}

pub fn parse(text: &str) -> Result<Vec<FileChange>, ParseError> {
    let lines = body_lines(text);
    let err = |line: usize, msg: String| ParseError {
        line: line + 1,
        msg,
    };
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(err(0, format!("the patch must start with `{BEGIN}`")));
    }
    if lines.last().map(|l| l.trim()) != Some(END) {
        return Err(err(
            lines.len().saturating_sub(1),
            format!("the patch must end with `{END}`"),
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut changes = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        let at = i + 1; // index in `lines`
        if let Some(path) = line.strip_prefix(ADD) {
            let mut text = String::new();
            i += 1;
            while i < body.len() && !body[i].starts_with("*** ") {
                let Some(content) = body[i].strip_prefix('+') else {
                    return Err(err(
                        i + 1,
                        format!("a line of an added file must start with `+`: {:?}", body[i]),
                    ));
                };
                text.push_str(content);
                text.push('\n');
                i += 1;
            }
            changes.push(FileChange {
                path: path.trim().to_string(),
                op: Op::Add(text),
            });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            changes.push(FileChange {
                path: path.trim().to_string(),
                op: Op::Delete,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            i += 1;
            let mut move_to = None;
            if let Some(to) = body.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                move_to = Some(to.trim().to_string());
                i += 1;
            }
            let (hunks, next) = hunks(body, i).map_err(|(l, m)| err(l + 1, m))?;
            i = next;
            if hunks.is_empty() && move_to.is_none() {
                return Err(err(at, format!("`{UPDATE}{}` has no hunk", path.trim())));
            }
            let edits = if hunks.is_empty() {
                Vec::new()
            } else {
                vec![Edits::Hunks(hunks)]
            };
            changes.push(FileChange {
                path: path.trim().to_string(),
                op: Op::Update { move_to, edits },
            });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(err(
                at,
                format!(
                    "expected `{ADD}`, `{DELETE}` or `{UPDATE}` followed by a path, found {line:?}"
                ),
            ));
        }
    }
    if changes.is_empty() {
        return Err(err(0, "the patch changes no file".into()));
    }
    Ok(changes)
}

/// The hunks of an Update section from `body[i]` on, and the index after them.
fn hunks(body: &[&str], mut i: usize) -> Result<(Vec<Hunk>, usize), (usize, String)> {
    let mut out: Vec<Hunk> = Vec::new();
    let mut cur: Option<Hunk> = None;
    while i < body.len() {
        let line = body[i];
        if let Some(rest) = line.strip_prefix("@@") {
            let anchor = rest.trim();
            // A `@@` right after another (nothing in between) narrows the same hunk.
            match &mut cur {
                Some(h) if h.lines.is_empty() => {
                    if !anchor.is_empty() {
                        h.anchors.push(anchor.to_string());
                    }
                }
                _ => {
                    out.extend(cur.take());
                    cur = Some(Hunk {
                        anchors: (!anchor.is_empty())
                            .then(|| anchor.to_string())
                            .into_iter()
                            .collect(),
                        ..Hunk::default()
                    });
                }
            }
        } else if line.trim_end() == END_OF_FILE {
            let Some(h) = &mut cur else {
                return Err((i, format!("`{END_OF_FILE}` outside a hunk")));
            };
            h.at_end = true;
        } else if line.starts_with("*** ") {
            break;
        } else {
            let (kind, text) = match line.chars().next() {
                Some(' ') => (Kind::Context, &line[1..]),
                Some('-') => (Kind::Remove, &line[1..]),
                Some('+') => (Kind::Add, &line[1..]),
                None => (Kind::Context, ""),
                Some(_) => {
                    return Err((
                        i,
                        format!(
                            "a hunk line must start with ' ', '-' or '+' (or be `@@`): {line:?}"
                        ),
                    ));
                }
            };
            cur.get_or_insert_with(Hunk::default)
                .lines
                .push((kind, text.to_string()));
        }
        i += 1;
    }
    out.extend(cur);
    if let Some(h) = out.iter().position(|h| h.lines.is_empty()) {
        return Err((i.saturating_sub(1), format!("hunk {} has no lines", h + 1)));
    }
    Ok((out, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_kind_parses() {
        let p = "*** Begin Patch\n*** Add File: new.txt\n+a\n+b\n*** Delete File: old.txt\n\
                 *** Update File: src/x.rs\n*** Move to: src/y.rs\n@@ impl A {\n@@ fn f() {\n \
                 keep\n-gone\n+came\n@@\n x\n\n+tail\n*** End of File\n*** End Patch\n";
        let c = parse(p).expect("parse");
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].op, Op::Add("a\nb\n".into()));
        assert_eq!(c[1].op, Op::Delete);
        let Op::Update { move_to, edits } = &c[2].op else {
            panic!("update")
        };
        assert_eq!(move_to.as_deref(), Some("src/y.rs"));
        let [Edits::Hunks(h)] = edits.as_slice() else {
            panic!("hunks")
        };
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].anchors, ["impl A {", "fn f() {"]);
        assert_eq!(h[0].lines.len(), 3);
        assert_eq!(h[1].lines[1], (Kind::Context, String::new()));
        assert!(h[1].at_end && !h[0].at_end);
    }

    #[test]
    fn a_heredoc_wrapper_and_a_missing_first_at_are_accepted() {
        let p = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a\n x\n-y\n+z\n*** End Patch\nEOF\n";
        assert!(detect(p));
        let c = parse(p).expect("parse");
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn malformed_envelopes_name_the_line() {
        let e = parse("*** Begin Patch\n*** Frobnicate: a\n*** End Patch").expect_err("bad");
        assert_eq!(e.line, 2);
        let e = parse("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch").expect_err("bad");
        assert_eq!(e.line, 3);
        assert!(parse("*** Begin Patch\n*** Add File: a\n+x\n").is_err());
        assert!(parse("*** Begin Patch\n*** End Patch").is_err());
    }
}
