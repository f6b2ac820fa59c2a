//! Audit events as JSON lines: `tool.called`, `tool.completed`, `tool.denied`.

use crate::lock::LockExt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

/// Longest string kept in a logged argument; longer ones are cut with their length noted.
pub const MAX_LOGGED_STRING: usize = 256;

#[derive(Clone)]
pub struct AuditLog {
    file: Arc<Mutex<File>>,
}

impl AuditLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Append one event; `fields` are merged into `{ts, event}`. Never fails the caller.
    pub fn event(&self, event: &str, fields: Value) {
        let mut line = Map::new();
        line.insert("ts".into(), Value::String(now_rfc3339()));
        line.insert("event".into(), Value::String(event.into()));
        if let Value::Object(extra) = fields {
            line.extend(extra);
        }
        let Ok(mut text) = serde_json::to_string(&Value::Object(line)) else {
            return;
        };
        text.push('\n');
        let mut f = self.file.locked();
        if let Err(e) = f.write_all(text.as_bytes()) {
            tracing::warn!("audit log write failed: {e}");
        }
    }

    /// A call began; `private` arguments are logged by size only ([`redact_private`]).
    pub fn called(&self, tool: &str, request_id: &str, args: &Value, private: &[String]) {
        let params = redact_private(args, private);
        self.event(
            "tool.called",
            json!({ "tool": tool, "request_id": request_id, "params": params }),
        );
    }

    pub fn completed(
        &self,
        tool: &str,
        request_id: &str,
        duration_ms: f64,
        error_code: Option<&str>,
    ) {
        self.event(
            "tool.completed",
            json!({
                "tool": tool, "request_id": request_id, "duration_ms": duration_ms,
                "success": error_code.is_none(), "error_code": error_code,
            }),
        );
    }

    pub fn denied(&self, tool: &str, request_id: &str, code: &str, detail: &Value) {
        self.event(
            "tool.denied",
            json!({ "tool": tool, "request_id": request_id, "code": code, "detail": detail }),
        );
    }
}

/// The `_meta` key of a tool listing the arguments whose values never reach a log (memory's
/// `content`: a note refused as a secret must leave no trace). The host reads it from its
/// children's tool lists, so its own audit log keeps them out too.
pub const PRIVATE_ARGS_META: &str = "kitbag/private_args";

/// The private arguments a tool's `_meta` names ([`PRIVATE_ARGS_META`]).
pub fn private_args(meta: Option<&serde_json::Map<String, Value>>) -> Vec<String> {
    meta.and_then(|m| m.get(PRIVATE_ARGS_META))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// [`redact`], with the values of the top-level arguments named in `private` replaced by
/// their size: what was passed is visible, never what it said.
pub fn redact_private(v: &Value, private: &[impl AsRef<str>]) -> Value {
    let mut out = redact(v);
    if let Value::Object(map) = &mut out {
        for key in private {
            if let Some(val) = map.get_mut(key.as_ref()) {
                let bytes = serde_json::to_string(&v[key.as_ref()]).map_or(0, |s| s.len());
                *val = Value::String(format!("[private: {bytes} bytes]"));
            }
        }
    }
    out
}

/// A URL for messages and logs: credentials in it (`https://user:pass@…`,
/// `postgres://user:pass@…`) are not repeated.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// Copy of `v` with long strings cut (file contents must not bloat the log).
pub fn redact(v: &Value) -> Value {
    match v {
        Value::String(s) if s.len() > MAX_LOGGED_STRING => {
            let (head, _) = crate::limits::truncate_str(s, MAX_LOGGED_STRING);
            Value::String(format!("{head}… [{} bytes]", s.len()))
        }
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), redact(v))).collect())
        }
        other => other.clone(),
    }
}

/// Current UTC time as RFC 3339 with milliseconds.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_lines_with_redaction() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("audit.jsonl");
        let log = AuditLog::open(&p).expect("open");
        log.called(
            "file_write",
            "7",
            &json!({"path": "a", "content": "x".repeat(10_000)}),
            &[],
        );
        log.called(
            "memory_store",
            "8",
            &json!({"content": "key ghp_0123", "tags": ["a"], "scope": "global"}),
            &["content".to_string(), "tags".to_string()],
        );
        log.completed("file_write", "7", 1.5, None);
        let text = std::fs::read_to_string(&p).expect("read");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "tool.called");
        assert!(lines[0]["params"]["content"].as_str().expect("s").len() < 400);
        assert_eq!(lines[1]["params"]["content"], "[private: 14 bytes]");
        assert_eq!(lines[1]["params"]["tags"], "[private: 5 bytes]");
        assert_eq!(lines[1]["params"]["scope"], "global");
        assert!(!text.contains("ghp_"));
        assert_eq!(lines[2]["success"], true);
    }
}
