//! Top-level settings of `agent.json` and their `KITBAG_*` environment overrides.
//!
//! Precedence (seed 000): environment variable > `agent.json` > built-in default. Every
//! resolved value remembers where it came from, so `host_status` and `kitbag doctor`
//! can show why a value is what it is.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The settings as written in `agent.json` (all optional).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub model: Option<String>,
    /// The model `--agent auto` asks when no routing rule decides (default: `model`; `off`:
    /// never ask one).
    pub router_model: Option<String>,
    pub max_tokens: Option<u64>,
    pub context_chars: Option<u64>,
    pub context_turns: Option<u64>,
    /// The model's context window in tokens (default: 200,000 for Anthropic, 128,000 for OpenAI).
    pub context_window: Option<u64>,
    pub system_prompt: Option<String>,
    /// Default for every server without its own `startup_timeout_sec`.
    pub startup_timeout_sec: Option<u64>,
    /// Default for every server without its own `tool_timeout_sec`.
    pub tool_timeout_sec: Option<u64>,
    /// How long a server that started on its first call and keeps nothing between calls
    /// may stay unused before it stops again (0: never); an entry's own `idle_stop_secs`
    /// overrides it.
    pub idle_stop_secs: Option<u64>,
    /// The longest the host polls its client's input and its servers' output before its
    /// thread sleeps, in microseconds (0: never). It spares a relayed call the wake-ups of a
    /// halted vCPU; the window adapts to the gaps between messages (kitbag-shared's
    /// `busy_poll`), so an idle host does not poll.
    pub busy_poll_us: Option<u64>,
    /// Text bytes of one tool result the agent loop passes to the model and the session; the
    /// rest is kept in a file the result names (issue #42).
    pub max_tool_result_bytes: Option<u64>,
    /// Memory injection and limits (seed 001).
    pub memory: Option<MemorySettings>,
    /// `{file:…}` and `{cmd:…}` in prompts, packs and skills (seed 002).
    pub prompt_includes: Option<PromptIncludeSettings>,
}

/// The `prompt_includes` block of `agent.json`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PromptIncludeSettings {
    /// The most bytes one include brings in (its head and tail are kept).
    pub max_bytes: Option<u64>,
    /// `{cmd:…}` runs at all (default false).
    pub cmd: Option<bool>,
    /// The commands `{cmd:…}` may run: each entry a command and its first arguments
    /// (`git log`), which the include's words must start with.
    pub cmd_allow: Option<Vec<String>>,
}

/// `prompt_includes.max_bytes` when unset.
pub const DEFAULT_INCLUDE_MAX_BYTES: u64 = 16 * 1024;

/// How long a server may take to start and answer `initialize` when nothing says otherwise.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an unused server that keeps nothing between calls runs before it stops, when
/// nothing says otherwise.
pub const DEFAULT_IDLE_STOP: Duration = Duration::from_secs(300);
/// `busy_poll_us` when unset: off. Polling pays only where waking an idle CPU is dear (a VM
/// without guest halt-polling) and a CPU is free to poll; on a machine whose CPUs are all
/// busy, a polling host takes time from the processes it waits for.
pub const DEFAULT_BUSY_POLL: Duration = Duration::ZERO;
/// How long one tool call may take when nothing says otherwise.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(600);

/// `max_tool_result_bytes` when unset: a long file's worth of text (~16k tokens).
pub const DEFAULT_MAX_TOOL_RESULT_BYTES: u64 = 64 * 1024;

/// The `memory` block of `agent.json` (seed 001 §1): what the agent loop injects before each
/// model call, and how many memories kitbag-memory keeps.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemorySettings {
    /// relevant | recent_only | off.
    pub inject_mode: Option<String>,
    pub max_inject_chars: Option<u64>,
    pub max_inject_count: Option<u64>,
    pub max_total: Option<u64>,
}

/// The values `memory.inject_mode` takes.
pub const INJECT_MODES: &[&str] = &["relevant", "recent_only", "off"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Env,
    File,
    Default,
}

/// One resolved setting.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Setting {
    pub key: &'static str,
    pub env: &'static str,
    /// Null means "none" (e.g. model: auto-detected from the API key).
    pub value: Value,
    pub source: Source,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Count,
    /// A whole number where 0 turns the thing off (`idle_stop_secs`: never stop).
    Amount,
    /// true or false (environment: true/false, 1/0, on/off).
    Flag,
    /// Strings (environment: comma-separated).
    List,
    /// One of these words.
    Choice(&'static [&'static str]),
}

struct Spec {
    key: &'static str,
    env: &'static str,
    kind: Kind,
    default: fn() -> Value,
}

const SPECS: &[Spec] = &[
    Spec {
        key: "model",
        env: "KITBAG_MODEL",
        kind: Kind::Text,
        default: || Value::Null,
    },
    Spec {
        key: "router_model",
        env: "KITBAG_ROUTER_MODEL",
        kind: Kind::Text,
        default: || Value::Null,
    },
    Spec {
        key: "max_tokens",
        env: "KITBAG_MAX_TOKENS",
        kind: Kind::Count,
        default: || json!(4096),
    },
    Spec {
        key: "context_chars",
        env: "KITBAG_CONTEXT_CHARS",
        kind: Kind::Count,
        default: || json!(24000),
    },
    Spec {
        key: "context_turns",
        env: "KITBAG_CONTEXT_TURNS",
        kind: Kind::Count,
        default: || json!(50),
    },
    Spec {
        key: "context_window",
        env: "KITBAG_CONTEXT_WINDOW",
        kind: Kind::Count,
        default: || Value::Null,
    },
    Spec {
        key: "system_prompt",
        env: "KITBAG_SYSTEM_PROMPT",
        kind: Kind::Text,
        default: || Value::Null,
    },
    Spec {
        key: "startup_timeout_sec",
        env: "KITBAG_STARTUP_TIMEOUT_SEC",
        kind: Kind::Count,
        default: || json!(DEFAULT_STARTUP_TIMEOUT.as_secs()),
    },
    Spec {
        key: "tool_timeout_sec",
        env: "KITBAG_TOOL_TIMEOUT_SEC",
        kind: Kind::Count,
        default: || json!(DEFAULT_TOOL_TIMEOUT.as_secs()),
    },
    Spec {
        key: "idle_stop_secs",
        env: "KITBAG_IDLE_STOP_SECS",
        kind: Kind::Amount,
        default: || json!(DEFAULT_IDLE_STOP.as_secs()),
    },
    Spec {
        key: "busy_poll_us",
        env: "KITBAG_BUSY_POLL_US",
        kind: Kind::Amount,
        default: || json!(DEFAULT_BUSY_POLL.as_micros() as u64),
    },
    Spec {
        key: "max_tool_result_bytes",
        env: "KITBAG_MAX_TOOL_RESULT_BYTES",
        kind: Kind::Count,
        default: || json!(DEFAULT_MAX_TOOL_RESULT_BYTES),
    },
    Spec {
        key: "memory.inject_mode",
        env: "KITBAG_MEMORY_INJECT_MODE",
        kind: Kind::Choice(INJECT_MODES),
        default: || json!("relevant"),
    },
    Spec {
        key: "memory.max_inject_chars",
        env: "KITBAG_MEMORY_MAX_INJECT_CHARS",
        kind: Kind::Count,
        default: || json!(2048),
    },
    Spec {
        key: "memory.max_inject_count",
        env: "KITBAG_MEMORY_MAX_INJECT_COUNT",
        kind: Kind::Count,
        default: || json!(10),
    },
    Spec {
        key: "memory.max_total",
        env: "KITBAG_MEMORY_MAX_TOTAL",
        kind: Kind::Count,
        default: || json!(500),
    },
    Spec {
        key: "prompt_includes.max_bytes",
        env: "KITBAG_PROMPT_INCLUDES_MAX_BYTES",
        kind: Kind::Count,
        default: || json!(DEFAULT_INCLUDE_MAX_BYTES),
    },
    Spec {
        key: "prompt_includes.cmd",
        env: "KITBAG_PROMPT_INCLUDES_CMD",
        kind: Kind::Flag,
        default: || json!(false),
    },
    Spec {
        key: "prompt_includes.cmd_allow",
        env: "KITBAG_PROMPT_INCLUDES_CMD_ALLOW",
        kind: Kind::List,
        default: || json!([]),
    },
];

/// A setting's value that is not accepted, from the environment or from agent.json.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    #[error("{var}={raw}: must be {accepted} (it overrides agent.json `{key}`)")]
    Env {
        var: &'static str,
        raw: String,
        accepted: String,
        key: &'static str,
    },
    #[error("agent.json `{key}`: {value:?} is not accepted; use one of {accepted}")]
    File {
        key: &'static str,
        value: String,
        accepted: String,
    },
}

/// Every setting, resolved. `env` looks a variable up (the process environment in
/// production; a map in tests). A malformed variable is an error naming it.
pub fn resolve(
    file: &FileSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Setting>, SettingError> {
    let from_file = serde_json::to_value(file).unwrap_or(Value::Null);
    let mut out = Vec::with_capacity(SPECS.len());
    for spec in SPECS {
        let (value, source) = match env(spec.env).filter(|v| !v.is_empty()) {
            Some(raw) => {
                let v = match spec.kind {
                    Kind::Text => Value::String(raw),
                    Kind::Choice(words) => {
                        if !words.contains(&raw.trim()) {
                            return Err(SettingError::Env {
                                var: spec.env,
                                raw,
                                accepted: format!("one of {}", words.join(", ")),
                                key: spec.key,
                            });
                        }
                        Value::String(raw.trim().to_owned())
                    }
                    Kind::Flag => match raw.trim().to_ascii_lowercase().as_str() {
                        "true" | "1" | "on" => json!(true),
                        "false" | "0" | "off" => json!(false),
                        _ => {
                            return Err(SettingError::Env {
                                var: spec.env,
                                raw,
                                accepted: "true or false".into(),
                                key: spec.key,
                            });
                        }
                    },
                    Kind::List => json!(
                        raw.split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .collect::<Vec<_>>()
                    ),
                    Kind::Amount => match raw.trim().parse::<u64>() {
                        Ok(n) => json!(n),
                        Err(_) => {
                            return Err(SettingError::Env {
                                var: spec.env,
                                raw,
                                accepted: "a whole number (0: off)".into(),
                                key: spec.key,
                            });
                        }
                    },
                    Kind::Count => match raw.trim().parse::<u64>() {
                        Ok(n) if n > 0 => json!(n),
                        _ => {
                            return Err(SettingError::Env {
                                var: spec.env,
                                raw,
                                accepted: "a positive whole number".into(),
                                key: spec.key,
                            });
                        }
                    },
                };
                (v, Source::Env)
            }
            // `memory.max_total` is `max_total` inside the `memory` block.
            None => match from_file.pointer(&format!("/{}", spec.key.replace('.', "/"))) {
                Some(v) if !v.is_null() => {
                    if let (Kind::Choice(words), Some(w)) = (spec.kind, v.as_str())
                        && !words.contains(&w)
                    {
                        return Err(SettingError::File {
                            key: spec.key,
                            value: w.to_owned(),
                            accepted: words.join(", "),
                        });
                    }
                    (v.clone(), Source::File)
                }
                _ => ((spec.default)(), Source::Default),
            },
        };
        out.push(Setting {
            key: spec.key,
            env: spec.env,
            value,
            source,
        });
    }
    Ok(out)
}

/// Look a resolved setting up.
pub fn get<'a>(settings: &'a [Setting], key: &str) -> Option<&'a Setting> {
    settings.iter().find(|s| s.key == key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn an_amount_takes_zero_from_the_environment_a_count_does_not() {
        let s = resolve(
            &FileSettings::default(),
            env(&[("KITBAG_BUSY_POLL_US", "0"), ("KITBAG_IDLE_STOP_SECS", "0")]),
        )
        .unwrap();
        assert_eq!(get(&s, "busy_poll_us").unwrap().value, json!(0));
        assert_eq!(get(&s, "idle_stop_secs").unwrap().value, json!(0));
        let e = resolve(
            &FileSettings::default(),
            env(&[("KITBAG_BUSY_POLL_US", "-1")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("KITBAG_BUSY_POLL_US") && e.contains("0: off"),
            "{e}"
        );
        assert!(resolve(&FileSettings::default(), env(&[("KITBAG_MAX_TOKENS", "0")])).is_err());
    }

    #[test]
    fn env_beats_file_beats_default() {
        let file = FileSettings {
            model: Some("anthropic/claude-sonnet".into()),
            max_tokens: Some(8192),
            tool_timeout_sec: Some(120),
            ..Default::default()
        };
        let s = resolve(
            &file,
            env(&[("KITBAG_MAX_TOKENS", "1000"), ("KITBAG_CONTEXT_TURNS", "7")]),
        )
        .unwrap();
        let v = |k| get(&s, k).unwrap();
        assert_eq!(v("max_tokens").value, json!(1000));
        assert_eq!(v("max_tokens").source, Source::Env);
        assert_eq!(v("model").value, json!("anthropic/claude-sonnet"));
        assert_eq!(v("model").source, Source::File);
        assert_eq!(v("context_turns").value, json!(7));
        assert_eq!(v("context_chars").value, json!(24000));
        assert_eq!(v("context_chars").source, Source::Default);
        assert_eq!(v("tool_timeout_sec").value, json!(120));
        assert_eq!(v("system_prompt").value, Value::Null);
        assert_eq!(v("max_tool_result_bytes").value, json!(65536));
    }

    #[test]
    fn malformed_overrides_name_the_variable() {
        let e = resolve(
            &FileSettings::default(),
            env(&[("KITBAG_MAX_TOKENS", "lots")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("KITBAG_MAX_TOKENS=lots"), "{e}");
        let e = resolve(
            &FileSettings::default(),
            env(&[("KITBAG_TOOL_TIMEOUT_SEC", "0")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("KITBAG_TOOL_TIMEOUT_SEC"), "{e}");
        // An empty variable counts as unset.
        let s = resolve(&FileSettings::default(), env(&[("KITBAG_MODEL", "")])).unwrap();
        assert_eq!(get(&s, "model").unwrap().source, Source::Default);
    }

    #[test]
    fn the_memory_block_is_read_nested_and_checked() {
        let file = FileSettings {
            memory: Some(MemorySettings {
                inject_mode: Some("recent_only".into()),
                max_total: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = resolve(&file, env(&[("KITBAG_MEMORY_MAX_INJECT_COUNT", "4")])).unwrap();
        let v = |k| get(&s, k).unwrap().clone();
        assert_eq!(v("memory.inject_mode").value, json!("recent_only"));
        assert_eq!(v("memory.inject_mode").source, Source::File);
        assert_eq!(v("memory.max_total").value, json!(3));
        assert_eq!(v("memory.max_inject_count").value, json!(4));
        assert_eq!(v("memory.max_inject_chars").value, json!(2048));
        let bad = FileSettings {
            memory: Some(MemorySettings {
                inject_mode: Some("always".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = resolve(&bad, env(&[])).unwrap_err().to_string();
        assert!(
            e.contains("memory.inject_mode") && e.contains("relevant, recent_only, off"),
            "{e}"
        );
    }
}
