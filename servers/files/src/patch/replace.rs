//! Claude's text-editor commands as a patch: a JSON object or array of them, in order —
//! `{"command": "str_replace", "path", "old_str", "new_str", "replace_all"?}`,
//! `{"command": "create", "path", "file_text"}`, `{"command": "insert", "path",
//! "insert_line", "new_str"}` (after line N; 0 is the top). `command` may be left out when the
//! fields say it; `old_string`/`new_string`/`content`/`insert_text` are accepted too.
//! Commands on one file apply in order, each to what the one before left.

use serde::Deserialize;
use serde_json::Value;

use super::ParseError;
use super::model::{Edits, FileChange, Hunk, Kind, Op, Replace};

/// Whether `text` is JSON text (an object or an array).
pub fn detect(text: &str) -> bool {
    matches!(text.trim_start().as_bytes().first(), Some(b'{' | b'['))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Command {
    #[serde(default)]
    command: Option<String>,
    path: String,
    #[serde(default, alias = "old_string")]
    old_str: Option<String>,
    #[serde(default, alias = "new_string", alias = "insert_text")]
    new_str: Option<String>,
    #[serde(default)]
    replace_all: Option<bool>,
    #[serde(default, alias = "content")]
    file_text: Option<String>,
    #[serde(default)]
    insert_line: Option<u64>,
}

pub fn parse(text: &str) -> Result<Vec<FileChange>, ParseError> {
    let at = |i: usize, msg: String| ParseError { line: i + 1, msg };
    let value: Value = serde_json::from_str(text).map_err(|e| ParseError {
        line: e.line(),
        msg: format!("not valid JSON: {e}"),
    })?;
    let items = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    if items.is_empty() {
        return Err(at(0, "the command list is empty".into()));
    }
    let mut out: Vec<FileChange> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let c: Command =
            serde_json::from_value(item).map_err(|e| at(i, format!("command {}: {e}", i + 1)))?;
        let kind = c.command.clone().unwrap_or_else(|| {
            if c.file_text.is_some() {
                "create".into()
            } else if c.insert_line.is_some() {
                "insert".into()
            } else {
                "str_replace".into()
            }
        });
        let op = match kind.as_str() {
            "create" => {
                let text = c.file_text.ok_or_else(|| {
                    at(i, format!("command {}: `create` needs `file_text`", i + 1))
                })?;
                if out.iter().any(|f| f.path == c.path) {
                    return Err(at(
                        i,
                        format!(
                            "command {}: {} is created after other commands on it",
                            i + 1,
                            c.path
                        ),
                    ));
                }
                out.push(FileChange {
                    path: c.path,
                    op: Op::Add(text),
                });
                continue;
            }
            "str_replace" => {
                let old = c.old_str.ok_or_else(|| {
                    at(
                        i,
                        format!("command {}: `str_replace` needs `old_str`", i + 1),
                    )
                })?;
                Edits::Replace(Replace {
                    old,
                    new: c.new_str.unwrap_or_default(),
                    all: c.replace_all.unwrap_or(false),
                })
            }
            "insert" => {
                let line = c.insert_line.ok_or_else(|| {
                    at(
                        i,
                        format!("command {}: `insert` needs `insert_line`", i + 1),
                    )
                })?;
                let new = c
                    .new_str
                    .ok_or_else(|| at(i, format!("command {}: `insert` needs `new_str`", i + 1)))?;
                Edits::Hunks(vec![Hunk {
                    old_start: Some(line as usize),
                    lines: new.lines().map(|l| (Kind::Add, l.to_string())).collect(),
                    ..Hunk::default()
                }])
            }
            other => {
                return Err(at(
                    i,
                    format!(
                        "command {}: `{other}` is not one of str_replace, create, insert",
                        i + 1
                    ),
                ));
            }
        };
        match out.iter_mut().find(|f| f.path == c.path) {
            Some(FileChange {
                op: Op::Update { edits, .. },
                ..
            }) => edits.push(op),
            Some(_) => {
                return Err(at(
                    i,
                    format!(
                        "command {}: {} is created in this patch; give its whole text in `file_text`",
                        i + 1,
                        c.path
                    ),
                ));
            }
            None => out.push(FileChange {
                path: c.path,
                op: Op::Update {
                    move_to: None,
                    edits: vec![op],
                },
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_on_one_file_group_in_order() {
        let p = r#"[{"command":"str_replace","path":"a.py","old_str":"x = 1","new_str":"x = 2"},
                    {"path":"b.py","file_text":"print()\n"},
                    {"path":"a.py","old_string":"y","new_string":"z","replace_all":true},
                    {"command":"insert","path":"a.py","insert_line":0,"new_str":"import os\n"}]"#;
        assert!(detect(p));
        let c = parse(p).expect("parse");
        assert_eq!(c.len(), 2);
        let Op::Update { edits, .. } = &c[0].op else {
            panic!()
        };
        assert_eq!(edits.len(), 3);
        assert_eq!(c[1].op, Op::Add("print()\n".into()));
    }

    #[test]
    fn a_bad_command_is_named() {
        let e = parse(r#"[{"path":"a","old_str":"x"},{"command":"view","path":"a"}]"#)
            .expect_err("bad");
        assert!(e.msg.starts_with("command 2:"), "{}", e.msg);
        let e = parse(r#"{"path":"a","old_str":"x","bogus":1}"#).expect_err("unknown");
        assert!(e.msg.contains("bogus"), "{}", e.msg);
    }
}
