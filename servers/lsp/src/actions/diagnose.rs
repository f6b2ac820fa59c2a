//! `diagnostics` of a file or a directory: each file's server asked (pulled and pushed
//! diagnostics, fresh for the text on disk), within one deadline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use kitbag_shared::{Access, ErrorCode, PathPolicy, Resolved, ToolError, ToolResult};

use super::Answer;
use crate::result::{Diagnostic, LspResult, page};
use crate::tool::{LspParams, language_for, need};
use kitbag_lsp_client::config::LanguageConfig;
use kitbag_lsp_client::diagnostics::{self, passes};
use kitbag_lsp_client::pool::Pool;
use kitbag_lsp_client::text::Lines;

/// The note of an answer returned before the servers went quiet.
const NOT_SETTLED: &str = "returned before the language server went quiet: results may be incomplete; call again or raise wait_ms";

/// Files a directory `diagnostics` call opens at most.
pub const MAX_DIR_FILES: usize = 200;

/// What `diagnostics` was asked about: the resolved path and whether it is a directory,
/// asked of a descriptor opened beneath the root (issue #22 §1).
fn diagnostics_target(policy: &PathPolicy, path: &str) -> ToolResult<(Resolved, bool)> {
    let r = policy.resolve(path, "path", Access::Read)?;
    match policy.open_file(path, "path", Access::Read) {
        Ok((r, f)) => {
            let dir = f
                .metadata()
                .map_err(|e| ToolError::io(&r.rel, &e))?
                .is_dir();
            Ok((r, dir))
        }
        Err(e) if e.code == ErrorCode::FileNotFound || e.code == ErrorCode::NotADirectory => {
            Err(ToolError::new(
                ErrorCode::FileNotFound,
                format!("path: `{}` does not exist", r.rel),
            ))
        }
        Err(e) => Err(e),
    }
}

/// Files to check, grouped by language.
type Groups<'a> = Vec<(&'a LanguageConfig, Vec<PathBuf>)>;

/// The files of a directory a server is configured for (at most [`MAX_DIR_FILES`]; the
/// flag says whether more were left out), grouped by language.
fn directory_files<'a>(pool: &'a Pool, policy: &PathPolicy, dir: &Path) -> (Groups<'a>, bool) {
    let mut files = Vec::new();
    let mut truncated = false;
    for entry in ignore::WalkBuilder::new(dir).build().flatten() {
        // The walk goes by path: each file it found is opened again beneath the root,
        // so a walk led outside by a directory swapped for a link names nothing there.
        if entry.file_type().is_some_and(|t| t.is_file())
            && pool.config.for_path(entry.path()).is_some()
            && policy.open_real_read(entry.path()).is_ok()
        {
            if files.len() == MAX_DIR_FILES {
                truncated = true;
                break;
            }
            files.push(entry.into_path());
        }
    }
    files.sort();
    let mut groups: Groups<'a> = Vec::new();
    for f in files {
        let Some(lang) = pool.config.for_path(&f) else {
            continue;
        };
        match groups.iter_mut().find(|(l, _)| l.name == lang.name) {
            Some((_, v)) => v.push(f),
            None => groups.push((lang, vec![f])),
        }
    }
    (groups, truncated)
}

/// The diagnostics of every group, from each group's server, within one deadline.
struct Gathered {
    all: Vec<Diagnostic>,
    settled: bool,
    waited_ms: u64,
    files_checked: usize,
}

async fn gather(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    groups: &Groups<'_>,
    dir: Option<&Path>,
    deadline: Instant,
) -> ToolResult<Gathered> {
    let mut g = Gathered {
        all: Vec::new(),
        settled: true,
        waited_ms: 0,
        files_checked: 0,
    };
    for (lang, files) in groups {
        let server = pool.get(lang).await?;
        let texts = server.sync(files).await?;
        g.files_checked += files.len();
        let pairs: Vec<(PathBuf, Arc<Lines>)> = files.iter().cloned().zip(texts).collect();
        let left = deadline.saturating_duration_since(Instant::now());
        let got = diagnostics::collect(&server, &pairs, left).await;
        g.settled &= got.settled;
        g.waited_ms += got.waited_ms;
        let mut seen: Vec<PathBuf> = Vec::new();
        for (path, lines, items) in &got.by_file {
            seen.push(path.clone());
            for d in items {
                g.all
                    .push(diagnostics::entry(policy, path, lines, d, server.encoding));
            }
        }
        // Under a directory, also what the server pushed for files nobody opened.
        let Some(dir) = dir else { continue };
        for (path, items) in diagnostics::pushed_under(&server, dir) {
            if seen.contains(&path) || !policy.allows(&path, Access::Read) {
                continue;
            }
            if let Some(lines) = server.text_of(&path).await {
                for d in &items {
                    g.all.push(diagnostics::entry(
                        policy,
                        &path,
                        &lines,
                        d,
                        server.encoding,
                    ));
                }
            }
        }
    }
    Ok(g)
}

pub async fn diagnostics(
    pool: &Arc<Pool>,
    policy: &PathPolicy,
    p: &LspParams,
) -> ToolResult<Answer> {
    let path = need(&p.path, "path", "required")?;
    let (r, is_dir) = diagnostics_target(policy, path)?;
    let deadline = Instant::now() + p.wait();
    let (groups, files_truncated) = if is_dir {
        directory_files(pool, policy, &r.abs)
    } else {
        let lang = language_for(pool, &r.abs, &r.rel)?;
        (vec![(lang, vec![r.abs.clone()])], false)
    };
    let dir = is_dir.then_some(r.abs.as_path());
    let mut g = gather(pool, policy, &groups, dir, deadline).await?;
    let severity = p.severity.map(|s| s.as_str());
    g.all.retain(|d| passes(severity, &d.severity));
    g.all
        .sort_by(|a, b| (&a.path, a.line, a.character).cmp(&(&b.path, b.line, b.character)));
    let (shown, mut pg) = page(g.all, p, 100);
    pg.exact = !files_truncated && g.settled;
    let mut result = LspResult {
        path: Some(r.rel.clone()),
        files_checked: Some(g.files_checked),
        settled: Some(g.settled),
        waited_ms: Some(g.waited_ms),
        files_truncated: files_truncated.then_some(true),
        note: (!g.settled).then(|| NOT_SETTLED.to_string()),
        ..LspResult::new(p.action)
    };
    let shown = pg.fit(&result, shown);
    let mut text: Vec<String> = shown.iter().map(Diagnostic::line).collect();
    if pg.total == 0 {
        text.push(format!(
            "no diagnostics in {} ({} files)",
            r.rel, g.files_checked
        ));
    }
    result.diagnostics = Some(shown);
    pg.mark(&mut result, &mut text);
    if files_truncated {
        text.push(format!(
            "only the first {MAX_DIR_FILES} files were checked; narrow `path`"
        ));
    }
    if !g.settled {
        text.push("note: the language server was still working when this returned; results may be incomplete".into());
    }
    Ok((result, text.join("\n")))
}
