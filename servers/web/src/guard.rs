//! The SSRF guard: which URLs and addresses a fetch may reach.
//!
//! Hosts are resolved once here; the connection goes to the checked addresses (the HTTP
//! client's resolver is this module), so a second lookup cannot swap in an internal address.
//! Every redirect hop is checked the same way.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use url::{Host, Url};

/// What the operator opened deliberately.
#[derive(Debug, Clone, Default)]
pub struct GuardConfig {
    pub allow_private: bool,
    /// Hosts (names or IP literals, lowercase) exempt from the address check.
    pub allow_hosts: Vec<String>,
}

impl GuardConfig {
    pub fn host_allowed(&self, host: &str) -> bool {
        let h = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.allow_hosts.contains(&h)
    }
}

/// Why an address may not be fetched, or None when it is public.
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return blocked_v4(v4).map(|_| "an IPv4-mapped IPv6 form of a blocked address");
            }
            let seg = v6.segments();
            if v6.is_unspecified() {
                Some("the unspecified address")
            } else if v6.is_loopback() {
                Some("loopback")
            } else if seg[0] & 0xfe00 == 0xfc00 {
                Some("a unique local (ULA) address")
            } else if seg[0] & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if seg[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if seg[0..6] == [0, 0, 0, 0, 0, 0] {
                // Deprecated IPv4-compatible form ::a.b.c.d.
                blocked_v4(Ipv4Addr::new(
                    (seg[6] >> 8) as u8,
                    seg[6] as u8,
                    (seg[7] >> 8) as u8,
                    seg[7] as u8,
                ))
                .map(|_| "an IPv4-compatible IPv6 form of a blocked address")
            } else if seg[0] == 0x64 && seg[1] == 0xff9b {
                let v4 = Ipv4Addr::new(
                    (seg[6] >> 8) as u8,
                    seg[6] as u8,
                    (seg[7] >> 8) as u8,
                    seg[7] as u8,
                );
                blocked_v4(v4).map(|_| "a NAT64 form of a blocked address")
            } else if seg[0] == 0x2002 {
                let v4 = Ipv4Addr::new(
                    (seg[1] >> 8) as u8,
                    seg[1] as u8,
                    (seg[2] >> 8) as u8,
                    seg[2] as u8,
                );
                blocked_v4(v4).map(|_| "a 6to4 form of a blocked address")
            } else {
                None
            }
        }
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if o[0] == 0 {
        Some("the unspecified / this-network range 0.0.0.0/8")
    } else if ip.is_loopback() {
        Some("loopback 127.0.0.0/8")
    } else if o[0] == 10
        || (o[0] == 172 && (16..=31).contains(&o[1]))
        || (o[0] == 192 && o[1] == 168)
    {
        Some("a private (RFC 1918) address")
    } else if o[0] == 100 && (64..=127).contains(&o[1]) {
        Some("carrier-grade NAT 100.64.0.0/10")
    } else if o[0] == 169 && o[1] == 254 {
        Some("link-local 169.254.0.0/16 (cloud metadata lives here)")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("IETF protocol assignments 192.0.0.0/24")
    } else if o[0] == 198 && (o[1] == 18 || o[1] == 19) {
        Some("benchmarking 198.18.0.0/15")
    } else if o[0] >= 224 {
        Some("multicast or reserved 224.0.0.0/3")
    } else {
        None
    }
}

/// A URL the fetcher refuses, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Malformed or unsupported: a bad argument.
    Invalid(String),
    /// Points at a blocked address.
    Blocked(String),
}

/// Check a URL before any connection: scheme, credentials, and IP-literal hosts.
pub fn check_url(url: &Url, cfg: &GuardConfig) -> Result<(), Refusal> {
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(Refusal::Invalid(format!(
                "scheme `{other}` is not supported; only http and https"
            )));
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refusal::Invalid(
            "credentials in URLs are not accepted".into(),
        ));
    }
    let Some(host) = url.host() else {
        return Err(Refusal::Invalid("the URL has no host".into()));
    };
    let host_str = url.host_str().unwrap_or_default();
    if cfg.allow_private || cfg.host_allowed(host_str) {
        return Ok(());
    }
    let ip = match host {
        Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        Host::Domain(_) => None,
    };
    if let Some(ip) = ip
        && let Some(why) = blocked_reason(ip)
    {
        return Err(Refusal::Blocked(format!("{host_str} is {why}")));
    }
    Ok(())
}

/// Resolve a host and refuse it if any address is blocked (unless allowed).
pub async fn resolve_checked(
    host: &str,
    port: u16,
    cfg: &GuardConfig,
) -> Result<Vec<SocketAddr>, Refusal> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Refusal::Invalid(format!("cannot resolve {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Refusal::Invalid(format!("{host} has no addresses")));
    }
    if !cfg.allow_private && !cfg.host_allowed(host) {
        for a in &addrs {
            if let Some(why) = blocked_reason(a.ip()) {
                return Err(Refusal::Blocked(format!(
                    "{host} resolves to {} — {why}",
                    a.ip()
                )));
            }
        }
    }
    Ok(addrs)
}

/// reqwest's resolver: every name the client connects to goes through the guard.
pub struct GuardResolver {
    pub cfg: Arc<GuardConfig>,
}

impl reqwest::dns::Resolve for GuardResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let cfg = self.cfg.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            match resolve_checked(&host, 0, &cfg).await {
                Ok(addrs) => {
                    let iter: reqwest::dns::Addrs = Box::new(addrs.into_iter());
                    Ok(iter)
                }
                Err(Refusal::Blocked(m)) | Err(Refusal::Invalid(m)) => Err(Box::new(
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, m),
                )
                    as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(u: &str) -> bool {
        let url = Url::parse(u).expect("parse");
        matches!(
            check_url(&url, &GuardConfig::default()),
            Err(Refusal::Blocked(_))
        )
    }

    #[test]
    fn blocks_every_internal_range_and_spelling() {
        for u in [
            "http://127.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0.0.0.0/",
            "http://224.0.0.1/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
            "http://[::]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[2002:7f00:1::]/",
        ] {
            assert!(refused(u), "{u} must be refused");
        }
        for u in [
            "http://93.184.216.34/",
            "https://[2606:4700::1111]/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
        ] {
            assert!(!refused(u), "{u} is public");
        }
    }

    #[test]
    fn schemes_credentials_and_allow_lists() {
        let cfg = GuardConfig::default();
        for u in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "http://user:pw@example.com/",
            "gopher://x/",
        ] {
            let url = Url::parse(u).expect("parse");
            assert!(
                matches!(check_url(&url, &cfg), Err(Refusal::Invalid(_))),
                "{u}"
            );
        }
        let allow = GuardConfig {
            allow_private: false,
            allow_hosts: vec!["127.0.0.1".into()],
        };
        assert!(check_url(&Url::parse("http://127.0.0.1:8080/").expect("p"), &allow).is_ok());
        assert!(check_url(&Url::parse("http://10.0.0.1/").expect("p"), &allow).is_err());
        let open = GuardConfig {
            allow_private: true,
            allow_hosts: vec![],
        };
        assert!(check_url(&Url::parse("http://10.0.0.1/").expect("p"), &open).is_ok());
    }

    #[tokio::test]
    async fn hostname_resolving_to_loopback_is_refused() {
        let e = resolve_checked("localhost", 80, &GuardConfig::default())
            .await
            .expect_err("blocked");
        assert!(matches!(e, Refusal::Blocked(m) if m.contains("loopback")));
    }
}
