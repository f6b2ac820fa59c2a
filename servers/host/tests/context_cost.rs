//! What the suite's tool list costs a model's context (issue #15 §6): for every tool that
//! `kitbag serve` lists by default, the bytes of `{"name", "description", "inputSchema"}`
//! as compact JSON — what a client sends the model. `outputSchema`, annotations and titles
//! are left out: clients do not put them in the prompt. Prints a per-tool table to stderr
//! (`cargo test -p kitbag --test context_cost -- --nocapture`) and holds the total under
//! a budget so that new tools and wordier descriptions have to make room.

use std::io::{BufRead, BufReader, Write};

use serde_json::{Value, json};

/// The whole suite's model-visible list, in bytes (issue #37: ≤ 40,000). 40 KB for the nine
/// first families; 46 KB once kitbag-vm's twelve tools joined; back under 40,000 when every
/// description and parameter text was trimmed to what a model needs (47,016 → 37,189 bytes
/// for 50 tools); 35,000 (issue #43: ≤ 700 per tool on average) once descriptions stopped
/// repeating what results and the schema already say (paging hints, error codes, unsigned
/// integers' `minimum: 0`): 38,532 → 34,170 bytes for 51 tools. `ask` and `form` (issue #39)
/// came in at 1,653 bytes; 29 descriptions were cut to what a model needs to make room
/// (36,620 → 34,990 for 55 tools). `checkpoint`, `checkpoint_list` and `checkpoint_restore`
/// came in at 824 bytes; limits a bad value's error names anyway (maxima, sizes) left the
/// parameter texts, and descriptions lost what the schema or result says (35,814 → 34,980 for
/// 58 tools). `agent_delegate` came in at 1,343 bytes, cut to 700 (no per-variant docs: they
/// made a `oneOf`); 23 descriptions lost asides (paging notes, defaults, examples) to make
/// room (36,323 → 34,998 for 59 tools). `web_fetch`'s `render` came
/// in at 141 bytes; five parameter texts lost limits their errors name, three descriptions lost
/// asides (35,139 → 34,983). Tighter budgets: `--tools lazy`, or a config without the families
/// unused.
const BUDGET: usize = 35_000;

/// With a model reachable (a `model` setting or an API key) the host also lists the subagent
/// job tools (`agent_job_start`, `agent_job_status`, `agent_job_result`: 998 bytes); without
/// one they could only fail, so they are not listed.
const BUDGET_WITH_MODEL: usize = 36_000;

/// The default `tools/list`, every page, as the host serves it over stdio — with an API key in
/// its environment (`model`), or with none.
fn default_tools(model: bool) -> Vec<Value> {
    let d = tempfile::tempdir().expect("tmp");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kitbag"));
    cmd.args(["serve"])
        .current_dir(d.path())
        .env_remove("KITBAG_HOST_DEPTH")
        .env_remove("KITBAG_CONFIG")
        .env_remove("KITBAG_MODEL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if model {
        cmd.env("ANTHROPIC_API_KEY", "sk-context-cost");
    }
    let mut child = cmd.spawn().expect("spawn kitbag serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").expect("write");
        stdin.flush().expect("flush");
    };
    // Wait for the answer to request `id`, skipping notifications.
    let mut answer = |id: u64| -> Value {
        for line in lines.by_ref() {
            let v: Value = serde_json::from_str(&line.expect("read")).expect("json line");
            if v["id"] == id {
                return v;
            }
        }
        panic!("the host closed stdout before answering request {id}");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "context-cost", "version": "1"}}}),
    );
    answer(0);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    for id in 1.. {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}));
        let r = answer(id);
        let page = r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list failed: {r}"));
        tools.extend(page.iter().cloned());
        cursor = r["result"]
            .get("nextCursor")
            .filter(|c| !c.is_null())
            .cloned();
        if cursor.is_none() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    tools
}

#[test]
fn the_default_tool_list_fits_the_context_budget() {
    fits(&default_tools(false), BUDGET);
}

#[test]
fn with_a_model_the_job_tools_join_within_their_budget() {
    let tools = default_tools(true);
    assert!(tools.iter().any(|t| t["name"] == "agent_job_start"));
    fits(&tools, BUDGET_WITH_MODEL);
}

fn fits(tools: &[Value], budget: usize) {
    assert!(tools.len() >= 38, "{} tools", tools.len());
    let mut rows: Vec<(usize, usize, String)> = tools
        .iter()
        .map(|t| {
            let desc = t["description"].as_str().map_or(0, str::len);
            (
                kitbag_testkit::bench::model_visible_bytes(t),
                desc,
                t["name"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
    let total: usize = rows.iter().map(|r| r.0).sum();
    let mut table = format!("{:<22} {:>7} {:>12}\n", "tool", "bytes", "description");
    for (bytes, desc, name) in &rows {
        table.push_str(&format!("{name:<22} {bytes:>7} {desc:>12}\n"));
    }
    table.push_str(&format!(
        "{:<22} {total:>7}   ({} tools, budget {budget})\n",
        "total",
        rows.len()
    ));
    eprint!("{table}");
    assert!(
        total <= budget,
        "the model-visible tool list is {total} bytes, over the {budget}-byte budget:\n{table}"
    );
}
