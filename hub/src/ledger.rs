//! The record of one tool call through the host: its `tool.call` audit line, its count and
//! latency for `/metrics`, its span. Written here only, whichever transport forwarded it.

use std::time::Instant;

use kitbag_shared::audit::AuditLog;
use kitbag_shared::otel::{Outcome, Span};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// Who answered a host tool (`host_status`, `host_reload`) in the audit log.
pub const HOST_SERVER: &str = "host";

/// A call under way. Close it with [`Ledger::finish`] (answered, well or with an error)
/// or [`Ledger::cancelled`] (the client gave up on it).
pub struct Ledger {
    tool: String,
    server: String,
    request_id: String,
    agent: Option<String>,
    /// The log and the call's arguments as logged (long strings cut, private ones by size);
    /// built only when there is a log.
    audit: Option<(AuditLog, Value)>,
    started: Instant,
    /// The call's span, when the transport leaves it to the call (the stdio byte path).
    span: Option<Span>,
}

/// What the ledger needs to know of a call as it starts.
pub struct Opening<'a> {
    /// The tool as the client named it.
    pub tool: &'a str,
    pub server: String,
    pub request_id: String,
    pub agent: Option<String>,
    /// Arguments the server marked private (`kitbag/private_args`).
    pub private_args: &'a [String],
}

impl Ledger {
    /// Start the record; `params` is read only when there is an audit log.
    pub fn open(
        audit: Option<&AuditLog>,
        opening: Opening<'_>,
        params: impl FnOnce() -> Value,
    ) -> Ledger {
        Ledger {
            audit: audit.map(|a| {
                let logged = kitbag_shared::audit::redact_private(&params(), opening.private_args);
                (a.clone(), logged)
            }),
            tool: opening.tool.to_string(),
            server: opening.server,
            request_id: opening.request_id,
            agent: opening.agent,
            started: Instant::now(),
            span: None,
        }
    }

    /// Let the call end `span` (see [`Ledger::span`]).
    pub fn with_span(mut self, span: Option<Span>) -> Ledger {
        self.span = span;
        self
    }

    /// The call was refused by the agent policy or the caller's tiers (`tool.denied`); its
    /// error result is finished like any other.
    pub fn denied(&self, code: &str) {
        if let Some((a, _)) = &self.audit {
            a.denied(
                &self.tool,
                &self.request_id,
                code,
                &json!({"agent": self.agent}),
            );
        }
    }

    /// The call was answered: `code` is the error code of an error result. Counted, logged,
    /// its span ended.
    pub fn finish(mut self, code: Option<&str>) {
        if let Some(span) = self.span.take() {
            span.end(match code {
                Some(code) => Outcome::ToolError(code),
                None => Outcome::Ok,
            });
        }
        kitbag_shared::metrics::calls().record(
            &self.tool,
            code,
            self.started.elapsed().as_secs_f64(),
        );
        if let Some((a, params)) = self.audit.take() {
            a.event(
                "tool.call",
                json!({
                    "agent": self.agent,
                    "server": self.server,
                    "tool": self.tool,
                    "request_id": self.request_id,
                    "duration_ms": self.started.elapsed().as_secs_f64() * 1000.0,
                    "ok": code.is_none(),
                    "error_code": code,
                    "params": params,
                }),
            );
        }
    }

    /// The client gave up on the call: it counts nowhere but in its span.
    pub fn cancelled(mut self) {
        if let Some(span) = self.span.take() {
            span.end(Outcome::Cancelled);
        }
    }
}

/// The error code of an error result (`tool_error` when it names none); None for a success.
pub fn error_code(result: &CallToolResult) -> Option<&str> {
    if result.is_error != Some(true) {
        return None;
    }
    Some(
        result
            .structured_content
            .as_ref()
            .and_then(|s| s.get("error")?.get("code")?.as_str())
            .unwrap_or("tool_error"),
    )
}

/// An error result with a typed code, as every kitbag server writes them.
pub fn error_result(code: &str, message: String) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "error [{code}]: {message}"
    ))]);
    r.structured_content = Some(json!({"error": {"code": code, "message": message}}));
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn opening<'a>(private: &'a [String]) -> Opening<'a> {
        Opening {
            tool: "memory_store",
            server: "memory".into(),
            request_id: "7".into(),
            agent: Some("reviewer".into()),
            private_args: private,
        }
    }

    #[test]
    fn one_audit_line_per_call_with_private_arguments_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let private = vec!["content".to_string()];
        let ledger = Ledger::open(
            Some(&log),
            opening(&private),
            || json!({"content": "a secret", "key": "k"}),
        );
        ledger.denied("capability_denied");
        ledger.finish(Some("capability_denied"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["event"], "tool.denied");
        assert_eq!(lines[0]["detail"]["agent"], "reviewer");
        let call = &lines[1];
        assert_eq!(call["event"], "tool.call");
        assert_eq!(call["server"], "memory");
        assert_eq!(call["request_id"], "7");
        assert_eq!(call["ok"], false);
        assert_eq!(call["error_code"], "capability_denied");
        assert_eq!(call["params"]["key"], "k");
        assert_eq!(call["params"]["content"], "[private: 10 bytes]");
        assert!(!text.contains("a secret"));
    }

    #[test]
    fn a_cancelled_call_is_not_logged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        Ledger::open(Some(&log), opening(&[]), || json!({})).cancelled();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn without_a_log_the_arguments_are_never_read() {
        Ledger::open(None, opening(&[]), || unreachable!("no log, no params")).finish(None);
    }

    #[test]
    fn an_error_result_without_a_code_counts_as_tool_error() {
        let mut r = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(error_code(&r), Some("tool_error"));
        r.structured_content = Some(json!({"error": {"code": "not_found"}}));
        assert_eq!(error_code(&r), Some("not_found"));
        assert_eq!(
            error_code(&CallToolResult::success(vec![ContentBlock::text("ok")])),
            None
        );
    }
}
