//! Between MCP and the model: the host's tools become tool specs, a tool's result becomes the
//! parts of a `tool_result` block (text, and images as images — seed 000's image support).

use kitbag_llm::{ResultPart, ToolSpec};
use rmcp::model::{CallToolResult, ContentBlock, Tool};

pub fn tool_spec(t: &Tool) -> ToolSpec {
    ToolSpec {
        name: t.name.to_string(),
        description: t.description.as_deref().unwrap_or("").to_owned(),
        input_schema: serde_json::Value::Object((*t.input_schema).clone()),
    }
}

/// The parts the model sees. Structured content is the fallback when a result carries no
/// content blocks (servers are asked to send both; not all do).
pub fn result_parts(r: &CallToolResult) -> (Vec<ResultPart>, bool) {
    let mut parts = Vec::new();
    for c in &r.content {
        match c {
            ContentBlock::Text(t) => parts.push(ResultPart::Text {
                text: t.text.clone(),
            }),
            ContentBlock::Image(i) => parts.push(ResultPart::Image {
                media_type: i.mime_type.clone(),
                data: i.data.clone(),
            }),
            ContentBlock::Resource(res) => {
                let text = match &res.resource {
                    rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                        format!("[resource {uri}]\n{text}")
                    }
                    rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                        format!("[binary resource {uri}]")
                    }
                    _ => "[resource]".to_owned(),
                };
                parts.push(ResultPart::Text { text });
            }
            ContentBlock::ResourceLink(link) => parts.push(ResultPart::Text {
                text: format!("[resource link {}]", link.uri),
            }),
            ContentBlock::Audio(_) => parts.push(ResultPart::Text {
                text: "[audio content: not shown to the model]".into(),
            }),
            _ => parts.push(ResultPart::Text {
                text: "[content of a kind this host does not pass on]".into(),
            }),
        }
    }
    if parts.is_empty()
        && let Some(s) = &r.structured_content
    {
        parts.push(ResultPart::Text {
            text: s.to_string(),
        });
    }
    if parts.is_empty() {
        parts.push(ResultPart::Text {
            text: "(no output)".into(),
        });
    }
    (parts, r.is_error == Some(true))
}
