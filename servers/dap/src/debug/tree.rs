//! A `variables` answer with nested values (`depth` > 1), fetched level by level (each
//! level's requests sent together), bounded by depth, per-value and total counts.

use kitbag_shared::ToolResult;
use serde_json::{Value, json};

use crate::dap::{Client, RequestError};

use super::result::Variable;
use super::{REQUEST_TIMEOUT, adapter_failure, cap};

/// The deepest `variables` `depth`.
pub const MAX_DEPTH: u64 = 4;
/// Nested values returned per value, and in all, by a `depth` > 1 call.
pub const MAX_CHILDREN_PER_VALUE: usize = 50;
pub const MAX_NESTED_VALUES: usize = 500;

/// Whether a variable is worth showing (not a dunder or debugpy's grouping nodes).
pub fn shown(v: &Value) -> bool {
    let name = v["name"].as_str().unwrap_or("");
    !(name.starts_with("__") || name == "special variables" || name == "function variables")
}

/// An adapter's variable as kitbag's, named `name`.
pub fn variable(v: &Value, name: String) -> Variable {
    let reference = v["variablesReference"].as_i64().unwrap_or(0);
    Variable {
        name,
        value: cap(v["value"].as_str().unwrap_or("")),
        value_type: v["type"].as_str().unwrap_or("").to_string(),
        expandable: reference > 0,
        variables_reference: reference,
        memory_reference: v["memoryReference"].as_str().map(String::from),
        children: None,
        children_omitted: None,
    }
}

pub struct Tree {
    /// Every value, its children (indexes) once expanded, and how many children were left out.
    nodes: Vec<(Variable, Option<Vec<usize>>, u64)>,
    roots: Vec<usize>,
    pub truncated: bool,
}

impl Tree {
    pub fn new(top: Vec<Variable>) -> Tree {
        let roots = (0..top.len()).collect();
        Tree {
            nodes: top.into_iter().map(|v| (v, None, 0)).collect(),
            roots,
            truncated: false,
        }
    }

    /// Expand down to `depth` levels; children are named by `name_child(parent, child)`.
    pub async fn expand(
        &mut self,
        client: &Client,
        depth: u64,
        name_child: impl Fn(&str, &str) -> String,
    ) -> ToolResult<()> {
        let mut budget = MAX_NESTED_VALUES;
        let mut frontier = self.roots.clone();
        for _ in 1..depth {
            let mut asked = Vec::new();
            for &i in &frontier {
                let reference = self.nodes[i].0.variables_reference;
                if reference > 0 {
                    let rx = client
                        .start("variables", json!({"variablesReference": reference}))
                        .await
                        .map_err(|e| {
                            adapter_failure(client, format!("adapter write failed: {e}"))
                        })?;
                    asked.push((i, rx));
                }
            }
            let mut next = Vec::new();
            for (i, rx) in asked {
                let resp = match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
                    Ok(Ok(resp)) => resp,
                    Ok(Err(_)) => {
                        return Err(adapter_failure(client, RequestError::Ended));
                    }
                    Err(_) => {
                        return Err(adapter_failure(
                            client,
                            RequestError::NoAnswer("variables".into()),
                        ));
                    }
                };
                let kids: Vec<&Value> = resp["body"]["variables"]
                    .as_array()
                    .map(|a| a.iter().filter(|v| shown(v)).collect())
                    .unwrap_or_default();
                let take = kids.len().min(MAX_CHILDREN_PER_VALUE).min(budget);
                if take < kids.len().min(MAX_CHILDREN_PER_VALUE) {
                    self.truncated = true;
                }
                budget -= take;
                let parent = self.nodes[i].0.name.clone();
                let mut ids = Vec::with_capacity(take);
                for k in kids.iter().take(take) {
                    ids.push(self.nodes.len());
                    let name = name_child(&parent, k["name"].as_str().unwrap_or(""));
                    self.nodes.push((variable(k, name), None, 0));
                }
                next.extend(&ids);
                self.nodes[i].1 = Some(ids);
                self.nodes[i].2 = (kids.len() - take) as u64;
            }
            if next.is_empty() || budget == 0 {
                break;
            }
            frontier = next;
        }
        Ok(())
    }

    pub fn render(&self) -> Vec<Variable> {
        self.roots.iter().map(|&i| self.render_one(i)).collect()
    }

    fn render_one(&self, i: usize) -> Variable {
        let (v, kids, omitted) = &self.nodes[i];
        let mut v = v.clone();
        if let Some(kids) = kids {
            v.children = Some(kids.iter().map(|&k| self.render_one(k)).collect());
            if *omitted > 0 {
                v.children_omitted = Some(*omitted);
            }
        }
        v
    }

    /// The first `roots` top-level values (and what they hold) as text.
    pub fn text(&self, roots: usize) -> String {
        let mut out = String::new();
        let shown = &self.roots[..roots.min(self.roots.len())];
        self.text_of(shown, 0, &mut out);
        out
    }

    fn text_of(&self, ids: &[usize], indent: usize, out: &mut String) {
        for &i in ids {
            let (v, kids, omitted) = &self.nodes[i];
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "{:indent$}{}: {} = {}",
                "",
                v.name,
                v.value_type,
                v.value,
                indent = indent * 2
            ));
            if let Some(kids) = kids {
                self.text_of(kids, indent + 1, out);
                if *omitted > 0 {
                    out.push_str(&format!(
                        "\n{:w$}… {omitted} more",
                        "",
                        w = (indent + 1) * 2
                    ));
                }
            }
        }
    }
}
