//! The checks every HTTP request passes before MCP sees it: `Host` and `Origin` (the
//! DNS-rebinding guard). The bearer token is [`super::auth`]'s.
//!
//! A page on an attacker's site can make a browser send requests to `127.0.0.1`; the browser
//! then names the attacker's host in `Host` (after a DNS rebind) or its site in `Origin`.
//! Accepting only loopback names and local origins stops both.

use http::HeaderMap;
use http::header::{HOST, ORIGIN};

pub use super::caller::Refusal;

/// Names a loopback listener answers to.
pub const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Accepted `Host` names (a port, when given, must match too); empty = any.
    pub hosts: Vec<String>,
    /// Accepted `Origin` values (`scheme://host[:port]`, port `*` = any); a request
    /// without `Origin` (every non-browser client) passes.
    pub origins: Vec<String>,
}

/// What no client of ours sends, and what a proxy in front could read otherwise than the
/// guard does: a second `Host` (which one names the server?) and an absolute-form target
/// (`POST http://evil.example/mcp`, whose authority outranks `Host` by RFC 9112 §3.2.2, so the
/// `Host` checked would not be the one meant). Both 400, on every path.
pub fn check_framing(uri: &http::Uri, headers: &HeaderMap) -> Result<(), Refusal> {
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(Refusal::BadRequest(
            "Bad Request: the request target must be a path (/mcp), not an absolute URI".into(),
        ));
    }
    if headers.get_all(HOST).iter().nth(1).is_some() {
        return Err(Refusal::BadRequest(
            "Bad Request: more than one Host header".into(),
        ));
    }
    Ok(())
}

impl Guard {
    /// `Host` and `Origin` ([`check_framing`] first made sure there is one `Host` at most).
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        self.check_host(headers)?;
        self.check_origin(headers)
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if self.hosts.is_empty() {
            return Ok(());
        }
        let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
            return Err(Refusal::Forbidden(
                "Forbidden: a Host header is required".into(),
            ));
        };
        let (name, port) = split_authority(host);
        let allowed = self.hosts.iter().any(|a| {
            let (a_name, a_port) = split_authority(a);
            a_name.eq_ignore_ascii_case(name) && (a_port.is_none() || a_port == port)
        });
        if allowed {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "Forbidden: Host `{}` is not served here (allowed: {}; add one with --allowed-host)",
                clip(host),
                self.hosts.join(", ")
            )))
        }
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("");
        if self.origins.iter().any(|a| origin_matches(a, origin)) {
            return Ok(());
        }
        Err(Refusal::Forbidden(format!(
            "Forbidden: Origin `{}` is not allowed (allowed: {}; add one with --allowed-origin)",
            clip(origin),
            if self.origins.is_empty() {
                "none".to_string()
            } else {
                self.origins.join(", ")
            }
        )))
    }
}

/// The origins a loopback server accepts by default: pages served from this machine.
pub fn local_origins() -> Vec<String> {
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .map(String::from)
        .to_vec()
}

/// `name[:port]` (IPv6 in brackets) → name without brackets, port text.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    let authority = authority.trim();
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((name, tail)) => (name, tail.strip_prefix(':')),
            None => (rest, None),
        };
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (authority, None),
    }
}

/// `allowed` is `scheme://host[:port]` with port `*` for any; an origin without a port
/// uses its scheme's default.
fn origin_matches(allowed: &str, origin: &str) -> bool {
    if allowed == "null" || origin == "null" {
        return allowed == origin;
    }
    let (Some((a_scheme, a_rest)), Some((o_scheme, o_rest))) =
        (allowed.split_once("://"), origin.split_once("://"))
    else {
        return false;
    };
    if !a_scheme.eq_ignore_ascii_case(o_scheme) {
        return false;
    }
    let (a_name, a_port) = split_authority(a_rest.trim_end_matches('/'));
    let (o_name, o_port) = split_authority(o_rest);
    let default_port = if o_scheme.eq_ignore_ascii_case("https") {
        "443"
    } else {
        "80"
    };
    let o_port = o_port.unwrap_or(default_port);
    a_name.eq_ignore_ascii_case(o_name)
        && match a_port {
            Some("*") => true,
            Some(p) => p == o_port,
            None => o_port == default_port,
        }
}

/// A header value quoted in an error, cut so a huge one cannot bloat the answer.
fn clip(text: &str) -> &str {
    match text.char_indices().nth(120) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(http::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    fn loopback() -> Guard {
        Guard {
            hosts: LOOPBACK_HOSTS.map(String::from).to_vec(),
            origins: local_origins(),
        }
    }

    #[test]
    fn loopback_names_pass_and_rebound_names_do_not() {
        let g = loopback();
        for host in [
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "LOCALHOST",
            "::1",
        ] {
            assert_eq!(g.check(&headers(&[(HOST, host)])), Ok(()), "{host}");
        }
        for host in ["evil.example:8080", "127.0.0.2", "localhost.evil.example"] {
            assert!(
                matches!(
                    g.check(&headers(&[(HOST, host)])),
                    Err(Refusal::Forbidden(_))
                ),
                "{host}"
            );
        }
        assert!(matches!(
            g.check(&HeaderMap::new()),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn one_host_and_an_origin_form_target_only() {
        let uri = |u: &str| u.parse::<http::Uri>().expect("uri");
        let one = headers(&[(HOST, "localhost")]);
        assert_eq!(check_framing(&uri("/mcp"), &one), Ok(()));
        for target in [
            "http://evil.example/mcp",
            "http://localhost/mcp",
            "localhost:80",
        ] {
            assert!(
                matches!(
                    check_framing(&uri(target), &one),
                    Err(Refusal::BadRequest(_))
                ),
                "{target}"
            );
        }
        let mut two = one.clone();
        two.append(HOST, HeaderValue::from_static("evil.example"));
        assert!(matches!(
            check_framing(&uri("/mcp"), &two),
            Err(Refusal::BadRequest(_))
        ));
        assert_eq!(check_framing(&uri("/mcp"), &HeaderMap::new()), Ok(()));
    }

    #[test]
    fn origins_are_matched_by_scheme_host_and_port() {
        let g = loopback();
        let ok = |o: &str| {
            g.check(&headers(&[(HOST, "localhost"), (ORIGIN, o)]))
                .is_ok()
        };
        assert!(ok("http://localhost:6274"));
        assert!(ok("http://127.0.0.1"));
        assert!(!ok("https://localhost:6274"), "scheme differs");
        assert!(!ok("http://evil.example"));
        assert!(!ok("null"));
        assert!(origin_matches(
            "https://app.example",
            "https://app.example:443"
        ));
        assert!(!origin_matches(
            "https://app.example",
            "https://app.example:8443"
        ));
        assert!(origin_matches("http://[::1]:*", "http://[::1]:3000"));
    }
}
