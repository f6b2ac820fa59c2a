//! `instance_copy` of directories: host side of [`crate::tree`]. In: the host directory is
//! walked (links sent as links, files opened beneath the root). Out: every entry is received
//! into memory (bounded by `max_bytes`), conflicts are checked before anything is written,
//! then the files are written together (all or nothing); links are not recreated on the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kitbag_shared::paths::fd::open_dirs;
use kitbag_shared::{Access, CallCtx, ErrorCode, Parents, Reply, ToolError, ToolResult};
use serde_json::json;

use crate::proto::Request;
use crate::tools::copy::{CopyParams, CopyResult};
use crate::tree::{self, Kind};
use crate::{Caller, VmState};

pub async fn copy_in_dir(
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
            tree::send(&mut w, &entries, |abs| policy.open_real_read(abs)).await?;
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

/// What a directory copy out did.
pub struct Received {
    pub files: u64,
    pub bytes: u64,
    pub skipped_links: u64,
}

/// Receive a directory's entries (the agent's answer said `tree`) into host directory `host`.
pub async fn receive_dir<R: tokio::io::AsyncBufRead + Unpin>(
    read: &mut R,
    ctx: &CallCtx,
    host: &str,
    max: u64,
    overwrite: bool,
) -> ToolResult<Received> {
    let mut budget = max;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut skipped_links = 0;
    loop {
        // The entries are the instance's to choose: their number is bounded like their bytes.
        if dirs.len() + files.len() + skipped_links as usize > tree::MAX_ENTRIES {
            return Err(ToolError::new(
                ErrorCode::OutputTooLarge,
                format!(
                    "guest_path: the directory holds more than {} entries",
                    tree::MAX_ENTRIES
                ),
            )
            .with_detail(json!({ "field": "guest_path" })));
        }
        match tree::next(read, &mut budget).await {
            Ok(Some((entry, rel, bytes))) => match entry.kind {
                Kind::Dir => dirs.push(rel),
                Kind::File => files.push((rel, bytes)),
                Kind::Symlink => skipped_links += 1,
                Kind::End => break,
            },
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                return Err(ToolError::new(
                    ErrorCode::OutputTooLarge,
                    format!("guest_path: the directory holds {e}; raise max_bytes (now {max})"),
                )
                .with_detail(json!({ "field": "max_bytes" })));
            }
            Err(e) => return Err(ToolError::internal(format!("the copy failed: {e}"))),
        }
    }
    let policy = ctx.policy().clone();
    let host = host.to_string();
    let bytes: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let n = files.len() as u64;
    kitbag_shared::blocking(move || {
        let join = |rel: &Path| -> String { format!("{}/{}", host.trim_end_matches('/'), rel.display()) };
        // Check every target first: nothing is written when one is refused.
        let mut targets = Vec::new();
        for (rel, data) in files {
            let path = join(&rel);
            let (resolved, parent) = policy.parent(&path, "host_path", Access::Write, Parents::Create)?;
            let exists = parent.stat().map_err(|e| ToolError::io(&path, &e))?.is_some();
            if exists && !overwrite {
                return Err(ToolError::new(
                    ErrorCode::FileExists,
                    format!("host_path: {} exists; pass overwrite: true to replace it (nothing was written)", resolved.rel),
                )
                .with_detail(json!({ "field": "host_path", "path": resolved.rel })));
            }
            targets.push((parent, data));
        }
        for rel in dirs {
            let path = join(&rel);
            let resolved = policy.resolve(&path, "host_path", Access::Write)?;
            let under = resolved.abs.strip_prefix(policy.root()).unwrap_or(Path::new("."));
            open_dirs(policy.root_fd(), under, true).map_err(|e| ToolError::io(&path, &e))?;
        }
        kitbag_shared::atomic::write_all_atomic_at(&targets)
            .map_err(|e| ToolError::io(&host, &e))
    })
    .await?;
    Ok(Received {
        files: n,
        bytes,
        skipped_links,
    })
}
