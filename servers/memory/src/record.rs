//! What the store holds and hands back: a memory ([`Record`]), the filters of search, recent
//! and context ([`Filter`]), and what a store call did ([`Stored`]).

use serde::{Deserialize, Serialize};

/// One memory as stored and as exported (one JSON line each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    pub id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub created_at: String,
    pub last_used_at: String,
    pub use_count: i64,
}

pub fn content_hash(content: &str, scope: &str, session: Option<&str>) -> String {
    let key = format!(
        "{scope}\u{0}{}\u{0}{}",
        session.unwrap_or(""),
        content.trim()
    );
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(key.as_bytes()))
}

pub fn now() -> String {
    kitbag_shared::audit::now_rfc3339()
}

pub enum Stored {
    New {
        id: String,
        created_at: String,
        evicted: Option<String>,
    },
    Duplicate {
        id: String,
        created_at: String,
    },
    Full,
}

/// Filters shared by search, recent and context.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub tags: Vec<String>,
    pub scope: Option<String>,
    pub session: Option<String>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.scope.is_none() && self.session.is_none()
    }

    pub(crate) fn keeps(&self, r: &Record) -> bool {
        self.scope.as_ref().is_none_or(|s| *s == r.scope)
            && self
                .session
                .as_ref()
                .is_none_or(|s| r.session.as_ref() == Some(s))
            && self
                .tags
                .iter()
                .all(|t| r.tags.iter().any(|x| x.eq_ignore_ascii_case(t)))
    }
}
