//! Each delegation's whole stream, kept as `.kitbag/delegate/<id>.ndjson` under the root —
//! the newest [`KEPT`] of them.

use std::path::{Path, PathBuf};

use kitbag_shared::{ToolError, ToolResult};

/// How many logs are kept.
pub const KEPT: usize = 50;

pub fn dir(root: &Path) -> PathBuf {
    root.join(".kitbag").join("delegate")
}

/// A new delegation's id: its start time (sortable) and a random part.
pub fn new_id() -> String {
    let ms = kitbag_shared::clock::unix_millis();
    let rand = kitbag_shared::random::hex(3).unwrap_or_default();
    format!("{ms}-{rand}")
}

/// Create the log of delegation `id`.
pub async fn create(root: &Path, id: &str) -> ToolResult<(PathBuf, tokio::fs::File)> {
    let d = dir(root);
    let shown = ".kitbag/delegate";
    tokio::fs::create_dir_all(&d)
        .await
        .map_err(|e| ToolError::io(shown, &e))?;
    let path = d.join(format!("{id}.ndjson"));
    let f = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .await
        .map_err(|e| ToolError::io(shown, &e))?;
    Ok((path, f))
}

/// `path` as the result names it: root-relative.
pub fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Remove all but the newest [`KEPT`] logs (ids sort by start time).
pub fn prune(root: &Path) {
    let Ok(entries) = std::fs::read_dir(dir(root)) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
        .collect();
    if logs.len() <= KEPT {
        return;
    }
    logs.sort_by_key(|p| {
        let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
        let ms: u128 = stem
            .as_deref()
            .and_then(|s| s.split('-').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        ms
    });
    for old in &logs[..logs.len() - KEPT] {
        let _ = std::fs::remove_file(old);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_logs_stay() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir(d.path())).unwrap();
        for i in 0..(KEPT + 7) {
            std::fs::write(dir(d.path()).join(format!("{}-ab.ndjson", 1000 + i)), "").unwrap();
        }
        prune(d.path());
        let mut left: Vec<String> = std::fs::read_dir(dir(d.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT);
        assert_eq!(left[0], "1007-ab.ndjson");
    }
}
