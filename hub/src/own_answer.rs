//! How the host's own tools answer: a typed result as its text and `structuredContent`, or
//! its typed error; their arguments decoded as every server's are.

use kitbag_shared::ToolResult;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};

/// `v` as a success: `text` for the model, the value itself as `structuredContent`.
pub fn structured<T: serde::Serialize>(text: String, v: &T) -> CallToolResult {
    let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
    out.structured_content = serde_json::to_value(v).ok();
    out
}

/// A tool's outcome: [`structured`] with `text` of the value, or the error's result.
pub fn answer<T: serde::Serialize>(
    r: ToolResult<T>,
    text: impl FnOnce(&T) -> String,
) -> CallToolResult {
    match r {
        Ok(v) => structured(text(&v), &v),
        Err(e) => e.into_call_result(),
    }
}

/// The call's arguments as `P` (a typed `invalid_params` naming the field otherwise).
pub fn decode<P: serde::de::DeserializeOwned>(args: Option<JsonObject>) -> ToolResult<P> {
    kitbag_shared::server::decode_args::<P>(args.unwrap_or_default())
}
