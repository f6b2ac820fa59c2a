//! Directory copies over the agent stream: a sequence of entries, each a JSON line
//! ([`Entry`]) followed by a file's bytes, ended by an `end` entry. Paths are relative and
//! made only of plain components; links are carried as links (never followed).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::proto;

/// Most entries one copy carries.
pub const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Dir,
    File,
    Symlink,
    End,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub kind: Kind,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub mode: u32,
    #[serde(default)]
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A relative path of plain components only (no `..`, no root, no `.`).
pub fn safe_rel(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    if p.is_empty() || p.contains('\0') {
        return None;
    }
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| path.to_path_buf())
}

/// Walk `root` (not following links): every entry, parents first, and the bytes of files.
/// Fails past `max_bytes` of content or [`MAX_ENTRIES`] entries.
pub fn walk(root: &Path, max_bytes: u64) -> std::io::Result<(Vec<(Entry, PathBuf)>, u64)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&dir)?.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let rel_child = rel.join(e.file_name());
            let meta = std::fs::symlink_metadata(e.path())?;
            let path = rel_child.to_string_lossy().into_owned();
            let mode = meta.permissions().mode() & 0o7777;
            let entry = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(e.path())?;
                Entry {
                    kind: Kind::Symlink,
                    path,
                    mode,
                    size: 0,
                    target: Some(target.to_string_lossy().into_owned()),
                }
            } else if meta.is_dir() {
                stack.push(rel_child.clone());
                Entry {
                    kind: Kind::Dir,
                    path,
                    mode,
                    size: 0,
                    target: None,
                }
            } else if meta.is_file() {
                total += meta.len();
                Entry {
                    kind: Kind::File,
                    path,
                    mode,
                    size: meta.len(),
                    target: None,
                }
            } else {
                continue; // sockets, fifos, devices: not copied
            };
            if total > max_bytes {
                return Err(too_large(total, max_bytes));
            }
            out.push((entry, e.path()));
            if out.len() > MAX_ENTRIES {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_ENTRIES} entries"
                )));
            }
        }
    }
    // Parents before children: sort by depth, then name.
    out.sort_by(|a, b| {
        let da = a.0.path.matches('/').count();
        let db = b.0.path.matches('/').count();
        da.cmp(&db).then(a.0.path.cmp(&b.0.path))
    });
    Ok((out, total))
}

pub fn too_large(total: u64, max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("more than {max} bytes (at least {total})"),
    )
}

/// Send walked entries; `open` gives each file's reader (the host side opens through its
/// Open a file to send, by its path (inside an instance, where the agent's view is the
/// instance's own).
pub fn open_plain(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// path policy).
pub async fn send<W: AsyncWrite + Unpin>(
    w: &mut W,
    entries: &[(Entry, PathBuf)],
    open: impl Fn(&Path) -> std::io::Result<std::fs::File> + Clone + Send + 'static,
) -> std::io::Result<()> {
    for (entry, abs) in entries {
        proto::write_line(w, entry).await?;
        if entry.kind == Kind::File {
            let (open, abs) = (open.clone(), abs.clone());
            let opened = kitbag_shared::blocking::unblock(move || open(&abs)).await?;
            let file = tokio::fs::File::from_std(opened);
            let copied = tokio::io::copy(&mut file.take(entry.size), w).await?;
            if copied != entry.size {
                return Err(std::io::Error::other(format!(
                    "{} changed size while it was copied",
                    entry.path
                )));
            }
        }
    }
    proto::write_line(
        w,
        &Entry {
            kind: Kind::End,
            path: String::new(),
            mode: 0,
            size: 0,
            target: None,
        },
    )
    .await?;
    w.flush().await
}

/// One received entry and, for a file, its bytes (at most `budget` in all).
pub async fn next<R: AsyncBufRead + Unpin>(
    r: &mut R,
    budget: &mut u64,
) -> std::io::Result<Option<(Entry, PathBuf, Vec<u8>)>> {
    let Some((entry, rel)) = next_header(r, budget).await? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    if entry.kind == Kind::File {
        bytes.reserve(entry.size as usize);
        r.take(entry.size).read_to_end(&mut bytes).await?;
        if bytes.len() as u64 != entry.size {
            return Err(ended_early());
        }
    }
    Ok(Some((entry, rel, bytes)))
}

/// One received entry's header, its path checked and a file's size taken from `budget`; the
/// file's `size` bytes follow on `r` for the caller to take (e.g. with [`receive_body`]).
pub async fn next_header<R: AsyncBufRead + Unpin>(
    r: &mut R,
    budget: &mut u64,
) -> std::io::Result<Option<(Entry, PathBuf)>> {
    let entry: Entry = proto::read_line(r).await?;
    if entry.kind == Kind::End {
        return Ok(None);
    }
    let Some(rel) = safe_rel(&entry.path) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unsafe path in the archive: {:?}", entry.path),
        ));
    };
    if entry.kind == Kind::File {
        if entry.size > *budget {
            return Err(too_large(entry.size, *budget));
        }
        *budget -= entry.size;
    }
    Ok(Some((entry, rel)))
}

/// Copy a file's `size` bytes from `r` to `w`; fewer is an error.
pub async fn receive_body<R, W>(r: &mut R, w: &mut W, size: u64) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if tokio::io::copy(&mut r.take(size), w).await? != size {
        return Err(ended_early());
    }
    w.flush().await
}

fn ended_early() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the archive ended early")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths() {
        assert!(safe_rel("a/b.txt").is_some());
        for bad in ["", "/etc", "../x", "a/../../x", "./a", "a\0b"] {
            assert!(safe_rel(bad).is_none(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_tree_round_trips() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(d.path().join("a/b")).expect("mkdir");
        std::fs::write(d.path().join("a/b/f.txt"), "hello").expect("w");
        std::fs::write(d.path().join("top"), [0u8, 1]).expect("w");
        std::os::unix::fs::symlink("a/b/f.txt", d.path().join("link")).expect("ln");
        let (entries, total) = walk(d.path(), 1 << 20).expect("walk");
        assert_eq!(total, 7);
        let mut buf = Vec::new();
        send(&mut buf, &entries, |p| std::fs::File::open(p))
            .await
            .expect("send");
        let mut r = tokio::io::BufReader::new(buf.as_slice());
        let mut budget = 1 << 20;
        let mut got = Vec::new();
        while let Some((e, rel, bytes)) = next(&mut r, &mut budget).await.expect("next") {
            got.push((e.kind, rel.to_string_lossy().into_owned(), bytes));
        }
        assert_eq!(got[0].1, "a"); // parents first
        assert!(got.contains(&(Kind::File, "a/b/f.txt".into(), b"hello".to_vec())));
        assert!(
            got.iter()
                .any(|(k, p, _)| *k == Kind::Symlink && p == "link")
        );
        assert!(walk(d.path(), 3).is_err(), "the size cap holds");
    }
}
