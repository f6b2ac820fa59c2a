//! A broad corpus of fake credentials written the way people write them into notes, one
//! provider per entry of [`PROVIDERS`] (issue #21: ≥ 150 secrets, ≥ 40 providers), and of
//! benign notes that look like secrets to a naive detector: digests, UUIDs, ULIDs, public
//! keys, SRI hashes, placeholders and prose about passwords (≥ 100).
//!
//! Every value is generated (deterministic xorshift), none is real. Shared by
//! `tests/secrets_providers.rs` and `benches/secrets.rs`.

#![allow(dead_code)]

pub use kitbag_testkit::fuzz::Xorshift as Gen;

pub const UPNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
pub const B32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
pub const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
pub const HEX: &str = "0123456789abcdef";
pub const DIGITS: &str = "0123456789";
const BECH32: &str = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L";
const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// One fake credential in a sentence, and which provider's format it is.
pub struct Secret {
    pub provider: &'static str,
    /// The credential itself, as it appears in `text`.
    pub token: String,
    pub text: String,
}

/// A provider: its name and a function making its token from the generator.
type Maker = fn(&mut Gen) -> String;

/// Every provider with its token format (as published by the provider or seen in the wild).
pub const PROVIDERS: &[(&str, Maker)] = &[
    ("aws_access_key", |g| format!("AKIA{}", g.pick(B32, 16))),
    ("aws_secret_key", |g| {
        format!("aws_secret_access_key={}", g.pick(B64, 40))
    }),
    ("github_classic", |g| format!("ghp_{}", g.pick(ALNUM, 36))),
    ("github_oauth", |g| format!("gho_{}", g.pick(ALNUM, 36))),
    ("github_app", |g| format!("ghs_{}", g.pick(ALNUM, 36))),
    ("github_fine_grained", |g| {
        format!("github_pat_{}_{}", g.pick(ALNUM, 22), g.pick(ALNUM, 59))
    }),
    ("gitlab_pat", |g| format!("glpat-{}", g.pick(URLSAFE, 20))),
    ("gitlab_runner", |g| format!("glrt-{}", g.pick(URLSAFE, 20))),
    ("anthropic", |g| {
        format!(
            "sk-ant-api03-{}-{}AA",
            g.pick(URLSAFE, 80),
            g.pick(URLSAFE, 12)
        )
    }),
    ("openai", |g| format!("sk-proj-{}", g.pick(URLSAFE, 48))),
    ("slack_bot", |g| {
        format!(
            "xoxb-{}-{}-{}",
            g.pick(DIGITS, 12),
            g.pick(DIGITS, 13),
            g.pick(ALNUM, 24)
        )
    }),
    ("slack_app", |g| {
        format!(
            "xapp-1-A{}-{}-{}",
            g.pick(UPNUM, 10),
            g.pick(DIGITS, 13),
            g.pick(HEX, 64)
        )
    }),
    ("slack_webhook", |g| {
        format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            g.pick(UPNUM, 8),
            g.pick(UPNUM, 10),
            g.pick(ALNUM, 24)
        )
    }),
    ("google_api_key", |g| format!("AIza{}", g.pick(URLSAFE, 35))),
    ("google_oauth_secret", |g| {
        format!("GOCSPX-{}", g.pick(URLSAFE, 28))
    }),
    ("gcp_service_account", |g| {
        format!(
            "\"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC{}\\n-----END PRIVATE KEY-----\\n\"",
            g.pick(B64, 64)
        )
    }),
    ("stripe_live", |g| format!("sk_live_{}", g.pick(ALNUM, 24))),
    ("stripe_restricted", |g| {
        format!("rk_live_{}", g.pick(ALNUM, 30))
    }),
    ("stripe_webhook", |g| format!("whsec_{}", g.pick(ALNUM, 32))),
    ("twilio_api_key", |g| format!("SK{}", g.pick(HEX, 32))),
    ("twilio_auth_token", |g| {
        format!("Twilio auth token {}", g.pick(HEX, 32))
    }),
    ("sendgrid", |g| {
        format!("SG.{}.{}", g.pick(URLSAFE, 22), g.pick(URLSAFE, 43))
    }),
    ("mailgun", |g| format!("key-{}", g.pick(HEX, 32))),
    ("mailgun_v2", |g| {
        format!(
            "mailgun api key {}-{}-{}",
            g.pick(HEX, 32),
            g.pick(HEX, 8),
            g.pick(HEX, 8)
        )
    }),
    ("mailchimp", |g| {
        format!("{}-us{}", g.pick(HEX, 32), 1 + g.next_u64() % 20)
    }),
    ("npm", |g| format!("npm_{}", g.pick(ALNUM, 36))),
    ("pypi", |g| {
        format!("pypi-AgEIcHlwaS5vcmcCJ{}", g.pick(URLSAFE, 60))
    }),
    ("huggingface", |g| format!("hf_{}", g.pick(ALNUM, 34))),
    ("azure_storage", |g| {
        format!(
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={}==",
            g.pick(B64, 86)
        )
    }),
    ("azure_ad_client_secret", |g| {
        format!(
            "client secret {}8Q~{}",
            g.pick(ALNUM, 3),
            g.pick(URLSAFE, 31)
        )
    }),
    ("discord_bot", |g| {
        format!(
            "M{}.{}.{}",
            g.pick(URLSAFE, 25),
            g.pick(URLSAFE, 6),
            g.pick(URLSAFE, 38)
        )
    }),
    ("discord_webhook", |g| {
        format!(
            "https://discord.com/api/webhooks/{}/{}",
            g.pick(DIGITS, 19),
            g.pick(URLSAFE, 68)
        )
    }),
    ("telegram_bot", |g| {
        format!("{}:AA{}", g.pick(DIGITS, 10), g.pick(URLSAFE, 33))
    }),
    ("shopify", |g| format!("shpat_{}", g.pick(HEX, 32))),
    ("digitalocean", |g| format!("dop_v1_{}", g.pick(HEX, 64))),
    ("datadog", |g| format!("DD_API_KEY={}", g.pick(HEX, 32))),
    ("newrelic", |g| format!("NRAK-{}", g.pick(UPNUM, 27))),
    ("sentry_dsn", |g| {
        format!(
            "https://{}@o{}.ingest.sentry.io/{}",
            g.pick(HEX, 32),
            g.pick(DIGITS, 6),
            g.pick(DIGITS, 7)
        )
    }),
    ("sentry_auth", |g| {
        format!("sntrys_eyJ{}", g.pick(URLSAFE, 120))
    }),
    ("atlassian", |g| {
        format!("ATATT3xFfGF0{}={}", g.pick(URLSAFE, 170), g.pick(HEX, 8))
    }),
    ("linear", |g| format!("lin_api_{}", g.pick(ALNUM, 40))),
    ("notion", |g| {
        format!("ntn_{}{}", g.pick(DIGITS, 11), g.pick(ALNUM, 35))
    }),
    ("postman", |g| {
        format!("PMAK-{}-{}", g.pick(HEX, 24), g.pick(HEX, 34))
    }),
    ("vault", |g| format!("hvs.{}", g.pick(URLSAFE, 90))),
    ("terraform_cloud", |g| {
        format!("{}.atlasv1.{}", g.pick(ALNUM, 14), g.pick(ALNUM, 67))
    }),
    ("databricks", |g| format!("dapi{}", g.pick(HEX, 32))),
    ("doppler", |g| format!("dp.st.prd.{}", g.pick(ALNUM, 40))),
    ("square", |g| format!("EAAA{}", g.pick(URLSAFE, 60))),
    ("dockerhub", |g| format!("dckr_pat_{}", g.pick(URLSAFE, 27))),
    ("grafana", |g| {
        format!("glsa_{}_{}", g.pick(ALNUM, 32), g.pick(HEX, 8))
    }),
    ("age", |g| format!("AGE-SECRET-KEY-1{}", g.pick(BECH32, 58))),
    ("groq", |g| format!("gsk_{}", g.pick(ALNUM, 52))),
    ("replicate", |g| format!("r8_{}", g.pick(ALNUM, 37))),
    ("perplexity", |g| format!("pplx-{}", g.pick(ALNUM, 48))),
    ("figma", |g| format!("figd_{}", g.pick(URLSAFE, 40))),
    ("supabase", |g| format!("sbp_{}", g.pick(HEX, 40))),
    ("airtable", |g| {
        format!("pat{}.{}", g.pick(ALNUM, 14), g.pick(HEX, 64))
    }),
    ("okta", |g| {
        format!("Authorization: SSWS 00{}", g.pick(URLSAFE, 40))
    }),
    ("jwt", |g| {
        format!(
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
            g.pick(URLSAFE, 60),
            g.pick(URLSAFE, 43)
        )
    }),
    ("basic_auth_header", |g| {
        format!("Authorization: Basic {}=", g.pick(B64, 31))
    }),
    ("bearer_header", |g| {
        format!("Authorization: Bearer {}", g.pick(URLSAFE, 40))
    }),
    ("database_url", |g| {
        format!("postgres://app:{}@db.internal:5432/prod", g.pick(ALNUM, 18))
    }),
    ("rsa_private_key", |g| {
        format!(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA{}\n-----END RSA PRIVATE KEY-----",
            g.pick(B64, 64)
        )
    }),
    ("openssh_private_key", |g| {
        format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA{}\n-----END OPENSSH PRIVATE KEY-----",
            g.pick(B64, 64)
        )
    }),
    ("pgp_private_key", |g| {
        format!(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF{}\n-----END PGP PRIVATE KEY BLOCK-----",
            g.pick(B64, 64)
        )
    }),
    ("labelled_hex_key", |g| {
        format!("encryption key {}", g.pick(HEX, 64))
    }),
    ("prose_password", |g| {
        format!(
            "the admin password is {}!{}",
            g.pick(ALNUM, 8),
            g.pick(DIGITS, 2)
        )
    }),
    ("env_password", |g| {
        format!("REDIS_PASSWORD={}", g.pick(ALNUM, 20))
    }),
];

/// How each provider's token is put into a note (`{}` is the token).
const SENTENCES: [&str; 4] = [
    "{}",
    "note to self: the key for the staging deploy is {} — rotate it next week",
    "Put this in the CI settings: {}",
    "config for the integration (copied from the dashboard):\n  {}\n",
];

/// Three notes per provider, each in a different sentence.
pub fn secrets() -> Vec<Secret> {
    let mut g = Gen(0xA076_1D64_78BD_642F);
    let mut out = Vec::new();
    for (i, (provider, make)) in PROVIDERS.iter().enumerate() {
        for k in 0..3 {
            let token = make(&mut g);
            let sentence = SENTENCES[(i + k) % SENTENCES.len()];
            out.push(Secret {
                provider,
                text: sentence.replace("{}", &token),
                token,
            });
        }
    }
    out
}

/// Notes that are not secrets but look like them to a naive detector.
pub fn benign() -> Vec<String> {
    let mut g = Gen(0xE703_7ED1_A0B4_28DB);
    let mut out: Vec<String> = [
        "Passwords must be at least 12 characters and are checked against breached lists.",
        "Reset a user's password from the admin panel, never by editing the database.",
        "The production database password is stored in 1Password under 'prod db'.",
        "Ask Sam for the VPN password; it is not written down anywhere.",
        "Rotate API tokens every 90 days; the rotation job runs on the 1st.",
        "The token bucket refills at 10 tokens per second.",
        "Set OPENAI_API_KEY=<your key> before running the examples.",
        "api_key = \"YOUR_API_KEY_HERE\"",
        "password: ${DB_PASSWORD}",
        "token: changeme",
        "AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key id.",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY in the AWS examples",
        "The example token in our docs is ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.",
        "Stripe's placeholder is sk_live_XXXXXXXXXXXXXXXXXXXXXXXX; never a real one.",
        "export GITHUB_TOKEN=$(gh auth token)",
        "secret_key = os.environ[\"DJANGO_SECRET_KEY\"]",
        "The secret santa list is in the shared drive.",
        "Our password manager is Bitwarden; the team vault is 'eng'.",
        "JWTs are signed with RS256; the public key is served at /.well-known/jwks.json.",
        "Use `kubectl create secret generic app-env --from-env-file=.env` to load settings.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for i in 0..12 {
        out.push(format!(
            "Fixed in commit {} (PR #{}).",
            g.pick(HEX, 40),
            2000 + i
        ));
        out.push(format!("image digest sha256:{}", g.pick(HEX, 64)));
        out.push(format!(
            "request id {}-{}-4{}-8{}-{} failed with 502",
            g.pick(HEX, 8),
            g.pick(HEX, 4),
            g.pick(HEX, 3),
            g.pick(HEX, 3),
            g.pick(HEX, 12)
        ));
        out.push(format!("event 01{} was replayed", g.pick(CROCKFORD, 24)));
        out.push(format!("\"integrity\": \"sha512-{}==\"", g.pick(B64, 86)));
        out.push(format!(
            "<script src=\"https://cdn.example.org/lib.js\" integrity=\"sha384-{}\"></script>",
            g.pick(B64, 64)
        ));
        out.push(format!(
            "deploy key (public): ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{} ci@acme",
            g.pick(B64, 43)
        ));
        out.push(format!(
            "authorized_keys: ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{} alice@laptop",
            g.pick(B64, 200)
        ));
        out.push(format!(
            "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA{}\n-----END PUBLIC KEY-----",
            g.pick(B64, 64)
        ));
    }
    for i in 0..10 {
        out.push(format!("md5 of the tarball: {}", g.pick(HEX, 32)));
        out.push(format!(
            "GPG fingerprint {} {} {} {} {}",
            g.pick("0123456789ABCDEF", 4),
            g.pick("0123456789ABCDEF", 4),
            g.pick("0123456789ABCDEF", 4),
            g.pick("0123456789ABCDEF", 4),
            g.pick("0123456789ABCDEF", 4)
        ));
        out.push(format!(
            "pod web-{}-{} restarted {i} times",
            g.pick(HEX, 10),
            g.pick("abcdefghijklmnopqrstuvwxyz0123456789", 5)
        ));
        out.push(format!("wallet 0x{} received the refund", g.pick(HEX, 40)));
    }
    out
}
