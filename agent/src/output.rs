//! A pack's `output_schema`: the JSON its answers end with (seed 002's typed subagent
//! results). The model is told the schema; its answer's JSON is found and checked; a wrong
//! one gets one chance to be corrected (`kitbag run`, subagent jobs).

use serde_json::Value;

/// Why a schema or an answer's JSON is not what it should be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputError {
    #[error("not an object: a JSON Schema object")]
    NotAnObject,
    #[error("not a JSON Schema: {0}")]
    BadSchema(String),
    #[error("the answer has no JSON object")]
    NoJson,
    /// Every violation (up to five), with its place.
    #[error("{0}")]
    Mismatch(String),
}

/// The schema, checked when the pack loads: an object that compiles as a JSON Schema.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, OutputError> {
    if !schema.is_object() {
        return Err(OutputError::NotAnObject);
    }
    jsonschema::validator_for(schema).map_err(|e| OutputError::BadSchema(e.to_string()))
}

/// What the system prompt says when the pack has a schema.
pub fn instruction(schema: &Value) -> String {
    format!(
        "End your final answer with one JSON object, in a ```json block, that matches this JSON \
         Schema:\n{schema}"
    )
}

/// What the model is told when its JSON was missing or wrong.
pub fn correction(why: &OutputError) -> String {
    format!(
        "Your answer's JSON does not match the required output schema: {why}. Answer again, \
         ending with the corrected JSON object in a ```json block."
    )
}

/// The JSON an answer ends with: its last ```json block, else the whole answer, else its last
/// `{…}` that parses.
pub fn extract(text: &str) -> Option<Value> {
    let mut rest = text;
    let mut last_block = None;
    while let Some(start) = rest.find("```json") {
        let after = &rest[start + "```json".len()..];
        let Some(end) = after.find("```") else { break };
        last_block = Some(after[..end].trim());
        rest = &after[end + 3..];
    }
    if let Some(block) = last_block {
        return serde_json::from_str(block).ok();
    }
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text.trim()) {
        return Some(v);
    }
    // The last opening brace whose text up to the last closing brace parses.
    let end = text.rfind('}')?;
    text[..end]
        .match_indices('{')
        .map(|(i, _)| i)
        .rev()
        .find_map(|i| match serde_json::from_str::<Value>(&text[i..=end]) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => None,
        })
}

/// The answer's JSON if it matches `schema`, else why not (every violation, with its place).
pub fn check(text: &str, schema: &Value) -> Result<Value, OutputError> {
    let validator = compile(schema)?;
    let value = extract(text).ok_or(OutputError::NoJson)?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(OutputError::Mismatch(errors.join("; ")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["files"],
               "properties": {"files": {"type": "array", "items": {"type": "string"}}}})
    }

    #[test]
    fn the_last_json_block_is_the_output() {
        let text = "First draft:\n```json\n{\"files\": 1}\n```\nFinal:\n```json\n{\"files\": [\"a.rs\"]}\n```";
        assert_eq!(check(text, &schema()).unwrap(), json!({"files": ["a.rs"]}));
    }

    #[test]
    fn bare_json_and_json_after_prose_are_found() {
        assert_eq!(extract("{\"files\": []}"), Some(json!({"files": []})));
        assert_eq!(
            extract("Done. The result is {\"files\": [\"x\"], \"n\": {\"k\": 1}} as asked."),
            Some(json!({"files": ["x"], "n": {"k": 1}}))
        );
        assert_eq!(extract("no json here"), None);
    }

    #[test]
    fn a_violation_says_where() {
        let e = check("```json\n{\"files\": [3]}\n```", &schema()).unwrap_err();
        assert!(e.to_string().starts_with("/files/0: "), "{e}");
        let e = check("nothing", &schema()).unwrap_err();
        assert_eq!(e, OutputError::NoJson);
    }

    #[test]
    fn only_an_object_that_compiles_is_a_schema() {
        assert!(compile(&json!("x")).is_err());
        assert!(compile(&json!({"type": 5})).is_err());
        assert!(compile(&schema()).is_ok());
    }
}
