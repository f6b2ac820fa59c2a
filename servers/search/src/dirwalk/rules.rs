//! The ignore rules a walk applies: each directory's `.ignore`, `.gitignore` and
//! `.git/info/exclude` (read beneath its descriptor without following links), linked to the
//! nearest ancestor that has rules; the rules above the search directory and a worktree's
//! common exclude file (read by path, as the `ignore` crate reads them); and the verdict for a
//! path in the crate's order of precedence.

use std::io::Read;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use kitbag_shared::paths::fd::open_beneath;
use kitbag_shared::rustix::fs::{AtFlags, FileType, Mode, OFlags, statat};

/// Which ignore-related names a directory holds.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Present {
    pub(super) ignore: bool,
    pub(super) gitignore: bool,
    pub(super) git: bool,
}

/// The ignore rules of one directory that has some, linked to the nearest such ancestor.
pub(super) struct Rules {
    pub(super) ignore: Gitignore,
    pub(super) gitignore: Gitignore,
    pub(super) exclude: Gitignore,
    pub(super) parent: Option<Arc<Rules>>,
}

/// The verdict for `path`: `.ignore` files first, then `.gitignore`, then
/// `.git/info/exclude`, then the global excludes; within each kind the deepest directory with
/// a rule for the path decides (the `ignore` crate's precedence without `require_git`).
pub(super) fn matched(
    rules: Option<&Rules>,
    global: &Gitignore,
    path: &Path,
    is_dir: bool,
) -> Match<()> {
    let kinds: [fn(&Rules) -> &Gitignore; 3] = [|r| &r.ignore, |r| &r.gitignore, |r| &r.exclude];
    for kind in kinds {
        let mut at = rules;
        while let Some(r) = at {
            match kind(r).matched(path, is_dir) {
                Match::None => at = r.parent.as_deref(),
                Match::Ignore(_) => return Match::Ignore(()),
                Match::Whitelist(_) => return Match::Whitelist(()),
            }
        }
    }
    match global.matched(path, is_dir) {
        Match::None => Match::None,
        Match::Ignore(_) => Match::Ignore(()),
        Match::Whitelist(_) => Match::Whitelist(()),
    }
}

/// Link a directory's rules (if it has any) onto `parent`.
pub(super) fn link(
    ignore: Gitignore,
    gitignore: Gitignore,
    exclude: Gitignore,
    parent: Option<Arc<Rules>>,
) -> Option<Arc<Rules>> {
    if ignore.is_empty() && gitignore.is_empty() && exclude.is_empty() {
        return parent;
    }
    Some(Arc::new(Rules {
        ignore,
        gitignore,
        exclude,
        parent,
    }))
}

/// The rules of a walked directory, from the ignore files its listing showed, read beneath
/// its descriptor without following links.
pub(super) fn dir_rules(
    dir: BorrowedFd<'_>,
    abs: &Path,
    present: Present,
    parent: Option<Arc<Rules>>,
) -> Option<Arc<Rules>> {
    if !present.ignore && !present.gitignore && !present.git {
        return parent;
    }
    let beneath = |rel: &str| {
        if !match rel {
            ".ignore" => present.ignore,
            ".gitignore" => present.gitignore,
            _ => present.git,
        } {
            return Gitignore::empty();
        }
        match read_beneath(dir, rel) {
            Some(bytes) => gitignore_of(abs, &abs.join(rel), &bytes),
            None => Gitignore::empty(),
        }
    };
    let ignore = beneath(".ignore");
    let gitignore = beneath(".gitignore");
    let exclude = if !present.git {
        Gitignore::empty()
    } else if statat(dir, ".git", AtFlags::empty())
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode as _) == FileType::RegularFile)
    {
        // A worktree or submodule: `.git` names the real git directory, outside the walk.
        let first = read_beneath(dir, ".git").and_then(|b| first_line(&b));
        match first.and_then(|l| common_dir_of(&l)) {
            Some(common) => gitignore_at(abs, &common.join("info/exclude")),
            None => Gitignore::empty(),
        }
    } else {
        beneath(".git/info/exclude")
    };
    link(ignore, gitignore, exclude, parent)
}

/// The rules of the directories above the search directory (`/` first), read by path, as the
/// `ignore` crate's walker reads them.
pub(super) fn ancestor_rules(abs: &Path) -> Option<Arc<Rules>> {
    let mut chain = None;
    let above: Vec<&Path> = abs.ancestors().skip(1).collect();
    for dir in above.into_iter().rev() {
        let git_is_file = dir.join(".git").metadata().is_ok_and(|m| m.is_file());
        let exclude = if git_is_file {
            std::fs::read(dir.join(".git"))
                .ok()
                .and_then(|b| first_line(&b))
                .and_then(|l| common_dir_of(&l))
                .map(|common| common.join("info/exclude"))
        } else {
            Some(dir.join(".git/info/exclude"))
        };
        chain = link(
            gitignore_at(dir, &dir.join(".ignore")),
            gitignore_at(dir, &dir.join(".gitignore")),
            exclude.map_or_else(Gitignore::empty, |p| gitignore_at(dir, &p)),
            chain,
        );
    }
    chain
}

/// The git common directory a `.git` file's first line (`gitdir: …`) leads to, through the
/// git directory's `commondir` file; `None` when there is none (then no exclude file applies).
pub(super) fn common_dir_of(dot_git_line: &str) -> Option<PathBuf> {
    let real = PathBuf::from(dot_git_line.strip_prefix("gitdir: ")?);
    let common = first_line(&std::fs::read(real.join("commondir")).ok()?)?;
    Some(if common.starts_with('.') {
        real.join(common)
    } else {
        PathBuf::from(common)
    })
}

/// A file's first line as `BufRead::lines` gives it; `None` when empty or not UTF-8.
pub(super) fn first_line(bytes: &[u8]) -> Option<String> {
    let line = lines(bytes).next()?;
    std::str::from_utf8(line).ok().map(str::to_string)
}

/// The lines of a file as `BufRead::lines` splits them (`\n` or `\r\n`; no empty last line).
pub(super) fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match memchr::memchr(b'\n', rest) {
            Some(i) => {
                let mut line = &rest[..i];
                rest = &rest[i + 1..];
                if let Some(l) = line.strip_suffix(b"\r") {
                    line = l;
                }
                Some(line)
            }
            None => Some(std::mem::take(&mut rest)),
        }
    })
}

/// A regular file beneath `dir` (no link anywhere on `rel`), read whole; `None` if it cannot
/// be opened. `O_NONBLOCK`: a FIFO named `.gitignore` reads as empty instead of hanging.
pub(super) fn read_beneath(dir: BorrowedFd<'_>, rel: &str) -> Option<Vec<u8>> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = open_beneath(dir, Path::new(rel), flags, Mode::empty()).ok()?;
    let mut bytes = Vec::new();
    // What was read before an error counts, as `GitignoreBuilder::add` keeps earlier lines.
    let _ = std::fs::File::from(fd).read_to_end(&mut bytes);
    Some(bytes)
}

/// The matcher of an ignore file's content, rooted at `dir`, parsed as `GitignoreBuilder::add`
/// parses a file: a BOM dropped, bad globs skipped, reading stopped at a line that is not UTF-8.
pub(super) fn gitignore_of(dir: &Path, from: &Path, bytes: &[u8]) -> Gitignore {
    let mut b = GitignoreBuilder::new(dir);
    for (i, line) in lines(bytes).enumerate() {
        let Ok(line) = std::str::from_utf8(line) else {
            break;
        };
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        let _ = b.add_line(Some(from.to_path_buf()), line);
    }
    b.build().unwrap_or_else(|_| Gitignore::empty())
}

/// The matcher of the ignore file at `file` (read by path, if it exists), rooted at `dir`.
pub(super) fn gitignore_at(dir: &Path, file: &Path) -> Gitignore {
    if !file.exists() {
        return Gitignore::empty();
    }
    let mut b = GitignoreBuilder::new(dir);
    let _ = b.add(file);
    b.build().unwrap_or_else(|_| Gitignore::empty())
}
