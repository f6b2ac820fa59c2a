//! The static bearer token of `--auth-token-file`: read it, or make a new one.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Shortest token accepted: anything shorter is guessable.
const MIN_TOKEN_CHARS: usize = 16;

/// The token of a token file: the secret itself, or its digest written `sha256:<hex>` (so a
/// server's disk need not hold the secret: `printf %s TOKEN | sha256sum`).
pub fn parse(text: &str) -> super::auth::StaticToken {
    super::auth::StaticToken::from_digest_text(text)
        .unwrap_or_else(|| super::auth::StaticToken::from_secret(text))
}

/// The token in `path` (surrounding whitespace removed).
pub fn read(path: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| anyhow::anyhow!("--auth-token-file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_CHARS || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        anyhow::bail!(
            "--auth-token-file {}: the token must be one line of at least {MIN_TOKEN_CHARS} characters without spaces (make one with --generate-auth-token)",
            path.display()
        );
    }
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        // Secrets mounted by Kubernetes are 0644 by default: warn, do not refuse.
        tracing::warn!(
            "--auth-token-file {}: readable by other users (mode {:o}); 0600 is safer",
            path.display(),
            meta.permissions().mode() & 0o777
        );
    }
    Ok(token.to_string())
}

/// Create `path` holding a new random token (256 bits, hex), readable by its owner only.
/// An existing file is kept: the token in it is read instead.
pub fn generate(path: &Path) -> anyhow::Result<String> {
    let token =
        crate::random::hex(32).map_err(|e| anyhow::anyhow!("random bytes for a new token: {e}"))?;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut f) => {
            f.write_all(token.as_bytes())
                .and_then(|()| f.write_all(b"\n"))
                .and_then(|()| f.sync_all())
                .map_err(|e| anyhow::anyhow!("--auth-token-file {}: {e}", path.display()))?;
            eprintln!("wrote a new bearer token to {} (mode 0600)", path.display());
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(anyhow::anyhow!("--auth-token-file {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_private_long_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        let first = generate(&path).expect("generate");
        assert_eq!(first.len(), 64);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A second start reads the same token rather than replacing it.
        assert_eq!(generate(&path).expect("again"), first);
        assert_eq!(read(&path).expect("read"), first);
    }

    #[test]
    fn short_or_missing_tokens_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        assert!(read(&path).is_err());
        std::fs::write(&path, "short\n").expect("write");
        let err = read(&path).expect_err("short token").to_string();
        assert!(err.contains("at least 16"), "{err}");
    }
}
