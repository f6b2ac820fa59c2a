//! HTTPS on the fixture's port, beside plain HTTP (told apart by the first byte: a TLS
//! ClientHello starts with 0x16).
//!
//! Why: kubectl (client-go's clientcmd) applies a kubeconfig's credentials only when the
//! transport is TLS — over `http://` it sends no token and every request is 401. So the
//! fixture makes a private CA and a server certificate for 127.0.0.1/localhost (with the
//! `openssl` command, in the state directory) and [`super::Fixture::write_kubeconfig_tls`]
//! names `https://` with that CA.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The CA certificate (PEM), for kubeconfigs.
    pub ca_pem: Vec<u8>,
}

impl Tls {
    pub fn new(state_dir: &Path) -> Tls {
        let dir = state_dir.join("tls");
        kitbag_testkit::test_certificates(&dir);
        let read = |f: &str| std::fs::read(dir.join(f)).expect("read certificate");
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&read("server.crt"))
                .collect::<Result<_, _>>()
                .expect("server certificate");
        let key = PrivateKeyDer::from_pem_slice(&read("server.key")).expect("server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("TLS config");
        // HTTP/1.1 only: upgrades (exec, port-forward) need it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            ca_pem: read("ca.crt"),
        }
    }
}
