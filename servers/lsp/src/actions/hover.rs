//! hover: the server's text at a position (markdown, capped) and the span it is about.

use std::sync::Arc;

use kitbag_shared::{PathPolicy, ToolResult};
use serde_json::Value;

use super::{Answer, ask, at_position, lsp_position, unsupported_unless};
use crate::result::{LspResult, Position, Range};
use crate::tool::LspParams;
use kitbag_lsp_client::pool::Pool;
use kitbag_lsp_client::text::{Encoding, Lines};

/// Hover text beyond this is cut with a marker.
pub const MAX_HOVER_CHARS: usize = 4000;

fn hover_text(contents: &Value) -> String {
    match contents {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(hover_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        Value::Object(o) => match (o.get("kind"), o.get("language"), o.get("value")) {
            (Some(_), _, Some(Value::String(v))) => v.clone(),
            (None, Some(Value::String(lang)), Some(Value::String(v))) => {
                format!("```{lang}\n{v}\n```")
            }
            (_, _, Some(Value::String(v))) => v.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// The prose of a hover text: what stands outside its fenced code blocks (which hold the
/// signature), without the rules servers draw between the parts (pyright's `---`), trimmed;
/// None when that is nothing.
fn documentation(text: &str) -> Option<String> {
    let mut prose: Vec<&str> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            prose.push(line);
        }
    }
    let is_rule = |l: &&str| {
        let t = l.trim();
        t.is_empty() || (t.len() >= 3 && t.chars().all(|c| matches!(c, '-' | '*' | '_')))
    };
    while prose.first().is_some_and(is_rule) {
        prose.remove(0);
    }
    while prose.last().is_some_and(is_rule) {
        prose.pop();
    }
    let doc = prose.join("\n").trim().to_string();
    (!doc.is_empty()).then_some(doc)
}

/// An LSP range in caller coordinates (1-based lines, characters).
fn caller_range(lines: &Lines, r: &Value, enc: Encoding) -> Range {
    let point = |v: &Value| {
        let (line, units) = lsp_position(v);
        Position {
            line: line + 1,
            character: lines.to_chars(line, units, enc).1,
        }
    };
    Range {
        start: point(&r["start"]),
        end: point(&r["end"]),
    }
}

pub async fn hover(pool: &Arc<Pool>, policy: &PathPolicy, p: &LspParams) -> ToolResult<Answer> {
    let (o, tdp, (line, ch)) = at_position(pool, policy, p).await?;
    unsupported_unless(&o.server, "hoverProvider", p.action)?;
    let answer = ask(pool, &o.server, "textDocument/hover", tdp).await?;
    if answer.is_null() {
        let result = LspResult {
            found: Some(false),
            content: Some(None),
            documentation: Some(None),
            ..LspResult::new(p.action)
        };
        return Ok((
            result,
            format!("nothing to show at {}:{}:{}", o.rel, line + 1, ch),
        ));
    }
    let full = hover_text(&answer["contents"]);
    let (content, truncated) = if full.chars().count() > MAX_HOVER_CHARS {
        let cut: String = full.chars().take(MAX_HOVER_CHARS).collect();
        (format!("{cut}… [truncated]"), true)
    } else {
        (full, false)
    };
    let range = answer
        .get("range")
        .filter(|r| r.is_object())
        .map(|r| caller_range(&o.lines, r, o.server.encoding));
    let result = LspResult {
        found: Some(true),
        documentation: Some(documentation(&content)),
        content: Some(Some(content.clone())),
        truncated: truncated.then_some(true),
        range,
        ..LspResult::new(p.action)
    };
    Ok((result, content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hover_contents_in_every_shape() {
        assert_eq!(hover_text(&json!("plain")), "plain");
        assert_eq!(
            hover_text(&json!({"kind": "markdown", "value": "**x**"})),
            "**x**"
        );
        assert_eq!(
            hover_text(&json!([{"language": "python", "value": "def f()"}, "doc"])),
            "```python\ndef f()\n```\n\ndoc"
        );
        assert_eq!(hover_text(&Value::Null), "");
    }

    #[test]
    fn documentation_is_the_prose_outside_the_code_blocks() {
        let ts = "\n```typescript\n(property) User.name: string\n```\nThe user's display name.\n\n*@since* 2";
        assert_eq!(
            documentation(ts).as_deref(),
            Some("The user's display name.\n\n*@since* 2")
        );
        assert_eq!(documentation("```rust\nfn f()\n```\n"), None);
        assert_eq!(documentation("plain words").as_deref(), Some("plain words"));
        // pyright: a rule between the signature and the docstring.
        assert_eq!(
            documentation("```python\ndef f() -> None\n```\n---\nDoc for f.").as_deref(),
            Some("Doc for f.")
        );
        assert_eq!(documentation("```python\nx: int\n```\n---\n"), None);
    }
}
