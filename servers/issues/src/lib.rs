//! kitbag-issues: an issue tracker and a todo checklist for agents, over MCP, on SQLite (or a
//! shared PostgreSQL with `--database-url`).
//!
//! Tools: `issue_list`, `issue_get`, `issue_create`, `issue_update`, `issue_comment`,
//! `issue_transition`, `issue_bind` and `todo`; `ask` and `form`, which put questions to the
//! operator through the client (MCP elicitation, `interaction.rs`). Every one declares
//! `_meta["kitbag/principal_scope"] = "root-only"` so a host offers them to its root agent only.
//! Resources `issues://open` and `issues://N` with change notifications; the prompt
//! `todo_reminder`. `kitbag-issues export` / `import` move issues through JSONL.

pub mod db;
pub mod interaction;
pub mod issue;
pub mod model;
pub mod notifier;
pub mod render;
pub mod resources;
pub mod state;
pub mod todo;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use kitbag_shared::{
    CallCtx, CommonArgs, Identity, McpServer, Reply, ToolDef, ToolResult, ToolRouter,
};
use serde_json::json;

pub use state::IssuesState;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kitbag-issues",
    version,
    about = "MCP server: issue tracker and todo checklist on SQLite or PostgreSQL"
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Database file. Default: <root>/.kitbag/issues.db.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub db: Option<PathBuf>,

    /// Keep the issues in PostgreSQL instead of a SQLite file, shared by every server (and
    /// replica) given the same URL; notifications reach the other servers' clients through
    /// LISTEN/NOTIFY. Empty means unset.
    #[arg(
        long,
        global = true,
        env = "KITBAG_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Project the issues belong to (numbers are per project). Default: the root's name.
    #[arg(long, global = true, value_name = "NAME")]
    pub project: Option<String>,

    /// Author recorded on every change.
    #[arg(long, default_value = "agent:primary", value_name = "PRINCIPAL")]
    pub principal: String,

    /// Bind the session to issue N at start (for `todo`).
    #[arg(long, value_name = "N")]
    pub issue: Option<i64>,

    /// A workflow issues may be assigned to (`workflow:NAME`); repeatable.
    #[arg(long = "workflow", value_name = "NAME")]
    pub workflows: Vec<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Write every issue (with its updates and todos) as one JSON line each to stdout.
    Export,
    /// Read JSON lines (from FILE, or stdin with `-`); issues with a known id are replaced.
    Import { file: PathBuf },
}

pub const IDENTITY: Identity = Identity {
    name: "kitbag-issues",
    version: env!("CARGO_PKG_VERSION"),
    instructions: "The project's issue tracker and your working checklist. issue_list / issue_get to read; issue_create, issue_update, issue_comment, issue_transition to change (the state machine is enforced). issue_bind chooses the issue this session works on; todo manages its checklist (view, set, add, start, done, drop, note), addressing todos by their text. Resources issues://open and issues://N; prompt todo_reminder.",
};

/// Every tool is for the root agent only; a host enforces it from this `_meta`.
fn root_only(def: ToolDef) -> ToolDef {
    def.with_meta(json!({ "kitbag/principal_scope": "root-only" }))
}

async fn read<T: Send + 'static>(
    s: Arc<IssuesState>,
    ctx: CallCtx,
    f: impl FnOnce(&IssuesState, &mut db::Store) -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    issue::with_conn(s, &ctx, f).await
}

async fn write<T: Send + 'static>(
    s: Arc<IssuesState>,
    ctx: CallCtx,
    f: impl FnOnce(&IssuesState, &mut db::Store) -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    let r = issue::with_conn(s.clone(), &ctx, f).await;
    if r.is_ok() {
        s.notifier.poke();
    }
    r
}

pub fn router() -> ToolRouter<IssuesState> {
    ToolRouter::new()
        .tool(
            root_only(issue::LIST_DEF),
            |s: Arc<IssuesState>, p: issue::ListParams, ctx: CallCtx| async move {
                read(s, ctx, move |st, c| issue::list(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::GET_DEF),
            |s: Arc<IssuesState>, p: issue::GetParams, ctx: CallCtx| async move {
                read(s, ctx, move |st, c| issue::get(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::CREATE_DEF),
            |s: Arc<IssuesState>, p: issue::CreateParams, ctx: CallCtx| async move {
                write(s, ctx, move |st, c| issue::create(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::UPDATE_DEF),
            |s: Arc<IssuesState>, p: issue::UpdateParams, ctx: CallCtx| async move {
                write(s, ctx, move |st, c| issue::update(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::COMMENT_DEF),
            |s: Arc<IssuesState>, p: issue::CommentParams, ctx: CallCtx| async move {
                write(s, ctx, move |st, c| issue::comment(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::TRANSITION_DEF),
            |s: Arc<IssuesState>, p: issue::TransitionParams, ctx: CallCtx| async move {
                write(s, ctx, move |st, c| issue::transition(st, c, p)).await
            },
        )
        .tool(
            root_only(issue::BIND_DEF),
            |s: Arc<IssuesState>, p: issue::BindParams, ctx: CallCtx| async move {
                read(s, ctx, move |st, c| issue::bind(st, c, p)).await
            },
        )
        .tool(
            root_only(interaction::ASK_DEF),
            |_: Arc<IssuesState>, p: interaction::AskParams, ctx: CallCtx| async move {
                interaction::run(&ctx, "ask", interaction::ask_form(&p)?).await
            },
        )
        .tool(
            root_only(interaction::FORM_DEF),
            |_: Arc<IssuesState>, p: interaction::FormParams, ctx: CallCtx| async move {
                interaction::run(&ctx, "form", interaction::form_form(&p)?).await
            },
        )
        .tool(
            root_only(todo::DEF),
            |s: Arc<IssuesState>, p: todo::TodoParams, ctx: CallCtx| async move {
                let r: ToolResult<Reply<todo::TodoResult>> =
                    write(s, ctx, move |st, c| todo::run(st, c, p)).await;
                r
            },
        )
}

/// The store the arguments name: PostgreSQL with a database URL, else the SQLite file (and
/// its path).
fn open_store(args: &Args) -> anyhow::Result<(db::Store, Option<PathBuf>)> {
    use kitbag_shared::state::pg::url_given;
    match url_given(args.database_url.as_deref()) {
        Some(url) => Ok((db::open_postgres(url)?, None)),
        None => {
            let path = db_path(args)?;
            let conn = db::open(&args.common.policy()?, &path)?;
            Ok((db::Store::sqlite(db::FAMILY, conn), Some(path)))
        }
    }
}

fn db_path(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.db {
        Some(p) => Ok(p.clone()),
        None => Ok(args.common.policy()?.root().join(".kitbag/issues.db")),
    }
}

fn project(args: &Args) -> anyhow::Result<String> {
    let name = match &args.project {
        Some(p) => p.trim().to_string(),
        None => args
            .common
            .policy()?
            .root()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "default".to_string()),
    };
    if name.is_empty() || name.len() > 200 {
        anyhow::bail!("--project: give a name of 1 to 200 bytes");
    }
    Ok(name)
}

fn check_principal(p: &str) -> anyhow::Result<String> {
    let p = p.trim();
    if p.is_empty() || p.len() > 200 || p.chars().any(char::is_whitespace) {
        anyhow::bail!(
            "--principal {p:?}: give an identity without spaces, e.g. agent:primary or operator"
        );
    }
    Ok(p.to_string())
}

pub fn build(args: &Args) -> anyhow::Result<McpServer<IssuesState>> {
    let policy = args.common.policy()?;
    let (mut conn, path) = open_store(args)?;
    let cursor = db::last_change(&mut conn).map_err(|e| anyhow::anyhow!(e.message))?;
    if let Some(n) = args.issue
        && n < 1
    {
        anyhow::bail!("--issue {n}: issue numbers start at 1");
    }
    let state = IssuesState::new(
        conn,
        path,
        project(args)?,
        check_principal(&args.principal)?,
        args.workflows.clone(),
        args.issue,
    );
    state
        .notifier
        .cursor
        .store(cursor, std::sync::atomic::Ordering::SeqCst);
    Ok(McpServer::new(IDENTITY, state, router(), policy)
        .with_common_args(&args.common)?
        .with_extras(resources::IssuesExtras))
}

/// The runtime this server runs on (its own binary and `kitbag server issues` alike).
pub const THREADS: kitbag_shared::runtime::Threads = kitbag_shared::runtime::Threads::Multi;

pub async fn run(args: Args) -> anyhow::Result<()> {
    args.common.init_logging()?;
    // The PostgreSQL client blocks (it drives its own small runtime): the store is opened and
    // batch commands run on a blocking thread, never on the runtime's.
    let batch = args.clone();
    match &args.command {
        Some(_) => tokio::task::spawn_blocking(move || run_command(&batch))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        None => {
            let server = tokio::task::spawn_blocking(move || build(&batch))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))??;
            kitbag_shared::serve(server, &args.common).await
        }
    }
}

/// `export` and `import`.
fn run_command(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        Some(Command::Export) => {
            let (mut conn, _) = open_store(args)?;
            let records = db::export(&mut conn).map_err(|e| anyhow::anyhow!(e.message))?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for r in records {
                writeln!(out, "{}", serde_json::to_string(&r)?)?;
            }
            out.flush()?;
            Ok(())
        }
        Some(Command::Import { file }) => {
            let (mut conn, _) = open_store(args)?;
            let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(std::io::BufReader::new(
                    std::fs::File::open(file)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
                ))
            };
            let mut records = Vec::new();
            for (i, line) in reader.lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                let r: model::IssueRecord = serde_json::from_str(&line)
                    .map_err(|e| anyhow::anyhow!("line {}: {e}; nothing was imported", i + 1))?;
                records.push(r);
            }
            let (added, replaced) = db::import(&mut conn, &records)?;
            eprintln!(
                "imported {} issues ({added} new, {replaced} replaced)",
                records.len()
            );
            Ok(())
        }
        None => Ok(()),
    }
}
