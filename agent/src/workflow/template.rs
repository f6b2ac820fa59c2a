//! `{inputs.NAME}` in a step's text replaced by the input's value: as written in prompts and
//! tool arguments (a string that is only the placeholder takes the value with its type), and
//! single-quoted in shell commands, so an input can never become shell syntax.

use serde_json::{Map, Value};

/// A value as text: a string as is, anything else as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `s` single-quoted for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `text` with each `{inputs.NAME}` of a known input replaced (quoted for the shell when
/// `shell`); unknown names are left as written.
pub fn text(text: &str, inputs: &Map<String, Value>, shell: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("{inputs.") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "{inputs.".len()..];
        match after.find('}') {
            Some(end) if inputs.contains_key(&after[..end]) => {
                let v = shown(&inputs[&after[..end]]);
                out.push_str(&if shell { shell_quote(&v) } else { v });
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("{inputs.");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A tool step's arguments with the inputs put in.
pub fn value(v: &Value, inputs: &Map<String, Value>) -> Value {
    match v {
        Value::String(s) => {
            let whole = s
                .strip_prefix("{inputs.")
                .and_then(|r| r.strip_suffix('}'))
                .and_then(|name| inputs.get(name));
            match whole {
                Some(typed) => typed.clone(),
                None => Value::String(text(s, inputs, false)),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| value(i, inputs)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, i)| (k.clone(), value(i, inputs)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inputs() -> Map<String, Value> {
        json!({"branch": "main; rm -rf ~", "n": 3, "quote": "it's"})
            .as_object()
            .cloned()
            .expect("object")
    }

    #[test]
    fn placeholders_are_filled_and_shell_values_stay_data() {
        assert_eq!(
            text(
                "deploy {inputs.branch} x{inputs.n} {inputs.other}",
                &inputs(),
                false
            ),
            "deploy main; rm -rf ~ x3 {inputs.other}"
        );
        assert_eq!(
            text(
                "git checkout {inputs.branch} && echo {inputs.quote}",
                &inputs(),
                true
            ),
            r"git checkout 'main; rm -rf ~' && echo 'it'\''s'"
        );
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(text("printf %s {inputs.quote}", &inputs(), true))
            .output()
            .expect("sh");
        assert_eq!(out.stdout, b"it's");
        assert_eq!(
            value(
                &json!({"count": "{inputs.n}", "msg": "n={inputs.n}", "l": ["{inputs.branch}"]}),
                &inputs()
            ),
            json!({"count": 3, "msg": "n=3", "l": ["main; rm -rf ~"]})
        );
    }
}
