//! Label and field selectors (`labelSelector=…`, `fieldSelector=…`), parsed as the apiserver
//! does: comma-separated requirements that must all hold.

use serde_json::Value;

use super::store::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<(String, Op)>);

/// Split on commas outside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn set_values(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn parse_requirement(part: &str) -> Option<(String, Op)> {
    if let Some(k) = part.strip_prefix('!') {
        return Some((k.trim().to_string(), Op::NotExists));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Some((k.trim().to_string(), Op::Ne(v.trim().to_string())));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Some((k.trim().to_string(), Op::Eq(v.trim().to_string())));
    }
    for (word, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = part.split_once(word) {
            let vals = set_values(rest)?;
            let op = if notin { Op::NotIn(vals) } else { Op::In(vals) };
            return Some((k.trim().to_string(), op));
        }
    }
    Some((part.trim().to_string(), Op::Exists))
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            match parse_requirement(&part) {
                Some((k, op)) if valid_key(&k) => reqs.push((k, op)),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "unable to parse requirement: {part:?}: invalid label selector"
                    )));
                }
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq(want) => v == Some(want.as_str()),
                Op::Ne(want) => v != Some(want.as_str()),
                Op::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                Op::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
            }
        })
    }
}

/// `fieldSelector`: `field=value`, `field==value`, `field!=value`, comma-AND.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields a selector may name, per resource (as the apiserver: few for pods, only the
/// metadata for custom resources).
fn supported(plural: &str, field: &str) -> bool {
    let pod_fields = [
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
    ];
    let ns_fields = ["status.phase"];
    matches!(field, "metadata.name" | "metadata.namespace")
        || (plural == "pods" && pod_fields.contains(&field))
        || (plural == "namespaces" && ns_fields.contains(&field))
}

impl FieldSelector {
    pub fn parse(plural: &str, s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !supported(plural, field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            let mut v = obj;
            for part in field.split('.') {
                v = &v[part];
            }
            let got = v.as_str().unwrap_or_default();
            (got == want) == *eq
        })
    }

    /// The single name a `metadata.name=X` selector pins, if any.
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_requirements() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "a"}}});
        let m = |s: &str| LabelSelector::parse(s).map(|l| l.matches(&o));
        assert_eq!(m("app=web").ok(), Some(true));
        assert_eq!(m("app=web,tier!=a").ok(), Some(false));
        assert_eq!(m("app,!nope").ok(), Some(true));
        assert_eq!(m("tier in (a,b),app notin (x)").ok(), Some(true));
        assert!(m("a b c").is_err());
    }
}
