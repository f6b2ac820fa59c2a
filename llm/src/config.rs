//! Which provider, model, key and endpoint: from the `model` setting (`anthropic/<id>`,
//! `openai/<id>`) or, with none, from whichever API key is set.

use std::time::Duration;

use crate::error::LlmError;
use crate::openai::Dialect;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => crate::anthropic::PROVIDER,
            Provider::OpenAi => crate::openai::PROVIDER,
        }
    }

    pub fn prefix(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    pub fn key_var(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        }
    }

    fn base_var(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_BASE_URL",
            Provider::OpenAi => "OPENAI_BASE_URL",
        }
    }

    fn default_base(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::OpenAi => "https://api.openai.com/v1",
        }
    }

    /// The model used when only a key says which provider to use.
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::Anthropic => "claude-sonnet-5-5",
            Provider::OpenAi => "gpt-5.5",
        }
    }
}

/// A model named with its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub provider: Provider,
    pub model: String,
}

impl ModelSpec {
    /// `anthropic/<id>` or `openai/<id>`; a bare id is accepted where its name says whose it is
    /// (`claude-…`; `gpt-…`, `o1…`, `o3…`, `o4…`).
    pub fn parse(spec: &str) -> Result<Self, LlmError> {
        let spec = spec.trim();
        let bad = || {
            LlmError::Config(format!(
                "model: {spec:?} is not a model this host can call; accepted: anthropic/<model id> or openai/<model id> (OpenAI-compatible servers too, with OPENAI_BASE_URL)"
            ))
        };
        let (provider, model) = match spec.split_once('/') {
            Some(("anthropic", m)) => (Provider::Anthropic, m),
            Some(("openai", m)) => (Provider::OpenAi, m),
            Some(_) => return Err(bad()),
            None if spec.starts_with("claude") => (Provider::Anthropic, spec),
            None if ["gpt-", "o1", "o3", "o4", "chatgpt-"]
                .iter()
                .any(|p| spec.starts_with(p)) =>
            {
                (Provider::OpenAi, spec)
            }
            None => return Err(bad()),
        };
        if model.is_empty() || model.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad());
        }
        Ok(Self {
            provider,
            model: model.to_owned(),
        })
    }

    pub fn display(&self) -> String {
        format!("{}/{}", self.provider.prefix(), self.model)
    }

    /// The model's context window in tokens, from its family as the vendors publish it; a
    /// model this table does not know (an OpenAI-compatible local server's) gets the usual
    /// 128k — set `context_window` in agent.json for those.
    pub fn context_window(&self) -> u64 {
        let m = self.model.as_str();
        let has = |prefixes: &[&str]| prefixes.iter().any(|p| m.starts_with(p));
        match self.provider {
            // Every Claude model has 200k by default (1M only behind a beta header).
            Provider::Anthropic => 200_000,
            Provider::OpenAi if has(&["gpt-5"]) => 400_000,
            Provider::OpenAi if has(&["gpt-4.1"]) => 1_047_576,
            Provider::OpenAi if has(&["o1-mini", "o1-preview"]) => 128_000,
            Provider::OpenAi if has(&["o1", "o3", "o4"]) => 200_000,
            Provider::OpenAi if has(&["gpt-3.5-turbo"]) => 16_385,
            Provider::OpenAi if m == "gpt-4" || has(&["gpt-4-0"]) => 8_192,
            Provider::OpenAi => 128_000,
        }
    }
}

/// Everything needed to reach one model.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub spec: ModelSpec,
    /// Without the path: `https://api.anthropic.com`, `https://api.openai.com/v1`,
    /// `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// `None` only for an OpenAI-compatible server that needs none.
    pub api_key: Option<String>,
    pub dialect: Dialect,
}

impl Endpoint {
    /// Resolve the model (the setting, else by key) and its key and endpoint from `env`
    /// (`std::env::var` in the binary; a map in tests).
    pub fn resolve(
        model: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let spec = match model.filter(|m| !m.trim().is_empty()) {
            Some(m) => ModelSpec::parse(m)?,
            None => {
                let provider = if var("ANTHROPIC_API_KEY").is_some() {
                    Provider::Anthropic
                } else if var("OPENAI_API_KEY").is_some() {
                    Provider::OpenAi
                } else {
                    return Err(LlmError::Config(
                        "no model: set `model` in agent.json or KITBAG_MODEL (anthropic/<id> or openai/<id>), or set ANTHROPIC_API_KEY or OPENAI_API_KEY".into(),
                    ));
                };
                ModelSpec {
                    provider,
                    model: provider.default_model().to_owned(),
                }
            }
        };
        let p = spec.provider;
        let custom_base = var(p.base_var());
        let base_url = custom_base
            .clone()
            .unwrap_or_else(|| p.default_base().to_owned())
            .trim_end_matches('/')
            .to_owned();
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(LlmError::Config(format!(
                "{}: {base_url:?} is not an http(s) URL",
                p.base_var()
            )));
        }
        let official = custom_base.is_none() || base_url.contains("api.openai.com");
        let api_key = var(p.key_var());
        if api_key.is_none() && (p == Provider::Anthropic || official) {
            return Err(LlmError::Config(format!(
                "model {} needs an API key: set {}",
                spec.display(),
                p.key_var()
            )));
        }
        Ok(Self {
            spec,
            base_url,
            api_key,
            dialect: if official {
                Dialect::OpenAi
            } else {
                Dialect::Compatible
            },
        })
    }

    pub fn url(&self) -> String {
        match self.spec.provider {
            Provider::Anthropic => format!("{}/v1/messages", self.base_url),
            Provider::OpenAi => format!("{}/chat/completions", self.base_url),
        }
    }
}

/// Deadlines and retries.
#[derive(Debug, Clone)]
pub struct Limits {
    pub connect_timeout: Duration,
    /// Until the response's headers arrive.
    pub response_timeout: Duration,
    /// The longest silence between two chunks of a stream (Anthropic pings every few seconds).
    pub idle_timeout: Duration,
    /// Tries in all, the first included.
    pub max_attempts: u32,
    /// The first retry's wait; each later one doubles, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_attempts: 5,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(16),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn windows_follow_the_model_family() {
        let w = |s: &str| ModelSpec::parse(s).map(|m| m.context_window()).ok();
        assert_eq!(w("anthropic/claude-sonnet-4-5"), Some(200_000));
        assert_eq!(w("openai/gpt-5.5"), Some(400_000));
        assert_eq!(w("openai/gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(w("openai/gpt-4o"), Some(128_000));
        assert_eq!(w("openai/o3"), Some(200_000));
        assert_eq!(w("openai/o1-mini"), Some(128_000));
        assert_eq!(w("openai/gpt-4"), Some(8_192));
        assert_eq!(w("openai/gpt-3.5-turbo-0125"), Some(16_385));
        assert_eq!(w("openai/qwen2.5-coder"), Some(128_000), "a local model");
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn model_specs_parse_with_or_without_their_prefix() {
        let s = ModelSpec::parse("anthropic/claude-opus-4-1").expect("ok");
        assert_eq!(
            (s.provider, s.model.as_str()),
            (Provider::Anthropic, "claude-opus-4-1")
        );
        let s = ModelSpec::parse("openai/llama-3.1-8b").expect("ok");
        assert_eq!(
            (s.provider, s.model.as_str()),
            (Provider::OpenAi, "llama-3.1-8b")
        );
        assert_eq!(
            ModelSpec::parse("gpt-4.1").expect("ok").provider,
            Provider::OpenAi
        );
        assert_eq!(
            ModelSpec::parse("claude-x").expect("ok").provider,
            Provider::Anthropic
        );
        for bad in ["google/gemini", "llama3", "anthropic/", "openai/a b", ""] {
            let e = ModelSpec::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("anthropic/<model id>"), "{e}");
        }
    }

    #[test]
    fn the_key_that_is_set_picks_the_provider() {
        let e = Endpoint::resolve(None, &env(&[("OPENAI_API_KEY", "k")])).expect("ok");
        assert_eq!(e.spec.display(), "openai/gpt-5.5");
        assert_eq!(e.url(), "https://api.openai.com/v1/chat/completions");
        assert_eq!(e.dialect, Dialect::OpenAi);
        let e = Endpoint::resolve(
            None,
            &env(&[("ANTHROPIC_API_KEY", "a"), ("OPENAI_API_KEY", "k")]),
        )
        .expect("ok");
        assert_eq!(e.url(), "https://api.anthropic.com/v1/messages");
        let e = Endpoint::resolve(None, &env(&[]))
            .expect_err("none")
            .to_string();
        assert!(e.contains("KITBAG_MODEL"), "{e}");
    }

    #[test]
    fn a_local_compatible_server_needs_no_key() {
        let e = Endpoint::resolve(
            Some("openai/qwen2.5"),
            &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/")]),
        )
        .expect("ok");
        assert_eq!(e.url(), "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(e.dialect, Dialect::Compatible);
        assert!(e.api_key.is_none());
        let err = Endpoint::resolve(Some("anthropic/claude-x"), &env(&[]))
            .expect_err("no key")
            .to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        let err = Endpoint::resolve(
            Some("openai/x"),
            &env(&[("OPENAI_BASE_URL", "ftp://x"), ("OPENAI_API_KEY", "k")]),
        )
        .expect_err("bad url")
        .to_string();
        assert!(err.contains("OPENAI_BASE_URL"), "{err}");
    }
}
