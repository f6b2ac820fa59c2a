//! `instance_copy` of a directory out of an instance: host side of [`crate::tree`]. Every
//! entry is received into memory (bounded by `max_bytes`), conflicts are checked before
//! anything is written, then the files are written together (all or nothing); links are not
//! recreated on the host. (A directory copied in is walked and sent by `copy.rs`.)

use std::path::{Path, PathBuf};

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
