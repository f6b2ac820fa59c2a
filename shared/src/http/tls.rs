//! HTTPS for `--http`, and mutual TLS: with `--tls-client-ca`, only a client presenting a
//! certificate that CA signed gets past the handshake — how a team's gateways reach their
//! workspace runners (issue #19), with the bearer token still checked on top.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its TLS handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the TLS files cannot be used (the flag is named).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {source}", path.display())]
    Pem {
        flag: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{flag} {}: no certificate in it (PEM `CERTIFICATE` blocks expected)", path.display())]
    Empty { flag: &'static str, path: PathBuf },
    #[error("--tls-client-ca {}: {source}", path.display())]
    ClientCa {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("--tls-cert / --tls-key: {0}")]
    Config(#[from] rustls::Error),
}

/// Every certificate in a PEM file.
pub fn certificates(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        flag,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            flag,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The server side: `cert` (its chain) and `key`, and with `client_ca` client certificates
/// required and verified against it.
pub fn acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<TlsAcceptor, TlsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chain = certificates("--tls-cert", cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
        flag: "--tls-key",
        path: key.to_owned(),
        source,
    })?;
    let builder = rustls::ServerConfig::builder();
    let builder = match client_ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certificates("--tls-client-ca", path)? {
                roots.add(c)?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|source| TlsError::ClientCa {
                    path: path.to_owned(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
