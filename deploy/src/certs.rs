//! The mutual-TLS material `kitbag deploy render --profile team` puts in the Secret
//! `kitbag-tls`: a CA made for this deployment alone, the runner's server certificate and the
//! gateways' client certificate (ECDSA P-256). The runner accepts only clients this CA signed;
//! the gateways trust only this CA for the runner. Bring your own (cert-manager, a company
//! CA) by replacing the Secret's five keys.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// A CA lasts ten years; the certificates it signs, 825 days (what browsers allow, a
/// reasonable rotation for internal certificates too).
const CA_DAYS: i64 = 3650;
const LEAF_DAYS: i64 = 825;

/// PEM texts, keyed as in the Secret.
pub struct Certs {
    pub ca: String,
    pub runner_cert: String,
    pub runner_key: String,
    pub gateway_cert: String,
    pub gateway_key: String,
}

/// A new CA and the two certificates: the runner's for `runner_names` (DNS names), the
/// gateway's as a client.
pub fn make(deployment: &str, runner_names: &[String]) -> anyhow::Result<Certs> {
    let now = OffsetDateTime::now_utc();
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, format!("kitbag {deployment} CA"));
    // An hour back: clocks of the nodes that check it may lag.
    ca.not_before = now - Duration::hours(1);
    ca.not_after = now + Duration::days(CA_DAYS);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
        let mut p = CertificateParams::new(names)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![usage];
        p.not_before = now - Duration::hours(1);
        p.not_after = now + Duration::days(LEAF_DAYS);
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &ca)?;
        anyhow::Ok((cert.pem(), key.serialize_pem()))
    };
    let (runner_cert, runner_key) = leaf(
        runner_names.to_vec(),
        &format!("kitbag {deployment} runner"),
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (gateway_cert, gateway_key) = leaf(
        Vec::new(),
        &format!("kitbag {deployment} gateway"),
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    Ok(Certs {
        ca: ca.pem(),
        runner_cert,
        runner_key,
        gateway_cert,
        gateway_key,
    })
}
