//! kitbag-memory: persistent agent memory over MCP (SQLite + FTS5 on one machine, or a shared
//! PostgreSQL), with secret rejection and a context block for injection before LLM calls.

pub mod record;
pub mod schema;
pub mod secrets;
pub mod store;
pub mod tools;

use kitbag_shared::lock::LockExt;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use clap::{Parser, Subcommand, ValueEnum};
use futures::future::BoxFuture;
use kitbag_shared::rmcp::ErrorData as McpError;
use kitbag_shared::rmcp::model::{
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, Prompt, PromptArgument,
    PromptMessage, Role, ServerCapabilities,
};
use kitbag_shared::{CallCtx, CommonArgs, Extras, Identity, McpServer, ToolRouter};

pub use tools::MemoryState;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OnFull {
    /// Remove the least used memory to make room (and report it).
    Evict,
    /// Refuse the new memory with `memory_full`.
    Reject,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kitbag-memory",
    version,
    about = "MCP server: persistent memory with search"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Database file. Default: <root>/.kitbag/memory.db.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub db: Option<PathBuf>,

    /// A shared PostgreSQL instead of the file (`postgres://USER@HOST/DB`, or a Unix socket
    /// directory as host: `postgres://USER@%2Frun%2Fpostgresql/DB`). Schema created and
    /// migrated on start; many servers may share it.
    #[arg(long, global = true, value_name = "URL", env = "KITBAG_DATABASE_URL")]
    pub database_url: Option<String>,

    /// Largest memory, in bytes.
    #[arg(long, default_value_t = 4096)]
    pub max_content_bytes: usize,

    /// Most memories kept (the `memory.max_total` of a kitbag host's agent.json arrives as
    /// KITBAG_MEMORY_MAX_TOTAL).
    #[arg(long, default_value_t = 500, env = "KITBAG_MEMORY_MAX_TOTAL")]
    pub max_total: i64,

    /// What to do when `max_total` is reached.
    #[arg(long, value_enum, default_value_t = OnFull::Evict)]
    pub on_full: OnFull,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Write every memory as JSON lines to stdout.
    Export,
    /// Read JSON lines (from FILE, or stdin with `-`) and add the memories not present yet.
    Import { file: PathBuf },
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-memory",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "Durable memory across sessions: memory_store (secrets refused), memory_search (BM25 + recency), memory_delete, and memory_context (the block to inject before an LLM call; also offered as the prompt `memory_context`).",
};

pub fn router() -> ToolRouter<MemoryState> {
    ToolRouter::new()
        .tool(tools::STORE_DEF, |s: Arc<MemoryState>, p, ctx: CallCtx| {
            tools::store(s, p, ctx)
        })
        .tool(tools::SEARCH_DEF, |s: Arc<MemoryState>, p, ctx: CallCtx| {
            tools::search(s, p, ctx)
        })
        .tool(tools::DELETE_DEF, |s: Arc<MemoryState>, p, ctx: CallCtx| {
            tools::delete(s, p, ctx)
        })
        .tool(
            tools::CONTEXT_DEF,
            |s: Arc<MemoryState>, p, ctx: CallCtx| tools::context(s, p, ctx),
        )
}

/// The `memory_context` prompt, for clients that show prompts.
struct ContextPrompt;

impl Extras<MemoryState> for ContextPrompt {
    fn capabilities(&self, caps: &mut ServerCapabilities) {
        *caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .build();
    }

    fn list_prompts(
        &self,
        _state: Arc<MemoryState>,
    ) -> BoxFuture<'static, Result<ListPromptsResult, McpError>> {
        Box::pin(async {
            let prompt = Prompt::new(
                "memory_context",
                Some("Memories relevant to the conversation, ready to place before it"),
                Some(vec![
                    PromptArgument::new("query").with_description("The conversation's latest turn"),
                    PromptArgument::new("mode")
                        .with_description("relevant (default), recent_only or off"),
                ]),
            );
            Ok(ListPromptsResult::with_all_items(vec![prompt]))
        })
    }

    fn get_prompt(
        &self,
        state: Arc<MemoryState>,
        req: GetPromptRequestParams,
    ) -> BoxFuture<'static, Result<GetPromptResult, McpError>> {
        Box::pin(async move {
            if req.name != "memory_context" {
                return Err(McpError::invalid_params(
                    format!("no prompt named {}", req.name),
                    None,
                ));
            }
            let args = req.arguments.unwrap_or_default();
            let params: tools::ContextParams =
                serde_json::from_value(serde_json::Value::Object(args))
                    .map_err(|e| McpError::invalid_params(format!("arguments: {e}"), None))?;
            let result = tokio::task::spawn_blocking(move || {
                let mut conn = state.conn.locked();
                tools::context_block(&mut conn, &params)
            })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .map_err(|e| McpError::invalid_params(e.message, None))?;
            let text = if result.block.is_empty() {
                "(no memories)".to_string()
            } else {
                result.block
            };
            Ok(GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                text,
            )]))
        })
    }
}

fn db_path(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.db {
        Some(p) => Ok(p.clone()),
        None => Ok(args.common.policy()?.root().join(".kitbag/memory.db")),
    }
}

/// The store the arguments name: PostgreSQL with a database URL (an empty one counts as
/// unset), else the SQLite file.
pub fn open_store(args: &Args) -> anyhow::Result<store::Store> {
    match kitbag_shared::state::pg::url_given(args.database_url.as_deref()) {
        Some(url) => Ok(store::Store::new(schema::open_postgres(url)?)),
        None => Ok(store::Store::new(schema::open_sqlite(
            &args.common.policy()?,
            &db_path(args)?,
        )?)),
    }
}

/// The server over an open store.
pub fn build(args: &Args, conn: store::Store) -> anyhow::Result<McpServer<MemoryState>> {
    let policy = args.common.policy()?;
    let state = MemoryState {
        conn: Mutex::new(conn),
        cfg: tools::Config {
            max_content: args.max_content_bytes.max(16),
            max_total: args.max_total.max(1),
            evict_when_full: args.on_full == OnFull::Evict,
        },
    };
    Ok(McpServer::new(IDENTITY, state, router(), policy)
        .with_common_args(&args.common)?
        .with_extras(ContextPrompt))
}

/// The runtime this server runs on (its own binary and `kitbag server memory` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    // The PostgreSQL client blocks (it drives its own small runtime): stores are opened and
    // batch commands run on a blocking thread, never on the runtime's.
    let batch = args.clone();
    match &args.command {
        Some(_) => tokio::task::spawn_blocking(move || run_command(&batch))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        None => {
            let conn = tokio::task::spawn_blocking(move || open_store(&batch))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))??;
            let server = build(&args, conn)?;
            kitbag_shared::serve(server, &args.common).await
        }
    }
}

/// `export` and `import`.
fn run_command(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        Some(Command::Export) => {
            let mut conn = open_store(args)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for r in conn.export()? {
                writeln!(out, "{}", serde_json::to_string(&r)?)?;
            }
            out.flush()?;
            Ok(())
        }
        Some(Command::Import { file }) => {
            let mut conn = open_store(args)?;
            let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(std::io::BufReader::new(std::fs::File::open(file)?))
            };
            let mut records = Vec::new();
            for (i, line) in reader.lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                let r: record::Record = serde_json::from_str(&line)
                    .map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1))?;
                if let Some(f) = secrets::scan(&r.content) {
                    anyhow::bail!(
                        "line {}: refused, it looks like a secret ({})",
                        i + 1,
                        f.rule
                    );
                }
                records.push(r);
            }
            let added = conn.import(&records)?;
            eprintln!("imported {added} of {} memories", records.len());
            Ok(())
        }
        None => Ok(()),
    }
}
