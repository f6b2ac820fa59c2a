//! Workspace edits: reading the server's `WorkspaceEdit`, showing it, and applying it to
//! the disk all-or-nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::text::{Encoding, Lines, uri_to_path};

/// One text replacement in server coordinates (0-based lines, code units).
#[derive(Debug, Clone, PartialEq)]
pub struct TextEdit {
    pub start: (usize, usize),
    pub end: (usize, usize),
    pub new_text: String,
}

fn pos(v: &Value) -> Option<(usize, usize)> {
    Some((
        usize::try_from(v["line"].as_u64()?).ok()?,
        usize::try_from(v["character"].as_u64()?).ok()?,
    ))
}

fn text_edit(v: &Value) -> Option<TextEdit> {
    Some(TextEdit {
        start: pos(&v["range"]["start"])?,
        end: pos(&v["range"]["end"])?,
        new_text: v["newText"].as_str()?.to_string(),
    })
}

/// Why a workspace edit cannot be read or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("edit targets a non-file URI: {0}")]
    NonFileUri(String),
    /// The text edit, as JSON.
    #[error("malformed text edit: {0}")]
    Malformed(String),
    #[error("documentChanges entry without textDocument.uri")]
    MissingUri,
    /// A resource operation (`kind`: create, rename, delete) on `uri`.
    #[error("the server wants to {kind} a file ({uri}); kitbag-lsp applies text edits only")]
    ResourceOperation { kind: String, uri: String },
    #[error("the server sent overlapping edits")]
    Overlapping,
}

/// The text edits of a `WorkspaceEdit`, per file. Resource operations (create, rename,
/// delete files) are refused: a rename of a symbol must not move files behind the
/// caller's back.
pub fn files_of(edit: &Value) -> Result<BTreeMap<PathBuf, Vec<TextEdit>>, EditError> {
    let mut out: BTreeMap<PathBuf, Vec<TextEdit>> = BTreeMap::new();
    let mut add = |uri: &str, edits: &Value| -> Result<(), EditError> {
        let path = uri_to_path(uri).ok_or_else(|| EditError::NonFileUri(uri.to_string()))?;
        let list = edits.as_array().map(Vec::as_slice).unwrap_or_default();
        let entry = out.entry(path).or_default();
        for e in list {
            entry.push(text_edit(e).ok_or_else(|| EditError::Malformed(e.to_string()))?);
        }
        Ok(())
    };
    if let Some(changes) = edit.get("documentChanges").and_then(Value::as_array) {
        for change in changes {
            if let Some(kind) = change.get("kind").and_then(Value::as_str) {
                return Err(EditError::ResourceOperation {
                    kind: kind.to_string(),
                    uri: change["uri"]
                        .as_str()
                        .or(change["oldUri"].as_str())
                        .unwrap_or("?")
                        .to_string(),
                });
            }
            let uri = change["textDocument"]["uri"]
                .as_str()
                .ok_or(EditError::MissingUri)?;
            add(uri, &change["edits"])?;
        }
    } else if let Some(changes) = edit.get("changes").and_then(Value::as_object) {
        for (uri, edits) in changes {
            add(uri, edits)?;
        }
    }
    out.retain(|_, v| !v.is_empty());
    Ok(out)
}

/// Apply edits (server coordinates) to a text. Overlapping edits are an error.
pub fn apply(lines: &Lines, edits: &[TextEdit], enc: Encoding) -> Result<String, EditError> {
    let mut spans: Vec<(usize, usize, &str)> = edits
        .iter()
        .map(|e| {
            let a = lines.offset(e.start.0, e.start.1, enc);
            let b = lines.offset(e.end.0, e.end.1, enc);
            (a.min(b), a.max(b), e.new_text.as_str())
        })
        .collect();
    spans.sort_by_key(|s| (s.0, s.1));
    if spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(EditError::Overlapping);
    }
    let text = &lines.text;
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (a, b, new) in spans {
        out.push_str(&text[at..a]);
        out.push_str(new);
        at = b;
    }
    out.push_str(&text[at..]);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn range(l1: u64, c1: u64, l2: u64, c2: u64) -> Value {
        json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}})
    }

    #[test]
    fn reads_changes_and_document_changes() {
        let a = json!({"changes": {"file:///tmp/a.py": [{"range": range(0, 0, 0, 1), "newText": "y"}]}});
        let f = files_of(&a).unwrap();
        assert_eq!(f[&PathBuf::from("/tmp/a.py")].len(), 1);
        let b = json!({"documentChanges": [
            {"textDocument": {"uri": "file:///tmp/b.py", "version": 3},
             "edits": [{"range": range(1, 2, 1, 5), "newText": "Zed"}]}]});
        let f = files_of(&b).unwrap();
        assert_eq!(
            f[&PathBuf::from("/tmp/b.py")][0],
            TextEdit {
                start: (1, 2),
                end: (1, 5),
                new_text: "Zed".into()
            }
        );
        let c = json!({"documentChanges": [{"kind": "rename", "oldUri": "file:///a", "newUri": "file:///b"}]});
        assert_eq!(
            files_of(&c).unwrap_err(),
            EditError::ResourceOperation {
                kind: "rename".into(),
                uri: "file:///a".into()
            }
        );
    }

    #[test]
    fn applies_edits_in_any_order_with_unicode() {
        let l = Lines::new("é😀 old = old\nold\n".into());
        // UTF-16: é=1, 😀=2, space=1 → `old` starts at unit 4.
        let edits = vec![
            TextEdit {
                start: (1, 0),
                end: (1, 3),
                new_text: "new".into(),
            },
            TextEdit {
                start: (0, 4),
                end: (0, 7),
                new_text: "new".into(),
            },
            TextEdit {
                start: (0, 10),
                end: (0, 13),
                new_text: "new".into(),
            },
        ];
        assert_eq!(
            apply(&l, &edits, Encoding::Utf16).unwrap(),
            "é😀 new = new\nnew\n"
        );
        let overlapping = vec![edits[1].clone(), edits[1].clone()];
        assert_eq!(
            apply(&l, &overlapping, Encoding::Utf16),
            Err(EditError::Overlapping)
        );
    }
}
