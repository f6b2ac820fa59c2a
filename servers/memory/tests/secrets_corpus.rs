//! The secret detector against a corpus of realistic (fake) secrets and ordinary notes.
//!
//! Thresholds: every secret must be caught (rejection rate 100% on this corpus, ≥ 50 secrets),
//! and at most 2% of the ≥ 200 ordinary notes may be refused.

use kitbag_memory::secrets::scan;

use kitbag_testkit::fuzz::Xorshift as Gen;

const UP: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const UPNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const HEX: &str = "0123456789abcdef";

fn secrets() -> Vec<String> {
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let mut v = Vec::new();
    for i in 0..4 {
        v.push(format!(
            "deploy user key: AKIA{} (staging bucket #{i})",
            g.pick(UPNUM, 16)
        ));
        v.push(format!("aws_secret_access_key = {}", g.pick(B64, 40)));
        v.push(format!(
            "use token ghp_{} for the CI bot",
            g.pick(ALNUM, 36)
        ));
        v.push(format!(
            "github_pat_{}_{}",
            g.pick(ALNUM, 22),
            g.pick(ALNUM, 59)
        ));
        v.push(format!(
            "ANTHROPIC_API_KEY=sk-ant-api03-{}-{}AA",
            g.pick(URLSAFE, 80),
            g.pick(URLSAFE, 12)
        ));
        v.push(format!("openai key sk-proj-{}", g.pick(URLSAFE, 48)));
        v.push(format!(
            "slack bot: xoxb-{}-{}-{}",
            g.pick("0123456789", 12),
            g.pick("0123456789", 13),
            g.pick(ALNUM, 24)
        ));
        v.push(format!("maps key AIza{}", g.pick(URLSAFE, 35)));
        v.push(format!("stripe live: sk_live_{}", g.pick(ALNUM, 24)));
        v.push(format!(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow{}\n-----END RSA PRIVATE KEY-----",
            g.pick(B64, 60)
        ));
        v.push(format!(
            "session cookie eyJ{}.eyJ{}.{}",
            g.pick(URLSAFE, 30),
            g.pick(URLSAFE, 60),
            g.pick(URLSAFE, 43)
        ));
        v.push(format!(
            "postgres://admin:{}@db.internal:5432/prod",
            g.pick(ALNUM, 16)
        ));
        v.push(format!("db_password: \"{}\"", g.pick(ALNUM, 14)));
    }
    v.push(format!(
        "xoxp-{}-{}",
        g.pick("0123456789", 11),
        g.pick(ALNUM, 32)
    ));
    v.push(format!("glpat-{}", g.pick(URLSAFE, 20)));
    v.push(format!("npm publish token npm_{}", g.pick(ALNUM, 36)));
    v.push(format!("HF token hf_{}", g.pick(ALNUM, 34)));
    v.push(format!(
        "SG.{}.{}",
        g.pick(URLSAFE, 22),
        g.pick(URLSAFE, 43)
    ));
    v.push(format!(
        "DefaultEndpointsProtocol=https;AccountName=x;AccountKey={}==",
        g.pick(B64, 86)
    ));
    v.push(format!(
        "https://hooks.slack.com/services/T{}/B{}/{}",
        g.pick(UP, 8),
        g.pick(UP, 10),
        g.pick(ALNUM, 24)
    ));
    v.push("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----".into());
    v.push(format!("api_key = \"{}\"", g.pick(ALNUM, 32)));
    v.push(format!("export SECRET_TOKEN={}", g.pick(URLSAFE, 40)));
    v.push(format!("the wifi password is: {}", g.pick(ALNUM, 12)));
    v.push(format!("redis://:{}@cache.prod:6379/0", g.pick(ALNUM, 20)));
    v.push(format!(
        "Authorization token for the vendor API: {}",
        g.pick(ALNUM, 48)
    ));
    v.push(format!("rk_live_{}", g.pick(ALNUM, 30)));
    v
}

fn notes() -> Vec<String> {
    let mut g = Gen(0xD1B5_4A32_D192_ED03);
    let mut v: Vec<String> = [
        "The staging database is reset every Sunday at 02:00 UTC.",
        "Prefer `cargo nextest run` over `cargo test` in this repo; it is faster on CI.",
        "The user likes answers short and prefers British spelling.",
        "API rate limit for the billing service is 100 requests per minute per token.",
        "Use `token.clone()` before moving it into the closure, otherwise the borrow checker complains.",
        "fn parse_token(input: &str) -> Result<Token, Error> { lexer.next_token(input) }",
        "The password reset flow sends an email via the notifications service.",
        "Secrets live in Vault under kv/prod/billing; never commit them.",
        "Set api_key = \"<your key here>\" in config.toml before running the demo.",
        "password = ${DB_PASSWORD} is read from the environment at start-up.",
        "export OPENAI_API_KEY=$(pass show openai) is how the user loads keys.",
        "token: process.env.GITHUB_TOKEN",
        "The docs say to use postgres://user:password@localhost/db as an example URL.",
        "Release checklist: bump version, update CHANGELOG, tag, push, publish crates in order.",
        "CI runs on 2 cores; keep the test suite under 10 minutes.",
        "The frontend uses React 19 with Vite; tests use Vitest.",
        "Run migrations with `sqlx migrate run` from the backend directory.",
        "Don't use `unwrap()` on user input; return a typed error.",
        "The main branch is protected; merges need one approval.",
        "Error E0502 means a mutable borrow conflicts with an immutable one.",
        "Our S3 bucket for assets is called acme-static-assets in eu-west-1.",
        "The secret sauce of the ranking is BM25 plus a recency bonus.",
        "Token budget per request: 8k input, 2k output.",
        "The Kubernetes namespace for staging is `acme-staging`.",
        "When the build fails with 'linker cc not found', install build-essential.",
        "Meeting notes: decided to drop Python 3.8 support in the next minor.",
        "The user's timezone is Europe/Berlin.",
        "Avoid force-pushing to shared branches.",
        "Logs are in /var/log/acme/*.log and rotated daily.",
        "The JWT library we use is jsonwebtoken 9; tokens expire after 15 minutes.",
        "`let re = Regex::new(r\"^[a-z]+$\").unwrap();` compiles the pattern once.",
        "SELECT id, name FROM users WHERE created_at > now() - interval '7 days';",
        "Base64 of 'hello' is aGVsbG8=.",
        "The color palette: #1e293b, #0ea5e9, #f97316.",
        "Use `git bisect` to find the commit that broke the benchmark.",
        "The API returns 429 when throttled; retry with exponential backoff.",
        "Keyboard shortcut for the command palette is Ctrl+Shift+P.",
        "Version 2.3.1 fixed the memory leak in the websocket handler.",
        "Password policy: at least 12 characters, checked against breached lists.",
        "The auth service validates tokens with the public key from JWKS.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for i in 0..40 {
        let uuid = format!(
            "{}-{}-4{}-a{}-{}",
            g.pick(HEX, 8),
            g.pick(HEX, 4),
            g.pick(HEX, 3),
            g.pick(HEX, 3),
            g.pick(HEX, 12)
        );
        v.push(format!(
            "Tenant {uuid} was migrated to the new cluster on day {i}."
        ));
    }
    for i in 0..40 {
        v.push(format!(
            "The regression was introduced in commit {} and fixed in {} (#{}).",
            g.pick(HEX, 40),
            g.pick(HEX, 7),
            1000 + i
        ));
    }
    for i in 0..30 {
        v.push(format!(
            "Release artifact sha256: {} (build {i})",
            g.pick(HEX, 64)
        ));
    }
    for i in 0..25 {
        v.push(format!(
            "Logo used in the email template {i}: data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA{}",
            g.pick(B64, 120)
        ));
    }
    for i in 0..25 {
        v.push(format!(
            "Endpoint /v1/orders/{i} returns {{\"order_id\": {}, \"status\": \"shipped\", \"items\": {}}}",
            1000 + i,
            i % 7 + 1
        ));
    }
    for i in 0..20 {
        v.push(format!(
            "Build {i} took {}m{}s on the ARM runner; cache hit rate {}%.",
            i % 9 + 3,
            i * 7 % 60,
            60 + i
        ));
    }
    v
}

#[test]
fn corpus_rates() {
    let secrets = secrets();
    let notes = notes();
    assert!(secrets.len() >= 50, "{} secrets", secrets.len());
    assert!(notes.len() >= 200, "{} notes", notes.len());
    let missed: Vec<&String> = secrets.iter().filter(|s| scan(s).is_none()).collect();
    let false_pos: Vec<(&String, &'static str)> = notes
        .iter()
        .filter_map(|n| scan(n).map(|f| (n, f.rule)))
        .collect();
    let rejection = 1.0 - missed.len() as f64 / secrets.len() as f64;
    let fp_rate = false_pos.len() as f64 / notes.len() as f64;
    println!(
        "secrets: {} / {} rejected ({:.1}%); notes: {} / {} refused ({:.1}% false positives)",
        secrets.len() - missed.len(),
        secrets.len(),
        rejection * 100.0,
        false_pos.len(),
        notes.len(),
        fp_rate * 100.0
    );
    assert!(missed.is_empty(), "missed secrets (rule gaps): {missed:#?}");
    assert!(fp_rate <= 0.02, "false positives: {false_pos:#?}");
}

#[test]
fn findings_name_the_rule_and_line() {
    let f = scan("first line\nkey AKIAABCDEFGHIJKLMNOP here").expect("found");
    assert_eq!(f.rule, "aws_access_key_id");
    assert_eq!(f.line, 2);
}
