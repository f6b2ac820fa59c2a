//! PATCH bodies: JSON merge patch (RFC 7386; strategic merge patch is treated as one — lists
//! are replaced, not merged by key, and `$patch` directives are not understood) and JSON
//! patch (RFC 6902: add, remove, replace, test, copy, move).

use serde_json::Value;

use super::store::{ApiError, ApiResult};

pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if k.starts_with("$setElementOrder/") || k == "$patch" || k == "$retainKeys" {
                continue;
            }
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The parent container of `path` and the last token.
fn parent<'a>(doc: &'a mut Value, path: &str) -> ApiResult<(&'a mut Value, String)> {
    let bad = || ApiError::new(422, "Invalid", format!("invalid JSON patch path {path:?}"));
    let rest = path.strip_prefix('/').ok_or_else(bad)?;
    let mut tokens: Vec<String> = rest.split('/').map(unescape).collect();
    let last = tokens.pop().ok_or_else(bad)?;
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(&t).ok_or_else(bad)?,
            Value::Array(a) => {
                let i: usize = t.parse().map_err(|_| bad())?;
                a.get_mut(i).ok_or_else(bad)?
            }
            _ => return Err(bad()),
        };
    }
    Ok((cur, last))
}

fn get(doc: &Value, path: &str) -> Option<Value> {
    if path.is_empty() {
        return Some(doc.clone());
    }
    doc.pointer(path).cloned()
}

fn add(doc: &mut Value, path: &str, value: Value) -> ApiResult<()> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (p, last) = parent(doc, path)?;
    match p {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse().unwrap_or(usize::MAX)
            };
            if i > a.len() {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    format!("JSON patch: index out of range in {path:?}"),
                ));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(ApiError::new(
            422,
            "Invalid",
            format!("JSON patch: {path:?} has no parent"),
        )),
    }
}

fn remove(doc: &mut Value, path: &str) -> ApiResult<Value> {
    let missing = || {
        ApiError::new(
            422,
            "Invalid",
            format!(
                "the server rejected our request due to an error in our request: missing path {path:?}"
            ),
        )
    };
    let (p, last) = parent(doc, path)?;
    match p {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i < a.len() {
                Ok(a.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

/// Apply an RFC 6902 patch document.
pub fn json_patch(doc: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    for op in ops {
        let path = op["path"].as_str().unwrap_or_default();
        let value = op.get("value").cloned();
        let need_value = || {
            value
                .clone()
                .ok_or_else(|| ApiError::bad_request(format!("JSON patch: {op} needs a value")))
        };
        match op["op"].as_str().unwrap_or_default() {
            "add" => add(doc, path, need_value()?)?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, need_value()?)?;
            }
            "test" => {
                if get(doc, path) != Some(need_value()?) {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        format!("JSON patch: test failed at {path:?}"),
                    ));
                }
            }
            "copy" | "move" => {
                let from = op["from"].as_str().unwrap_or_default();
                let v = get(doc, from).ok_or_else(|| {
                    ApiError::new(422, "Invalid", format!("JSON patch: no {from:?}"))
                })?;
                if op["op"] == "move" {
                    remove(doc, from)?;
                }
                add(doc, path, v)?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "JSON patch: unknown operation {other:?}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_and_json_patch() {
        let mut d = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge(&mut d, &json!({"a": {"b": null, "d": 3}, "l": [9]}));
        assert_eq!(d, json!({"a": {"c": 2, "d": 3}, "l": [9]}));
        json_patch(
            &mut d,
            &json!([{"op": "replace", "path": "/a/c", "value": 5}, {"op": "add", "path": "/l/-", "value": 10}]),
        )
        .expect("patch");
        assert_eq!(d, json!({"a": {"c": 5, "d": 3}, "l": [9, 10]}));
        assert!(
            json_patch(
                &mut d,
                &json!([{"op": "replace", "path": "/zz", "value": 1}])
            )
            .is_err()
        );
    }
}
