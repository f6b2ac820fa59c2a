//! JSON Web Tokens as an OAuth resource server checks them (RFC 7519, RFC 7515, RFC 9068):
//! the signature against the issuer's published keys (a JWK set, RFC 7517), then issuer,
//! audience and validity times. Signatures are checked with ring; only asymmetric algorithms
//! are accepted (`none` and the HMAC family would let anyone holding the key — or nobody — mint
//! tokens).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::{Map, Value};

/// A token longer than this is refused unread (a header carrying one is already odd).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was not accepted. Every message is safe to send back (no key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtError {
    Malformed(String),
    UnsupportedAlgorithm(String),
    /// No published key matches the token's `kid` (the key set may need a refresh).
    UnknownKey(Option<String>),
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    MissingClaim(&'static str),
}

impl fmt::Display for JwtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwtError::Malformed(why) => write!(f, "the token is not a valid JWT: {why}"),
            JwtError::UnsupportedAlgorithm(alg) => write!(
                f,
                "the token is signed with `{alg}`; accepted: {}",
                ALGORITHMS.join(", ")
            ),
            JwtError::UnknownKey(Some(kid)) => {
                write!(f, "no key of the issuer has kid `{}`", clip(kid))
            }
            JwtError::UnknownKey(None) => write!(f, "no key of the issuer fits the token"),
            JwtError::BadSignature => write!(f, "the token's signature does not verify"),
            JwtError::Expired => write!(f, "the token has expired"),
            JwtError::NotYetValid => write!(f, "the token is not valid yet (nbf)"),
            JwtError::WrongIssuer => write!(f, "the token was issued by another issuer"),
            JwtError::WrongAudience => write!(f, "the token is for another audience"),
            JwtError::MissingClaim(claim) => write!(f, "the token has no `{claim}` claim"),
        }
    }
}

impl std::error::Error for JwtError {}

/// Accepted `alg` values.
pub const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// One verification key of a JWK set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    /// The algorithm the key is pinned to, when the set says so.
    pub alg: Option<String>,
    key: PublicKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (0x04 ‖ x ‖ y) on P-256 or P-384.
    Ec {
        curve: Curve,
        point: Vec<u8>,
    },
    Ed25519(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<Value>,
}

#[derive(Deserialize)]
struct RawKey {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// The signing keys of a JWK set document. Keys this server cannot use (symmetric, for
/// encryption, other curves, malformed) are skipped, as RFC 7517 §5 asks.
pub fn parse_jwks(document: &[u8]) -> Result<Vec<Jwk>, JwtError> {
    let set: RawSet = serde_json::from_slice(document)
        .map_err(|e| JwtError::Malformed(format!("the JWK set is not {{\"keys\": [...]}}: {e}")))?;
    Ok(set.keys.into_iter().filter_map(parse_key).collect())
}

fn parse_key(value: Value) -> Option<Jwk> {
    let raw: RawKey = serde_json::from_value(value).ok()?;
    if raw.usage.as_deref().is_some_and(|u| u != "sig") {
        return None;
    }
    let field = |v: &Option<String>| v.as_deref().and_then(|s| b64(s).ok());
    let key = match raw.kty.as_str() {
        "RSA" => PublicKey::Rsa {
            n: field(&raw.n)?,
            e: field(&raw.e)?,
        },
        "EC" => {
            let (curve, len) = match raw.crv.as_deref()? {
                "P-256" => (Curve::P256, 32),
                "P-384" => (Curve::P384, 48),
                _ => return None,
            };
            let (x, y) = (field(&raw.x)?, field(&raw.y)?);
            if x.len() != len || y.len() != len {
                return None;
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            PublicKey::Ec { curve, point }
        }
        "OKP" if raw.crv.as_deref() == Some("Ed25519") => PublicKey::Ed25519(field(&raw.x)?),
        _ => return None,
    };
    Some(Jwk {
        kid: raw.kid,
        alg: raw.alg,
        key,
    })
}

/// What a token must say to be accepted.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    /// Seconds since the epoch.
    pub now: u64,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: u64,
}

/// The parts of a token's header needed to pick a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub alg: String,
    pub kid: Option<String>,
}

/// A token split and its header read, before any key is chosen.
pub struct Token<'a> {
    pub header: Header,
    signed: &'a str,
    signature: Vec<u8>,
    payload: Vec<u8>,
}

/// Split `token` into its three parts and read the header.
pub fn decode(token: &str) -> Result<Token<'_>, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::Malformed(format!(
            "longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    let mut parts = token.split('.');
    let (Some(head), Some(body), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed(
            "expected three base64url parts separated by dots".into(),
        ));
    };
    #[derive(Deserialize)]
    struct RawHeader {
        alg: String,
        kid: Option<String>,
        crit: Option<Value>,
    }
    let header: RawHeader = serde_json::from_slice(&b64(head)?)
        .map_err(|e| JwtError::Malformed(format!("header: {e}")))?;
    if header.crit.is_some() {
        // Critical extensions this server does not know must not be ignored (RFC 7515 §4.1.11).
        return Err(JwtError::Malformed(
            "the header has `crit` extensions".into(),
        ));
    }
    if !ALGORITHMS.contains(&header.alg.as_str()) {
        return Err(JwtError::UnsupportedAlgorithm(
            clip(&header.alg).to_string(),
        ));
    }
    Ok(Token {
        header: Header {
            alg: header.alg,
            kid: header.kid,
        },
        signed: &token[..head.len() + 1 + body.len()],
        signature: b64(sig)?,
        payload: b64(body)?,
    })
}

impl Token<'_> {
    /// Check the signature with the fitting key of `keys`, then the claims; the claims on
    /// success.
    pub fn verify(
        &self,
        keys: &[Jwk],
        expect: &Expect<'_>,
    ) -> Result<Map<String, Value>, JwtError> {
        let alg = self.header.alg.as_str();
        let candidates: Vec<&Jwk> = keys
            .iter()
            .filter(|k| self.header.kid.is_none() || k.kid == self.header.kid)
            .filter(|k| k.alg.as_deref().is_none_or(|a| a == alg))
            .filter(|k| fits(&k.key, alg))
            .collect();
        if candidates.is_empty() {
            return Err(JwtError::UnknownKey(self.header.kid.clone()));
        }
        if !candidates
            .iter()
            .any(|k| check_signature(&k.key, alg, self.signed.as_bytes(), &self.signature))
        {
            return Err(JwtError::BadSignature);
        }
        let claims: Map<String, Value> = serde_json::from_slice(&self.payload)
            .map_err(|e| JwtError::Malformed(format!("claims: {e}")))?;
        check_claims(&claims, expect)?;
        Ok(claims)
    }
}

/// Whether `alg` can be verified with `key` (an RSA key never checks an EC algorithm).
fn fits(key: &PublicKey, alg: &str) -> bool {
    match key {
        PublicKey::Rsa { .. } => alg.starts_with("RS") || alg.starts_with("PS"),
        PublicKey::Ec { curve, .. } => {
            matches!(
                (curve, alg),
                (Curve::P256, "ES256") | (Curve::P384, "ES384")
            )
        }
        PublicKey::Ed25519(_) => alg == "EdDSA",
    }
}

fn check_signature(key: &PublicKey, alg: &str, message: &[u8], sig: &[u8]) -> bool {
    match key {
        PublicKey::Rsa { n, e } => {
            let params: &signature::RsaParameters = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
                _ => return false,
            };
            signature::RsaPublicKeyComponents { n, e }
                .verify(params, message, sig)
                .is_ok()
        }
        PublicKey::Ec { curve, point } => {
            let algorithm: &dyn signature::VerificationAlgorithm = match curve {
                Curve::P256 => &signature::ECDSA_P256_SHA256_FIXED,
                Curve::P384 => &signature::ECDSA_P384_SHA384_FIXED,
            };
            UnparsedPublicKey::new(algorithm, point)
                .verify(message, sig)
                .is_ok()
        }
        PublicKey::Ed25519(x) => UnparsedPublicKey::new(&signature::ED25519, x)
            .verify(message, sig)
            .is_ok(),
    }
}

fn check_claims(claims: &Map<String, Value>, expect: &Expect<'_>) -> Result<(), JwtError> {
    let number = |name: &'static str| claims.get(name).and_then(Value::as_f64);
    let exp = number("exp").ok_or(JwtError::MissingClaim("exp"))?;
    if exp + (expect.leeway as f64) <= expect.now as f64 {
        return Err(JwtError::Expired);
    }
    if let Some(nbf) = number("nbf")
        && nbf > (expect.now + expect.leeway) as f64
    {
        return Err(JwtError::NotYetValid);
    }
    match claims.get("iss").and_then(Value::as_str) {
        None => return Err(JwtError::MissingClaim("iss")),
        Some(iss) if iss != expect.issuer => return Err(JwtError::WrongIssuer),
        Some(_) => {}
    }
    let audience_matches = |a: &Value| a.as_str().is_some_and(|a| same_url(a, expect.audience));
    match claims.get("aud") {
        None => Err(JwtError::MissingClaim("aud")),
        Some(Value::Array(list)) if list.iter().any(audience_matches) => Ok(()),
        Some(one) if audience_matches(one) => Ok(()),
        Some(_) => Err(JwtError::WrongAudience),
    }
}

/// Audience comparison: exact, but a trailing slash does not make another resource.
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The scopes a token grants: `scope` (RFC 8693/9068, space-separated) or `scp` (a string or
/// a list, as some issuers write it).
pub fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let split = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => split(s),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .flat_map(split)
            .collect(),
        _ => Vec::new(),
    }
}

fn b64(text: &str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| JwtError::Malformed("a part is not unpadded base64url".into()))
}

fn clip(text: &str) -> &str {
    match text.char_indices().nth(64) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    fn enc(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// An Ed25519 issuer made in-process (the integration tests sign with openssl instead).
    struct Issuer {
        pair: Ed25519KeyPair,
    }

    impl Issuer {
        fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
            Self {
                pair: Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair"),
            }
        }
        fn jwks(&self, kid: &str) -> Vec<Jwk> {
            let doc = serde_json::json!({"keys": [
                {"kty": "oct", "k": "c2VjcmV0", "kid": kid},
                {"kty": "OKP", "crv": "Ed25519", "kid": kid, "use": "sig",
                 "x": enc(self.pair.public_key().as_ref())},
            ]});
            parse_jwks(doc.to_string().as_bytes()).expect("jwks")
        }
        fn sign(&self, header: Value, claims: Value) -> String {
            let signed = format!(
                "{}.{}",
                enc(header.to_string().as_bytes()),
                enc(claims.to_string().as_bytes())
            );
            let sig = self.pair.sign(signed.as_bytes());
            format!("{signed}.{}", enc(sig.as_ref()))
        }
    }

    const NOW: u64 = 1_800_000_000;

    fn expect() -> Expect<'static> {
        Expect {
            issuer: "https://as.example",
            audience: "https://kitbag.example/mcp",
            now: NOW,
            leeway: 30,
        }
    }

    fn claims() -> Value {
        serde_json::json!({"iss": "https://as.example", "aud": ["other", "https://kitbag.example/mcp/"],
            "exp": NOW + 60, "sub": "ada", "scope": "read write"})
    }

    #[test]
    fn a_good_token_verifies_and_every_bad_one_says_why() {
        let issuer = Issuer::new();
        let keys = issuer.jwks("k1");
        assert_eq!(keys.len(), 1, "the symmetric key is skipped");
        let head = serde_json::json!({"alg": "EdDSA", "kid": "k1"});
        let check = |claims: Value| {
            decode(&issuer.sign(head.clone(), claims)).and_then(|t| t.verify(&keys, &expect()))
        };
        let ok = check(claims()).expect("valid");
        assert_eq!(scopes(&ok), ["read", "write"]);

        let with = |key: &str, v: Value| {
            let mut c = claims();
            c[key] = v;
            check(c)
        };
        assert_eq!(with("exp", (NOW - 31).into()), Err(JwtError::Expired));
        assert!(with("exp", (NOW - 29).into()).is_ok(), "within leeway");
        assert_eq!(with("nbf", (NOW + 60).into()), Err(JwtError::NotYetValid));
        assert_eq!(
            with("iss", "https://evil.example".into()),
            Err(JwtError::WrongIssuer)
        );
        assert_eq!(
            with("aud", "https://kitbag.example/other".into()),
            Err(JwtError::WrongAudience)
        );
        let mut no_exp = claims();
        no_exp.as_object_mut().expect("obj").remove("exp");
        assert_eq!(check(no_exp), Err(JwtError::MissingClaim("exp")));

        // Another key, another kid, a tampered payload, alg confusion, `none`.
        let other = Issuer::new();
        let forged = other.sign(head.clone(), claims());
        assert_eq!(
            decode(&forged).and_then(|t| t.verify(&keys, &expect())),
            Err(JwtError::BadSignature)
        );
        let unknown = issuer.sign(serde_json::json!({"alg": "EdDSA", "kid": "k2"}), claims());
        assert!(matches!(
            decode(&unknown).and_then(|t| t.verify(&keys, &expect())),
            Err(JwtError::UnknownKey(Some(k))) if k == "k2"
        ));
        let good = issuer.sign(head.clone(), claims());
        let mut parts: Vec<&str> = good.split('.').collect();
        let mut c = claims();
        c["scope"] = "read write exec".into();
        let tampered_body = enc(c.to_string().as_bytes());
        parts[1] = &tampered_body;
        assert_eq!(
            decode(&parts.join(".")).and_then(|t| t.verify(&keys, &expect())),
            Err(JwtError::BadSignature)
        );
        let rs = issuer.sign(serde_json::json!({"alg": "RS256", "kid": "k1"}), claims());
        assert!(matches!(
            decode(&rs).and_then(|t| t.verify(&keys, &expect())),
            Err(JwtError::UnknownKey(_))
        ));
        for alg in ["none", "HS256"] {
            let t = format!(
                "{}.{}.",
                enc(format!(r#"{{"alg":"{alg}"}}"#).as_bytes()),
                enc(b"{}")
            );
            assert!(
                matches!(decode(&t), Err(JwtError::UnsupportedAlgorithm(_))),
                "{alg}"
            );
        }
        for junk in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.e30.e30",
            &"x".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert!(
                matches!(decode(junk), Err(JwtError::Malformed(_))),
                "{junk:.20}"
            );
        }
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let m = |v: Value| v.as_object().cloned().expect("object");
        assert_eq!(
            scopes(&m(serde_json::json!({"scp": ["read", "exec"]}))),
            ["read", "exec"]
        );
        assert_eq!(scopes(&m(serde_json::json!({"scp": "write"}))), ["write"]);
        assert!(scopes(&m(serde_json::json!({}))).is_empty());
    }

    #[test]
    fn unusable_keys_are_skipped_not_fatal() {
        let doc = br#"{"keys": [
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "use": "enc"},
            {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
            {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"},
            {"kty": "RSA", "n": "!!", "e": "AQAB"},
            "not an object",
            {"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "ok"}
        ]}"#;
        let keys = parse_jwks(doc).expect("parsed");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ok"));
        assert!(parse_jwks(b"[]").is_err());
    }
}
