//! A fake OAuth 2.1 authorization server for the host's OAuth *client* tests, on loopback:
//! RFC 8414 metadata, a JWK set, dynamic client registration (RFC 7591), the authorization
//! endpoint (it approves at once, as user `alice`), and the token endpoint with the
//! authorization-code grant (PKCE S256 checked), refresh tokens (rotated: a used one is
//! `invalid_grant`) and client credentials (HTTP Basic). Every token request must name a
//! `resource` (RFC 8707), which becomes the token's audience. Tokens are JWTs signed by
//! openssl ([`Key::sign`]), so the kitbag resource server under test verifies them for real.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::oauth::{Key, b64url};

/// One token request the server answered (or refused).
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub grant_type: String,
    pub resource: Option<String>,
    pub client_id: Option<String>,
    /// The answer's HTTP status.
    pub status: u16,
}

#[derive(Default)]
struct State {
    /// client_id → (redirect URIs, secret).
    clients: HashMap<String, (Vec<String>, Option<String>)>,
    /// code → (client, redirect, challenge, resource, scope).
    codes: HashMap<String, (String, String, String, String, String)>,
    /// refresh token → (client, resource, scope, subject); removed when used.
    refresh: HashMap<String, (String, String, String, String)>,
    requests: Vec<TokenRequest>,
    registrations: usize,
}

pub struct AuthServer {
    pub url: String,
    /// Lifetime of the access tokens it mints.
    pub token_ttl: Arc<AtomicU64>,
    state: Arc<Mutex<State>>,
}

impl AuthServer {
    /// Start, signing with `key`; `service` is a confidential client for client credentials
    /// (id, secret).
    pub fn start(key: Key, service: (&str, &str)) -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State::default()));
        state.lock().expect("state").clients.insert(
            service.0.to_string(),
            (Vec::new(), Some(service.1.to_string())),
        );
        let token_ttl = Arc::new(AtomicU64::new(3600));
        let key = Arc::new(key);
        let serial = Arc::new(AtomicUsize::new(0));
        let (issuer, st, ttl) = (url.clone(), state.clone(), token_ttl.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (issuer, st, ttl, key, serial) = (
                    issuer.clone(),
                    st.clone(),
                    ttl.clone(),
                    key.clone(),
                    serial.clone(),
                );
                std::thread::spawn(move || {
                    let server = Handler {
                        issuer,
                        state: st,
                        ttl,
                        key,
                        serial,
                    };
                    server.serve(stream);
                });
            }
        });
        AuthServer {
            url,
            token_ttl,
            state,
        }
    }

    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.state.lock().expect("state").requests.clone()
    }

    pub fn registrations(&self) -> usize {
        self.state.lock().expect("state").registrations
    }

    /// Revoke every refresh token (the user must log in again).
    pub fn revoke_refresh_tokens(&self) {
        self.state.lock().expect("state").refresh.clear();
    }
}

struct Handler {
    issuer: String,
    state: Arc<Mutex<State>>,
    ttl: Arc<AtomicU64>,
    key: Arc<Key>,
    serial: Arc<AtomicUsize>,
}

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn respond(mut stream: TcpStream, status: &str, extra: &[(&str, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let _ = write!(stream, "{head}\r\n{body}");
    let _ = stream.flush();
}

fn form(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// `application/x-www-form-urlencoded` decoding.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error(stream: TcpStream, status: &str, code: &str, why: &str) {
    respond(
        stream,
        status,
        &[],
        &json!({"error": code, "error_description": why}).to_string(),
    );
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

impl Handler {
    fn serve(&self, stream: TcpStream) {
        let Some(req) = read_request(&stream) else {
            return;
        };
        let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
        match (req.method.as_str(), path) {
            ("GET", "/.well-known/oauth-authorization-server") => {
                let i = &self.issuer;
                let doc = json!({
                    "issuer": i,
                    "authorization_endpoint": format!("{i}/authorize"),
                    "token_endpoint": format!("{i}/token"),
                    "registration_endpoint": format!("{i}/register"),
                    "jwks_uri": format!("{i}/jwks"),
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
                });
                respond(stream, "200 OK", &[], &doc.to_string());
            }
            ("GET", "/jwks") => {
                respond(
                    stream,
                    "200 OK",
                    &[],
                    &json!({"keys": [self.key.jwk.clone()]}).to_string(),
                );
            }
            ("POST", "/register") => self.register(stream, &req.body),
            ("GET", "/authorize") => self.authorize(stream, &form(query)),
            ("POST", "/token") => self.token(stream, &req),
            _ => error(stream, "404 Not Found", "not_found", path),
        }
    }

    fn register(&self, stream: TcpStream, body: &[u8]) {
        let Ok(meta) = serde_json::from_slice::<Value>(body) else {
            return error(
                stream,
                "400 Bad Request",
                "invalid_client_metadata",
                "not JSON",
            );
        };
        let redirects: Vec<String> = meta["redirect_uris"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if redirects.is_empty()
            || redirects
                .iter()
                .any(|r| !r.starts_with("http://127.0.0.1:"))
        {
            return error(
                stream,
                "400 Bad Request",
                "invalid_redirect_uri",
                "loopback redirects only",
            );
        }
        let id = format!("client-{}", self.serial.fetch_add(1, Ordering::SeqCst));
        let mut st = self.state.lock().expect("state");
        st.clients.insert(id.clone(), (redirects.clone(), None));
        st.registrations += 1;
        drop(st);
        let answer = json!({"client_id": id, "redirect_uris": redirects,
            "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"]});
        respond(stream, "201 Created", &[], &answer.to_string());
    }

    fn authorize(&self, stream: TcpStream, q: &HashMap<String, String>) {
        let get = |k: &str| q.get(k).cloned().unwrap_or_default();
        let (client, redirect) = (get("client_id"), get("redirect_uri"));
        let known = self
            .state
            .lock()
            .expect("state")
            .clients
            .get(&client)
            .is_some_and(|(r, _)| r.contains(&redirect));
        if !known {
            return error(
                stream,
                "400 Bad Request",
                "invalid_request",
                "unknown client or redirect",
            );
        }
        if get("response_type") != "code"
            || get("code_challenge_method") != "S256"
            || get("code_challenge").len() != 43
            || get("resource").is_empty()
        {
            return error(
                stream,
                "400 Bad Request",
                "invalid_request",
                "code, S256 and resource required",
            );
        }
        let code = format!("code-{}", self.serial.fetch_add(1, Ordering::SeqCst));
        self.state.lock().expect("state").codes.insert(
            code.clone(),
            (
                client,
                redirect.clone(),
                get("code_challenge"),
                get("resource"),
                get("scope"),
            ),
        );
        let location = format!("{redirect}?code={code}&state={}", get("state"));
        respond(stream, "302 Found", &[("location", location)], "");
    }

    fn token(&self, stream: TcpStream, req: &Request) {
        let f = form(&String::from_utf8_lossy(&req.body));
        let get = |k: &str| f.get(k).cloned().unwrap_or_default();
        let basic = req
            .headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .and_then(|(_, v)| v.strip_prefix("Basic "))
            .and_then(base64_decode)
            .and_then(|s| s.split_once(':').map(|(a, b)| (decode(a), decode(b))));
        let client_id = basic
            .as_ref()
            .map(|(a, _)| a.clone())
            .or_else(|| f.get("client_id").cloned());
        let grant = get("grant_type");
        let resource = f.get("resource").cloned();
        let outcome = self.grant(
            &grant,
            &get,
            resource.as_deref(),
            client_id.as_deref(),
            basic.as_ref(),
        );
        let status = match &outcome {
            Ok(_) => 200,
            Err(_) => 400,
        };
        self.state
            .lock()
            .expect("state")
            .requests
            .push(TokenRequest {
                grant_type: grant,
                resource,
                client_id,
                status,
            });
        match outcome {
            Ok(body) => respond(
                stream,
                "200 OK",
                &[("cache-control", "no-store".into())],
                &body.to_string(),
            ),
            Err((code, why)) => error(stream, "400 Bad Request", code, &why),
        }
    }

    fn grant(
        &self,
        grant: &str,
        get: &dyn Fn(&str) -> String,
        resource: Option<&str>,
        client: Option<&str>,
        basic: Option<&(String, String)>,
    ) -> Result<Value, (&'static str, String)> {
        let Some(resource) = resource else {
            return Err(("invalid_target", "resource is required".into()));
        };
        let client = client.ok_or(("invalid_client", "no client".to_string()))?;
        let mut st = self.state.lock().expect("state");
        let (subject, scope, refresh) = match grant {
            "authorization_code" => {
                let (c, redirect, challenge, res, scope) = st
                    .codes
                    .remove(&get("code"))
                    .ok_or(("invalid_grant", "unknown or used code".to_string()))?;
                let verifier = get("code_verifier");
                if c != client || redirect != get("redirect_uri") || res != resource {
                    return Err((
                        "invalid_grant",
                        "client, redirect or resource differs".into(),
                    ));
                }
                if b64url(&Sha256::digest(verifier.as_bytes())) != challenge {
                    return Err(("invalid_grant", "PKCE verifier does not match".into()));
                }
                ("alice".to_string(), scope, true)
            }
            "refresh_token" => {
                let (c, res, scope, subject) = st.refresh.remove(&get("refresh_token")).ok_or((
                    "invalid_grant",
                    "unknown, used or revoked refresh token".to_string(),
                ))?;
                if c != client || res != resource {
                    return Err(("invalid_grant", "client or resource differs".into()));
                }
                (subject, scope, true)
            }
            "client_credentials" => {
                let (id, secret) =
                    basic.ok_or(("invalid_client", "HTTP Basic required".to_string()))?;
                let ok = st
                    .clients
                    .get(id)
                    .is_some_and(|(_, s)| s.as_deref() == Some(secret));
                if !ok {
                    return Err(("invalid_client", "bad client credentials".into()));
                }
                (id.clone(), get("scope"), false)
            }
            other => return Err(("unsupported_grant_type", other.to_string())),
        };
        let ttl = self.ttl.load(Ordering::SeqCst);
        let claims = json!({"iss": self.issuer, "aud": resource, "sub": subject, "iat": now(),
            "exp": now() + ttl, "scope": scope, "client_id": client,
            "jti": self.serial.fetch_add(1, Ordering::SeqCst)});
        let mut answer = json!({"access_token": self.key.sign(&claims), "token_type": "Bearer",
            "expires_in": ttl, "scope": scope});
        if refresh {
            let rt = format!("refresh-{}", self.serial.fetch_add(1, Ordering::SeqCst));
            st.refresh.insert(
                rt.clone(),
                (client.to_string(), resource.to_string(), scope, subject),
            );
            answer["refresh_token"] = json!(rt);
        }
        Ok(answer)
    }
}

fn base64_decode(text: &str) -> Option<String> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.trim().bytes().filter(|&c| c != b'=') {
        let v = A.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).ok()
}
