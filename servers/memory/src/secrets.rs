//! Secret detection: refuse to store credentials, naming the rule that fired and never
//! echoing the secret itself.
//!
//! Provider rules match the published token formats; a generic rule catches
//! `key/secret/token/password = value` assignments whose value looks like a real credential
//! (long enough, high enough entropy, not a placeholder); a blob rule catches long
//! high-entropy tokens that are neither hex hashes nor base64 image data.

use std::sync::LazyLock;

use regex::Regex;

/// A detected secret: which rule, and where (1-based line), never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: &'static str,
    pub line: usize,
}

struct Rule {
    name: &'static str,
    re: Regex,
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rules: &[(&str, &str)] = &[
        (
            "private_key_block",
            r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY(?: BLOCK)?-----",
        ),
        (
            "aws_access_key_id",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
        ),
        (
            "aws_secret_access_key",
            r#"(?i)aws.{0,24}(?:secret|private).{0,24}?[=:\s"']+[A-Za-z0-9/+]{40}\b"#,
        ),
        (
            "github_token",
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b",
        ),
        (
            "github_fine_grained_token",
            r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
        ),
        ("gitlab_token", r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),
        ("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
        (
            "openai_api_key",
            r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        ),
        ("slack_token", r"\bxox[bpars]-[A-Za-z0-9\-]{10,}"),
        (
            "slack_webhook",
            r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+",
        ),
        ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
        (
            "stripe_key",
            r"\b(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{20,}\b",
        ),
        ("twilio_api_key", r"\bSK[0-9a-f]{32}\b"),
        (
            "sendgrid_api_key",
            r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b",
        ),
        ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
        ("huggingface_token", r"\bhf_[A-Za-z0-9]{34,}\b"),
        ("azure_storage_key", r"AccountKey=[A-Za-z0-9+/=]{60,}"),
        (
            "jwt",
            r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        ),
        (
            "url_with_password",
            r"\b[a-z][a-z0-9+.\-]*://[^/\s:@]*:([^/\s:@]+)@[^\s/]+",
        ),
    ];
    rules
        .iter()
        .filter_map(|(name, pat)| Regex::new(pat).ok().map(|re| Rule { name, re }))
        .collect()
});

static ASSIGNMENT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b([a-z0-9_.\-]*(?:api[_\-]?key|apikey|secret|token|passw(?:or)?d|passwd|pwd|credential|private[_\-]?key|access[_\-]?key|auth[_\-]?key)[a-z0-9_.\-]*)["']?(?:\s+is)?\s*(?:=|:|=>|:=)\s*["']?([^\s"',;]+)"#,
    )
    .ok()
});

static BLOB: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_\-]{32,}={0,2}").ok());

/// Values that are obviously not real credentials.
fn is_placeholder(v: &str) -> bool {
    let l = v.to_ascii_lowercase();
    v.starts_with('<')
        || v.starts_with("${")
        || v.starts_with("$(")
        || v.starts_with('{')
        || v.starts_with('%')
        || v.starts_with("process.env")
        || v.starts_with("os.environ")
        || v.starts_with("env.")
        || v.starts_with("std::env")
        || v.chars()
            .all(|c| c == '*' || c == 'x' || c == 'X' || c == '.' || c == '-' || c == '_')
        || [
            "changeme",
            "example",
            "placeholder",
            "your",
            "redacted",
            "dummy",
            "sample",
            "none",
            "null",
            "true",
            "false",
            "todo",
            "xxx",
            "secret",
            "password",
            "token",
        ]
        .iter()
        .any(|w| l.contains(w))
}

/// Shannon entropy in bits per character.
pub fn entropy(s: &str) -> f64 {
    let mut counts = [0usize; 256];
    let bytes = s.as_bytes();
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The first secret in `text`, if any.
pub fn scan(text: &str) -> Option<Finding> {
    for rule in RULES.iter() {
        if let Some(m) = rule.re.find(text) {
            if rule.name == "url_with_password" {
                // `user:password@host` with a placeholder password is documentation, not a secret.
                let caps = rule.re.captures(&text[m.start()..]);
                let pw = caps
                    .as_ref()
                    .and_then(|c| c.get(1))
                    .map(|g| g.as_str())
                    .unwrap_or("");
                if is_placeholder(pw) || pw.len() < 4 {
                    continue;
                }
            }
            return Some(Finding {
                rule: rule.name,
                line: line_of(text, m.start()),
            });
        }
    }
    if let Some(re) = ASSIGNMENT.as_ref() {
        for caps in re.captures_iter(text) {
            let (Some(key), Some(val)) = (caps.get(1), caps.get(2)) else {
                continue;
            };
            let v = val.as_str();
            if is_placeholder(v) || v.len() < 6 {
                continue;
            }
            let k = key.as_str().to_ascii_lowercase();
            let is_password = k.contains("pass") || k.contains("pwd");
            let looks_random = v.len() >= 12 && entropy(v) >= 3.2;
            let mixed =
                v.chars().any(|c| c.is_ascii_digit()) && v.chars().any(|c| c.is_ascii_alphabetic());
            if looks_random || (is_password && v.len() >= 6 && (mixed || entropy(v) >= 2.5)) {
                return Some(Finding {
                    rule: "credential_assignment",
                    line: line_of(text, key.start()),
                });
            }
        }
    }
    if let Some(re) = BLOB.as_ref() {
        for m in re.find_iter(text) {
            let s = m.as_str();
            let before = &text[..m.start()];
            // base64 payloads of data URIs (images, fonts) are content, not credentials.
            if before.ends_with("base64,")
                || before
                    .rfind("base64,")
                    .is_some_and(|i| !before[i..].contains(char::is_whitespace))
            {
                continue;
            }
            let is_hex = s.chars().all(|c| c.is_ascii_hexdigit());
            let has_upper = s.chars().any(|c| c.is_ascii_uppercase());
            let has_lower = s.chars().any(|c| c.is_ascii_lowercase());
            let has_digit = s.chars().any(|c| c.is_ascii_digit());
            if !is_hex
                && has_upper
                && has_lower
                && has_digit
                && s.len() >= 32
                && s.len() <= 200
                && entropy(s) >= 4.5
            {
                return Some(Finding {
                    rule: "high_entropy_token",
                    line: line_of(text, m.start()),
                });
            }
        }
    }
    None
}
