//! Argument checks shared by the tools: each names the field and what is accepted.

use std::collections::BTreeMap;

use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::json;

/// Instance names: `^[a-z0-9][a-z0-9-]{0,62}$`.
pub fn name(field: &str, v: &str) -> ToolResult<()> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ToolError::invalid_field(
            field,
            format!(
                "{v:?} is not a valid name: 1–63 characters, lowercase letters, digits and '-', starting with a letter or digit"
            ),
        ))
    }
}

pub use kitbag_shared::args::env;

/// An argv: non-empty, no NUL bytes, bounded.
pub fn argv(field: &str, argv: &[String]) -> ToolResult<()> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(ToolError::invalid_field(
            field,
            "must be a non-empty array of strings, the program first (use [\"sh\",\"-c\",\"…\"] for shell syntax)",
        ));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ToolError::invalid_field(
            field,
            "an argument contains a NUL byte",
        ));
    }
    let total: usize = argv.iter().map(String::len).sum();
    if total > 256 * 1024 || argv.len() > 4096 {
        return Err(ToolError::invalid_field(
            field,
            "too long: at most 4096 arguments and 256 KB",
        ));
    }
    Ok(())
}

/// An absolute guest path without NUL bytes.
pub fn guest_path(field: &str, p: &str) -> ToolResult<()> {
    if !p.starts_with('/') || p.contains('\0') || p.len() > 4096 {
        return Err(ToolError::invalid_field(
            field,
            format!("{p:?} must be an absolute path inside the instance, e.g. /work/file.txt"),
        ));
    }
    Ok(())
}

/// Labels: at most 16, keys `^[a-z0-9./-]{1,63}$`, values at most 256 bytes.
pub fn labels(field: &str, labels: &BTreeMap<String, String>) -> ToolResult<()> {
    if labels.len() > 16 {
        return Err(ToolError::invalid_field(field, "at most 16 labels"));
    }
    for (k, v) in labels {
        let ok = !k.is_empty()
            && k.len() <= 63
            && k.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"./-".contains(&b));
        if !ok {
            return Err(ToolError::invalid_field(
                field,
                format!("{k:?}: label keys are 1–63 of a-z 0-9 . / -"),
            ));
        }
        if v.len() > 256 {
            return Err(ToolError::invalid_field(
                field,
                format!("{k}: values are at most 256 bytes"),
            ));
        }
    }
    Ok(())
}

/// A number in a range, named.
pub fn range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    v: T,
    lo: T,
    hi: T,
) -> ToolResult<T> {
    if v < lo || v > hi {
        return Err(
            ToolError::invalid_field(field, format!("{v} is out of range: {lo}–{hi}"))
                .with_detail(json!({ "min": lo.to_string(), "max": hi.to_string() })),
        );
    }
    Ok(v)
}

/// The refusal every changing tool gives under --read-only.
pub fn writable(state: &crate::VmState) -> ToolResult<()> {
    if state.opts.read_only {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "this server was started with --read-only: instances cannot be spawned or changed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name("name", "web-1").is_ok());
        for bad in ["", "-x", "Web", "a_b", &"a".repeat(64)] {
            let e = name("name", bad).expect_err(bad);
            assert_eq!(e.code, ErrorCode::InvalidParams);
            assert!(e.message.starts_with("name:"));
        }
    }

    #[test]
    fn argv_and_paths() {
        assert!(argv("command", &[]).is_err());
        assert!(argv("command", &["ls".into()]).is_ok());
        assert!(guest_path("guest_path", "work/x").is_err());
        assert!(guest_path("guest_path", "/work/x").is_ok());
        assert!(range("port", 0u32, 1, 65535).is_err());
    }
}
