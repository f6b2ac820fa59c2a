//! Tool names as the seeds spell them, resolved to kitbag's: seed 004's dotted namespaces
//! (`file.read`, `code.lsp`, `kaged.issue.list`, the unified `kaged.issue` with `action`) and
//! seed 000's names (`read_file`, `bash`, `grep`). Only `tools/call` resolves them —
//! `tools/list` keeps kitbag's names, so what a client pays in context stays the same.

use serde_json::{Map, Value};

/// Seed 000's tool names and the kitbag tools they became.
const SEED_000: &[(&str, &str)] = &[
    ("bash", "shell_bash"),
    ("read_file", "file_read"),
    ("write_file", "file_write"),
    ("list_files", "file_list"),
    ("edit_file", "edit_text"),
    ("glob", "search_glob"),
    ("grep", "search_grep"),
];

/// Seed 003's tool names (`tool.*`) and the kitbag tools they became.
const SEED_003: &[(&str, &str)] = &[
    ("tool.python", "python"),
    ("tool.cli", "shell_bash"),
    ("tool.fetch", "web_fetch"),
];

/// Seed 003's delegated coding tools: one kitbag tool, the CLI named by an argument
/// (`devtools.claude-agent {task}` is `agent_delegate {agent: "claude", task}`; Cursor's CLI
/// is not one kitbag drives, so its call is refused naming the agents there are).
const SEED_003_DELEGATES: &[(&str, &str)] = &[
    ("devtools.claude-agent", "claude"),
    ("devtools.cursor-agent", "cursor"),
];

/// The namespace seed 004 puts the issue, todo and workflow tools under.
const KAGED: &str = "kaged.";

/// How a seed name maps onto a kitbag tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The kitbag tool.
    pub name: String,
    /// The call names its tool in an `action` argument (`kaged.issue` + `{"action": "list"}`):
    /// that argument is the tool's, not the tool's own parameter, and is left out.
    pub action_named: bool,
    /// An argument the seed's name stands for (`devtools.claude-agent`: `agent` = `claude`),
    /// set unless the call gives it.
    pub implied: Option<(&'static str, &'static str)>,
}

/// The kitbag tool a call of `name` with `arguments` stands for, among the tools `known` says
/// exist; None when `name` is one of them already or nothing matches.
pub fn resolve(
    name: &str,
    arguments: Option<&Map<String, Value>>,
    known: impl Fn(&str) -> bool,
) -> Option<Alias> {
    if known(name) {
        return None;
    }
    let plain = |n: String| {
        known(&n).then_some(Alias {
            name: n,
            action_named: false,
            implied: None,
        })
    };
    if let Some((_, agent)) = SEED_003_DELEGATES.iter().find(|(seed, _)| *seed == name) {
        let delegate = "agent_delegate";
        return known(delegate).then_some(Alias {
            name: delegate.to_string(),
            action_named: false,
            implied: Some(("agent", agent)),
        });
    }
    let bare = name.strip_prefix(KAGED).unwrap_or(name);
    let underscored = bare.replace('.', "_");
    if let Some(alias) = plain(underscored.clone()) {
        return Some(alias);
    }
    if let Some((_, kitbag)) = SEED_000
        .iter()
        .chain(SEED_003)
        .find(|(seed, _)| *seed == name)
    {
        return plain((*kitbag).to_string());
    }
    // The unified form: `kaged.issue` + `{"action": "list"}` → `issue_list`.
    let action = arguments?.get("action")?.as_str()?;
    let named = format!("{underscored}_{action}");
    known(&named).then_some(Alias {
        name: named,
        action_named: true,
        implied: None,
    })
}

/// [`resolve`], with the call's arguments made the resolved tool's (an `action` that only
/// named the tool is removed). Returns the name to call.
pub fn resolve_call(
    name: &str,
    arguments: &mut Option<Map<String, Value>>,
    known: impl Fn(&str) -> bool,
) -> Option<String> {
    let alias = resolve(name, arguments.as_ref(), known)?;
    if alias.action_named
        && let Some(args) = arguments.as_mut()
    {
        args.remove("action");
    }
    if let Some((key, value)) = alias.implied {
        arguments
            .get_or_insert_with(Map::new)
            .entry(key)
            .or_insert_with(|| Value::String(value.to_string()));
    }
    Some(alias.name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: &[&str] = &[
        "agent_delegate",
        "file_read",
        "code_lsp",
        "issue_list",
        "issue_transition",
        "todo",
        "shell_bash",
        "search_grep",
        "debug",
        "python",
    ];

    fn known(n: &str) -> bool {
        TOOLS.contains(&n)
    }

    fn call(name: &str, args: Value) -> (Option<String>, Value) {
        let mut args = args.as_object().cloned();
        let resolved = resolve_call(name, &mut args, known);
        (resolved, Value::Object(args.unwrap_or_default()))
    }

    #[test]
    fn seed_003_names_resolve() {
        assert_eq!(call("tool.python", json!({})).0.as_deref(), Some("python"));
        assert_eq!(call("tool.cli", json!({})).0.as_deref(), Some("shell_bash"));
        assert_eq!(call("tool.fetch", json!({})).0, None, "no web_fetch here");
    }

    #[test]
    fn seed_003_delegates_name_their_cli() {
        let (name, args) = call("devtools.claude-agent", json!({"task": "fix it"}));
        assert_eq!(name.as_deref(), Some("agent_delegate"));
        assert_eq!(args, json!({"agent": "claude", "task": "fix it"}));
        let (_, args) = call("devtools.cursor-agent", json!({"task": "x"}));
        assert_eq!(
            args["agent"], "cursor",
            "refused by agent_delegate, naming the field"
        );
    }

    #[test]
    fn seed_names_resolve_to_kitbag_tools() {
        assert_eq!(call("file.read", json!({})).0.as_deref(), Some("file_read"));
        assert_eq!(call("code.lsp", json!({})).0.as_deref(), Some("code_lsp"));
        assert_eq!(
            call("kaged.issue.list", json!({})).0.as_deref(),
            Some("issue_list")
        );
        assert_eq!(call("kaged.todo", json!({})).0.as_deref(), Some("todo"));
        assert_eq!(call("bash", json!({})).0.as_deref(), Some("shell_bash"));
        assert_eq!(call("grep", json!({})).0.as_deref(), Some("search_grep"));
    }

    #[test]
    fn the_unified_issue_tool_takes_its_tool_from_action() {
        let (name, args) = call(
            "kaged.issue",
            json!({"action": "transition", "number": 4, "to": "assigned"}),
        );
        assert_eq!(name.as_deref(), Some("issue_transition"));
        assert_eq!(args, json!({"number": 4, "to": "assigned"}));
        // A tool whose own parameter is `action` keeps it.
        let (name, args) = call("debug", json!({"action": "launch"}));
        assert_eq!(name, None);
        assert_eq!(args, json!({"action": "launch"}));
    }

    #[test]
    fn kitbag_names_and_unknown_names_are_left_alone() {
        assert_eq!(call("file_read", json!({})).0, None);
        assert_eq!(call("nope.nothing", json!({})).0, None);
        assert_eq!(call("kaged.issue", json!({"action": "explode"})).0, None);
        assert_eq!(call("kaged.issue", json!({"action": 3})).0, None);
    }
}
