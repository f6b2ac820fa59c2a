//! One rustls configuration for both the REST client (reqwest) and the WebSockets (exec,
//! port-forward): the cluster's CA from the kubeconfig (else the system's CA bundle), the
//! client certificate when the user has one, and `insecure-skip-tls-verify` honoured only
//! when the kubeconfig says so.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::config::{Auth, ClusterConfig};
use crate::error::{VmError, VmResult};

const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn bad(what: &str, e: impl std::fmt::Display) -> VmError {
    VmError::Invalid {
        field: "--kubeconfig",
        message: format!("{what}: {e}"),
    }
}

pub fn client_config(cfg: &ClusterConfig) -> VmResult<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| VmError::engine(format!("TLS: {e}")))?;
    let builder = if cfg.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let pem = match &cfg.ca_pem {
            Some(p) => p.clone(),
            None => std::fs::read(SYSTEM_BUNDLE).map_err(|e| VmError::io(SYSTEM_BUNDLE, e))?,
        };
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| bad("certificate-authority", e))?;
            roots
                .add(cert)
                .map_err(|e| bad("certificate-authority", e))?;
        }
        if roots.is_empty() {
            return Err(bad("certificate-authority", "no certificate in it"));
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match &cfg.auth {
        Auth::ClientCert { cert_pem, key_pem } => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| bad("client-certificate", e))?;
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("client-key", e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| bad("client-certificate", e))?
        }
        _ => builder.with_no_client_auth(),
    };
    // WebSocket upgrades are HTTP/1.1; so is this REST client (no h2 built).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// `insecure-skip-tls-verify: true`: the user chose to trust any certificate. Signatures are
/// still checked, so the handshake is at least with the holder of the certificate shown.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
