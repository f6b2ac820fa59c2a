//! Argument checks more than one server makes: each names the field and says what is accepted,
//! as a typed `invalid_params` [`ToolError`] (`detail.field` is the field).
//!
//! - numbers: [`range`], [`opt_range`], [`at_least`], [`opt_at_least`];
//! - sizes: [`non_empty`], [`max_bytes`], [`max_chars`], [`max_count`];
//! - choices and names: [`one_of`], [`name`] with [`NameRules`];
//! - [`env`]: environment variables for a child process.

use std::collections::BTreeMap;
use std::fmt::Display;

use serde::Serialize;
use serde_json::json;

use crate::{ToolError, ToolResult};

/// `value` if it lies in `min..=max`; else "`field`: 0 is out of range; accepted: 1 to 100".
pub fn range<T>(field: &str, value: T, min: T, max: T) -> ToolResult<T>
where
    T: PartialOrd + Display + Serialize + Copy,
{
    if value < min || value > max {
        return Err(ToolError::invalid_field(
            field,
            format!("{value} is out of range; accepted: {min} to {max}"),
        )
        .with_detail(json!({ "min": min, "max": max })));
    }
    Ok(value)
}

/// [`range`] of an optional argument: `None` (absent) is accepted as it is.
pub fn opt_range<T>(field: &str, value: Option<T>, min: T, max: T) -> ToolResult<Option<T>>
where
    T: PartialOrd + Display + Serialize + Copy,
{
    value.map(|v| range(field, v, min, max)).transpose()
}

/// `value` if it is `min` or more; else "`field`: -1 is out of range; accepted: 0 or more".
pub fn at_least<T>(field: &str, value: T, min: T) -> ToolResult<T>
where
    T: PartialOrd + Display + Serialize + Copy,
{
    if value < min {
        return Err(ToolError::invalid_field(
            field,
            format!("{value} is out of range; accepted: {min} or more"),
        )
        .with_detail(json!({ "min": min })));
    }
    Ok(value)
}

/// [`at_least`] of an optional argument: `None` (absent) is accepted as it is.
pub fn opt_at_least<T>(field: &str, value: Option<T>, min: T) -> ToolResult<Option<T>>
where
    T: PartialOrd + Display + Serialize + Copy,
{
    value.map(|v| at_least(field, v, min)).transpose()
}

/// A string that must not be empty (callers that ignore blank text pass it trimmed); `hint`
/// says what to give instead ("" for none).
pub fn non_empty(field: &str, s: &str, hint: &str) -> ToolResult<()> {
    if s.is_empty() {
        let message = if hint.is_empty() {
            "must not be empty".to_string()
        } else {
            format!("must not be empty; {hint}")
        };
        return Err(ToolError::invalid_field(field, message));
    }
    Ok(())
}

/// A string of at most `max` bytes: "`field`: is 70000 bytes long; at most 65536 bytes are
/// accepted". Checked before any work on the string, so a huge value costs nothing.
pub fn max_bytes(field: &str, s: &str, max: usize) -> ToolResult<()> {
    too_long(field, s.len(), max, "bytes")
}

/// A string of at most `max` characters (Unicode scalar values).
pub fn max_chars(field: &str, s: &str, max: usize) -> ToolResult<()> {
    // Counting stops past `max`: a 50 MB value is not walked to the end.
    if s.len() <= max || s.chars().take(max + 1).count() <= max {
        return Ok(());
    }
    too_long(field, s.chars().count(), max, "characters")
}

fn too_long(field: &str, length: usize, max: usize, unit: &str) -> ToolResult<()> {
    if length > max {
        return Err(ToolError::invalid_field(
            field,
            format!("is {length} {unit} long; at most {max} {unit} are accepted"),
        )
        .with_detail(json!({ "length": length, "max": max })));
    }
    Ok(())
}

/// A list of at most `max` items: "`field`: 21 tags; at most 20 are accepted".
pub fn max_count(field: &str, count: usize, max: usize, noun: &str) -> ToolResult<()> {
    if count > max {
        return Err(ToolError::invalid_field(
            field,
            format!("{count} {noun}; at most {max} are accepted"),
        )
        .with_detail(json!({ "count": count, "max": max })));
    }
    Ok(())
}

/// `value` if it is one of `accepted`; else "`field`: `x` is not accepted; one of: a, b, c".
pub fn one_of<'a>(field: &str, value: &str, accepted: &[&'a str]) -> ToolResult<&'a str> {
    match accepted.iter().find(|a| **a == value) {
        Some(a) => Ok(a),
        None => Err(not_one_of(field, value, accepted)),
    }
}

/// The refusal of [`one_of`], for a caller that matched the value itself (aliases, a list built
/// at run time).
pub fn not_one_of(field: &str, value: &str, accepted: &[&str]) -> ToolError {
    ToolError::invalid_field(
        field,
        format!("`{value}` is not accepted; one of: {}", accepted.join(", ")),
    )
    .with_detail(json!({ "accepted": accepted }))
}

/// What a name may be made of: checked by [`name`].
#[derive(Debug, Clone, Copy)]
pub struct NameRules {
    /// The longest name in bytes (names are ASCII); the shortest is 1.
    pub max_len: usize,
    /// Whether a byte may start the name.
    pub first: fn(u8) -> bool,
    /// Whether a byte may follow.
    pub rest: fn(u8) -> bool,
    /// The rules in words, for the error: "1–63 lowercase letters, digits and '-', …".
    pub describe: &'static str,
}

impl NameRules {
    pub fn accepts(&self, s: &str) -> bool {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= self.max_len
            && (self.first)(b[0])
            && b[1..].iter().all(|c| (self.rest)(*c))
    }
}

/// An environment variable's name: `^[A-Za-z_][A-Za-z0-9_]*$`.
pub const ENV_NAME: NameRules = NameRules {
    max_len: usize::MAX,
    first: |b| b.is_ascii_alphabetic() || b == b'_',
    rest: |b| b.is_ascii_alphanumeric() || b == b'_',
    describe: "a variable name: letters, digits and '_', not starting with a digit",
};

/// `s` if `rules` accept it; else "`field`: \"Bad\" is not accepted; <rules.describe>".
pub fn name<'s>(field: &str, s: &'s str, rules: &NameRules) -> ToolResult<&'s str> {
    if rules.accepts(s) {
        Ok(s)
    } else {
        Err(ToolError::invalid_field(
            field,
            format!("{s:?} is not accepted; {}", rules.describe),
        ))
    }
}

/// Environment variables: names `^[A-Za-z_][A-Za-z0-9_]*$`, no `KITBAG_*`, no NUL in values.
pub fn env(field: &str, env: &BTreeMap<String, String>) -> ToolResult<Vec<(String, String)>> {
    max_count(field, env.len(), 256, "variables")?;
    let mut out = Vec::new();
    for (k, v) in env {
        name(field, k, &ENV_NAME)?;
        if k.starts_with("KITBAG_") {
            return Err(ToolError::invalid_field(
                field,
                format!("{k}: names starting with KITBAG_ are reserved for kitbag"),
            ));
        }
        if v.contains('\0') {
            return Err(ToolError::invalid_field(
                field,
                format!("{k}: the value contains a NUL byte"),
            ));
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    /// The refusal's message, checked to name the field and be `invalid_params`.
    fn refused<T: std::fmt::Debug>(field: &str, r: ToolResult<T>) -> String {
        let e = r.expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert_eq!(e.detail["field"], field);
        let prefix = format!("{field}: ");
        assert!(e.message.starts_with(&prefix), "{}", e.message);
        e.message[prefix.len()..].to_string()
    }

    #[test]
    fn ranges() {
        assert_eq!(range("limit", 1, 1, 100).ok(), Some(1));
        assert_eq!(range("limit", 100, 1, 100).ok(), Some(100));
        assert_eq!(
            refused("limit", range("limit", 0i64, 1, 100)),
            "0 is out of range; accepted: 1 to 100"
        );
        assert_eq!(
            refused("port", range("port", 70000u32, 1, 65535)),
            "70000 is out of range; accepted: 1 to 65535"
        );
        let e = range("cpus", 9.5, 0.1, 8.0).expect_err("too many");
        assert_eq!(e.detail["min"], 0.1);
        assert_eq!(e.detail["max"], 8.0);
        assert_eq!(opt_range("limit", None, 1, 100).ok(), Some(None));
        assert_eq!(opt_range("limit", Some(5), 1, 100).ok(), Some(Some(5)));
        assert!(opt_range("limit", Some(101), 1, 100).is_err());
    }

    #[test]
    fn lower_bounds() {
        assert_eq!(at_least("offset", 0, 0).ok(), Some(0));
        assert_eq!(
            refused("offset", at_least("offset", -1i64, 0)),
            "-1 is out of range; accepted: 0 or more"
        );
        assert_eq!(opt_at_least("max_depth", None, 1).ok(), Some(None));
        assert!(opt_at_least("max_depth", Some(0), 1).is_err());
    }

    #[test]
    fn lengths() {
        assert!(non_empty("pattern", "x", "").is_ok());
        assert_eq!(
            refused("pattern", non_empty("pattern", "", "")),
            "must not be empty"
        );
        assert_eq!(
            refused("title", non_empty("title", "", "give a title")),
            "must not be empty; give a title"
        );
        assert!(max_bytes("query", "abc", 3).is_ok());
        assert_eq!(
            refused("query", max_bytes("query", "abcd", 3)),
            "is 4 bytes long; at most 3 bytes are accepted"
        );
        // Characters, not bytes: four two-byte letters are four characters.
        assert!(max_chars("title", "éééé", 4).is_ok());
        let e = max_chars("title", "ééééé", 4).expect_err("five");
        assert_eq!(
            e.message,
            "title: is 5 characters long; at most 4 characters are accepted"
        );
        assert_eq!(e.detail["length"], 5);
        assert_eq!(e.detail["max"], 4);
        assert!(max_count("tags", 20, 20, "tags").is_ok());
        assert_eq!(
            refused("tags", max_count("tags", 21, 20, "tags")),
            "21 tags; at most 20 are accepted"
        );
    }

    #[test]
    fn choices() {
        assert_eq!(one_of("mode", "b", &["a", "b"]).ok(), Some("b"));
        let e = one_of("mode", "c", &["a", "b"]).expect_err("c");
        assert_eq!(e.message, "mode: `c` is not accepted; one of: a, b");
        assert_eq!(e.detail["accepted"], json!(["a", "b"]));
    }

    #[test]
    fn names() {
        const LOWER: NameRules = NameRules {
            max_len: 3,
            first: |b| b.is_ascii_lowercase(),
            rest: |b| b.is_ascii_lowercase() || b == b'-',
            describe: "1–3 of a-z and '-', starting with a letter",
        };
        assert_eq!(name("name", "a-b", &LOWER).ok(), Some("a-b"));
        for bad in ["", "-a", "abcd", "aB", "é"] {
            assert_eq!(
                refused("name", name("name", bad, &LOWER)),
                format!("{bad:?} is not accepted; 1–3 of a-z and '-', starting with a letter")
            );
        }
    }

    #[test]
    fn env_names() {
        let mut m = BTreeMap::new();
        m.insert("GOOD_1".to_string(), "v".to_string());
        m.insert("_x".to_string(), "v".to_string());
        assert!(env("env", &m).is_ok());
        for bad in ["1X", "A-B", "KITBAG_INSTANCE_ID", ""] {
            let mut m = BTreeMap::new();
            m.insert(bad.to_string(), "v".to_string());
            refused("env", env("env", &m));
        }
        let mut m = BTreeMap::new();
        m.insert("A".to_string(), "a\0b".to_string());
        assert_eq!(
            refused("env", env("env", &m)),
            "A: the value contains a NUL byte"
        );
        let many: BTreeMap<String, String> =
            (0..257).map(|i| (format!("V{i}"), String::new())).collect();
        assert_eq!(
            refused("env", env("env", &many)),
            "257 variables; at most 256 are accepted"
        );
    }
}
