//! Argument checks more than one server makes: each names the field and what is accepted.

use std::collections::BTreeMap;

use crate::{ToolError, ToolResult};

/// Environment variables: names `^[A-Za-z_][A-Za-z0-9_]*$`, no `KITBAG_*`, no NUL in values.
pub fn env(field: &str, env: &BTreeMap<String, String>) -> ToolResult<Vec<(String, String)>> {
    if env.len() > 256 {
        return Err(ToolError::invalid_field(field, "at most 256 variables"));
    }
    let mut out = Vec::new();
    for (k, v) in env {
        let ok = k
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(ToolError::invalid_field(
                field,
                format!(
                    "{k:?} is not a valid variable name (letters, digits and '_', not starting with a digit)"
                ),
            ));
        }
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

    #[test]
    fn env_names() {
        let mut m = BTreeMap::new();
        m.insert("GOOD_1".to_string(), "v".to_string());
        assert!(env("env", &m).is_ok());
        for bad in ["1X", "A-B", "KITBAG_INSTANCE_ID", ""] {
            let mut m = BTreeMap::new();
            m.insert(bad.to_string(), "v".to_string());
            assert!(env("env", &m).is_err(), "{bad}");
        }
    }
}
