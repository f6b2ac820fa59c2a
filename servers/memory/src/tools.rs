//! The memory tools: store, search, delete, context.

use kitbag_shared::args;
use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len, truncate_str};
use kitbag_shared::lock::LockExt;
use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

use kitbag_shared::{CallCtx, ErrorCode, Reply, ToolDef, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::record::{Filter, Record, Stored};
use crate::secrets;
use crate::store::Store;

pub const STORE_DEF: ToolDef = ToolDef::write(
    "memory_store",
    "Remember",
    "Remember a fact, preference or decision for later sessions (stored once per scope). \
     Credentials are refused.",
)
// A refused secret must leave no trace: the content and tags never reach a log.
.private_args(&["content", "tags"]);

pub const SEARCH_DEF: ToolDef = ToolDef::read(
    "memory_search",
    "Recall",
    "Search memories (full text, content and tags).",
);

pub const DELETE_DEF: ToolDef = ToolDef::write(
    "memory_delete",
    "Forget",
    "Delete memories by `id` or `ids`; unknown ids are reported.",
)
.destructive()
.idempotent();

pub const CONTEXT_DEF: ToolDef = ToolDef::read(
    "memory_context",
    "Memory context block",
    "Memories to prepend to an LLM call: those matching `query` (the latest turn), else the \
     most recent.",
);

static STOPWORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    "a an and are as at be been but by can could did do does for from had has have he her his how i if in into is it its \
     just me my no not of on or our she so than that the their them then there these they this to too up us was we were \
     what when where which who why will with would you your about after all also any because before being both each few \
     more most other over same should some such only own very s t don"
        .split_whitespace()
        .collect()
});

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    User,
    Project,
    Session,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Session => "session",
        }
    }
}

pub struct Config {
    pub max_content: usize,
    pub max_total: i64,
    pub evict_when_full: bool,
}

pub struct MemoryState {
    pub conn: Mutex<Store>,
    pub cfg: Config,
}

async fn with_db<T: Send + 'static>(
    state: &Arc<MemoryState>,
    f: impl FnOnce(&mut Store, &Config) -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    let s = state.clone();
    kitbag_shared::blocking(move || {
        let mut conn = s.conn.locked();
        f(&mut conn, &s.cfg)
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreParams {
    pub content: String,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Default `project`; `user`: about the person, any project; `session`: needs `session`.
    #[serde(default)]
    pub scope: Option<Scope>,
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StoreResult {
    pub id: String,
    pub created_at: String,
    /// An identical memory already existed; its id is returned.
    pub duplicate: bool,
    /// The memory removed to make room, when the store was full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted: Option<String>,
}

fn check_scope(
    scope: Option<Scope>,
    session: &Option<String>,
) -> ToolResult<(Scope, Option<String>)> {
    let scope = scope.unwrap_or(Scope::Project);
    match (scope, session) {
        (Scope::Session, None) => Err(ToolError::invalid_field(
            "session",
            "is required when scope is `session`",
        )),
        (Scope::Session, Some(s)) if s.trim().is_empty() => {
            Err(ToolError::invalid_field("session", "must not be empty"))
        }
        (Scope::Session, Some(s)) => Ok((scope, Some(s.clone()))),
        (_, Some(_)) => Err(ToolError::invalid_field(
            "session",
            "is only accepted with scope `session`",
        )),
        (_, None) => Ok((scope, None)),
    }
}

pub async fn store(
    state: Arc<MemoryState>,
    p: StoreParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<StoreResult>> {
    let content = p.content.trim().to_string();
    args::non_empty("content", &content, "it is required")?;
    args::max_bytes("content", &content, state.cfg.max_content)?;
    let raw_tags = p.tags.unwrap_or_default();
    let clean_tags = tags_arg(raw_tags.clone())?;
    let (scope, session) = check_scope(p.scope, &p.session)?;
    // Scan before anything touches disk; the message names the rule, never the value.
    // Tags as given: lower-casing first would hide case-sensitive formats (`AKIA…`).
    let scanned = std::iter::once(content.as_str()).chain(raw_tags.iter().map(String::as_str));
    for (i, text) in scanned.enumerate() {
        if let Some(f) = secrets::scan(text) {
            let field = if i == 0 { "content" } else { "tags" };
            return Err(ToolError::new(
                ErrorCode::SecretDetected,
                format!(
                    "{field}: refused — it looks like a secret ({} on line {}). Memories are stored in plain text; keep credentials in a secret manager and store only where to find them.",
                    f.rule, f.line
                ),
            )
            .with_detail(json!({ "field": field, "rule": f.rule, "line": f.line })));
        }
    }
    let outcome = with_db(&state, move |conn, cfg| {
        conn.store(
            &content,
            &clean_tags,
            scope.as_str(),
            session.as_deref(),
            cfg.max_total,
            cfg.evict_when_full,
        )
    })
    .await?;
    match outcome {
        Stored::New {
            id,
            created_at,
            evicted,
        } => {
            let text = match &evicted {
                Some(e) => {
                    format!("stored {id} (the store was full: evicted {e}, the least used memory)")
                }
                None => format!("stored {id}"),
            };
            Ok(Reply::new(
                StoreResult {
                    id,
                    created_at,
                    duplicate: false,
                    evicted,
                },
                text,
            ))
        }
        Stored::Duplicate { id, created_at } => {
            let text = format!("already stored as {id}");
            Ok(Reply::new(
                StoreResult {
                    id,
                    created_at,
                    duplicate: true,
                    evicted: None,
                },
                text,
            ))
        }
        Stored::Full => Err(ToolError::new(
            ErrorCode::MemoryFull,
            format!(
                "the memory store is full ({} entries); delete memories first",
                state.cfg.max_total
            ),
        )),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Empty: the most recent.
    #[serde(default)]
    pub query: Option<String>,
    /// Match all of these.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub scope: Option<Scope>,
    #[serde(default)]
    pub session: Option<String>,
    /// 1–100, default 10.
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Hit {
    pub id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub scope: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub created_at: String,
    /// Relevance (higher is better); 0 for recency listings.
    pub score: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    pub memories: Vec<Hit>,
    pub count: u64,
    /// Memories matching, counted up to one past this page.
    pub total: u64,
    /// False: more match than `total`.
    pub total_exact: bool,
    /// More memories follow (`next_offset`), past `limit` or the 40 KB answer.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

/// Query words worth matching: lowercase, no stopwords, no punctuation.
pub fn terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in query
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
    {
        if w.chars().count() >= 2 && !STOPWORDS.contains(w.as_str()) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

fn age_days(created_at: &str) -> f64 {
    let fmt = time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(created_at, &fmt) {
        Ok(t) => ((time::OffsetDateTime::now_utc() - t).as_seconds_f64() / 86400.0).max(0.0),
        Err(_) => 365.0,
    }
}

/// Rank memories for `query`: full-text relevance (BM25 on SQLite, `ts_rank_cd` on
/// PostgreSQL) with a small bonus for recent entries.
pub fn rank(store: &mut Store, query: &str, filter: &Filter, limit: usize) -> ToolResult<Vec<Hit>> {
    rank_to(store, query, filter, limit, limit)
}

/// The `depth` best memories for `query`, chosen among all-words or any-word matches as for
/// a page of `limit`: the choice does not depend on the depth, so consecutive pages of one
/// search rank alike and neither repeat nor skip a memory.
pub fn rank_to(
    store: &mut Store,
    query: &str,
    filter: &Filter,
    limit: usize,
    depth: usize,
) -> ToolResult<Vec<Hit>> {
    let words = terms(query);
    if words.is_empty() {
        return Ok(store
            .recent(filter, depth)?
            .into_iter()
            .map(|r| hit(r, 0.0))
            .collect());
    }
    let want = depth.saturating_mul(5).max(50);
    let mut hits: Vec<Hit> = store
        .candidates(&words, filter, limit, want)?
        .into_iter()
        .map(|(r, relevance)| {
            // Recency adds up to 20%.
            let recency = 0.2 * (-age_days(&r.created_at) / 30.0).exp();
            let score = relevance * (1.0 + recency);
            hit(r, (score * 1000.0).round() / 1000.0)
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.created_at.cmp(&a.created_at))
            .then_with(|| b.id.cmp(&a.id))
    });
    hits.truncate(depth);
    Ok(hits)
}

/// The ranked hits from `offset` on, at most `limit` and as many as fit `budget` bytes of
/// JSON (the first always, its content cut if it alone would not fit).
pub fn page(ranked: Vec<Hit>, offset: usize, limit: usize, budget: usize) -> Vec<Hit> {
    let mut used = json_len(&SearchResult {
        memories: Vec::new(),
        count: u64::MAX,
        total: u64::MAX,
        total_exact: false,
        truncated: true,
        next_offset: Some(u64::MAX),
    });
    let mut out: Vec<Hit> = Vec::new();
    for mut h in ranked.into_iter().skip(offset).take(limit) {
        let first = out.is_empty();
        let mut add = json_len(&h) + usize::from(!first);
        if used + add > budget {
            if !first {
                break;
            }
            // Only a memory larger than the default 4 KB (`--max-content-bytes`) gets here.
            let marker = "… [cut to fit 40 KB]";
            let room = (budget - used.min(budget))
                .saturating_sub(add - json_len(h.content.as_str()) + json_len(marker));
            let (mut end, mut kept) = (h.content.len(), h.content.as_str());
            while json_len(kept) > room && end > 0 {
                end = (end * 9 / 10).min(end - 1);
                kept = truncate_str(&h.content, end).0;
            }
            h.content = format!("{kept}{marker}");
            add = json_len(&h);
        }
        used += add;
        out.push(h);
    }
    out
}

fn hit(r: Record, score: f64) -> Hit {
    Hit {
        id: r.id,
        content: r.content,
        tags: r.tags,
        scope: r.scope,
        session: r.session,
        created_at: r.created_at,
        score,
    }
}

fn limit_arg(field: &str, v: Option<i64>, default: i64, max: i64) -> ToolResult<usize> {
    Ok(args::opt_range(field, v, 1, max)?.unwrap_or(default) as usize)
}

/// Tags as stored and filtered by: trimmed, lower-case, 1–64 characters, at most 20, no
/// repeats. Checked before any work, so a huge tag costs nothing.
fn tags_arg(tags: Vec<String>) -> ToolResult<Vec<String>> {
    args::max_count("tags", tags.len(), 20, "tags")?;
    let mut clean = Vec::new();
    for t in &tags {
        let t = t.trim();
        if t.is_empty() || t.len() > 64 {
            return Err(ToolError::invalid_field(
                "tags",
                "each tag must be 1–64 characters",
            ));
        }
        let t = t.to_lowercase();
        if !clean.contains(&t) {
            clean.push(t);
        }
    }
    Ok(clean)
}

/// The longest memory id accepted (ids are `mem-` and a few hex digits).
const MAX_ID_BYTES: usize = 64;

fn filter_from(
    tags: Option<Vec<String>>,
    scope: Option<Scope>,
    session: Option<String>,
) -> ToolResult<Filter> {
    if session.is_some() && scope.is_some_and(|s| s != Scope::Session) {
        return Err(ToolError::invalid_field(
            "session",
            "is only accepted with scope `session`",
        ));
    }
    Ok(Filter {
        tags: tags_arg(tags.unwrap_or_default())?,
        scope: scope.map(|s| s.as_str().to_string()),
        session,
    })
}

/// The deepest `offset` accepted: every page ranks the memories before it again.
const MAX_OFFSET: i64 = 10_000;

/// The longest search query accepted (a memory is at most 4 KB; a query needs no more).
pub const MAX_QUERY_BYTES: usize = 4096;

/// A search text, refused before any work when it is longer than a query can usefully be.
fn query_arg(query: Option<String>) -> ToolResult<String> {
    let query = query.unwrap_or_default();
    args::max_bytes("query", &query, MAX_QUERY_BYTES)?;
    Ok(query)
}

pub async fn search(
    state: Arc<MemoryState>,
    p: SearchParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<SearchResult>> {
    let limit = limit_arg("limit", p.limit, 10, 100)?;
    let explicit = p.limit.is_some();
    let offset = args::opt_range("offset", p.offset, 0, MAX_OFFSET)?.unwrap_or(0) as usize;
    let filter = filter_from(p.tags, p.scope, p.session)?;
    let query = query_arg(p.query)?;
    let (hits, found, depth) = with_db(&state, move |conn, _| {
        // One past the page: whether more follow, without counting every match.
        let depth = offset + limit + 1;
        let ranked = rank_to(conn, &query, &filter, limit, depth)?;
        let found = ranked.len();
        // The budget holds a default call; an explicit `limit` gets what it asks for.
        let budget = if explicit {
            usize::MAX
        } else {
            RESULT_BUDGET_BYTES
        };
        let hits = page(ranked, offset, limit, budget);
        let ids: Vec<String> = hits.iter().map(|h| h.id.clone()).collect();
        conn.touch(&ids)?;
        Ok((hits, found, depth))
    })
    .await?;
    let end = offset + hits.len();
    let next_offset = (end < found).then_some(end);
    let mut text = String::new();
    for h in &hits {
        let tags = if h.tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", h.tags.join(", "))
        };
        text.push_str(&format!(
            "{} ({}, {:.2}){}: {}\n",
            h.id,
            &h.created_at[..10.min(h.created_at.len())],
            h.score,
            tags,
            h.content
        ));
    }
    if hits.is_empty() {
        text = "no memories match".into();
    }
    if let Some(n) = next_offset {
        text.push_str(&format!("[more: call again with offset={n}]"));
    }
    Ok(Reply::new(
        SearchResult {
            count: hits.len() as u64,
            memories: hits,
            total: found as u64,
            total_exact: found < depth,
            truncated: next_offset.is_some(),
            next_offset: next_offset.map(|n| n as u64),
        },
        text.trim_end().to_string(),
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct DeleteResult {
    pub deleted: Vec<String>,
    /// Ids that were not found.
    pub unknown: Vec<String>,
    /// How many were deleted and unknown in all: the two lists above are cut to fit the
    /// answer (`truncated`) when a long `ids` list was given.
    pub deleted_count: usize,
    pub unknown_count: usize,
    pub truncated: bool,
}

pub async fn delete(
    state: Arc<MemoryState>,
    p: DeleteParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<DeleteResult>> {
    let mut ids: Vec<String> = p.ids.unwrap_or_default();
    let field = if ids.is_empty() { "id" } else { "ids" };
    if let Some(id) = p.id {
        ids.insert(0, id);
    }
    if ids.is_empty() {
        return Err(ToolError::invalid_field(
            "ids",
            "give `id` or a non-empty `ids` list",
        ));
    }
    args::max_count("ids", ids.len(), 1000, "ids")?;
    if ids.iter().any(|id| id.len() > MAX_ID_BYTES) {
        // Unknown ids are echoed in the answer: an id no memory can have is refused instead.
        return Err(ToolError::invalid_field(
            field,
            format!("each id is at most {MAX_ID_BYTES} bytes"),
        ));
    }
    let (deleted, unknown) = with_db(&state, move |conn, _| conn.delete(&ids)).await?;
    let (deleted_count, unknown_count) = (deleted.len(), unknown.len());
    // The unknown ids first: they are what the caller must look at again.
    let base = kitbag_shared::limits::json_len(&DeleteResult {
        deleted: Vec::new(),
        unknown: Vec::new(),
        deleted_count,
        unknown_count,
        truncated: true,
    });
    let (unknown, cut_unknown) = kitbag_shared::limits::within_budget(base, unknown);
    let used = base + kitbag_shared::limits::json_len(&unknown);
    let (deleted, cut_deleted) = if used + 64 < kitbag_shared::limits::RESULT_BUDGET_BYTES {
        kitbag_shared::limits::within_budget(used, deleted)
    } else {
        (Vec::new(), deleted_count > 0)
    };
    let truncated = cut_unknown || cut_deleted;
    let mut text = format!("deleted {deleted_count}");
    if unknown_count > 0 {
        text.push_str(&format!(
            "; unknown ({unknown_count}): {}",
            unknown.join(", ")
        ));
        if cut_unknown {
            text.push_str(", …");
        }
    }
    Ok(Reply::new(
        DeleteResult {
            deleted,
            unknown,
            deleted_count,
            unknown_count,
            truncated,
        },
        text,
    ))
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Relevant,
    RecentOnly,
    Off,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextParams {
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Default 2048.
    #[serde(default)]
    pub max_inject_chars: Option<i64>,
    /// Default 10.
    #[serde(default)]
    pub max_inject_count: Option<i64>,
    #[serde(default)]
    pub scope: Option<Scope>,
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ContextResult {
    /// The block to put before the conversation (empty when nothing applies).
    pub block: String,
    /// Memories used, in order.
    pub ids: Vec<String>,
    pub mode: Mode,
}

/// Build the injection block (used by the tool and the MCP prompt).
pub fn context_block(conn: &mut Store, p: &ContextParams) -> ToolResult<ContextResult> {
    let mode = p.mode.unwrap_or_default();
    let max_chars = limit_arg("max_inject_chars", p.max_inject_chars, 2048, 65536)?;
    let max_count = limit_arg("max_inject_count", p.max_inject_count, 10, 100)?;
    let filter = filter_from(None, p.scope, p.session.clone())?;
    if mode == Mode::Off {
        return Ok(ContextResult {
            block: String::new(),
            ids: Vec::new(),
            mode,
        });
    }
    let query = query_arg(p.query.clone())?;
    let mut hits = match mode {
        Mode::Relevant => rank(conn, &query, &filter, max_count)?,
        _ => Vec::new(),
    };
    if hits.is_empty() {
        hits = conn
            .recent(&filter, max_count)?
            .into_iter()
            .map(|r| hit(r, 0.0))
            .collect();
    }
    let header = "<memories>\nThings remembered from earlier sessions (may be outdated):\n";
    let footer = "</memories>";
    let mut block = String::from(header);
    let mut ids = Vec::new();
    for h in hits.into_iter().take(max_count) {
        let line = format!(
            "- [{}] {}\n",
            &h.created_at[..10.min(h.created_at.len())],
            h.content.replace('\n', " ")
        );
        if block.chars().count() + line.chars().count() + footer.len() > max_chars {
            break;
        }
        block.push_str(&line);
        ids.push(h.id);
    }
    if ids.is_empty() {
        return Ok(ContextResult {
            block: String::new(),
            ids,
            mode,
        });
    }
    block.push_str(footer);
    conn.touch(&ids)?;
    Ok(ContextResult { block, ids, mode })
}

pub async fn context(
    state: Arc<MemoryState>,
    p: ContextParams,
    _ctx: CallCtx,
) -> ToolResult<Reply<ContextResult>> {
    let r = with_db(&state, move |conn, _| context_block(conn, &p)).await?;
    let text = if r.block.is_empty() {
        "(no memories to inject)".to_string()
    } else {
        r.block.clone()
    };
    Ok(Reply::new(r, text))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn huge_tags_are_refused_and_tags_are_normalised() {
        let e = tags_arg(vec!["x".repeat(20 << 20)]).expect_err("too long");
        assert_eq!(e.detail["field"], "tags");
        assert!(e.message.len() < 200, "{}", e.message);
        let tags = tags_arg(vec![" Rust ".into(), "rust".into(), "db".into()]).expect("ok");
        assert_eq!(tags, ["rust", "db"]);
        assert!(tags_arg(vec![" ".into()]).is_err());
    }

    #[test]
    fn long_queries_are_refused_before_any_work() {
        let e = query_arg(Some("x".repeat(50 << 20))).expect_err("too long");
        assert_eq!(e.code, kitbag_shared::ErrorCode::InvalidParams);
        assert_eq!(e.detail["field"], "query");
        assert!(e.message.len() < 200, "{}", e.message);
        assert_eq!(query_arg(None).expect("none"), "");
    }

    fn policy(root: &std::path::Path) -> kitbag_shared::paths::PathPolicy {
        kitbag_shared::paths::PathPolicy::new(root, &[], false).unwrap()
    }

    /// Run `check` on a SQLite store and on a PostgreSQL one (a private server; skipped
    /// with a SKIP line where PostgreSQL is not installed, required under CI=true).
    fn on_each_store(check: impl Fn(&mut Store)) {
        let dir = tempfile::tempdir().unwrap();
        let mut sqlite = Store::new(
            crate::schema::open_sqlite(&policy(dir.path()), &dir.path().join("m.db")).unwrap(),
        );
        check(&mut sqlite);
        if let Some(server) = kitbag_testkit::pg::PgServer::start() {
            let mut pg = Store::new(crate::schema::open_postgres(&server.url).unwrap());
            check(&mut pg);
        }
    }

    fn store(conn: &mut Store, content: &str, tags: &[&str], scope: &str, session: Option<&str>) {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        conn.store(content, &tags, scope, session, 100_000, true)
            .unwrap();
    }

    /// A filtered search must not lose its hits behind better unfiltered ones.
    #[test]
    fn filters_apply_before_the_candidate_limit() {
        on_each_store(|conn| {
            for i in 0..300 {
                store(
                    conn,
                    &format!("deploy deploy deploy note {i}"),
                    &["ops"],
                    "project",
                    None,
                );
            }
            store(
                conn,
                "the deploy key rotation runbook lives in the wiki",
                &["runbook"],
                "session",
                Some("s1"),
            );
            store(
                conn,
                "a user note about how to deploy on fridays",
                &["habits"],
                "user",
                None,
            );

            let by_session = Filter {
                session: Some("s1".into()),
                scope: Some("session".into()),
                ..Default::default()
            };
            let hits = rank(conn, "deploy", &by_session, 10).unwrap();
            assert_eq!(hits.len(), 1);
            assert!(hits[0].content.contains("runbook"));

            let by_scope = Filter {
                scope: Some("user".into()),
                ..Default::default()
            };
            let hits = rank(conn, "deploy", &by_scope, 10).unwrap();
            assert_eq!(hits.len(), 1);
            assert!(hits[0].content.contains("fridays"));

            let by_tag = Filter {
                tags: vec!["runbook".into()],
                ..Default::default()
            };
            let hits = rank(conn, "deploy", &by_tag, 10).unwrap();
            assert_eq!(hits.len(), 1);

            assert_eq!(conn.count().unwrap(), 302);
            let unfiltered = rank(conn, "deploy", &Filter::default(), 10).unwrap();
            assert_eq!(unfiltered.len(), 10);
            let ids: Vec<String> = unfiltered.iter().map(|h| h.id.clone()).collect();
            conn.touch(&ids).unwrap();
            let used = conn
                .export()
                .unwrap()
                .iter()
                .filter(|r| r.use_count == 1)
                .count();
            assert_eq!(used, 10);
            let (gone, unknown) = conn.delete(&[ids[0].clone(), "nope".into()]).unwrap();
            assert_eq!((gone.len(), unknown.len()), (1, 1));
            assert_eq!(conn.count().unwrap(), 301);
            assert_eq!(conn.export().unwrap().len(), 301);
        });
    }

    /// Memories holding every query term outrank ones holding a single term many times;
    /// with too few of those, any term counts.
    #[test]
    fn all_terms_first_then_any_term() {
        on_each_store(|conn| {
            for i in 0..40 {
                store(
                    conn,
                    &format!("cache cache cache {i}"),
                    &[],
                    "project",
                    None,
                );
            }
            for i in 0..3 {
                store(
                    conn,
                    &format!("invalidate the cache after deploy {i}"),
                    &[],
                    "project",
                    None,
                );
            }
            let hits = rank(conn, "cache deploy", &Filter::default(), 3).unwrap();
            assert_eq!(hits.len(), 3);
            assert!(
                hits.iter().all(|h| h.content.contains("deploy")),
                "{hits:?}"
            );
            // Asking for more than hold both terms: the single-term ones fill the rest.
            let hits = rank(conn, "cache deploy", &Filter::default(), 10).unwrap();
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().any(|h| !h.content.contains("deploy")));
        });
    }
}
