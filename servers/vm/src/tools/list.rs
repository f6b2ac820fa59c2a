//! `instance_list`: the instances, filtered; one instance in full with `instance`.

use std::collections::BTreeMap;

use kitbag_shared::{Reply, ToolDef, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::instance::{InstanceInfo, State};
use crate::tools::validate;
use crate::{Caller, VmState};
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};

pub const DEF: ToolDef = ToolDef::read(
    "instance_list",
    "List instances",
    "List instances (state, ports, leases, deadlines, usage), ended ones until removed.",
);

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub state: Option<Vec<State>>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Default true.
    #[serde(default)]
    pub include_ended: Option<bool>,
    /// Default 50.
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub leases_offset: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    pub instances: Vec<InstanceInfo>,
    /// How many matched in all.
    pub total: u64,
    /// The offset of the next page; null on the last page.
    pub next_offset: Option<u64>,
}

pub fn run(state: &VmState, p: ListParams, caller: &Caller) -> ToolResult<Reply<ListResult>> {
    let limit = validate::range("limit", p.limit.unwrap_or(50), 1, 200)?;
    let offset = p.offset.unwrap_or(0);
    let map = state.lock();
    let only = match &p.instance {
        Some(key) => Some(VmState::find(&map, key, "instance", caller)?),
        None => None,
    };
    if p.leases_offset.is_some() && p.instance.is_none() {
        return Err(kitbag_shared::ToolError::invalid_field(
            "leases_offset",
            "pages one instance's leases; give instance too",
        ));
    }
    let include_ended = p.include_ended.unwrap_or(true);
    let matched: Vec<&crate::instance::Instance> = map
        .values()
        .filter(|i| crate::visible(&map, &i.id, caller) && Some(&i.id) != caller.as_ref())
        .filter(|i| only.as_ref().is_none_or(|id| &i.id == id))
        .filter(|i| include_ended || i.state.is_live())
        .filter(|i| p.state.as_ref().is_none_or(|s| s.contains(&i.state)))
        .filter(|i| {
            p.labels
                .as_ref()
                .is_none_or(|want| want.iter().all(|(k, v)| i.labels.get(k) == Some(v)))
        })
        .collect();
    let total = matched.len() as u64;
    // Without a limit the page also stops where the answer's budget would be passed (never
    // before its first instance, so paging moves on).
    let fit = p.limit.is_none();
    let mut used = json_len(&ListResult {
        instances: Vec::new(),
        total,
        next_offset: Some(u64::MAX),
    });
    let mut page = Vec::new();
    let mut infos = Vec::new();
    for i in matched
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
    {
        let mut info = i.info(&state.root);
        if let Some(skip) = p.leases_offset {
            let skip = usize::try_from(skip)
                .unwrap_or(usize::MAX)
                .min(info.leases.len());
            info.leases.drain(..skip);
        }
        if fit {
            if infos.is_empty() {
                info.fit_within(RESULT_BUDGET_BYTES - used - 1);
            }
            let weight = json_len(&info) + 1;
            if !infos.is_empty() && used + weight >= RESULT_BUDGET_BYTES {
                break;
            }
            used += weight;
        }
        page.push(i);
        infos.push(info);
    }
    let next = offset + page.len() as u64;
    let mut text = if page.is_empty() {
        "no instances".to_string()
    } else {
        page.iter().map(|i| i.line()).collect::<Vec<_>>().join("\n")
    };
    for i in infos.iter().filter(|i| i.leases_truncated) {
        let from = p.leases_offset.unwrap_or(0) + i.leases.len() as u64;
        text.push_str(&format!(
            "\n{}: {} of {} leases shown (instance {}, leases_offset {from} for more)",
            i.id,
            i.leases.len(),
            i.leases_total,
            i.id
        ));
    }
    if next < total {
        text.push_str(&format!("\n… {} more (offset {next})", total - next));
    }
    Ok(Reply::new(
        ListResult {
            instances: infos,
            total,
            next_offset: (next < total).then_some(next),
        },
        text,
    ))
}
