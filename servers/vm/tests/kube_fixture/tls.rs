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

/// A CA and a server certificate signed by it, in `dir`.
fn make_certs(dir: &Path) {
    std::fs::create_dir_all(dir).expect("tls dir");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend_from_slice(&ec);
    ca.extend_from_slice(&[
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=kitbag-fixture-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    kitbag_testkit::openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend_from_slice(&ec);
    csr.extend_from_slice(&[
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=kube-apiserver",
    ]);
    kitbag_testkit::openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("server.ext");
    kitbag_testkit::openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

impl Tls {
    pub fn new(state_dir: &Path) -> Tls {
        let dir = state_dir.join("tls");
        make_certs(&dir);
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
