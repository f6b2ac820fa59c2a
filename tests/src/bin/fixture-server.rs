//! A minimal MCP server for host tests, speaking raw JSON-RPC on stdio.
//!
//! Tools: `fixture.echo` (a dotted name, as some third-party servers use), `file_read` (collides
//! with kitbag-files), `crash` (exits at once, mid-call). With `FIXTURE_GARBAGE=1` it writes
//! non-JSON lines to stdout between answers.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

fn main() {
    let garbage = std::env::var("FIXTURE_GARBAGE").is_ok_and(|v| v == "1");
    let name = std::env::var("FIXTURE_NAME").unwrap_or_else(|_| "fixture".into());
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue;
        }; // notifications need no answer
        let method = msg["method"].as_str().unwrap_or("");
        let result = match method {
            "initialize" => json!({
                "protocolVersion": msg["params"]["protocolVersion"].as_str().unwrap_or("2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "0"}
            }),
            "tools/list" => json!({"tools": [
                {"name": "fixture.echo", "description": "Echo the arguments.", "inputSchema": {"type": "object"}},
                {"name": "file_read", "description": "A fixture tool whose name collides.", "inputSchema": {"type": "object"}},
                {"name": "crash", "description": "Exit immediately.", "inputSchema": {"type": "object"}}
            ]}),
            "tools/call" => match msg["params"]["name"].as_str() {
                Some("crash") => std::process::exit(3),
                Some(tool) => {
                    json!({"content": [{"type": "text", "text": format!("{name} {tool} {}", msg["params"]["arguments"])}]})
                }
                None => json!({"content": [], "isError": true}),
            },
            "ping" => json!({}),
            _ => {
                let err = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}});
                let _ = writeln!(out, "{err}");
                let _ = out.flush();
                continue;
            }
        };
        if garbage {
            let _ = writeln!(out, "this is not JSON-RPC, just a stray print");
        }
        let _ = writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        );
        let _ = out.flush();
    }
}
