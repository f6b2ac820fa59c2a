//! The conformance fixture: an MCP server (over stdio, or `--http` like every kitbag binary)
//! with exactly the `test_*` tools, prompts and resources the official conformance suite
//! (`@modelcontextprotocol/conformance`, testkit/conformance) calls in its server scenarios,
//! each behaving as the suite's own reference server does. It is built on kitbag-shared's
//! `ToolRouter`/`McpServer`, so the suite exercises kitbag's serving code; the host test
//! (servers/host/tests/conformance.rs) runs it as a child of `kitbag serve --http`.
//!
//! Not here: the 2026-07-28 `input_required` tools (a child is spoken to in the handshake
//! era, so it never sees `inputResponses`), `test_missing_capability` (whether a child's tool
//! needs a client capability is not something the host can know) and the pending JSON Schema
//! 2020-12 tool — see testkit/conformance/expected-failures.json for what that costs.

mod input_required;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use kitbag_shared::rmcp::model::{
    CallToolResult, ContentBlock as Content, CustomRequest, GetPromptRequestParams,
    GetPromptResult, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ReadResourceRequestParams, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerRequest, Tool,
};
use kitbag_shared::rmcp::service::{Peer, RoleServer};
use kitbag_shared::rmcp::{ErrorData as McpError, model::ResourceUpdatedNotificationParam};
use kitbag_shared::runtime::{Threads, main as run_main};
use kitbag_shared::server::Extras;
use kitbag_shared::{CallCtx, CommonArgs, Identity, McpServer, ToolError, ToolResult, ToolRouter};
use serde_json::{Value, json};

/// A 1×1 red PNG and a minimal WAV: the suite's own test data.
const IMAGE: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const AUDIO: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

#[derive(Debug, Parser)]
#[command(
    name = "kitbag-conformance-fixture",
    about = "Test-only MCP server for the official conformance suite"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

const IDENTITY: Identity = Identity {
    name: "kitbag-conformance-fixture",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Test-only server: the conformance suite's test_* tools, prompts and resources.",
};

/// Clients subscribed to `test://watched-resource`.
#[derive(Default)]
struct Fixture {
    watchers: Mutex<Vec<(String, Peer<RoleServer>)>>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    run_main(Threads::Current, || async move {
        args.common.init_logging()?;
        let policy = args.common.policy()?;
        let server = McpServer::new(IDENTITY, Fixture::default(), router(), policy)
            .with_common_args(&args.common)?
            .with_extras(FixtureExtras);
        kitbag_shared::serve(server, &args.common).await
    })
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    match serde_json::from_value(value) {
        Ok(v) => v,
        Err(e) => panic!("fixture data does not decode: {e}"),
    }
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Tool {
    from_json(json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    }))
}

fn no_args(name: &str, description: &str) -> Tool {
    tool(name, description, json!({}), &[])
}

fn text(text: &str) -> CallToolResult {
    CallToolResult::success(vec![Content::text(text)])
}

fn string_arg(args: &JsonObject, name: &str) -> ToolResult<String> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ToolError::invalid_field(name, "a string is required")),
    }
}

#[allow(deprecated)] // logging is deprecated by SEP-2577, still in the handshake era
async fn log(ctx: &CallCtx, message: &str) {
    if let Some(peer) = ctx.peer() {
        let param: kitbag_shared::rmcp::model::LoggingMessageNotificationParam = from_json(json!({
            "level": "info", "logger": "conformance-fixture", "data": message,
        }));
        let _ = peer.notify_logging_message(param).await;
    }
}

/// A server→client request (sampling, elicitation) sent as it is on the wire; the answer
/// as JSON.
async fn ask_client(ctx: &CallCtx, method: &str, params: Value) -> ToolResult<Value> {
    let peer = ctx
        .peer()
        .ok_or_else(|| ToolError::internal("no client connection"))?;
    let answer = peer
        .send_request(ServerRequest::CustomRequest(CustomRequest::new(
            method,
            Some(params),
        )))
        .await
        .map_err(|e| ToolError::internal(format!("{method} failed: {e}")))?;
    serde_json::to_value(answer).map_err(|e| ToolError::internal(e.to_string()))
}

fn router() -> ToolRouter<Fixture> {
    input_required::tools(ToolRouter::new())
        .raw_tool(
            no_args("test_simple_text", "Tests simple text content response"),
            |_, _, _| async { Ok(text("This is a simple text response for testing.")) },
        )
        .raw_tool(
            no_args("test_image_content", "Tests image content response"),
            |_, _, _| async { Ok(CallToolResult::success(vec![Content::image(IMAGE, "image/png")])) },
        )
        .raw_tool(
            no_args("test_audio_content", "Tests audio content response"),
            |_, _, _| async { Ok(CallToolResult::success(vec![Content::audio(AUDIO, "audio/wav")])) },
        )
        .raw_tool(
            no_args(
                "test_embedded_resource",
                "Tests embedded resource content response",
            ),
            |_, _, _| async {
                Ok(CallToolResult::success(vec![Content::resource(
                    ResourceContents::text(
                        "This is an embedded resource content.",
                        "test://embedded-resource",
                    ),
                )]))
            },
        )
        .raw_tool(
            no_args(
                "test_multiple_content_types",
                "Tests response with multiple content types (text, image, resource)",
            ),
            |_, _, _| async {
                Ok(CallToolResult::success(vec![
                    Content::text("Multiple content types test:"),
                    Content::image(IMAGE, "image/png"),
                    Content::resource(
                        ResourceContents::text(
                            json!({"test": "data", "value": 123}).to_string(),
                            "test://mixed-content-resource",
                        )
                        .with_mime_type("application/json"),
                    ),
                ]))
            },
        )
        .raw_tool(
            no_args(
                "test_tool_with_logging",
                "Tests tool that emits log messages during execution",
            ),
            |_, _, ctx| async move {
                log(&ctx, "Tool execution started").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                log(&ctx, "Tool processing data").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                log(&ctx, "Tool execution completed").await;
                Ok(text("Tool with logging executed successfully"))
            },
        )
        .raw_tool(
            no_args(
                "test_tool_with_progress",
                "Tests tool that reports progress notifications",
            ),
            |_, _, ctx| async move {
                for step in [0.0, 50.0, 100.0] {
                    ctx.progress(step, Some(100.0), Some(format!("Completed step {step} of 100")))
                        .await;
                    if step < 100.0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                Ok(text("Progress reported: 0, 50 and 100 of 100"))
            },
        )
        // server-stateless (2026-07-28) diagnostics, as the suite's reference server has them.
        .raw_tool(
            no_args(
                "test_logging_tool",
                "Logs a line, then answers: a 2026-07-28 client that set no logLevel must not see the log",
            ),
            |_, _, ctx| async move {
                log(&ctx, "Diagnostic trace logging activated").await;
                Ok(text("Logging evaluated"))
            },
        )
        .raw_tool(
            no_args(
                "test_streaming_elicitation",
                "Reports progress on the response stream, then answers",
            ),
            |_, _, ctx| async move {
                ctx.progress(50.0, Some(100.0), None).await;
                Ok(text("Streaming complete"))
            },
        )
        .raw_tool(
            no_args("test_error_handling", "Tests error response handling"),
            |_, _, _| async {
                Err(ToolError::internal(
                    "This tool intentionally returns an error for testing",
                ))
            },
        )
        .raw_tool(
            tool(
                "test_sampling",
                "Tests server-initiated sampling (LLM completion request)",
                json!({"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}),
                &["prompt"],
            ),
            |_, args, ctx| async move {
                let prompt = string_arg(&args, "prompt")?;
                let answer = ask_client(
                    &ctx,
                    "sampling/createMessage",
                    json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                           "maxTokens": 100}),
                )
                .await?;
                let said = answer["content"]["text"].as_str().unwrap_or("No response");
                Ok(text(&format!("LLM response: {said}")))
            },
        )
        .raw_tool(
            tool(
                "test_elicitation",
                "Tests server-initiated elicitation (user input request)",
                json!({"message": {"type": "string", "description": "The message to show the user"}}),
                &["message"],
            ),
            |_, args, ctx| async move {
                let message = string_arg(&args, "message")?;
                let answer = ask_client(
                    &ctx,
                    "elicitation/create",
                    json!({"message": message, "requestedSchema": {"type": "object",
                        "properties": {"username": {"type": "string", "description": "User's response"},
                                       "email": {"type": "string", "description": "User's email address"}},
                        "required": ["username", "email"]}}),
                )
                .await?;
                Ok(text(&format!(
                    "User response: action={}, content={}",
                    answer["action"].as_str().unwrap_or("?"),
                    answer["content"]
                )))
            },
        )
        .raw_tool(
            no_args(
                "test_elicitation_sep1034_defaults",
                "Tests elicitation with default values (SEP-1034)",
            ),
            |_, _, ctx| async move {
                let answer = ask_client(
                    &ctx,
                    "elicitation/create",
                    json!({"message": "Please review and update the form fields with defaults",
                        "requestedSchema": {"type": "object", "properties": {
                            "name": {"type": "string", "description": "User name", "default": "John Doe"},
                            "age": {"type": "integer", "description": "User age", "default": 30},
                            "score": {"type": "number", "description": "User score", "default": 95.5},
                            "status": {"type": "string", "description": "User status",
                                       "enum": ["active", "inactive", "pending"], "default": "active"},
                            "verified": {"type": "boolean", "description": "Verification status", "default": true}},
                        "required": []}}),
                )
                .await?;
                Ok(text(&format!(
                    "Elicitation completed: action={}, content={}",
                    answer["action"].as_str().unwrap_or("?"),
                    answer["content"]
                )))
            },
        )
        .raw_tool(
            no_args(
                "test_elicitation_sep1330_enums",
                "Tests elicitation with enum schema improvements (SEP-1330)",
            ),
            |_, _, ctx| async move {
                let answer = ask_client(
                    &ctx,
                    "elicitation/create",
                    json!({"message": "Please select options from the enum fields",
                        "requestedSchema": {"type": "object", "properties": {
                            "untitledSingle": {"type": "string", "description": "Select one option",
                                               "enum": ["option1", "option2", "option3"]},
                            "titledSingle": {"type": "string", "description": "Select one option with titles",
                                             "oneOf": [{"const": "value1", "title": "First Option"},
                                                       {"const": "value2", "title": "Second Option"},
                                                       {"const": "value3", "title": "Third Option"}]},
                            "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                           "enum": ["opt1", "opt2", "opt3"],
                                           "enumNames": ["Option One", "Option Two", "Option Three"]},
                            "untitledMulti": {"type": "array", "description": "Select multiple options",
                                              "minItems": 1, "maxItems": 3,
                                              "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                            "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                            "minItems": 1, "maxItems": 3,
                                            "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                                {"const": "value2", "title": "Second Choice"},
                                                                {"const": "value3", "title": "Third Choice"}]}}},
                        "required": []}}),
                )
                .await?;
                Ok(text(&format!(
                    "Elicitation completed: action={}, content={}",
                    answer["action"].as_str().unwrap_or("?"),
                    answer["content"]
                )))
            },
        )
}

struct FixtureExtras;

const WATCHED: &str = "test://watched-resource";

impl Extras<Fixture> for FixtureExtras {
    fn capabilities(&self, caps: &mut ServerCapabilities) {
        *caps = from_json(json!({
            "tools": {"listChanged": false},
            "prompts": {"listChanged": false},
            "resources": {"subscribe": true, "listChanged": false},
            "logging": {},
        }));
    }

    fn list_resources(
        &self,
        _state: Arc<Fixture>,
    ) -> futures_box::BoxFuture<'static, Result<ListResourcesResult, McpError>> {
        Box::pin(async {
            Ok(from_json(json!({"resources": [
                {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
                 "description": "A static text resource for testing", "mimeType": "text/plain"},
                {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
                 "description": "A static binary resource (image) for testing", "mimeType": "image/png"},
                {"uri": WATCHED, "name": "watched-resource", "title": "Watched Resource",
                 "description": "A resource clients may subscribe to", "mimeType": "text/plain"},
            ]})))
        })
    }

    fn list_resource_templates(
        &self,
        _state: Arc<Fixture>,
    ) -> futures_box::BoxFuture<'static, Result<ListResourceTemplatesResult, McpError>> {
        Box::pin(async {
            Ok(from_json(json!({"resourceTemplates": [
                {"uriTemplate": "test://template/{id}/data", "name": "template",
                 "title": "Resource Template", "description": "A resource template with parameter substitution",
                 "mimeType": "application/json"},
            ]})))
        })
    }

    fn read_resource(
        &self,
        _state: Arc<Fixture>,
        req: ReadResourceRequestParams,
    ) -> futures_box::BoxFuture<'static, Result<ReadResourceResult, McpError>> {
        Box::pin(async move {
            let uri = req.uri.as_str();
            let content = match uri {
                "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
                    "text": "This is the content of the static text resource."}),
                "test://static-binary" => {
                    json!({"uri": uri, "mimeType": "image/png", "blob": IMAGE})
                }
                WATCHED => {
                    json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
                }
                _ => match uri
                    .strip_prefix("test://template/")
                    .and_then(|rest| rest.strip_suffix("/data"))
                    .filter(|id| !id.is_empty() && !id.contains('/'))
                {
                    Some(id) => json!({"uri": uri, "mimeType": "application/json",
                        "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
                    None => {
                        return Err(McpError::resource_not_found(
                            format!("Resource not found: {uri}"),
                            Some(json!({"uri": uri})),
                        ));
                    }
                },
            };
            Ok(from_json(json!({"contents": [content]})))
        })
    }

    fn subscribe(
        &self,
        state: Arc<Fixture>,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        let mut watchers = state.watchers.lock().unwrap_or_else(|p| p.into_inner());
        watchers.push((uri.clone(), peer.clone()));
        if uri == WATCHED {
            // The resource "changes" once right after the subscription, so a subscriber
            // sees a real update.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await;
            });
        }
        Ok(())
    }

    fn unsubscribe(&self, state: Arc<Fixture>, uri: String) -> Result<(), McpError> {
        let mut watchers = state.watchers.lock().unwrap_or_else(|p| p.into_inner());
        watchers.retain(|(u, _)| *u != uri);
        Ok(())
    }

    fn list_prompts(
        &self,
        _state: Arc<Fixture>,
    ) -> futures_box::BoxFuture<'static, Result<ListPromptsResult, McpError>> {
        Box::pin(async {
            Ok(from_json(json!({"prompts": [
                {"name": "test_simple_prompt", "title": "Simple Test Prompt",
                 "description": "A simple prompt without arguments"},
                {"name": "test_prompt_with_arguments", "title": "Prompt With Arguments",
                 "description": "A prompt with required arguments",
                 "arguments": [{"name": "arg1", "description": "First test argument", "required": true},
                               {"name": "arg2", "description": "Second test argument", "required": true}]},
                {"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource",
                 "description": "A prompt that includes an embedded resource",
                 "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
                {"name": "test_prompt_with_image", "title": "Prompt With Image",
                 "description": "A prompt that includes image content"},
            ]})))
        })
    }

    fn get_prompt(
        &self,
        _state: Arc<Fixture>,
        req: GetPromptRequestParams,
    ) -> futures_box::BoxFuture<'static, Result<GetPromptResult, McpError>> {
        Box::pin(async move {
            let args = req.arguments.unwrap_or_default();
            let arg = |name: &str| -> Result<String, McpError> {
                match args.get(name) {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(McpError::invalid_params(
                        format!("missing argument {name}"),
                        None,
                    )),
                }
            };
            let user = |content: Value| json!({"role": "user", "content": content});
            let messages = match req.name.as_ref() {
                "test_simple_prompt" => vec![user(
                    json!({"type": "text", "text": "This is a simple prompt for testing."}),
                )],
                "test_prompt_with_arguments" => vec![user(json!({"type": "text",
                    "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1")?, arg("arg2")?)}))],
                "test_prompt_with_embedded_resource" => vec![
                    user(
                        json!({"type": "resource", "resource": {"uri": arg("resourceUri")?,
                        "mimeType": "text/plain", "text": "Embedded resource content for testing."}}),
                    ),
                    user(
                        json!({"type": "text", "text": "Please process the embedded resource above."}),
                    ),
                ],
                "test_prompt_with_image" => vec![
                    user(json!({"type": "image", "data": IMAGE, "mimeType": "image/png"})),
                    user(json!({"type": "text", "text": "Please analyze the image above."})),
                ],
                other => {
                    return Err(McpError::invalid_params(format!("no prompt {other}"), None));
                }
            };
            Ok(from_json(json!({"messages": messages})))
        })
    }
}

mod futures_box {
    pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}
