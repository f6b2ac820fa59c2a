//! `instance_copy` of a directory out of an instance: host side of [`crate::tree`]. Every
//! file is streamed into a temp file beside its target as it arrives (bounded by `max_bytes`,
//! never held in memory), a conflict stops the copy before anything is in place, then the
//! files are put in place together (all or nothing); links are not recreated on the host. (A directory copied in is walked and sent by `copy.rs`.)

use std::path::{Path, PathBuf};

use kitbag_checkpoints::{Content, Recorder};
use kitbag_shared::atomic::{self, Staged};
use kitbag_shared::paths::ParentDir;
use kitbag_shared::paths::fd::open_dirs;
use kitbag_shared::{Access, CallCtx, ErrorCode, Parents, ToolError, ToolResult};
use serde_json::json;

use crate::tree::{self, Kind};

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
    // Each file is streamed into a temp file beside its target as it arrives; none is put in
    // place before the last has arrived whole (dropping these removes the temps).
    let mut staged: Vec<(PathBuf, Staged<ParentDir>)> = Vec::new();
    let mut bytes = 0u64;
    let mut skipped_links = 0;
    loop {
        // The entries are the instance's to choose: their number is bounded like their bytes.
        if dirs.len() + staged.len() + skipped_links as usize > tree::MAX_ENTRIES {
            return Err(ToolError::new(
                ErrorCode::OutputTooLarge,
                format!(
                    "guest_path: the directory holds more than {} entries",
                    tree::MAX_ENTRIES
                ),
            )
            .with_detail(json!({ "field": "guest_path" })));
        }
        match tree::next_header(read, &mut budget).await {
            Ok(Some((entry, rel))) => match entry.kind {
                Kind::Dir => dirs.push(rel),
                Kind::File => {
                    staged.push(receive_file(read, ctx, host, &rel, entry.size, overwrite).await?);
                    bytes += entry.size;
                }
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
    let n = staged.len() as u64;
    kitbag_shared::blocking(move || {
        for rel in dirs {
            let path = join(&host, &rel);
            let resolved = policy.resolve(&path, "host_path", Access::Write)?;
            let under = resolved
                .abs
                .strip_prefix(policy.root())
                .unwrap_or(Path::new("."));
            open_dirs(policy.root_fd(), under, true).map_err(|e| ToolError::io(&path, &e))?;
        }
        let mut journal = Recorder::begin(&policy, "instance_copy");
        for (abs, s) in &staged {
            journal.before(abs, Content::At(s.target()));
        }
        let (paths, staged): (Vec<PathBuf>, Vec<_>) = staged.into_iter().unzip();
        atomic::commit_all(staged).map_err(|e| ToolError::io(&host, &e))?;
        for abs in &paths {
            journal.after_at(abs);
        }
        journal.finish();
        Ok(())
    })
    .await?;
    Ok(Received {
        files: n,
        bytes,
        skipped_links,
    })
}

fn join(host: &str, rel: &Path) -> String {
    format!("{}/{}", host.trim_end_matches('/'), rel.display())
}

/// One file of the tree: its target checked (refused when it exists without `overwrite`, so
/// nothing is written), then its bytes streamed into a sealed temp file beside it.
async fn receive_file<R: tokio::io::AsyncBufRead + Unpin>(
    read: &mut R,
    ctx: &CallCtx,
    host: &str,
    rel: &Path,
    size: u64,
    overwrite: bool,
) -> ToolResult<(PathBuf, Staged<ParentDir>)> {
    let policy = ctx.policy().clone();
    let path = join(host, rel);
    let p2 = path.clone();
    let (abs, staged, file) = kitbag_shared::blocking(move || {
        let (resolved, parent) = policy.parent(&p2, "host_path", Access::Write, Parents::Create)?;
        let exists = parent.stat().map_err(|e| ToolError::io(&p2, &e))?.is_some();
        if exists && !overwrite {
            return Err(ToolError::new(
                ErrorCode::FileExists,
                format!("host_path: {} exists; pass overwrite: true to replace it (nothing was written)", resolved.rel),
            )
            .with_detail(json!({ "field": "host_path", "path": resolved.rel })));
        }
        let (staged, file) = atomic::begin(parent, None).map_err(|e| ToolError::io(&p2, &e))?;
        Ok((resolved.abs, staged, file))
    })
    .await?;
    let mut out = tokio::fs::File::from_std(file);
    tree::receive_body(read, &mut out, size)
        .await
        .map_err(|e| ToolError::internal(format!("the copy failed at {path}: {e}")))?;
    let file = out.into_std().await;
    kitbag_shared::blocking(move || {
        staged.seal(file).map_err(|e| ToolError::io(&path, &e))?;
        Ok((abs, staged))
    })
    .await
}
