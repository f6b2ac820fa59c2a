//! Agent packs (seed 002): `.kitbag/agents/<name>.md`, a prompt with frontmatter — `model`,
//! `description`, `temperature`, `tools` (an allowlist of globs), `max_tool_calls`,
//! `max_history_turns`. `--agent auto` picks one (`router`).

use std::path::Path;

use super::frontmatter::{self, DocError};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pack {
    pub name: String,
    /// What it is for (the router model reads it).
    pub description: Option<String>,
    pub model: Option<String>,
    pub temperature: Option<f64>,
    /// Globs; `None` = every tool the host's policy allows.
    pub tools: Option<Vec<String>>,
    pub max_tool_calls: Option<u32>,
    pub max_history_turns: Option<u64>,
    /// A JSON Schema its answers end with (one line of JSON): the model is told it and the
    /// answer is checked against it (`output.rs`).
    pub output_schema: Option<serde_json::Value>,
    pub prompt: String,
}

const KEYS: &[&str] = &[
    "name",
    "description",
    "model",
    "temperature",
    "tools",
    "max_tool_calls",
    "max_history_turns",
    "output_schema",
];

pub fn dir(root: &Path) -> std::path::PathBuf {
    root.join(".kitbag").join("agents")
}

/// Load `.kitbag/agents/<name>.md`; `Ok(None)` when there is no such file.
pub fn load(root: &Path, name: &str) -> anyhow::Result<Option<Pack>> {
    super::record::check_name_as("--agent", name)?;
    let path = dir(root).join(format!("{name}.md"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    };
    parse(name, &text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

pub fn parse(name: &str, text: &str) -> Result<Pack, DocError> {
    let d = frontmatter::parse(text)?;
    let unknown = d.unknown_keys(KEYS);
    if !unknown.is_empty() {
        return Err(DocError::UnknownKeys {
            unknown: unknown.join(", "),
            accepted: format!("a pack takes {}", KEYS.join(", ")),
        });
    }
    let temperature = d.number::<f64>("temperature", "a number from 0 to 2")?;
    if let Some(t) = temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(DocError::Invalid {
            key: "temperature".into(),
            value: t.to_string(),
            accepted: "from 0 to 2".into(),
        });
    }
    let max_tool_calls = d.number::<u32>("max_tool_calls", "a whole number")?;
    let max_history_turns = d.number::<u64>("max_history_turns", "a whole number")?;
    if max_history_turns == Some(0) {
        return Err(DocError::Invalid {
            key: "max_history_turns".into(),
            value: "0".into(),
            accepted: "at least 1".into(),
        });
    }
    let output_schema = match d.scalar("output_schema")? {
        None => None,
        Some(text) => {
            let invalid = |accepted: String| DocError::Invalid {
                key: "output_schema".into(),
                value: text.chars().take(80).collect(),
                accepted,
            };
            let schema: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| invalid(format!("JSON on one line ({e})")))?;
            crate::output::compile(&schema).map_err(|e| invalid(e.to_string()))?;
            Some(schema)
        }
    };
    let tools = d.list("tools")?;
    if let Some(globs) = &tools {
        for g in globs {
            globset::Glob::new(g).map_err(|e| DocError::Invalid {
                key: "tools".into(),
                value: format!("{g:?}"),
                accepted: format!("a glob ({e})"),
            })?;
        }
    }
    Ok(Pack {
        name: d.scalar("name")?.unwrap_or(name).to_owned(),
        description: d.scalar("description")?.map(str::to_owned),
        model: d.scalar("model")?.map(str::to_owned),
        temperature,
        tools,
        max_tool_calls,
        max_history_turns,
        output_schema,
        prompt: d.body,
    })
}

impl Pack {
    /// Whether the pack lets the model use `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        match &self.tools {
            None => true,
            Some(globs) => globs.iter().any(|g| {
                globset::Glob::new(g)
                    .map(|g| g.compile_matcher().is_match(tool))
                    .unwrap_or(false)
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn packs_parse_with_typed_errors() {
        let p = parse(
            "change",
            "---\nname: code.change\ntemperature: 0.1\ntools: [file_*, search_grep]\nmax_tool_calls: 3\nmax_history_turns: 20\n---\nSmall patches.",
        )
        .expect("ok");
        assert_eq!(p.name, "code.change");
        assert!(p.allows("file_read") && p.allows("search_grep") && !p.allows("shell_bash"));
        assert_eq!((p.max_tool_calls, p.max_history_turns), (Some(3), Some(20)));
        assert_eq!(p.prompt, "Small patches.");
        assert!(
            parse("x", "---\ntemprature: 1\n---\n")
                .unwrap_err()
                .to_string()
                .contains("temprature")
        );
        assert!(
            parse("x", "---\ntemperature: 7\n---\n")
                .unwrap_err()
                .to_string()
                .contains("0 to 2")
        );
        assert!(
            parse("x", "---\ntools: ['[']\n---\n")
                .unwrap_err()
                .to_string()
                .contains("glob")
        );
        assert!(parse("x", "no frontmatter").expect("ok").allows("anything"));
    }
}
