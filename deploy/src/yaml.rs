//! JSON values written as YAML block style: what a person reads in a manifest. Strings are
//! always double-quoted (YAML's double-quoted scalars take JSON's escapes), so no value is
//! ever read back as another type (`"on"`, `"1.0"`, `"null"`).

use serde_json::Value;

/// One YAML document (no `---`).
pub fn document(v: &Value) -> String {
    let mut out = String::new();
    block(v, 0, &mut out);
    out
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(Value::String(s.clone()).to_string()),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(o) if o.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !k.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    if plain {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

fn block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, val) in map {
                match scalar(val) {
                    Some(s) => out.push_str(&format!("{pad}{}: {s}\n", key(k))),
                    None => {
                        out.push_str(&format!("{pad}{}:\n", key(k)));
                        // Lists sit at their key's indentation, as kubectl writes them.
                        let next = if val.is_array() { indent } else { indent + 2 };
                        block(val, next, out);
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                match scalar(item) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        // The first line of a nested block goes after the dash.
                        let mut inner = String::new();
                        block(item, indent + 2, &mut inner);
                        let trimmed = inner.trim_start_matches(' ');
                        out.push_str(&format!("{pad}- {trimmed}"));
                    }
                }
            }
        }
        other => {
            if let Some(s) = scalar(other) {
                out.push_str(&format!("{pad}{s}\n"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_lists_and_quoted_scalars() {
        let v = json!({
            "apiVersion": "v1",
            "metadata": {"labels": {"app.kubernetes.io/name": "kitbag"}},
            "spec": {"replicas": 2, "ports": [{"port": 80, "name": "http"}], "args": ["serve", "on"], "empty": {}},
            "data": {"agent.json": "{\n  \"mcp\": {}\n}"}
        });
        let y = document(&v);
        assert!(y.contains("apiVersion: \"v1\"\n"), "{y}");
        assert!(
            y.contains("    app.kubernetes.io/name: \"kitbag\"\n"),
            "{y}"
        );
        assert!(
            y.contains("  ports:\n  - port: 80\n    name: \"http\"\n"),
            "{y}"
        );
        assert!(y.contains("  - \"on\"\n"), "{y}");
        assert!(y.contains("  empty: {}\n"), "{y}");
        assert!(
            y.contains("agent.json: \"{\\n  \\\"mcp\\\": {}\\n}\""),
            "{y}"
        );
    }
}
