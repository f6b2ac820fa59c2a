//! The suite's SEP-2322 tools (`test_input_required_result_*`), written as a handshake-era
//! server writes them: they ask the client mid-call (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) and wait. Through `kitbag serve --http`, a
//! 2026-07-28 client sees those requests as an `InputRequiredResult` and answers them by
//! calling again (the host's mrtr.rs); each request names its key in `inputRequests` with
//! `_meta["io.kitbag/inputKey"]`.

use serde_json::{Value, json};

use crate::{Fixture, ask_client, no_args, text};
use kitbag_shared::{CallCtx, ToolResult, ToolRouter};

/// Where a request names its key for the host.
const KEY_META: &str = "io.kitbag/inputKey";

fn keyed(key: &str, mut params: Value) -> Value {
    params["_meta"] = json!({ KEY_META: key });
    params
}

fn ask_name(key: &str, message: &str) -> Value {
    keyed(
        key,
        json!({"message": message, "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
    )
}

fn ask_capital() -> Value {
    keyed(
        "capital_question",
        json!({"messages": [{"role": "user", "content": {"type": "text",
            "text": "What is the capital of France?"}}], "maxTokens": 100}),
    )
}

fn ask_confirm() -> Value {
    keyed(
        "confirm",
        json!({"message": "Please confirm", "requestedSchema": {"type": "object",
            "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}),
    )
}

async fn elicit(ctx: &CallCtx, params: Value) -> ToolResult<Value> {
    ask_client(ctx, "elicitation/create", params).await
}

fn sampled(answer: &Value) -> &str {
    answer["content"]["text"].as_str().unwrap_or("(no text)")
}

fn roots(answer: &Value) -> String {
    answer["roots"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| r["uri"].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

pub fn tools(router: ToolRouter<Fixture>) -> ToolRouter<Fixture> {
    router
        .raw_tool(
            no_args(
                "test_input_required_result_elicitation",
                "Asks the user's name (SEP-2322 through the host)",
            ),
            |_, _, ctx| async move {
                let a = elicit(&ctx, ask_name("user_name", "What is your name?")).await?;
                let name = a["content"]["name"].as_str().unwrap_or("stranger");
                Ok(text(&format!("Hello, {name}!")))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_sampling",
                "Asks the client's model a question (SEP-2322 through the host)",
            ),
            |_, _, ctx| async move {
                let a = ask_client(&ctx, "sampling/createMessage", ask_capital()).await?;
                Ok(text(&format!("The model said: {}", sampled(&a))))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_list_roots",
                "Asks the client's roots (SEP-2322 through the host)",
            ),
            |_, _, ctx| async move {
                let a = ask_client(&ctx, "roots/list", keyed("client_roots", json!({}))).await?;
                Ok(text(&format!("Roots: {}", roots(&a))))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_multiple_inputs",
                "Asks for a name, a model answer and the roots at once",
            ),
            |_, _, ctx| async move {
                let (name, said, listed) = tokio::join!(
                    elicit(&ctx, ask_name("user_name", "What is your name?")),
                    ask_client(&ctx, "sampling/createMessage", ask_capital()),
                    ask_client(&ctx, "roots/list", keyed("client_roots", json!({}))),
                );
                let (name, said, listed) = (name?, said?, listed?);
                Ok(text(&format!(
                    "{}; {}; roots {}",
                    name["content"]["name"].as_str().unwrap_or("?"),
                    sampled(&said),
                    roots(&listed)
                )))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_multi_round",
                "Asks for a name, then for a colour (two rounds)",
            ),
            |_, _, ctx| async move {
                let first = elicit(&ctx, ask_name("step1", "What is your name?")).await?;
                let second = elicit(
                    &ctx,
                    keyed(
                        "step2",
                        json!({"message": "Your favourite colour?", "requestedSchema": {"type": "object",
                            "properties": {"color": {"type": "string"}}, "required": ["color"]}}),
                    ),
                )
                .await?;
                Ok(text(&format!(
                    "{} likes {}",
                    first["content"]["name"].as_str().unwrap_or("?"),
                    second["content"]["color"].as_str().unwrap_or("?")
                )))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_request_state",
                "Asks for a confirmation; answers state-ok once it has it",
            ),
            |_, _, ctx| async move {
                let a = elicit(&ctx, ask_confirm()).await?;
                Ok(text(&format!("state-ok (ok={})", a["content"]["ok"])))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_tampered_state",
                "Asks for a confirmation (the host refuses a tampered requestState)",
            ),
            |_, _, ctx| async move {
                let a = elicit(&ctx, ask_confirm()).await?;
                Ok(text(&format!("confirmed (ok={})", a["content"]["ok"])))
            },
        )
        .raw_tool(
            no_args(
                "test_input_required_result_capabilities",
                "Asks for a model answer and a name; uses what the client can give",
            ),
            |_, _, ctx| async move {
                let (said, name) = tokio::join!(
                    ask_client(&ctx, "sampling/createMessage", ask_capital()),
                    elicit(&ctx, ask_name("user_name", "What is your name?")),
                );
                Ok(text(&format!(
                    "sampling: {}; elicitation: {}",
                    said.map(|a| sampled(&a).to_owned())
                        .unwrap_or_else(|e| format!("refused ({e:?})")),
                    name.map(|a| a["content"].to_string())
                        .unwrap_or_else(|e| format!("refused ({e:?})"))
                )))
            },
        )
}
