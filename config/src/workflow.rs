//! Workflows as the config declares them (issue #39 §3; seed 004's `kaged.workflow.*`):
//! `"workflows": {"NAME": {description, inputs, invokable_by, timeout_seconds, steps}}` in
//! agent.json, or one `.kitbag/workflows/NAME.json` per workflow (the file holds what the
//! map's value would). Checked when the config loads: a bad declaration names its field.
//!
//! `inputs` is a JSON Schema object (`{"type": "object", "properties": …, "required": […]}`) or
//! seed 004's field map (`{"branch": {"type": "string", "required": true}}`), read into the
//! former. A step is an agent turn (`prompt`, `pack`), a tool call (`tool`, `args`) or a shell
//! command (`shell`); `{inputs.NAME}` in their text is replaced by the input's value (quoted
//! for the shell).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The host's workflow tools, offered when a workflow is declared (root-only).
pub const TOOLS: &[&str] = &["workflow_list", "workflow_status", "workflow_trigger"];

/// A declaration kitbag refuses, with the field and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct WorkflowError(pub String);

impl From<String> for WorkflowError {
    fn from(s: String) -> Self {
        WorkflowError(s)
    }
}

impl From<&str> for WorkflowError {
    fn from(s: &str) -> Self {
        WorkflowError(s.to_string())
    }
}

/// Who may invoke a workflow (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Invoker {
    Operator,
    Guest,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// A turn of the agent loop in the run's session.
    Agent {
        prompt: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pack: Option<String>,
    },
    /// One tool call through the host.
    Tool { tool: String, args: Value },
    /// A command for `/bin/sh -c` (run by the shell family's `shell_bash`).
    Shell {
        shell: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout_seconds: Option<u64>,
    },
}

/// A step as written: exactly one of `prompt`, `tool`, `shell`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepDecl {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    pack: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    shell: Option<String>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowDecl {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    inputs: Option<Value>,
    #[serde(default)]
    invokable_by: Option<Vec<Invoker>>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    steps: Vec<StepDecl>,
}

/// A declared workflow, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub name: String,
    pub description: String,
    /// A JSON Schema object.
    pub inputs: Value,
    pub invokable_by: Vec<Invoker>,
    /// The whole run's bound.
    pub timeout_seconds: u64,
    pub steps: Vec<Step>,
}

/// Default bound of a run.
pub const DEFAULT_TIMEOUT_SECS: u64 = 3600;
const MAX_STEPS: usize = 100;
const TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "array", "object", "file",
];

/// Whether `name` can name a workflow: 1–64 of `[a-z0-9_-]`, starting with a letter.
fn check_name(name: &str) -> Result<(), WorkflowError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WorkflowError(format!(
            "workflow name {name:?}: 1–64 of a-z, 0-9, '_' and '-', starting with a letter"
        )))
    }
}

/// `inputs` as a JSON Schema object (seed 004's field map converted).
fn input_schema(inputs: Option<Value>) -> Result<Value, WorkflowError> {
    let Some(v) = inputs else {
        return Ok(json!({"type": "object", "properties": {}}));
    };
    let Value::Object(map) = v else {
        return Err("inputs: an object (a JSON Schema, or a map of fields)".into());
    };
    let (properties, required) =
        if map.get("type") == Some(&json!("object")) || map.contains_key("properties") {
            let properties = map.get("properties").cloned().unwrap_or_else(|| json!({}));
            let Value::Object(properties) = properties else {
                return Err("inputs.properties: an object".into());
            };
            let required: Vec<String> = match map.get("required") {
                None => Vec::new(),
                Some(r) => serde_json::from_value(r.clone())
                    .map_err(|_| "inputs.required: a list of property names".to_string())?,
            };
            (properties, required)
        } else {
            // Seed 004: each field with its own `required` flag.
            let mut properties = Map::new();
            let mut required = Vec::new();
            for (k, field) in map {
                let Value::Object(mut f) = field else {
                    return Err(WorkflowError(format!(
                        "inputs.{k}: an object with a `type`"
                    )));
                };
                if f.remove("required") == Some(Value::Bool(true)) {
                    required.push(k.clone());
                }
                properties.insert(k, Value::Object(f));
            }
            (properties, required)
        };
    for (k, p) in &properties {
        let t = p.get("type").and_then(Value::as_str).unwrap_or("string");
        if !TYPES.contains(&t) {
            return Err(WorkflowError(format!(
                "inputs.{k}.type: {t:?}; accepted: {}",
                TYPES.join(", ")
            )));
        }
    }
    if let Some(r) = required.iter().find(|r| !properties.contains_key(*r)) {
        return Err(WorkflowError(format!(
            "inputs.required: {r:?} is not a property"
        )));
    }
    Ok(json!({"type": "object", "properties": properties, "required": required}))
}

fn step(i: usize, d: StepDecl) -> Result<Step, WorkflowError> {
    let at = |f: &str| format!("steps[{i}].{f}");
    let kinds = [d.prompt.is_some(), d.tool.is_some(), d.shell.is_some()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(WorkflowError(format!(
            "steps[{i}]: exactly one of `prompt` (an agent turn), `tool` (a tool call), `shell` (a command)"
        )));
    }
    let extra = |f: &str, given: bool, kind: &str| {
        if given {
            Err(WorkflowError(format!("{}: only for {kind} steps", at(f))))
        } else {
            Ok(())
        }
    };
    if let Some(prompt) = d.prompt {
        extra("args", d.args.is_some(), "tool")?;
        extra("timeout_seconds", d.timeout_seconds.is_some(), "shell")?;
        if prompt.trim().is_empty() {
            return Err(WorkflowError(format!("{}: empty", at("prompt"))));
        }
        return Ok(Step::Agent {
            prompt,
            pack: d.pack,
        });
    }
    extra("pack", d.pack.is_some(), "agent (`prompt`)")?;
    if let Some(tool) = d.tool {
        extra("timeout_seconds", d.timeout_seconds.is_some(), "shell")?;
        let args = d.args.unwrap_or_else(|| json!({}));
        if !args.is_object() {
            return Err(WorkflowError(format!("{}: an object", at("args"))));
        }
        return Ok(Step::Tool { tool, args });
    }
    extra("args", d.args.is_some(), "tool")?;
    let shell = d.shell.unwrap_or_default();
    if shell.trim().is_empty() {
        return Err(WorkflowError(format!("{}: empty", at("shell"))));
    }
    Ok(Step::Shell {
        shell,
        timeout_seconds: d.timeout_seconds,
    })
}

/// One declaration, checked.
pub fn parse_one(name: &str, v: Value) -> Result<Workflow, WorkflowError> {
    check_name(name)?;
    let d: WorkflowDecl = serde_json::from_value(v).map_err(|e| e.to_string())?;
    if d.steps.is_empty() || d.steps.len() > MAX_STEPS {
        return Err(WorkflowError(format!("steps: 1 to {MAX_STEPS} steps")));
    }
    let steps = d
        .steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| step(i, s))
        .collect::<Result<_, _>>()?;
    Ok(Workflow {
        name: name.to_string(),
        description: d.description.unwrap_or_default(),
        inputs: input_schema(d.inputs)?,
        invokable_by: d.invokable_by.unwrap_or_else(|| vec![Invoker::Operator]),
        timeout_seconds: d.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECS).max(1),
        steps,
    })
}

/// agent.json's `workflows` map.
pub fn parse_map(map: BTreeMap<String, Value>) -> Result<Vec<Workflow>, WorkflowError> {
    map.into_iter()
        .map(|(name, v)| {
            parse_one(&name, v).map_err(|e| WorkflowError(format!("workflows.{name}: {e}")))
        })
        .collect()
}

/// The workflows of `<root>/.kitbag/workflows/*.json` (each file's stem names it), after
/// `declared` (agent.json's win a name both declare). A file that does not parse is an
/// error naming it.
pub fn with_files(
    mut declared: Vec<Workflow>,
    root: &Path,
) -> Result<Vec<Workflow>, WorkflowError> {
    let dir = root.join(".kitbag").join("workflows");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(declared);
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for path in files {
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if declared.iter().any(|w| w.name == name) {
            continue;
        }
        let shown = path.display();
        let text =
            std::fs::read_to_string(&path).map_err(|e| WorkflowError(format!("{shown}: {e}")))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| WorkflowError(format!("{shown}: {e}")))?;
        declared.push(parse_one(name, v).map_err(|e| WorkflowError(format!("{shown}: {e}")))?);
    }
    Ok(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_field_maps_and_json_schemas_read_alike() {
        let seed = parse_one(
            "deploy",
            json!({"description": "Ship it.", "inputs": {
                "branch": {"type": "string", "required": true, "description": "Git branch."},
                "dry_run": {"type": "boolean", "required": false, "default": false}
            }, "steps": [{"shell": "echo {inputs.branch}"}]}),
        )
        .expect("seed form");
        let schema = parse_one(
            "deploy",
            json!({"description": "Ship it.", "inputs": {"type": "object", "properties": {
                "branch": {"type": "string", "description": "Git branch."},
                "dry_run": {"type": "boolean", "default": false}
            }, "required": ["branch"]}, "steps": [{"shell": "echo {inputs.branch}"}]}),
        )
        .expect("schema form");
        assert_eq!(seed, schema);
        assert_eq!(seed.invokable_by, [Invoker::Operator]);
        assert_eq!(seed.timeout_seconds, DEFAULT_TIMEOUT_SECS);
    }

    #[test]
    fn a_bad_declaration_names_its_field() {
        let bad = |v: Value| parse_one("w", v).expect_err("refused").0;
        assert!(bad(json!({"steps": []})).contains("steps: 1 to"));
        assert!(
            bad(json!({"steps": [{"prompt": "a", "shell": "b"}]}))
                .contains("steps[0]: exactly one")
        );
        assert!(bad(json!({"steps": [{"shell": "x", "pack": "p"}]})).contains("steps[0].pack"));
        assert!(bad(json!({"steps": [{"tool": "t", "args": 3}]})).contains("steps[0].args"));
        assert!(
            bad(json!({"steps": [{"shell": "x"}], "inputs": {"a": {"type": "date"}}}))
                .contains("inputs.a.type")
        );
        assert!(bad(json!({"steps": [{"shell": "x"}], "colour": 1})).contains("colour"));
        assert!(parse_one("Bad Name", json!({"steps": [{"shell": "x"}]})).is_err());
        let e = parse_map(BTreeMap::from([("w".to_string(), json!({"steps": []}))]))
            .expect_err("refused")
            .0;
        assert!(e.starts_with("workflows.w: "), "{e}");
    }

    #[test]
    fn files_add_workflows_the_config_does_not_declare() {
        let d = tempfile::tempdir().expect("tmp");
        let dir = d.path().join(".kitbag/workflows");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("lint.json"), r#"{"steps": [{"shell": "true"}]}"#).expect("w");
        std::fs::write(
            dir.join("deploy.json"),
            r#"{"steps": [{"shell": "false"}]}"#,
        )
        .expect("w");
        std::fs::write(dir.join("notes.md"), "not a workflow").expect("w");
        let declared = parse_map(BTreeMap::from([(
            "deploy".to_string(),
            json!({"steps": [{"shell": "echo config"}]}),
        )]))
        .expect("map");
        let all = with_files(declared, d.path()).expect("files");
        let names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["deploy", "lint"]);
        assert_eq!(
            all[0].steps,
            [Step::Shell {
                shell: "echo config".into(),
                timeout_seconds: None
            }]
        );
        std::fs::write(dir.join("broken.json"), "{").expect("w");
        assert!(
            with_files(Vec::new(), d.path())
                .expect_err("bad file")
                .0
                .contains("broken.json")
        );
    }
}
