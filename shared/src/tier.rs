//! Capability tiers (seed 002): what a tool can do to the world, as four grants an operator
//! or an OAuth token gives separately — `read` (introspection), `write` (changes files and
//! state), `exec` (runs programs) and `external` (reaches the network).
//!
//! Every kitbag tool declares its tier in `_meta` (`kitbag/tier`); a tool of another server
//! gets one from its annotations ([`of_tool`]).

use std::fmt;

use rmcp::model::Tool;
use serde_json::Value;

/// The `_meta` key holding a kitbag tool's tier.
pub const TIER_META: &str = "kitbag/tier";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Read,
    Write,
    Exec,
    External,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Write, Tier::Exec, Tier::External];

    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Write => "write",
            Tier::Exec => "exec",
            Tier::External => "external",
        }
    }

    pub fn parse(text: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's tier: its declared `kitbag/tier`, else what its annotations promise. A tool that
/// promises nothing may run anything, so it needs `exec`; one that only reads but reaches
/// the network needs `external`.
pub fn of_tool(tool: &Tool) -> Tier {
    let declared = tool
        .meta
        .as_ref()
        .and_then(|m| m.0.get(TIER_META))
        .and_then(Value::as_str)
        .and_then(Tier::parse);
    if let Some(tier) = declared {
        return tier;
    }
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|a| a.read_only_hint) == Some(true);
    // The MCP default for openWorldHint is true: only an explicit false keeps a tool local.
    let local = hints.and_then(|a| a.open_world_hint) == Some(false);
    match (read_only, local) {
        (true, true) => Tier::Read,
        (true, false) => Tier::External,
        (false, _) => Tier::Exec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    fn tool() -> Tool {
        Tool::new("t", "d", std::sync::Arc::new(serde_json::Map::new()))
    }

    #[test]
    fn declared_tiers_win_and_annotations_decide_the_rest() {
        let mut m = serde_json::Map::new();
        m.insert(TIER_META.into(), "write".into());
        let declared = tool()
            .with_meta(rmcp::model::MetaObject(m))
            .with_annotations(ToolAnnotations::new().read_only(true));
        assert_eq!(of_tool(&declared), Tier::Write);
        assert_eq!(of_tool(&tool()), Tier::Exec, "no promises: exec");
        let reader =
            tool().with_annotations(ToolAnnotations::new().read_only(true).open_world(false));
        assert_eq!(of_tool(&reader), Tier::Read);
        let fetcher = tool().with_annotations(ToolAnnotations::new().read_only(true));
        assert_eq!(of_tool(&fetcher), Tier::External, "open world by default");
        for t in Tier::ALL {
            assert_eq!(Tier::parse(t.as_str()), Some(t));
        }
        assert_eq!(Tier::parse("admin"), None);
    }
}
