//! The per-user token store: one file per remote resource, readable by its owner only, in
//! `$KITBAG_OAUTH_DIR`, else `$XDG_STATE_HOME/kitbag/oauth`, else
//! `~/.local/state/kitbag/oauth`. Each user of a machine logs in for themselves; nothing is
//! shared through agent.json.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What is kept for one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub resource: String,
    pub issuer: String,
    pub client_id: String,
    /// A secret the authorization server issued at registration (RFC 7591).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds; None: the server did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// This user's store.
    pub fn for_user() -> std::io::Result<Store> {
        let dir = match std::env::var_os("KITBAG_OAUTH_DIR") {
            Some(d) => PathBuf::from(d),
            None => match std::env::var_os("XDG_STATE_HOME") {
                Some(s) => PathBuf::from(s).join("kitbag/oauth"),
                None => {
                    let home = std::env::var_os("HOME").ok_or_else(|| {
                        std::io::Error::other(
                            "neither KITBAG_OAUTH_DIR, XDG_STATE_HOME nor HOME is set",
                        )
                    })?;
                    PathBuf::from(home).join(".local/state/kitbag/oauth")
                }
            },
        };
        Ok(Store { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `resource`'s tokens.
    pub fn path_of(&self, resource: &str) -> PathBuf {
        let digest = Sha256::digest(resource.trim_end_matches('/').as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }

    pub fn load(&self, resource: &str) -> Option<Stored> {
        let text = std::fs::read_to_string(self.path_of(resource)).ok()?;
        let stored: Stored = serde_json::from_str(&text).ok()?;
        (stored.resource.trim_end_matches('/') == resource.trim_end_matches('/')).then_some(stored)
    }

    /// Replace `stored.resource`'s tokens at once (a temporary file renamed over the old one),
    /// the directory 0700 and the file 0600.
    pub fn save(&self, stored: &Stored) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let mut file = tempfile::Builder::new()
            .prefix(".token-")
            .permissions(std::fs::Permissions::from_mode(0o600))
            .tempfile_in(&self.dir)?;
        file.write_all(&serde_json::to_vec_pretty(stored).map_err(std::io::Error::other)?)?;
        file.as_file().sync_all()?;
        file.persist(self.path_of(&stored.resource))
            .map_err(|e| e.error)?;
        Ok(())
    }

    /// Forget `resource`'s tokens; true when there were some.
    pub fn remove(&self, resource: &str) -> std::io::Result<bool> {
        match std::fs::remove_file(self.path_of(resource)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_private_replaced_whole_and_kept_per_resource() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store {
            dir: dir.path().join("oauth"),
        };
        let mut s = Stored {
            resource: "https://a.test/mcp".into(),
            issuer: "https://login.test".into(),
            client_id: "c".into(),
            client_secret: None,
            access_token: "at-1".into(),
            refresh_token: Some("rt-1".into()),
            expires_at: Some(10),
            scope: None,
        };
        store.save(&s).expect("save");
        s.access_token = "at-2".into();
        store.save(&s).expect("save again");
        assert_eq!(store.load("https://a.test/mcp/"), Some(s.clone()));
        assert_eq!(store.load("https://b.test/mcp"), None);
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&store.path_of(&s.resource)), 0o600);
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(
            std::fs::read_dir(store.dir()).expect("dir").count(),
            1,
            "no temporary files left"
        );
        assert!(store.remove(&s.resource).expect("remove"));
        assert!(!store.remove(&s.resource).expect("again"));
    }
}
