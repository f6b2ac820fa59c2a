//! Building the gitignore-aware walker shared by grep, glob and the AST tools.

use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use kitbag_shared::{ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;

/// A glob (or type name) or a list of them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// Options every walking tool shares.
#[derive(Debug, Clone, Default)]
pub struct WalkOptions {
    pub hidden: bool,
    pub no_ignore: bool,
    /// Globs (`!` excludes), matched relative to the search root.
    pub globs: Vec<String>,
    /// ripgrep file-type names (`rust`, `py`, ...).
    pub types: Vec<String>,
    pub globs_field: &'static str,
}

pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .min(12)
}

/// A configured walker over `root` (a directory or a single file).
pub fn builder(root: &Path, opts: &WalkOptions) -> ToolResult<WalkBuilder> {
    let mut b = WalkBuilder::new(root);
    b.hidden(!opts.hidden)
        .ignore(!opts.no_ignore)
        .git_ignore(!opts.no_ignore)
        .git_global(!opts.no_ignore)
        .git_exclude(!opts.no_ignore)
        .parents(!opts.no_ignore)
        .require_git(false)
        .follow_links(false)
        .threads(threads());
    if !opts.globs.is_empty() {
        let mut ob = OverrideBuilder::new(root);
        for g in &opts.globs {
            if g.is_empty() || g == "!" {
                return Err(ToolError::invalid_field(
                    opts.globs_field,
                    "an empty glob is not accepted",
                ));
            }
            ob.add(g).map_err(|e| {
                ToolError::invalid_field(opts.globs_field, format!("invalid glob `{g}`: {e}"))
            })?;
        }
        let ov = ob.build().map_err(|e| {
            ToolError::invalid_field(opts.globs_field, format!("invalid globs: {e}"))
        })?;
        b.overrides(ov);
    }
    if !opts.types.is_empty() {
        let mut tb = TypesBuilder::new();
        tb.add_defaults();
        for t in &opts.types {
            let known = tb.definitions().iter().any(|d| d.name() == t);
            if !known {
                let mut names: Vec<String> = tb
                    .definitions()
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect();
                names.sort();
                let sample: Vec<&str> = names
                    .iter()
                    .map(String::as_str)
                    .filter(|n| {
                        [
                            "rust", "py", "js", "ts", "go", "c", "cpp", "java", "md", "json",
                            "yaml", "sh",
                        ]
                        .contains(n)
                    })
                    .collect();
                return Err(ToolError::invalid_field(
                    "type",
                    format!(
                        "unknown file type `{t}`; ripgrep's type names are accepted, e.g. {} ({} in all)",
                        sample.join(", "),
                        names.len()
                    ),
                ));
            }
            tb.select(t);
        }
        let types = tb
            .build()
            .map_err(|e| ToolError::invalid_field("type", e.to_string()))?;
        b.types(types);
    }
    Ok(b)
}
