//! TLS to PostgreSQL over rustls, as a managed database (RDS, Cloud SQL, Azure) requires.
//!
//! The URL's `sslmode` decides, as the `postgres` client reads it: `disable` (plain),
//! `prefer` (the default: TLS when the server offers it) or `require`. libpq's `verify-ca` and
//! `verify-full` are read as `require`: kitbag always verifies the server's certificate chain
//! *and* its name, whatever the mode — an encrypted connection to an unverified server is
//! not offered. The roots: `sslrootcert=FILE` in the URL (PEM; taken out before the URL reaches
//! the client, which does not know it), else `$PGSSLROOTCERT`, else the system's bundle. A
//! Unix-socket URL never uses TLS (PostgreSQL offers none there).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::Socket;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where the system keeps its trusted roots (Debian, Ubuntu, Alpine; Fedora's path second).
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("sslrootcert {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("sslrootcert {}: no PEM certificate in it", path.display())]
    Empty { path: PathBuf },
    #[error("no trusted roots: give sslrootcert=FILE in the URL or PGSSLROOTCERT (checked: {0})")]
    NoRoots(String),
}

/// A URL as the `postgres` client accepts it, and the roots file it named, if any.
pub fn split_url(url: &str) -> (String, Option<PathBuf>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut root = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslrootcert", v)) => root = Some(PathBuf::from(percent_decode(v))),
            Some(("sslmode", "verify-ca" | "verify-full")) => kept.push("sslmode=require"),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, root)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector: the roots named (`root`, else `$PGSSLROOTCERT`, else the system bundle).
pub fn connector(root: Option<&Path>) -> Result<Rustls, TlsSetupError> {
    let env_root = std::env::var_os("PGSSLROOTCERT").map(PathBuf::from);
    let named = root.map(Path::to_path_buf).or(env_root);
    let mut roots = rustls::RootCertStore::empty();
    match named {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|source| TlsSetupError::Read {
                path: path.clone(),
                source,
            })?;
            for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(TlsSetupError::Empty { path });
            }
        }
        None => {
            for bundle in SYSTEM_BUNDLES {
                if let Ok(pem) = std::fs::read(bundle) {
                    for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                        let _ = roots.add(cert);
                    }
                }
            }
            if roots.is_empty() {
                return Err(TlsSetupError::NoRoots(SYSTEM_BUNDLES.join(", ")));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| TlsSetupError::NoRoots("no TLS version the provider supports".into()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Rustls {
        config: Arc::new(config),
    })
}

/// Makes a TLS connection per PostgreSQL connection.
#[derive(Clone)]
pub struct Rustls {
    config: Arc<rustls::ClientConfig>,
}

pub struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    /// `None` for a host that is no name (a Unix socket's directory: the client asks for a
    /// connector per host before it knows it will not use TLS there).
    name: Option<ServerName<'static>>,
    host: String,
}

impl MakeTlsConnect<Socket> for Rustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        Ok(RustlsConnect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_owned()).ok(),
            host: domain.to_owned(),
        })
    }
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let name = self.name.ok_or_else(|| {
                io::Error::other(format!(
                    "TLS needs a host name or address to verify, not {:?}",
                    self.host
                ))
            })?;
            let tls = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(Box::new(tls)))
        })
    }
}

/// The encrypted stream. No channel binding: SCRAM without `-PLUS`, which every server
/// accepts; the certificate check above is what authenticates the server.
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_parameters_leave_the_url_and_verify_modes_read_as_require() {
        assert_eq!(
            split_url("postgres://u@db/x"),
            ("postgres://u@db/x".to_string(), None)
        );
        let (url, root) = split_url(
            "postgres://u@db:5432/x?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=k",
        );
        assert_eq!(
            url,
            "postgres://u@db:5432/x?sslmode=require&application_name=k"
        );
        assert_eq!(root, Some(PathBuf::from("/etc/ca.pem")));
        let (url, _) = split_url("postgres://u@db/x?sslrootcert=/ca.pem");
        assert_eq!(url, "postgres://u@db/x");
    }

    #[test]
    fn a_roots_file_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tmp");
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate").expect("write");
        let e = connector(Some(&empty)).err().expect("refused").to_string();
        assert!(
            e.contains("no PEM certificate") && e.contains("ca.pem"),
            "{e}"
        );
        let e = connector(Some(&dir.path().join("missing.pem")))
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
