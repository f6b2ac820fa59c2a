//! `instance_copy`: move a file into or out of an instance.

use std::sync::Arc;

use base64::Engine;
use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::atomic;
use kitbag_shared::{
    Access, CallCtx, ErrorCode, Parents, PathPolicy, Reply, ToolDef, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::proto::{self, Answer, Request};
use crate::tools::validate;
use crate::tree::{self, Kind};
use crate::{Caller, VmState};

/// Content returned inline at most.
pub const MAX_INLINE: u64 = 256 * 1024;
/// Content returned inline without `max_bytes`: what the answer's budget holds (its
/// serialized size is checked too).
pub const DEFAULT_INLINE: u64 = (kitbag_shared::limits::RESULT_BUDGET_BYTES - 1024) as u64;

pub const DEF: ToolDef = ToolDef::write(
    "instance_copy",
    "Copy files to or from instance",
    "Copy a file or directory into or out of an instance; out without host_path returns it \
     inline (≤ 38 KB). Atomic.",
)
.destructive();

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    In,
    Out,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Utf8,
    Base64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyParams {
    pub instance: String,
    pub direction: Direction,
    pub guest_path: String,
    /// Root-relative source (in) or target (out).
    #[serde(default)]
    pub host_path: Option<String>,
    /// In: instead of host_path.
    #[serde(default)]
    pub content: Option<String>,
    /// Default utf8.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    #[serde(default)]
    pub overwrite: Option<bool>,
    /// Default 64 MB.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CopyResult {
    pub instance: String,
    pub guest_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    pub bytes: u64,
    /// Out without host_path: the file's content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Directory copies: files copied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Directory copies out: symbolic links found and not recreated on the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_links: Option<u64>,
}

pub async fn run(
    state: Arc<VmState>,
    p: CopyParams,
    ctx: CallCtx,
    caller: Caller,
) -> ToolResult<Reply<CopyResult>> {
    validate::writable(&state)?;
    validate::guest_path("guest_path", &p.guest_path)?;
    if caller.is_some() && p.host_path.is_some() {
        return Err(ToolError::new(
            ErrorCode::CapabilityDenied,
            "host_path: a guest has no access to the host's files; copy content inline, or use your own instance's files",
        )
        .with_detail(json!({ "field": "host_path" })));
    }
    let max = validate::range("max_bytes", p.max_bytes.unwrap_or(64 << 20), 1, 1 << 30)?;
    let overwrite = p.overwrite.unwrap_or(false);
    match p.direction {
        Direction::In => copy_in(state, p, ctx, max, overwrite, caller).await,
        Direction::Out => copy_out(state, p, ctx, max, overwrite, caller).await,
    }
}

async fn copy_in(
    state: Arc<VmState>,
    p: CopyParams,
    ctx: CallCtx,
    max: u64,
    overwrite: bool,
    caller: Caller,
) -> ToolResult<Reply<CopyResult>> {
    if p.content.is_none()
        && let Some(h) = &p.host_path
        && ctx
            .policy()
            .resolve(h, "host_path", Access::Read)?
            .abs
            .is_dir()
    {
        return copy_in_dir(state, p, ctx, max, overwrite, caller).await;
    }
    let source = source(&p, &ctx, max).await?;
    let size = source.len();
    if size > max {
        return Err(ToolError::new(
            ErrorCode::OutputTooLarge,
            format!("content: {size} bytes, more than max_bytes ({max})"),
        ));
    }
    let (id, sandbox, _busy) = state.sandbox(&p.instance, true, &caller)?;
    let req = Request::CopyIn {
        path: p.guest_path.clone(),
        size,
        overwrite,
    };
    let answer = sandbox
        .request_with_body(&req, |mut w| async {
            source.send(&mut w).await?;
            Ok(w)
        })
        .await
        .map_err(|e| ToolError::internal(format!("instance {id}: the copy failed: {e}")))?;
    if !answer.ok {
        return Err(agent_error(&answer, "guest_path", &p.guest_path));
    }
    Ok(Reply::new(
        CopyResult {
            instance: id.clone(),
            guest_path: p.guest_path.clone(),
            host_path: p.host_path.clone(),
            bytes: size,
            content: None,
            encoding: None,
            files: None,
            skipped_links: None,
        },
        format!("copied {size} bytes into {id}:{}", p.guest_path),
    ))
}

/// A host directory into the instance: walked (links sent as links, files opened beneath the
/// root) and sent as one entry stream.
async fn copy_in_dir(
    state: Arc<VmState>,
    p: CopyParams,
    ctx: CallCtx,
    max: u64,
    overwrite: bool,
    caller: Caller,
) -> ToolResult<Reply<CopyResult>> {
    let host = p.host_path.clone().unwrap_or_default();
    let resolved = ctx.policy().resolve(&host, "host_path", Access::Read)?;
    let policy = ctx.policy().clone();
    let abs = resolved.abs.clone();
    let h = host.clone();
    let (entries, total) =
        kitbag_shared::blocking(move || tree::walk(&abs, max).map_err(|e| size_error(&h, &e, max)))
            .await?;
    let files = entries.iter().filter(|(e, _)| e.kind == Kind::File).count() as u64;
    let (id, sandbox, _busy) = state.sandbox(&p.instance, true, &caller)?;
    let req = Request::CopyInTree {
        path: p.guest_path.clone(),
        overwrite,
        max_bytes: max,
    };
    let answer = sandbox
        .request_with_body(&req, |mut w| async {
            // Files are opened beneath the root, never by the path string the walk saw.
            let policy = policy.clone();
            tree::send(&mut w, &entries, move |abs| policy.open_real_read(abs)).await?;
            Ok(w)
        })
        .await
        .map_err(|e| ToolError::internal(format!("instance {id}: the copy failed: {e}")))?;
    if !answer.ok {
        let code = match answer.code.as_deref() {
            Some("exists") => ErrorCode::FileExists,
            Some("too_large") => ErrorCode::OutputTooLarge,
            _ => ErrorCode::IoError,
        };
        return Err(ToolError::new(
            code,
            format!(
                "guest_path: {}{}",
                answer.error.unwrap_or_default(),
                if code == ErrorCode::FileExists {
                    "; pass overwrite: true to replace files (files before it were copied)"
                } else {
                    ""
                }
            ),
        )
        .with_detail(json!({ "field": "guest_path" })));
    }
    Ok(Reply::new(
        CopyResult {
            instance: id.clone(),
            guest_path: p.guest_path.clone(),
            host_path: Some(host.clone()),
            bytes: total,
            content: None,
            encoding: None,
            files: Some(files),
            skipped_links: None,
        },
        format!(
            "copied {files} files ({total} bytes) from {host} into {id}:{}",
            p.guest_path
        ),
    ))
}

fn size_error(h: &str, e: &std::io::Error, max: u64) -> ToolError {
    if e.kind() == std::io::ErrorKind::FileTooLarge {
        ToolError::new(
            ErrorCode::OutputTooLarge,
            format!("host_path: {h} holds {e}; raise max_bytes (now {max}) or copy less"),
        )
        .with_detail(json!({ "field": "max_bytes" }))
    } else {
        ToolError::io(h, e).with_detail(json!({ "field": "host_path" }))
    }
}

/// What a file copied in comes from: `content` decoded, or a host file sent as it is read
/// (never held whole in memory).
enum Source {
    Bytes(Vec<u8>),
    File(std::fs::File, u64),
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::File(_, n) => *n,
        }
    }

    async fn send<W: tokio::io::AsyncWrite + Unpin>(self, w: &mut W) -> std::io::Result<()> {
        match self {
            Source::Bytes(b) => w.write_all(&b).await,
            Source::File(f, size) => {
                let f = tokio::fs::File::from_std(f);
                let copied = tokio::io::copy(&mut f.take(size), w).await?;
                if copied != size {
                    return Err(std::io::Error::other(format!(
                        "host_path shrank from {size} to {copied} bytes while it was copied"
                    )));
                }
                Ok(())
            }
        }
    }
}

async fn source(p: &CopyParams, ctx: &CallCtx, max: u64) -> ToolResult<Source> {
    match (&p.content, &p.host_path) {
        (Some(_), Some(_)) => Err(ToolError::invalid_field(
            "content",
            "give content or host_path, not both",
        )),
        (None, None) => Err(ToolError::invalid_field(
            "host_path",
            "direction \"in\" needs host_path or content",
        )),
        (Some(c), None) => match p.encoding.unwrap_or(Encoding::Utf8) {
            Encoding::Utf8 => Ok(Source::Bytes(c.as_bytes().to_vec())),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(c.trim())
                .map(Source::Bytes)
                .map_err(|e| ToolError::invalid_field("content", format!("not valid base64: {e}"))),
        },
        (None, Some(h)) => {
            let policy = ctx.policy().clone();
            let h = h.clone();
            kitbag_shared::blocking(move || open_host_file(&policy, &h, max)).await
        }
    }
}

/// Open a host file of at most `max` bytes (the size is checked before anything is sent).
fn open_host_file(policy: &PathPolicy, h: &str, max: u64) -> ToolResult<Source> {
    let (_, file) = policy.open_file(h, "host_path", Access::Read)?;
    let meta = file.metadata().map_err(|e| ToolError::io(h, &e))?;
    if !meta.is_file() {
        return Err(ToolError::new(
            ErrorCode::NotAFile,
            format!("host_path: {h} is neither a regular file nor a directory"),
        )
        .with_detail(json!({ "field": "host_path" })));
    }
    if meta.len() > max {
        return Err(ToolError::new(
            ErrorCode::OutputTooLarge,
            format!(
                "host_path: {h} has {} bytes, more than max_bytes ({max})",
                meta.len()
            ),
        )
        .with_detail(json!({ "field": "max_bytes", "size": meta.len() })));
    }
    Ok(Source::File(file, meta.len()))
}

async fn copy_out(
    state: Arc<VmState>,
    p: CopyParams,
    ctx: CallCtx,
    max: u64,
    overwrite: bool,
    caller: Caller,
) -> ToolResult<Reply<CopyResult>> {
    if p.content.is_some() {
        return Err(ToolError::invalid_field(
            "content",
            "only for direction \"in\"",
        ));
    }
    // Check the host side before touching the instance.
    let target = match &p.host_path {
        Some(h) => Some(ctx.policy().resolve(h, "host_path", Access::Write)?),
        None => None,
    };
    // Inline without max_bytes: what a default answer holds.
    let fit = target.is_none() && p.max_bytes.is_none();
    let limit = if target.is_some() {
        max
    } else if fit {
        DEFAULT_INLINE
    } else {
        MAX_INLINE.min(max)
    };
    let (id, sandbox, _busy) = state.sandbox(&p.instance, true, &caller)?;
    let stream = sandbox
        .agent()
        .await
        .map_err(|e| ToolError::internal(format!("instance {id}: {e}")))?;
    let (read, mut write) = tokio::io::split(stream);
    proto::write_line(
        &mut write,
        &Request::CopyOut {
            path: p.guest_path.clone(),
            max_bytes: limit,
            tree: target.is_some(),
        },
    )
    .await
    .map_err(|e| ToolError::internal(e.to_string()))?;
    let mut read = tokio::io::BufReader::new(read);
    let answer: Answer = proto::read_line(&mut read)
        .await
        .map_err(|e| ToolError::internal(e.to_string()))?;
    if !answer.ok {
        return Err(out_refused(&answer, target.is_none(), limit, &p.guest_path));
    }
    if answer.kind.as_deref() == Some("tree")
        && let Some(h) = &p.host_path
    {
        let out =
            crate::tools::copy_tree::receive_dir(&mut read, &ctx, h, limit, overwrite).await?;
        return Ok(tree_reply(id, &p.guest_path, h, &out));
    }
    let size = answer.size.unwrap_or(0);
    // The size is the instance's word: held against what was asked before anything is
    // allocated or written.
    if size > limit {
        return Err(ToolError::internal(format!(
            "instance {id} announced {size} bytes for {}, more than the {limit} it was asked for at most; nothing was written",
            p.guest_path
        )));
    }
    if let (Some(_), Some(h)) = (target, &p.host_path) {
        receive_file(&mut read, &ctx, h, size, overwrite).await?;
        drop(_busy);
        return Ok(Reply::new(
            CopyResult {
                instance: id.clone(),
                guest_path: p.guest_path.clone(),
                host_path: Some(h.clone()),
                bytes: size,
                content: None,
                encoding: None,
                files: None,
                skipped_links: None,
            },
            format!("copied {size} bytes from {id}:{} to {h}", p.guest_path),
        ));
    }
    // Inline: at most MAX_INLINE bytes (the limit asked of the instance).
    let mut bytes = Vec::with_capacity(size as usize);
    (&mut read)
        .take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| ToolError::internal(e.to_string()))?;
    if (bytes.len() as u64) != size {
        return Err(ToolError::internal("the instance sent less than announced"));
    }
    drop(_busy);
    let reply = inline_reply(id, p.guest_path.clone(), p.encoding, bytes);
    let weight = kitbag_shared::limits::json_len(&reply.data);
    if fit && weight >= kitbag_shared::limits::RESULT_BUDGET_BYTES {
        return Err(ToolError::new(
            ErrorCode::OutputTooLarge,
            format!(
                "{} ({size} bytes) is {weight} bytes in the answer (escaped or base64), more than a default answer holds: pass max_bytes (≤ {MAX_INLINE}) to have it inline, or host_path",
                p.guest_path
            ),
        )
        .with_detail(json!({ "field": "max_bytes", "size": size })));
    }
    Ok(reply)
}

/// The instance refused to send `guest_path`. Too large to return inline gets its own hint.
fn out_refused(answer: &Answer, inline: bool, limit: u64, guest_path: &str) -> ToolError {
    if answer.code.as_deref() == Some("too_large") && inline {
        return ToolError::new(
            ErrorCode::OutputTooLarge,
            format!(
                "{} has {} bytes, more than is returned inline ({limit}): pass host_path to copy it to a file{}",
                guest_path,
                answer.size.unwrap_or(0),
                if limit < MAX_INLINE {
                    format!(", or max_bytes (≤ {MAX_INLINE}) for more inline")
                } else {
                    String::new()
                }
            ),
        )
        .with_detail(json!({ "field": "host_path", "size": answer.size }));
    }
    agent_error(answer, "guest_path", guest_path)
}

fn tree_reply(
    id: String,
    guest_path: &str,
    h: &str,
    out: &crate::tools::copy_tree::Received,
) -> Reply<CopyResult> {
    Reply::new(
        CopyResult {
            instance: id.clone(),
            guest_path: guest_path.to_string(),
            host_path: Some(h.to_string()),
            bytes: out.bytes,
            content: None,
            encoding: None,
            files: Some(out.files),
            skipped_links: Some(out.skipped_links),
        },
        format!(
            "copied {} files ({} bytes) from {id}:{} to {h}{}",
            out.files,
            out.bytes,
            guest_path,
            if out.skipped_links > 0 {
                format!("; {} symbolic links not copied", out.skipped_links)
            } else {
                String::new()
            }
        ),
    )
}

/// Receive a copied-out file of `size` bytes into `host_path`: streamed into a temp file
/// beside it (never held in memory), put in place only when whole — an existing file is kept
/// unless `overwrite`, and is refused before anything is received.
async fn receive_file<R: tokio::io::AsyncRead + Unpin>(
    read: &mut R,
    ctx: &CallCtx,
    h: &str,
    size: u64,
    overwrite: bool,
) -> ToolResult<()> {
    let exists = |h: &str| {
        ToolError::new(
            ErrorCode::FileExists,
            format!("host_path: {h} exists; pass overwrite: true to replace it"),
        )
        .with_detail(json!({ "field": "host_path" }))
    };
    let policy = ctx.policy().clone();
    let h2 = h.to_string();
    let (abs, staged, file) = kitbag_shared::blocking(move || {
        let (resolved, parent) = policy.parent(&h2, "host_path", Access::Write, Parents::Create)?;
        let io =
            |e: std::io::Error| ToolError::io(&h2, &e).with_detail(json!({ "field": "host_path" }));
        if !overwrite && parent.stat().map_err(io)?.is_some() {
            return Err(exists(&h2));
        }
        // A new file gets a new file's mode; a replaced one keeps its own.
        let mode = (!overwrite).then(|| 0o666 & !atomic::process_umask());
        let (staged, file) = atomic::begin(parent, mode).map_err(io)?;
        Ok((resolved.abs, staged, file))
    })
    .await?;
    let mut out = tokio::fs::File::from_std(file);
    let copied = tokio::io::copy(&mut read.take(size), &mut out)
        .await
        .map_err(|e| ToolError::io(h, &e).with_detail(json!({ "field": "host_path" })))?;
    if copied != size {
        // Dropping `staged` removes the partial temp file.
        return Err(ToolError::internal(format!(
            "the instance sent {copied} of the {size} bytes it announced; nothing was written"
        )));
    }
    let file = out.into_std().await;
    let h2 = h.to_string();
    let policy = ctx.policy().clone();
    kitbag_shared::blocking(move || {
        let mut journal = Recorder::begin(&policy, "instance_copy");
        journal.before(&abs, Content::At(staged.target()));
        let placed = staged.seal(file).and_then(|()| {
            if overwrite {
                staged.commit()
            } else {
                staged.commit_new()
            }
        });
        if placed.is_ok() {
            journal.after_at(&abs);
            journal.finish();
        }
        placed.map_err(|e| {
            if atomic::is_exists(&e) {
                exists(&h2)
            } else {
                ToolError::io(&h2, &e).with_detail(json!({ "field": "host_path" }))
            }
        })
    })
    .await
}

/// A file returned in the answer: UTF-8 as text, anything else (or when asked) as base64.
fn inline_reply(
    id: String,
    guest_path: String,
    asked: Option<Encoding>,
    bytes: Vec<u8>,
) -> Reply<CopyResult> {
    let size = bytes.len() as u64;
    let (content, encoding) = match (asked, String::from_utf8(bytes)) {
        (Some(Encoding::Base64), Ok(s)) => (
            base64::engine::general_purpose::STANDARD.encode(s.as_bytes()),
            Encoding::Base64,
        ),
        (_, Ok(s)) => (s, Encoding::Utf8),
        (_, Err(e)) => (
            base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            Encoding::Base64,
        ),
    };
    Reply::new(
        CopyResult {
            instance: id,
            guest_path,
            host_path: None,
            bytes: size,
            content: Some(content.clone()),
            encoding: Some(encoding),
            files: None,
            skipped_links: None,
        },
        if encoding == Encoding::Utf8 {
            content
        } else {
            format!("({size} bytes of binary content, base64 in the structured result)")
        },
    )
}

fn agent_error(a: &Answer, field: &str, path: &str) -> ToolError {
    let msg = a.error.clone().unwrap_or_default();
    let code = match a.code.as_deref() {
        Some("not_found") => ErrorCode::FileNotFound,
        Some("exists") => ErrorCode::FileExists,
        Some("is_dir") => ErrorCode::NotAFile,
        Some("too_large") => ErrorCode::OutputTooLarge,
        Some("invalid") => ErrorCode::InvalidParams,
        _ => ErrorCode::IoError,
    };
    let hint = match code {
        ErrorCode::FileExists => "; pass overwrite: true to replace it",
        ErrorCode::NotAFile => "; directories: tar them with instance_exec, then copy the archive",
        _ => "",
    };
    ToolError::new(code, format!("{field}: {msg}{hint}"))
        .with_detail(json!({ "field": field, "path": path }))
}
