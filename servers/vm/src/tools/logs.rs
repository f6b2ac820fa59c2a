//! `instance_logs`: page through an instance's logs (main command, background jobs, backend).

use kitbag_shared::{ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::instance_dir;
use crate::tools::validate;
use crate::{Caller, VmState};
use kitbag_shared::limits as budget;

pub const DEF: ToolDef = ToolDef::read(
    "instance_logs",
    "Read instance logs",
    "Read an instance's log from a byte offset (next_offset continues), also after it ended. \
     Not activity.",
);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    pub instance: String,
    /// main (default), job:<id>, exec:<n> or backend.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub offset: Option<u64>,
    /// Default 32768.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Last max_bytes.
    #[serde(default)]
    pub tail: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LogsResult {
    pub instance: String,
    pub source: String,
    pub text: String,
    pub offset: u64,
    pub next_offset: u64,
    /// The log's size now.
    pub size: u64,
    /// Nothing more to read now (for a job: it ended and everything was read).
    pub eof: bool,
    /// More bytes exist past next_offset.
    pub truncated: bool,
    /// Jobs: still running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// Jobs and main: how it ended, once it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<crate::proto::ExitStatus>,
}

pub async fn run(state: &VmState, p: LogsParams, caller: &Caller) -> ToolResult<Reply<LogsResult>> {
    let max = validate::range("max_bytes", p.max_bytes.unwrap_or(32 * 1024), 1, 256 * 1024)?;
    let (id, dir, engine) = {
        let map = state.lock();
        let id = VmState::find(&map, &p.instance, "instance", caller)?;
        let inst = map.get(&id);
        let dir = inst.map(|i| i.dir.clone()).unwrap_or_default();
        // A paused VM is not woken for its logs (reading is not activity): it shows what was
        // collected before it paused.
        let engine = inst
            .filter(|i| i.state == crate::instance::State::Running)
            .and_then(|i| i.sandbox.clone());
        (id, dir, engine)
    };
    if let Some(engine) = engine {
        engine.sync_logs().await;
    }
    let source = p.source.unwrap_or_else(|| "main".into());
    // The agent's logs (main, jobs) live where the instance can write: opened as untrusted.
    // Backend and exec logs are the server's own.
    let (opened, exit_name) = match source.as_str() {
        "main" => (
            instance_dir::open_guest_log(&dir, "main.log"),
            Some("main.exit".to_string()),
        ),
        "backend" => (open_server_log(&instance_dir::backend_log(&dir)), None),
        s => {
            let (kind, n) = s.split_once(':').unwrap_or(("", ""));
            let ok = !n.is_empty() && n.len() <= 24 && n.bytes().all(|b| b.is_ascii_alphanumeric());
            match (kind, ok) {
                ("job", true) => (
                    instance_dir::open_guest_log(&dir, &format!("job-{n}.log")),
                    Some(format!("job-{n}.exit")),
                ),
                ("exec", true) => match n.parse::<u64>() {
                    Ok(seq) => (open_server_log(&instance_dir::exec_log(&dir, seq)), None),
                    Err(_) => (Err(std::io::ErrorKind::NotFound.into()), None),
                },
                _ => {
                    return Err(ToolError::invalid_field(
                        "source",
                        format!("{s:?}: use main, backend, job:<id> or exec:<n>"),
                    ));
                }
            }
        }
    };
    let file = opened.map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ToolError::new(
                ErrorCode::NotFound,
                format!("instance {id} has no {source} log"),
            )
            .with_detail(json!({ "field": "source", "source": source }))
        } else {
            ToolError::io(&source, &e)
        }
    })?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let tail = p.tail.unwrap_or(false);
    let mut offset = if tail {
        size.saturating_sub(max)
    } else {
        p.offset.unwrap_or(0).min(size)
    };
    let n = max.min(size - offset) as usize;
    let mut buf = vec![0u8; n];
    use std::os::unix::fs::FileExt;
    let got = file
        .read_at(&mut buf, offset)
        .map_err(|e| ToolError::io(&source, &e))?;
    buf.truncate(got);
    if p.max_bytes.is_none() {
        // A default page also ends where the answer's budget would be passed (escaping grows
        // text up to 6×); a tail keeps its end and starts later.
        let room =
            budget::RESULT_BUDGET_BYTES - 512 - budget::json_len(&id) - budget::json_len(&source);
        let keep = budget::bytes_within(&buf, room, tail, |b| {
            String::from_utf8_lossy(b).into_owned()
        });
        if tail {
            offset += (buf.len() - keep) as u64;
            buf.drain(..buf.len() - keep);
        } else {
            buf.truncate(keep);
        }
    }
    let got = buf.len();
    let exit = exit_name
        .and_then(|f| instance_dir::read_guest_log(&dir, &f, 4096).ok())
        .and_then(|b| serde_json::from_slice::<crate::proto::ExitStatus>(&b).ok());
    let running = source.starts_with("job:").then_some(exit.is_none());
    let next = offset + got as u64;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let eof = next >= size && running != Some(true);
    Ok(Reply::new(
        LogsResult {
            instance: id,
            source,
            text: text.clone(),
            offset,
            next_offset: next,
            size,
            eof,
            truncated: next < size,
            running,
            exit,
        },
        if text.is_empty() {
            "(no output)".to_string()
        } else {
            text
        },
    ))
}

/// One of the server's own logs (never visible inside an instance); a link is still refused.
fn open_server_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let parent = path.parent().unwrap_or(std::path::Path::new("/"));
    let name = path.file_name().unwrap_or_default();
    instance_dir::open_untrusted(parent, std::path::Path::new(name))
}
