//! What an external server marked `"lazy": true` offered when it last started, so that the
//! next host lists its tools without starting it and starts it on its first call.
//!
//! One file per entry in `$KITBAG_CACHE_DIR`, else `$XDG_CACHE_HOME/kitbag/servers`, else
//! `~/.cache/kitbag/servers`, named by a digest of what decides the server's answers: command,
//! arguments, environment, working directory, URL and headers. A changed entry is another
//! server (its first start is with the host again); a server that lists other tools once
//! started replaces the file and the list (`tools/list_changed`). Only tools and declared
//! families are kept — no environment value, header or token. Directory 0700, files 0600.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::child_catalog::Families;
use kitbag_config::entry::ServerEntry;

/// The file's content.
#[derive(Serialize, Deserialize)]
struct Cached {
    /// The entry's whole digest: a file renamed or truncated names no other server.
    entry: String,
    tools: Vec<Tool>,
    families: Families,
}

/// The user's cache of lazy servers' catalogs.
#[derive(Debug, Clone)]
pub struct CatalogCache {
    dir: PathBuf,
}

impl CatalogCache {
    /// This user's cache; None when no directory can be named (no HOME).
    pub fn for_user() -> Option<CatalogCache> {
        let dir = match std::env::var_os("KITBAG_CACHE_DIR") {
            Some(d) => PathBuf::from(d),
            None => match std::env::var_os("XDG_CACHE_HOME") {
                Some(c) => PathBuf::from(c).join("kitbag/servers"),
                None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/kitbag/servers"),
            },
        };
        Some(CatalogCache { dir })
    }

    pub fn in_dir(dir: &Path) -> CatalogCache {
        CatalogCache {
            dir: dir.to_path_buf(),
        }
    }

    fn digest(entry: &ServerEntry) -> String {
        let decides = serde_json::json!({
            "command": entry.command,
            "args": entry.args,
            "env": entry.env,
            "cwd": entry.cwd,
            "url": entry.url,
            "headers": entry.headers,
        });
        Sha256::digest(decides.to_string().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{}.json", &digest[..32]))
    }

    /// The tools and families `entry`'s server offered when it last started.
    pub fn load(&self, entry: &ServerEntry) -> Option<(Vec<Tool>, Families)> {
        let digest = Self::digest(entry);
        let text = std::fs::read(self.path_of(&digest)).ok()?;
        let cached: Cached = serde_json::from_slice(&text).ok()?;
        (cached.entry == digest).then_some((cached.tools, cached.families))
    }

    /// Remember what `entry`'s server offers (a temporary file renamed over the old one).
    pub fn save(
        &self,
        entry: &ServerEntry,
        tools: &[Tool],
        families: Families,
    ) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let digest = Self::digest(entry);
        let cached = Cached {
            entry: digest.clone(),
            tools: tools.to_vec(),
            families,
        };
        let mut file = tempfile::Builder::new()
            .prefix(".catalog-")
            .permissions(std::fs::Permissions::from_mode(0o600))
            .tempfile_in(&self.dir)?;
        file.write_all(&serde_json::to_vec(&cached).map_err(std::io::Error::other)?)?;
        file.persist(self.path_of(&digest)).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arg: &str) -> ServerEntry {
        ServerEntry {
            command: "some-server".into(),
            args: vec![arg.into()],
            enabled: true,
            ..Default::default()
        }
    }

    fn tool(name: &str) -> Tool {
        serde_json::from_value(serde_json::json!({
            "name": name, "description": "d", "inputSchema": {"type": "object"}
        }))
        .expect("tool")
    }

    #[test]
    fn a_catalog_is_kept_per_entry_privately_and_replaced_whole() {
        let d = tempfile::tempdir().expect("tmp");
        let cache = CatalogCache::in_dir(&d.path().join("servers"));
        let a = entry("--a");
        assert!(cache.load(&a).is_none());
        let families = Families {
            prompts: true,
            ..Default::default()
        };
        cache.save(&a, &[tool("one")], families).expect("save");
        cache
            .save(&a, &[tool("one"), tool("two")], families)
            .expect("again");
        let (tools, f) = cache.load(&a).expect("cached");
        assert_eq!(tools.len(), 2);
        assert_eq!(f, families);
        // Another argument, or another environment value: another server.
        assert!(cache.load(&entry("--b")).is_none());
        let mut with_env = entry("--a");
        with_env.env.insert("TOKEN".into(), "x".into());
        assert!(cache.load(&with_env).is_none());
        // Settings that do not change what the server offers keep its catalog.
        let mut renamed = entry("--a");
        renamed.prefix = Some("p_".into());
        assert!(cache.load(&renamed).is_some());
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&d.path().join("servers")), 0o700);
        let files: Vec<_> = std::fs::read_dir(d.path().join("servers"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1, "no temporary file left: {files:?}");
        assert_eq!(mode(&files[0]), 0o600);
        let text = std::fs::read_to_string(&files[0]).expect("read");
        assert!(!text.contains("TOKEN"), "{text}");
    }
}
