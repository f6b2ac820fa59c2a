//! A trigger's inputs held against the workflow's input schema: every field checked (type,
//! `enum`), required ones present, unknown ones refused — each failure an `invalid_params`
//! naming `inputs.FIELD` — and defaults filled in. `file` inputs cannot travel in a tool call
//! (seed 004: `file_input_not_supported`).

use kitbag_shared::{ErrorCode, ToolError, ToolResult};
use serde_json::{Map, Value, json};

fn bad(field: &str, why: impl std::fmt::Display) -> ToolError {
    ToolError::invalid_field(&format!("inputs.{field}"), why.to_string())
}

fn fits(kind: &str, v: &Value) -> bool {
    match kind {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

/// `given` checked against `schema` (a workflow's, as kitbag-config reads it), with defaults.
pub fn check(schema: &Value, given: &Map<String, Value>) -> ToolResult<Map<String, Value>> {
    let empty = Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    let required = kitbag_shared::schema::required_names(schema);
    if let Some((name, _)) = properties.iter().find(|(k, p)| {
        p["type"] == "file" && (required.contains(&k.as_str()) || given.contains_key(*k))
    }) {
        return Err(ToolError::new(
            ErrorCode::FileInputNotSupported,
            format!(
                "input `{name}` is a file, which a tool call cannot carry: invoke this workflow \
                 through the HTTP upload endpoint, or give the file's path in a text input"
            ),
        )
        .with_detail(json!({"field": format!("inputs.{name}")})));
    }
    for key in given.keys() {
        if !properties.contains_key(key) {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            return Err(bad(
                key,
                format!(
                    "not an input of this workflow (its inputs: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    let mut out = Map::new();
    for (key, p) in properties {
        let kind = p["type"].as_str().unwrap_or("string");
        match given.get(key) {
            None | Some(Value::Null) => {
                if required.contains(&key.as_str()) {
                    return Err(bad(key, format!("required ({kind})")));
                }
                if let Some(d) = p.get("default") {
                    out.insert(key.clone(), d.clone());
                }
            }
            Some(v) => {
                if !fits(kind, v) {
                    return Err(bad(key, format!("is {v}, not a {kind}")));
                }
                if let Some(options) = p["enum"].as_array()
                    && !options.contains(v)
                {
                    let shown: Vec<String> = options.iter().map(Value::to_string).collect();
                    return Err(bad(key, format!("is {v}; one of {}", shown.join(", "))));
                }
                out.insert(key.clone(), v.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "branch": {"type": "string"},
            "dry_run": {"type": "boolean", "default": false},
            "target": {"type": "string", "enum": ["staging", "production"]},
            "count": {"type": "integer"}
        }, "required": ["branch"]})
    }

    fn given(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn inputs_are_checked_field_by_field_and_defaults_filled() {
        let ok = check(&schema(), &given(json!({"branch": "main", "count": 3}))).expect("ok");
        assert_eq!(
            Value::Object(ok),
            json!({"branch": "main", "dry_run": false, "count": 3})
        );
        let field = |v: Value| {
            check(&schema(), &given(v)).expect_err("refused").detail["field"]
                .as_str()
                .expect("field")
                .to_string()
        };
        assert_eq!(field(json!({})), "inputs.branch");
        assert_eq!(field(json!({"branch": 1})), "inputs.branch");
        assert_eq!(field(json!({"branch": "m", "count": 1.5})), "inputs.count");
        assert_eq!(
            field(json!({"branch": "m", "target": "moon"})),
            "inputs.target"
        );
        assert_eq!(
            field(json!({"branch": "m", "colour": "red"})),
            "inputs.colour"
        );
    }

    #[test]
    fn a_file_input_is_refused_with_the_way_out() {
        let s =
            json!({"type": "object", "properties": {"cv": {"type": "file"}}, "required": ["cv"]});
        let e = check(&s, &Map::new()).expect_err("file");
        assert_eq!(e.code, ErrorCode::FileInputNotSupported);
        assert!(e.message.contains("HTTP upload"), "{}", e.message);
    }
}
