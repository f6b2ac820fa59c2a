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
        (
            "gitlab_token",
            r"\bgl(?:pat|rt|ptt|dt|ft|soat|agent)-[A-Za-z0-9_\-]{20,}",
        ),
        ("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
        (
            "openai_api_key",
            r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        ),
        ("slack_token", r"\bx(?:ox[abeprs]|app)-[A-Za-z0-9\-]{10,}"),
        (
            "slack_webhook",
            r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+",
        ),
        ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
        (
            "google_oauth_client_secret",
            r"\bGOCSPX-[A-Za-z0-9_\-]{28}\b",
        ),
        ("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9+/]{32,}"),
        ("mailgun_key", r"\bkey-[0-9a-f]{32}\b"),
        ("mailgun_key", r"\b[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}\b"),
        ("mailchimp_key", r"\b[0-9a-f]{32}-us[0-9]{1,2}\b"),
        ("pypi_token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
        (
            "discord_bot_token",
            r"\b[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}\b",
        ),
        (
            "discord_webhook",
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/[A-Za-z0-9_\-]{60,}",
        ),
        (
            "telegram_bot_token",
            r"\b[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}\b",
        ),
        ("shopify_token", r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b"),
        ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
        ("newrelic_key", r"\bNR(?:AK|AA|II|JS)-[A-Z0-9]{27}\b"),
        (
            "sentry_dsn",
            r"https://[0-9a-f]{32}@[a-z0-9.\-]+\.ingest\.(?:[a-z]+\.)?sentry\.io/",
        ),
        ("sentry_token", r"\bsntr[ysu]s?_[A-Za-z0-9_=\-]{40,}"),
        ("atlassian_token", r"\bATATT3[A-Za-z0-9_\-=]{150,}"),
        ("linear_key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
        (
            "notion_token",
            r"\b(?:ntn_[0-9]{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})\b",
        ),
        ("postman_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
        ("vault_token", r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}"),
        (
            "terraform_token",
            r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}",
        ),
        ("databricks_token", r"\bdapi[a-f0-9]{32}(?:-[0-9])?\b"),
        (
            "doppler_token",
            r"\bdp\.(?:st|ct|sa|pt|scim|audit)\.[A-Za-z0-9_.\-]{40,}",
        ),
        (
            "square_token",
            r"\b(?:EAAA[A-Za-z0-9_\-]{60}|sq0atp-[A-Za-z0-9_\-]{22}|sq0csp-[A-Za-z0-9_\-]{43})",
        ),
        ("dockerhub_token", r"\bdckr_pat_[A-Za-z0-9_\-]{27,}"),
        ("grafana_token", r"\bgl(?:sa|c)_[A-Za-z0-9_=+/\-]{32,}"),
        (
            "age_secret_key",
            r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b",
        ),
        ("groq_key", r"\bgsk_[A-Za-z0-9]{52}\b"),
        ("replicate_token", r"\br8_[A-Za-z0-9]{37}\b"),
        ("perplexity_key", r"\bpplx-[A-Za-z0-9]{48}\b"),
        ("figma_token", r"\bfig[dhu]_[A-Za-z0-9_\-]{40,}"),
        ("supabase_token", r"\bsbp_[a-f0-9]{40}\b"),
        ("airtable_token", r"\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}\b"),
        (
            "azure_ad_client_secret",
            r"\b[A-Za-z0-9_~.\-]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}",
        ),
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
    // `key = value`, `key: value`, and in prose `the key is value` (group 3 marks "is").
    Regex::new(
        r#"(?i)\b([a-z0-9_.\-]*(?:api[_\-]?key|apikey|secret|token|passw(?:or)?d|passwd|pwd|credential|private[_\-]?key|access[_\-]?key|auth[_\-]?key)[a-z0-9_.\-]*)["']?(?:\s*(?:=|:|=>|:=)|\s+(is)\s*[:=]?)\s*["']?([^\s"',;]+)"#,
    )
    .ok()
});

/// An `Authorization` header with credentials (Basic, Bearer, Okta's SSWS, Token).
static AUTH_HEADER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\bauthorization\b\s*[:=]?\s*(?:basic|bearer|ssws|token)\s+([A-Za-z0-9+/_.~=\-]{16,})",
    )
    .ok()
});

/// A hex key introduced by a word that makes it one ("encryption key 9f…", "auth token: …"):
/// bare hex is a digest or an id, labelled hex is a credential.
static LABELLED_HEX: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:key|secret|token|passphrase|credential|password)\b[^\n0-9a-f]{0,12}\b([0-9a-f]{32,128})\b").ok()
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

/// A token a provider rule matched that is a documented example or a placeholder
/// (`AKIAIOSFODNN7EXAMPLE`, `ghp_xxxx…`), not a credential.
fn is_example_token(token: &str) -> bool {
    let l = token.to_ascii_lowercase();
    if [
        "example",
        "placeholder",
        "dummy",
        "sample",
        "redacted",
        "your_",
        "yourkey",
    ]
    .iter()
    .any(|w| l.contains(w))
    {
        return true;
    }
    // Eight or more of one character in a row: a mask, not a random token.
    let bytes = token.as_bytes();
    bytes.windows(8).any(|w| w.iter().all(|&b| b == w[0]))
}

/// Whether a value has at least two of: lower case, upper case, digits, other symbols.
fn char_classes(v: &str) -> usize {
    let lower = v.chars().any(|c| c.is_ascii_lowercase());
    let upper = v.chars().any(|c| c.is_ascii_uppercase());
    let digit = v.chars().any(|c| c.is_ascii_digit());
    let other = v.chars().any(|c| !c.is_ascii_alphanumeric());
    [lower, upper, digit, other].iter().filter(|&&b| b).count()
}

/// Whether the text just before a high-entropy blob makes it public material: an SRI or
/// package-lock `integrity` digest, an SSH public key, or the body of a PEM block holding a
/// public key or a certificate.
fn is_public_material(before: &str) -> bool {
    let tail = before.trim_end_matches(['"', '\'', ' ']);
    if ["sha256-", "sha384-", "sha512-"]
        .iter()
        .any(|p| tail.ends_with(p))
    {
        return true;
    }
    let last_word = before
        .trim_end()
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or("");
    if last_word.starts_with("ssh-")
        || last_word.starts_with("ecdsa-sha2-")
        || last_word.starts_with("sk-ssh-")
        || last_word.starts_with("sk-ecdsa-")
    {
        return true;
    }
    match before.rfind("-----BEGIN ") {
        Some(i) => {
            let block = &before[i..];
            !block.contains("-----END ")
                && (block.contains("PUBLIC KEY") || block.contains("CERTIFICATE"))
        }
        None => false,
    }
}

fn finding(rule: &'static str, text: &str, offset: usize) -> Option<Finding> {
    Some(Finding {
        rule,
        line: line_of(text, offset),
    })
}

/// The first secret in `text`, if any.
pub fn scan(text: &str) -> Option<Finding> {
    provider_token(text)
        .or_else(|| auth_header(text))
        .or_else(|| labelled_hex(text))
        .or_else(|| assignment(text))
        .or_else(|| high_entropy_blob(text))
}

/// A token in a provider's published format (examples and masks skipped).
fn provider_token(text: &str) -> Option<Finding> {
    for rule in RULES.iter() {
        for m in rule.re.find_iter(text) {
            if rule.name == "url_with_password" {
                // `user:password@host` with a placeholder password is documentation.
                let caps = rule.re.captures(&text[m.start()..]);
                let pw = caps
                    .as_ref()
                    .and_then(|c| c.get(1))
                    .map(|g| g.as_str())
                    .unwrap_or("");
                if is_placeholder(pw) || pw.len() < 4 {
                    continue;
                }
            } else if is_example_token(m.as_str()) {
                continue;
            }
            return finding(rule.name, text, m.start());
        }
    }
    None
}

fn auth_header(text: &str) -> Option<Finding> {
    let re = AUTH_HEADER.as_ref()?;
    for caps in re.captures_iter(text) {
        let (Some(all), Some(v)) = (caps.get(0), caps.get(1)) else {
            continue;
        };
        let v = v.as_str();
        if is_placeholder(v) || is_example_token(v) || char_classes(v) < 2 {
            continue;
        }
        return finding("authorization_header", text, all.start());
    }
    None
}

fn labelled_hex(text: &str) -> Option<Finding> {
    let re = LABELLED_HEX.as_ref()?;
    for caps in re.captures_iter(text) {
        let (Some(all), Some(v)) = (caps.get(0), caps.get(1)) else {
            continue;
        };
        // A random key mixes letters and digits; `0000…` or `abcdef…` runs are not keys.
        if is_example_token(v.as_str()) || entropy(v.as_str()) < 3.0 {
            continue;
        }
        return finding("labelled_hex_key", text, all.start());
    }
    None
}

/// `password = …`, `api_key: …`, `the admin password is …` with a value that looks real.
fn assignment(text: &str) -> Option<Finding> {
    let re = ASSIGNMENT.as_ref()?;
    for caps in re.captures_iter(text) {
        let (Some(key), Some(val)) = (caps.get(1), caps.get(3)) else {
            continue;
        };
        let prose = caps.get(2).is_some();
        let v = val.as_str().trim_end_matches(['.', ')', ']']);
        if is_placeholder(v) || v.len() < 6 {
            continue;
        }
        let k = key.as_str().to_ascii_lowercase();
        let is_password = k.contains("pass") || k.contains("pwd");
        let looks_random = v.len() >= 12 && entropy(v) >= 3.2;
        let found = if prose {
            // "the password is stored in the vault" is prose; "the password is Tr0ub4dor&3"
            // is a password: words are one character class, credentials mix them.
            char_classes(v) >= 2 && (is_password || looks_random)
        } else {
            let mixed =
                v.chars().any(|c| c.is_ascii_digit()) && v.chars().any(|c| c.is_ascii_alphabetic());
            looks_random || (is_password && (mixed || entropy(v) >= 2.5))
        };
        if found {
            return finding("credential_assignment", text, key.start());
        }
    }
    None
}

/// A long random-looking token that is neither hex (digests, ids) nor public material.
fn high_entropy_blob(text: &str) -> Option<Finding> {
    let re = BLOB.as_ref()?;
    for m in re.find_iter(text) {
        let s = m.as_str();
        let before = &text[..m.start()];
        // base64 payloads of data URIs (images, fonts) are content, not credentials.
        if before.ends_with("base64,")
            || before
                .rfind("base64,")
                .is_some_and(|i| !before[i..].contains(char::is_whitespace))
            || is_public_material(before)
            || ["sha256-", "sha384-", "sha512-"]
                .iter()
                .any(|p| s.starts_with(p))
            || is_example_token(s)
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
            return finding("high_entropy_token", text, m.start());
        }
    }
    None
}
