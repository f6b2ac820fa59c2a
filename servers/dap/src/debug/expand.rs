//! Variable paths for `variables` `expand`: `"user"`, `"user.address"`, `"items[0]"`,
//! `"cfg['key']"`, matched against the child names each adapter uses (debugpy quotes dict
//! keys, lldb brackets array items, V8 names indices bare).

/// What is wrong with an `expand` path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("a path does not start with `.`")]
    LeadingDot,
    #[error("`[` without `]` in `{0}`")]
    Unclosed(String),
    #[error("an empty `[]` in `{0}`")]
    EmptyBrackets(String),
    #[error("an empty path")]
    Empty,
}

/// The segments of a path, or what is wrong with it.
pub fn parse_path(path: &str) -> Result<Vec<String>, PathError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = path.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                if cur.is_empty() && out.is_empty() {
                    return Err(PathError::LeadingDot);
                }
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            '[' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                let mut inner = String::new();
                let mut closed = false;
                let quote = chars.peek().copied().filter(|q| *q == '\'' || *q == '"');
                if let Some(q) = quote {
                    chars.next();
                    for c in chars.by_ref() {
                        if c == q {
                            break;
                        }
                        inner.push(c);
                    }
                }
                for c in chars.by_ref() {
                    if c == ']' {
                        closed = true;
                        break;
                    }
                    if quote.is_none() {
                        inner.push(c);
                    }
                }
                if !closed {
                    return Err(PathError::Unclosed(path.to_string()));
                }
                if inner.trim().is_empty() && quote.is_none() {
                    return Err(PathError::EmptyBrackets(path.to_string()));
                }
                out.push(inner.trim().to_string());
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    if out.is_empty() {
        return Err(PathError::Empty);
    }
    Ok(out)
}

/// A child name without an adapter's decoration: `'name'` / `"name"` / `[0]` → name / 0.
pub fn bare(name: &str) -> &str {
    let n = name.trim();
    let n = n
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(n);
    for q in ['\'', '"'] {
        if let Some(inner) = n.strip_prefix(q).and_then(|x| x.strip_suffix(q)) {
            return inner;
        }
    }
    n
}

/// Whether an adapter's child name is the path segment `segment`.
pub fn matches(adapter_name: &str, segment: &str) -> bool {
    adapter_name == segment || bare(adapter_name) == bare(segment)
}

/// The full path of a child under `parent`: `user.name`, `items[0]`, `cfg['a key']`.
pub fn child_path(parent: &str, child: &str) -> String {
    let b = bare(child);
    let identifier = b
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
        && b.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    if identifier {
        format!("{parent}.{b}")
    } else if !b.is_empty() && b.chars().all(|c| c.is_ascii_digit()) {
        format!("{parent}[{b}]")
    } else {
        format!("{parent}[{}]", child.trim())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_split_on_dots_and_brackets() {
        assert_eq!(parse_path("user").unwrap(), ["user"]);
        assert_eq!(
            parse_path("user.address.city").unwrap(),
            ["user", "address", "city"]
        );
        assert_eq!(parse_path("items[0].name").unwrap(), ["items", "0", "name"]);
        assert_eq!(parse_path("cfg['a.b']").unwrap(), ["cfg", "a.b"]);
        assert_eq!(parse_path("cfg[\"k\"][2]").unwrap(), ["cfg", "k", "2"]);
        for bad in ["", ".x", "a[", "a[]"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn adapter_names_match_bare_segments() {
        assert!(matches("'name'", "name"));
        assert!(matches("\"name\"", "name"));
        assert!(matches("[0]", "0"));
        assert!(matches("0", "0"));
        assert!(matches("user", "user"));
        assert!(!matches("username", "user"));
    }

    #[test]
    fn children_are_named_by_their_full_path() {
        assert_eq!(child_path("user", "'name'"), "user.name");
        assert_eq!(child_path("user", "name"), "user.name");
        assert_eq!(child_path("items", "[3]"), "items[3]");
        assert_eq!(child_path("items", "3"), "items[3]");
        assert_eq!(child_path("cfg", "'a key'"), "cfg['a key']");
    }
}
