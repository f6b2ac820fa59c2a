//! A fake OAuth authorization server for resource-server tests, on loopback: it publishes
//! RFC 8414 metadata and a JWK set, and mints JWTs.
//!
//! Keys are made and tokens signed by the `openssl` command (RS256, ES256, EdDSA), an
//! implementation independent of the ring-based verifier under test — so a token accepted
//! here is one a real issuer could have produced, not one kitbag agrees with itself about.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
    EdDsa,
}

impl Alg {
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
        }
    }
}

/// One signing key: its PEM file and its public JWK.
pub struct Key {
    pub kid: String,
    pub alg: Alg,
    pem: PathBuf,
    pub jwk: Value,
}

fn openssl(args: &[&str], input: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run openssl (Debian's openssl package)");
    if let Some(bytes) = input {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("write");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// DER `SEQUENCE { INTEGER r, INTEGER s }` (openssl's ECDSA signature) → JWS's fixed r ‖ s.
fn ecdsa_der_to_fixed(der: &[u8], half: usize) -> Vec<u8> {
    let mut at = 2; // SEQUENCE, short length (a P-256 signature is < 128 bytes)
    let mut out = Vec::new();
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "INTEGER");
        let len = der[at + 1] as usize;
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(half)..];
        out.extend(std::iter::repeat_n(0, half - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    out
}

impl Key {
    /// A new key pair in `dir`.
    pub fn generate(dir: &Path, alg: Alg, kid: &str) -> Key {
        let pem = dir.join(format!("{kid}.pem"));
        let p = pem.to_str().expect("utf-8");
        let algorithm = match alg {
            Alg::Rs256 => vec!["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
            Alg::Es256 => vec!["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
            Alg::EdDsa => vec!["-algorithm", "ed25519"],
        };
        let mut args = vec!["genpkey"];
        args.extend(algorithm);
        args.extend(["-out", p]);
        openssl(&args, None);
        let spki = openssl(&["pkey", "-in", p, "-pubout", "-outform", "DER"], None);
        let jwk = match alg {
            Alg::Rs256 => {
                let text =
                    String::from_utf8(openssl(&["rsa", "-in", p, "-noout", "-modulus"], None))
                        .expect("utf-8");
                let modulus = text.trim().trim_start_matches("Modulus=");
                json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                       "n": b64url(&hex_bytes(modulus)), "e": "AQAB"})
            }
            Alg::Es256 => {
                // The SPKI's last 65 bytes are the uncompressed point 04 ‖ x ‖ y.
                let point = &spki[spki.len() - 65..];
                assert_eq!(point[0], 4);
                json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                       "x": b64url(&point[1..33]), "y": b64url(&point[33..])})
            }
            Alg::EdDsa => json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                                 "x": b64url(&spki[spki.len() - 32..])}),
        };
        Key {
            kid: kid.into(),
            alg,
            pem,
            jwk,
        }
    }

    /// A compact JWS of `claims`, signed by openssl.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg.name(), "typ": "at+jwt", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let p = self.pem.to_str().expect("utf-8");
        let sig = match self.alg {
            Alg::Rs256 => openssl(&["dgst", "-sha256", "-sign", p], Some(input.as_bytes())),
            Alg::Es256 => ecdsa_der_to_fixed(
                &openssl(&["dgst", "-sha256", "-sign", p], Some(input.as_bytes())),
                32,
            ),
            Alg::EdDsa => {
                let msg = self.pem.with_extension("msg");
                std::fs::write(&msg, &input).expect("write");
                openssl(
                    &[
                        "pkeyutl",
                        "-sign",
                        "-inkey",
                        p,
                        "-rawin",
                        "-in",
                        msg.to_str().expect("utf-8"),
                    ],
                    None,
                )
            }
        };
        format!("{input}.{}", b64url(&sig))
    }
}

/// The issuer: metadata at `/.well-known/oauth-authorization-server`, keys at `/jwks`.
pub struct Issuer {
    pub url: String,
    /// The JWK set served now (replace it to rotate keys).
    pub jwks: Arc<Mutex<Value>>,
    /// How many times `/jwks` was fetched.
    pub jwks_fetches: Arc<AtomicUsize>,
    /// Every Authorization header the issuer was sent (none expected).
    pub seen_authorization: Arc<Mutex<Vec<String>>>,
}

impl Issuer {
    pub fn start(keys: &[&Key]) -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let jwks = Arc::new(Mutex::new(
            json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}),
        ));
        let fetches = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (issuer, set, count, auth) = (url.clone(), jwks.clone(), fetches.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if line.to_ascii_lowercase().starts_with("authorization:")
                        && let Ok(mut a) = auth.lock()
                    {
                        a.push(line.trim().to_string());
                    }
                }
                let path = request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .to_string();
                let (status, body) = match path.as_str() {
                    "/.well-known/oauth-authorization-server" => (
                        "200 OK",
                        json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks"),
                               "authorization_endpoint": format!("{issuer}/authorize"),
                               "token_endpoint": format!("{issuer}/token"),
                               "response_types_supported": ["code"]})
                        .to_string(),
                    ),
                    "/jwks" => {
                        count.fetch_add(1, Ordering::SeqCst);
                        (
                            "200 OK",
                            set.lock().map(|s| s.to_string()).unwrap_or_default(),
                        )
                    }
                    _ => ("404 Not Found", "{}".to_string()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.flush();
            }
        });
        Issuer {
            url,
            jwks,
            jwks_fetches: fetches,
            seen_authorization: seen,
        }
    }

    /// Claims of a token valid for an hour, for `audience`, granting `scope`.
    pub fn claims(&self, audience: &str, scope: &str) -> Value {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        json!({"iss": self.url, "aud": audience, "sub": "test-user", "iat": now,
               "exp": now + 3600, "scope": scope, "client_id": "kitbag-tests"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_without_padding() {
        assert_eq!(b64url(b""), "");
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn ecdsa_signatures_become_fixed_width() {
        // r with a leading zero byte (high bit set), s short by one byte.
        let mut der = vec![0x30, 0x44, 0x02, 0x21, 0x00];
        der.extend([0x80; 32]);
        der.extend([0x02, 0x1f]);
        der.extend([0x01; 31]);
        let fixed = ecdsa_der_to_fixed(&der, 32);
        assert_eq!(fixed.len(), 64);
        assert_eq!(fixed[0], 0x80);
        assert_eq!(fixed[32], 0x00);
        assert_eq!(fixed[33], 0x01);
    }
}
