//! Markdown with frontmatter, as agent packs (seed 002) and skills (seed 001) are written:
//!
//! ```md
//! ---
//! name: code.change
//! temperature: 0.1
//! tools:
//!   - file_*
//!   - search_grep
//! ---
//! The prompt.
//! ```
//!
//! The subset of YAML these files use: `key: value` scalars (quotes optional) and lists, block
//! (`- item`) or inline (`[a, b]`). Anything else is an error naming the line.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(String),
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub fields: BTreeMap<String, Value>,
    pub body: String,
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_owned();
        }
    }
    s.to_owned()
}

/// Why a skill's or a pack's file was refused: its frontmatter's syntax, or a field's value.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    #[error("line {line}: a list item outside a list")]
    ItemOutsideList { line: usize },
    #[error("line {line}: expected `key: value`, found {found:?}")]
    NotKeyValue { line: usize, found: String },
    #[error("line {line}: {key:?} is not a key")]
    BadKey { line: usize, key: String },
    #[error("line {line}: `{key}` is given twice")]
    Duplicate { line: usize, key: String },
    #[error("the frontmatter has no closing `---`")]
    Unclosed,
    #[error("`{key}` must be a single value, not a list")]
    NotScalar { key: String },
    /// `value` as the file gave it; `accepted` what the field takes.
    #[error("`{key}`: {value} is not {accepted}")]
    Invalid {
        key: String,
        value: String,
        accepted: String,
    },
    /// `why`: what the field is for, so that the fix is obvious.
    #[error("`{key}` is missing{why}")]
    Missing {
        key: &'static str,
        why: &'static str,
    },
    #[error("unknown keys {unknown}; {accepted}")]
    UnknownKeys { unknown: String, accepted: String },
}

/// Parse a document. A file without frontmatter is all body.
pub fn parse(text: &str) -> Result<Document, DocError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_end() == "---" => {}
        _ => {
            return Ok(Document {
                fields: BTreeMap::new(),
                body: text.trim().to_owned(),
            });
        }
    }
    let mut fields = BTreeMap::new();
    let mut open_list: Option<String> = None;
    let mut body_start = None;
    for (i, line) in lines.by_ref() {
        let n = i + 1;
        if line.trim_end() == "---" {
            body_start = Some(i + 1);
            break;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(item) = trimmed
            .strip_prefix("- ")
            .or(trimmed.strip_prefix("-").filter(|r| r.is_empty()))
        {
            let Some(key) = &open_list else {
                return Err(DocError::ItemOutsideList { line: n });
            };
            if let Some(Value::List(items)) = fields.get_mut(key) {
                items.push(unquote(item));
            }
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(DocError::NotKeyValue {
                line: n,
                found: trimmed.to_owned(),
            });
        };
        let key = key.trim().to_owned();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(DocError::BadKey { line: n, key });
        }
        let value = value.trim();
        open_list = None;
        let parsed = if value.is_empty() {
            open_list = Some(key.clone());
            Value::List(Vec::new())
        } else if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Value::List(
                inner
                    .split(',')
                    .map(unquote)
                    .filter(|s| !s.is_empty())
                    .collect(),
            )
        } else {
            Value::Scalar(unquote(value))
        };
        if fields.insert(key.clone(), parsed).is_some() {
            return Err(DocError::Duplicate { line: n, key });
        }
    }
    let Some(start) = body_start else {
        return Err(DocError::Unclosed);
    };
    let body: Vec<&str> = text.lines().skip(start).collect();
    Ok(Document {
        fields,
        body: body.join("\n").trim().to_owned(),
    })
}

impl Document {
    pub fn scalar(&self, key: &str) -> Result<Option<&str>, DocError> {
        match self.fields.get(key) {
            None => Ok(None),
            Some(Value::Scalar(s)) => Ok(Some(s)),
            Some(Value::List(_)) => Err(DocError::NotScalar {
                key: key.to_owned(),
            }),
        }
    }

    pub fn list(&self, key: &str) -> Result<Option<Vec<String>>, DocError> {
        match self.fields.get(key) {
            None => Ok(None),
            Some(Value::List(l)) => Ok(Some(l.clone())),
            // `tools: file_read` is a list of one.
            Some(Value::Scalar(s)) => Ok(Some(vec![s.clone()])),
        }
    }

    pub fn number<T: std::str::FromStr>(
        &self,
        key: &str,
        what: &str,
    ) -> Result<Option<T>, DocError> {
        match self.scalar(key)? {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| DocError::Invalid {
                key: key.to_owned(),
                value: format!("{s:?}"),
                accepted: what.to_owned(),
            }),
        }
    }

    /// Keys not in `known`, for an error that names them.
    pub fn unknown_keys(&self, known: &[&str]) -> Vec<String> {
        self.fields
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_pack_parses() {
        let d = parse("---\nname: code.change\nmodel: mlx\ntemperature: 0.1\ntools:\n  - fs.read\n  - \"fs.list\"\nmax_tool_calls: 3\n---\nYou are in `code.change` mode.\n\nKeep patches small.\n").expect("ok");
        assert_eq!(d.scalar("name").unwrap(), Some("code.change"));
        assert_eq!(
            d.list("tools").unwrap(),
            Some(vec!["fs.read".into(), "fs.list".into()])
        );
        assert_eq!(
            d.number::<u32>("max_tool_calls", "a count").unwrap(),
            Some(3)
        );
        assert_eq!(
            d.number::<f64>("temperature", "a number").unwrap(),
            Some(0.1)
        );
        assert_eq!(
            d.body,
            "You are in `code.change` mode.\n\nKeep patches small."
        );
    }

    #[test]
    fn inline_lists_and_plain_files() {
        let d = parse("---\ntools: [file_read, 'search_*']\n---\nx").expect("ok");
        assert_eq!(
            d.list("tools").unwrap(),
            Some(vec!["file_read".into(), "search_*".into()])
        );
        let d = parse("just a prompt\n").expect("ok");
        assert!(d.fields.is_empty());
        assert_eq!(d.body, "just a prompt");
    }

    #[test]
    fn mistakes_name_the_line() {
        assert!(
            parse("---\nname x\n---\n")
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        assert!(
            parse("---\n- a\n---\n")
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        assert!(
            parse("---\nname: a\nname: b\n---\n")
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(
            parse("---\nname: a\n")
                .unwrap_err()
                .to_string()
                .contains("closing")
        );
        let d = parse("---\nmax_tool_calls: many\n---\n").expect("ok");
        assert!(
            d.number::<u32>("max_tool_calls", "a count")
                .unwrap_err()
                .to_string()
                .contains("\"many\"")
        );
    }
}
