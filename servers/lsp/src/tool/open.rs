//! The steps every action shares on its way to a language server: resolve `path` and open
//! it beneath the root, find its language, get the server and sync the file; and the one
//! way an RPC failure becomes a tool error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kitbag_shared::{Access, ErrorCode, PathPolicy, Resolved, ToolError, ToolResult};

use kitbag_lsp_client::config::LanguageConfig;
use kitbag_lsp_client::pool::{Pool, Server};
use kitbag_lsp_client::rpc::RpcError;
use kitbag_lsp_client::text::Lines;

/// A file opened in its server, ready for a request.
pub struct Opened {
    pub abs: PathBuf,
    pub rel: String,
    pub server: Arc<Server>,
    pub lines: Arc<Lines>,
}

/// Resolve `path`, find its language, get its server and sync it.
pub async fn open(pool: &Arc<Pool>, policy: &PathPolicy, path: &str) -> ToolResult<Opened> {
    let (r, file) = open_path(policy, path)?;
    if is_dir(&r, &file)? {
        return Err(ToolError::invalid_field(
            "path",
            format!("`{}` is a directory; this action needs a file", r.rel),
        ));
    }
    drop(file);
    let lang = language_for(pool, &r.abs, &r.rel)?;
    let server = pool.get(lang).await?;
    let mut texts = server.sync(std::slice::from_ref(&r.abs)).await?;
    let lines = texts
        .pop()
        .ok_or_else(|| ToolError::internal("sync returned no text"))?;
    Ok(Opened {
        abs: r.abs,
        rel: r.rel,
        server,
        lines,
    })
}

/// Resolve `path` and open it beneath the root without following a link (issue #22 §1):
/// what the answer is about is what was resolved, even if a directory on the way is swapped
/// for a link meanwhile. A missing path is `file_not_found` naming the resolved path.
pub fn open_path(policy: &PathPolicy, path: &str) -> ToolResult<(Resolved, std::fs::File)> {
    // Resolved first on its own, so refusals read exactly as they always did.
    let r = policy.resolve(path, "path", Access::Read)?;
    match policy.open_file(path, "path", Access::Read) {
        Ok(v) => Ok(v),
        Err(e) if e.code == ErrorCode::FileNotFound || e.code == ErrorCode::NotADirectory => {
            Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("path: `{}` does not exist", r.rel),
            )
            .with_detail(serde_json::json!({"field": "path"})))
        }
        Err(e) => Err(e),
    }
}

/// Whether an opened path is a directory (`fstat` on the descriptor, not the name).
pub fn is_dir(r: &Resolved, file: &std::fs::File) -> ToolResult<bool> {
    file.metadata()
        .map(|m| m.is_dir())
        .map_err(|e| ToolError::io(&r.rel, &e))
}

/// The configured language of a file, or `unsupported_language`.
pub fn language_for<'a>(pool: &'a Pool, abs: &Path, rel: &str) -> ToolResult<&'a LanguageConfig> {
    pool.config.for_path(abs).ok_or_else(|| {
        ToolError::new(
            ErrorCode::UnsupportedLanguage,
            format!(
                "path: no language server is configured for `{rel}`; configured languages: {} (by extension: {})",
                pool.config.names().join(", "),
                pool.config
                    .languages
                    .iter()
                    .flat_map(|l| l.extensions.iter().map(|e| format!(".{e}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )
        .with_detail(serde_json::json!({"field": "path", "path": rel}))
    })
}

/// A language by its configured name, or `invalid_params` naming `language`.
pub fn language_named<'a>(pool: &'a Pool, name: &str) -> ToolResult<&'a LanguageConfig> {
    pool.config.by_name(name).ok_or_else(|| {
        ToolError::invalid_field(
            "language",
            format!(
                "unknown language `{name}`; configured: {}",
                pool.config.names().join(", ")
            ),
        )
    })
}

/// Map an RPC failure to a tool error; a hang kills the server so the next call
/// starts a fresh one.
pub async fn rpc_error(pool: &Pool, server: &Arc<Server>, method: &str, e: RpcError) -> ToolError {
    match e {
        RpcError::Timeout => {
            pool.kill_hung(server).await;
            ToolError::new(
                ErrorCode::Timeout,
                format!(
                    "the {} language server did not answer {method} within {}s; it was stopped and restarts on the next call",
                    server.lang.name,
                    pool.config.request_timeout.as_secs_f64()
                ),
            )
        }
        RpcError::Closed => ToolError::new(
            ErrorCode::LspServerUnavailable,
            format!(
                "the {} language server exited during {method}; the next call restarts it",
                server.lang.name
            ),
        )
        .with_detail(serde_json::json!({"stderr_tail": server.rpc.stderr_tail()})),
        RpcError::Server { code, message } => ToolError::new(
            ErrorCode::InvalidParams,
            format!(
                "the {} language server refused {method}: {message}",
                server.lang.name
            ),
        )
        .with_detail(serde_json::json!({"lsp_error_code": code})),
    }
}
