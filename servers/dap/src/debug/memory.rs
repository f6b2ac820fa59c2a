//! Actions that exist only when the adapter advertises them: instructions and memory
//! (disassemble, read_memory, write_memory), modules, loaded sources, and raw DAP requests.

use base64::Engine;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
use kitbag_shared::{PathPolicy, Reply, ToolError, ToolResult, args};
use serde_json::{Value, json};

use super::params::{Action, DebugParams};
use super::result::{DebugResult, Instruction, Memory, Module, SourceEntry};
use super::source::shown_path;
use super::{DapState, REQUEST_TIMEOUT, adapter_failure, need, require_capability};

/// The largest read_memory / write_memory, in bytes.
pub const MAX_MEMORY_BYTES: u64 = 4096;
/// The most instructions one disassemble returns.
const MAX_INSTRUCTIONS: u64 = 500;
/// The most modules or sources listed.
const MAX_LISTED: usize = 2000;
/// The largest custom_request body returned whole.
const MAX_BODY_CHARS: usize = 20_000;

pub async fn memory(state: &DapState, p: &DebugParams) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let client = &core.client;
    let reference = need(
        &p.memory_reference,
        "memory_reference",
        "a memoryReference (address) from a frame's instruction_pointer, a variable or evaluate",
    )?;
    let offset = p.offset.unwrap_or(0);
    let mut r = DebugResult::new(p.action, "ok");
    match p.action {
        Action::Disassemble => {
            require_capability(client, "supportsDisassembleRequest", "disassemble")?;
            let count = p.count.unwrap_or(16).clamp(1, MAX_INSTRUCTIONS);
            let body = client
                .request(
                    "disassemble",
                    json!({"memoryReference": reference, "instructionOffset": offset,
                        "instructionCount": count, "resolveSymbols": true}),
                    REQUEST_TIMEOUT,
                )
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let list: Vec<Instruction> = body["instructions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| Instruction {
                    address: i["address"].as_str().unwrap_or("").to_string(),
                    instruction: i["instruction"].as_str().unwrap_or("").to_string(),
                    bytes: i["instructionBytes"].as_str().map(String::from),
                    symbol: i["symbol"].as_str().map(super::cap),
                    line: i["line"].as_i64(),
                })
                .collect();
            // Held to the result budget: the next page starts after the last one shown.
            let (list, cut) = super::within_budget(&r, list);
            let mut text = list
                .iter()
                .map(|i| format!("{}  {}", i.address, i.instruction))
                .collect::<Vec<_>>()
                .join("\n");
            if cut {
                let next = offset + list.len() as i64;
                r.truncated = Some(true);
                r.next_offset = u64::try_from(next).ok();
                text.push_str(&format!("\n[more: offset {next}]"));
            }
            r.instructions = Some(list);
            Ok(Reply::new(r, text))
        }
        Action::ReadMemory => {
            require_capability(client, "supportsReadMemoryRequest", "read_memory")?;
            let count = args::range("count", p.count.unwrap_or(32), 1, MAX_MEMORY_BYTES)?;
            let body = client
                .request(
                    "readMemory",
                    json!({"memoryReference": reference, "offset": offset, "count": count}),
                    REQUEST_TIMEOUT,
                )
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let data = body["data"].as_str().unwrap_or("").to_string();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&data)
                .unwrap_or_default();
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let memory = Memory {
                address: body["address"].as_str().unwrap_or("").to_string(),
                data,
                hex: hex.join(" "),
                unreadable_bytes: body["unreadableBytes"].as_i64().unwrap_or(0),
            };
            let text = format!("{}: {}", memory.address, memory.hex);
            r.memory = Some(memory);
            Ok(Reply::new(r, text))
        }
        _ => {
            require_capability(client, "supportsWriteMemoryRequest", "write_memory")?;
            let data = need(&p.data, "data", "the bytes to write, base64-encoded")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| ToolError::invalid_field("data", format!("base64 bytes ({e})")))?;
            if bytes.is_empty() || bytes.len() as u64 > MAX_MEMORY_BYTES {
                return Err(ToolError::invalid_field(
                    "data",
                    format!("1 to {MAX_MEMORY_BYTES} bytes, base64-encoded"),
                ));
            }
            let body = client
                .request(
                    "writeMemory",
                    json!({"memoryReference": reference, "offset": offset,
                        "data": data.trim(), "allowPartial": false}),
                    REQUEST_TIMEOUT,
                )
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let written = body["bytesWritten"].as_i64().unwrap_or(bytes.len() as i64);
            r.bytes_written = Some(written);
            Ok(Reply::new(
                r,
                format!("wrote {written} bytes at {reference}+{offset}"),
            ))
        }
    }
}

/// A listing's page from `skip`, held to the result budget: `total`, and when entries follow,
/// `truncated` and `next_offset` (plus a line saying so for the text).
fn page_on<T: serde::Serialize>(
    r: &mut DebugResult,
    skip: usize,
    all: usize,
    list: Vec<T>,
) -> (Vec<T>, Option<String>) {
    r.total = Some(all as u64);
    let (list, _) = super::within_budget(r, list);
    let next = skip + list.len();
    if next >= all {
        return (list, None);
    }
    r.truncated = Some(true);
    r.next_offset = Some(next as u64);
    let more = format!("[{} of {all} shown; more: offset {next}]", list.len());
    (list, Some(more))
}

pub async fn listing(
    state: &DapState,
    policy: &PathPolicy,
    p: &DebugParams,
) -> ToolResult<Reply<DebugResult>> {
    let core = state.live().await?;
    let client = &core.client;
    let mut r = DebugResult::new(p.action, "ok");
    let skip = args::opt_at_least("offset", p.offset, 0)?.unwrap_or(0) as usize;
    match p.action {
        Action::Modules => {
            require_capability(client, "supportsModulesRequest", "modules")?;
            let body = client
                .request("modules", json!({}), REQUEST_TIMEOUT)
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let all = body["modules"].as_array().cloned().unwrap_or_default();
            let list: Vec<Module> = all
                .iter()
                .skip(skip)
                .take(MAX_LISTED)
                .map(|m| Module {
                    id: match &m["id"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                    name: m["name"].as_str().unwrap_or("").to_string(),
                    path: m["path"].as_str().map(|p| shown_path(policy, Some(p))),
                })
                .collect();
            let (list, more) = page_on(&mut r, skip, all.len(), list);
            let text = list
                .iter()
                .map(|m| format!("{} {}", m.name, m.path.as_deref().unwrap_or("")))
                .chain(more)
                .collect::<Vec<_>>()
                .join("\n");
            r.modules = Some(list);
            Ok(Reply::new(r, text))
        }
        Action::LoadedSources => {
            require_capability(client, "supportsLoadedSourcesRequest", "loaded_sources")?;
            let body = client
                .request("loadedSources", json!({}), REQUEST_TIMEOUT)
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let all = body["sources"].as_array().cloned().unwrap_or_default();
            let list: Vec<SourceEntry> = all
                .iter()
                .skip(skip)
                .take(MAX_LISTED)
                .map(|s| SourceEntry {
                    name: s["name"].as_str().unwrap_or("").to_string(),
                    path: shown_path(policy, s["path"].as_str()),
                })
                .collect();
            let (list, more) = page_on(&mut r, skip, all.len(), list);
            let text = list
                .iter()
                .map(|s| s.path.clone())
                .chain(more)
                .collect::<Vec<_>>()
                .join("\n");
            r.sources = Some(list);
            Ok(Reply::new(r, text))
        }
        _ => {
            let command = need(&p.command, "command", "a DAP command name")?;
            let args = Value::Object(p.arguments.clone().unwrap_or_default());
            let body = client
                .request(command, args, REQUEST_TIMEOUT)
                .await
                .map_err(|m| adapter_failure(client, m))?;
            let text = body.to_string();
            let body = match body {
                Value::Object(m) => m,
                Value::Null => serde_json::Map::new(),
                other => {
                    let mut m = serde_json::Map::new();
                    m.insert("value".into(), other);
                    m
                }
            };
            // Cut by characters for the text, and by bytes against the result budget.
            let room = RESULT_BUDGET_BYTES.saturating_sub(json_len(&r) + 16);
            if text.chars().count() > MAX_BODY_CHARS || json_len(&body) >= room {
                let shown: String = text.chars().take(MAX_BODY_CHARS).collect();
                r.truncated = Some(true);
                return Ok(Reply::new(
                    r,
                    format!("{shown}… [truncated at {MAX_BODY_CHARS} chars]"),
                ));
            }
            r.body = Some(body);
            Ok(Reply::new(r, text))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};

    /// 3,000 modules with long, quote-laden paths (before: the first 2,000, ≈ 800 KB): a
    /// default page stays under the budget, says where the next starts, and the next page
    /// starts exactly there.
    #[test]
    fn listings_page_within_the_budget() {
        let all: Vec<Module> = (0..3000)
            .map(|i| Module {
                id: i.to_string(),
                name: format!("lib{i}.so"),
                path: Some(format!("/opt/\"{}\"/lib{i}.so", "q".repeat(200))),
            })
            .collect();
        let mut seen = 0;
        let mut pages = 0;
        while seen < all.len() {
            let mut r = DebugResult::new(Action::Modules, "ok");
            let list = all.iter().skip(seen).take(MAX_LISTED).cloned().collect();
            let (list, more) = page_on(&mut r, seen, all.len(), list);
            assert_eq!(list[0].id, seen.to_string(), "nothing lost or repeated");
            r.modules = Some(list.clone());
            assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
            seen += list.len();
            if seen < all.len() {
                assert_eq!(r.truncated, Some(true));
                assert_eq!(r.next_offset, Some(seen as u64));
                assert!(more.is_some());
            } else {
                assert_eq!(r.next_offset, None);
            }
            pages += 1;
        }
        assert!(pages > 10, "{pages}");
    }
}
