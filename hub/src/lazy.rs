//! `--tools lazy`: progressive discovery for users with many servers.
//!
//! Every tool definition costs context on every model call (kitbag's own suite is ~45 KB of
//! names, descriptions and schemas). In lazy mode the host lists three small tools instead:
//! `tool_search` finds tools by words, `tool_schema` returns one tool's full definition, and
//! `tool_call` calls any tool by name. Direct calls to the real names keep working, so a
//! client that knows them loses nothing.

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const SEARCH_TOOL: &str = "tool_search";
pub const SCHEMA_TOOL: &str = "tool_schema";
pub const CALL_TOOL: &str = "tool_call";

/// Which tool list the host offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ToolsMode {
    /// Every tool of every server.
    #[default]
    Full,
    /// tool_search, tool_schema and tool_call (plus the host's own tools).
    Lazy,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Words to look for in tool names and descriptions, e.g. "read file" or "breakpoint".
    /// Empty lists every tool.
    #[serde(default)]
    pub query: String,
    /// Most tools to return (1–50, default 10).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Found {
    pub name: String,
    /// The first sentence of its description.
    pub summary: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    pub tools: Vec<Found>,
    /// How many tools matched in all.
    pub matched: usize,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaParams {
    /// The tool's exact name, as tool_search returned it.
    pub name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SchemaResult {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: JsonObject,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// The tool's exact name.
    pub name: String,
    /// Its arguments, as its input schema describes (tool_schema shows it).
    #[serde(default)]
    pub arguments: Option<JsonObject>,
}

/// The three discovery tools.
pub fn tools() -> Vec<Tool> {
    // Built once (`crate::serve::prepare_own_tools`), cloned after.
    static BUILT: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_tools).clone()
}

fn build_tools() -> Vec<Tool> {
    let read = |title: &str| {
        ToolAnnotations::with_title(title)
            .read_only(true)
            .open_world(false)
    };
    let schema = |s: Result<JsonObject, kitbag_shared::schema::NotAnObject>| s.unwrap_or_default();
    vec![
        Tool::new(
            SEARCH_TOOL,
            "Find tools by what they do: words matched against every available tool's name and description, best first. Then get a tool's arguments with tool_schema and run it with tool_call.\nExample: {\"query\": \"search text in files\"}",
            schema(kitbag_shared::schema::input_schema::<SearchParams>()),
        )
        .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<SearchResult>("tool_search")))
        .with_annotations(read("Search tools")),
        Tool::new(
            SCHEMA_TOOL,
            "Show one tool's full description and argument schema, before calling it with tool_call.\nExample: {\"name\": \"file_read\"}",
            schema(kitbag_shared::schema::input_schema::<SchemaParams>()),
        )
        .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<SchemaResult>("tool_schema")))
        .with_annotations(read("Tool schema")),
        Tool::new(
            CALL_TOOL,
            "Call any available tool by name with its arguments; returns that tool's own result.\nExample: {\"name\": \"file_read\", \"arguments\": {\"path\": \"README.md\"}}",
            schema(kitbag_shared::schema::input_schema::<CallParams>()),
        )
        .with_annotations(
            ToolAnnotations::with_title("Call a tool")
                .read_only(false)
                .destructive(true)
                .open_world(true),
        ),
    ]
}

/// The first sentence (or line) of a description, at most ~160 characters.
fn summary(description: &str) -> String {
    let first_line = description.lines().next().unwrap_or("");
    let end = first_line
        .find(". ")
        .map(|i| i + 1)
        .unwrap_or(first_line.len());
    let s = &first_line[..end];
    match s.char_indices().nth(160) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Rank `tools` for `query`: the most words found first, then words in the name.
pub fn search(tools: &[Tool], query: &str, limit: usize) -> SearchResult {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &Tool)> = tools
        .iter()
        .filter_map(|t| {
            if words.is_empty() {
                return Some((0, t));
            }
            let name = t.name.to_lowercase();
            let desc = t.description.as_deref().unwrap_or("").to_lowercase();
            // Words found anywhere count most, then words in the name; how often a word
            // recurs in a description adds a little (capped: long texts must not win).
            let score: usize = words
                .iter()
                .map(|w| {
                    let in_name = name.contains(w.as_str());
                    let in_desc = desc.matches(w.as_str()).count().min(3);
                    if in_name || in_desc > 0 {
                        10 + 5 * usize::from(in_name) + in_desc
                    } else {
                        0
                    }
                })
                .sum();
            (score > 0).then_some((score, t))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let matched = scored.len();
    SearchResult {
        tools: scored
            .into_iter()
            .take(limit)
            .map(|(_, t)| Found {
                name: t.name.to_string(),
                summary: summary(t.description.as_deref().unwrap_or("")),
            })
            .collect(),
        matched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> Tool {
        Tool::new(name.to_string(), description.to_string(), JsonObject::new())
    }

    #[test]
    fn names_outrank_descriptions_and_empty_lists_all() {
        let tools = vec![
            tool("file_read", "Read a file. Numbered lines."),
            tool("search_grep", "Search file contents with a regex."),
            tool("shell_bash", "Run a command."),
        ];
        let r = search(&tools, "read file", 10);
        assert_eq!(r.tools[0].name, "file_read");
        assert_eq!(r.tools[0].summary, "Read a file.");
        assert_eq!(r.matched, 2);
        assert_eq!(search(&tools, "", 2).tools.len(), 2);
        assert_eq!(search(&tools, "", 2).matched, 3);
        assert_eq!(search(&tools, "zzz", 10).matched, 0);
    }
}
