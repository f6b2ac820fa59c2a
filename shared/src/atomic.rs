//! Atomic writes: a temp file in the same directory, fsync, rename over the target.
//!
//! A crash at any instant leaves the old or the new content, never a mix. The file's
//! permission bits are kept; a new file gets 0666 minus the process umask, as `open` would.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically, creating parent directories when `create_parents`.
pub fn write_atomic(path: &Path, bytes: &[u8], create_parents: bool) -> std::io::Result<()> {
    let staged = stage(path, bytes, create_parents)?;
    staged.commit()
}

/// Write several files all-or-nothing: every file is staged first; if any rename fails,
/// the files already replaced are put back as they were.
pub fn write_all_atomic(files: &[(PathBuf, Vec<u8>)], create_parents: bool) -> std::io::Result<()> {
    let mut staged = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        // Dropping `staged` on error removes every temp file written so far.
        staged.push(stage(path, bytes, create_parents)?);
    }
    // Keep a hard-link backup of each existing target so a failed rename can be undone.
    let mut backups: Vec<Option<PathBuf>> = Vec::with_capacity(staged.len());
    for s in &staged {
        if s.target.exists() {
            let backup = unique_sibling(&s.target, "bak");
            if let Err(e) = fs::hard_link(&s.target, &backup) {
                cleanup(&backups);
                return Err(e);
            }
            backups.push(Some(backup));
        } else {
            backups.push(None);
        }
    }
    let mut done = 0;
    let mut failure = None;
    for s in staged.iter_mut() {
        match s.rename_into_place() {
            Ok(()) => done += 1,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(e) = failure {
        for (s, backup) in staged.iter().zip(&backups).take(done) {
            match backup {
                Some(b) => {
                    let _ = fs::rename(b, &s.target);
                }
                None => {
                    let _ = fs::remove_file(&s.target);
                }
            }
        }
        cleanup(&backups);
        return Err(e);
    }
    cleanup(&backups);
    Ok(())
}

fn cleanup(backups: &[Option<PathBuf>]) {
    for b in backups.iter().flatten() {
        let _ = fs::remove_file(b);
    }
}

struct Staged {
    temp: Option<PathBuf>,
    target: PathBuf,
}

impl Staged {
    fn rename_into_place(&mut self) -> std::io::Result<()> {
        if let Some(temp) = &self.temp {
            fs::rename(temp, &self.target)?;
            self.temp = None;
            if let Some(dir) = self.target.parent() {
                // Make the rename itself durable.
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
        }
        Ok(())
    }

    fn commit(mut self) -> std::io::Result<()> {
        self.rename_into_place()
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(t) = &self.temp {
            let _ = fs::remove_file(t);
        }
    }
}

fn stage(path: &Path, bytes: &[u8], create_parents: bool) -> std::io::Result<Staged> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if create_parents {
        fs::create_dir_all(dir)?;
    }
    let mode = match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        }
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => 0o666 & !process_umask(),
    };
    let temp = unique_sibling(path, "tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    let staged = Staged {
        temp: Some(temp.clone()),
        target: path.to_path_buf(),
    };
    file.write_all(bytes)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.sync_all()?;
    Ok(staged)
}

fn unique_sibling(path: &Path, kind: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sibling = format!(".{name}.kitbag-{kind}-{}-{n}", std::process::id());
    path.with_file_name(sibling)
}

/// The process umask, read from /proc so nothing has to change it to find out.
pub fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_mode_and_replaces() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("f.sh");
        fs::write(&p, "old").expect("w");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o751)).expect("chmod");
        write_atomic(&p, b"new", false).expect("write");
        assert_eq!(fs::read_to_string(&p).expect("r"), "new");
        assert_eq!(
            fs::metadata(&p).expect("m").permissions().mode() & 0o777,
            0o751
        );
        assert_eq!(
            fs::read_dir(d.path()).expect("ls").count(),
            1,
            "no temp left behind"
        );
    }

    #[test]
    fn creates_parents() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("a/b/c.txt");
        write_atomic(&p, b"x", true).expect("write");
        assert_eq!(fs::read(&p).expect("r"), b"x");
    }

    #[test]
    fn many_rolls_back_on_failure() {
        let d = tempfile::tempdir().expect("tmp");
        let a = d.path().join("a.txt");
        fs::write(&a, "A").expect("w");
        // The second target is a directory: its rename fails after the first succeeded.
        let b = d.path().join("b");
        fs::create_dir(&b).expect("mkdir");
        fs::write(b.join("inner"), "x").expect("w");
        let err = write_all_atomic(
            &[(a.clone(), b"A2".to_vec()), (b.clone(), b"B2".to_vec())],
            false,
        );
        assert!(err.is_err());
        assert_eq!(fs::read_to_string(&a).expect("r"), "A");
        let names: Vec<_> = fs::read_dir(d.path())
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp or backup left: {names:?}");
    }

    #[test]
    fn many_all_written() {
        let d = tempfile::tempdir().expect("tmp");
        let files: Vec<(PathBuf, Vec<u8>)> = (0..3)
            .map(|i| {
                (
                    d.path().join(format!("{i}.txt")),
                    format!("{i}").into_bytes(),
                )
            })
            .collect();
        write_all_atomic(&files, false).expect("write");
        for (p, b) in &files {
            assert_eq!(&fs::read(p).expect("r"), b);
        }
    }
}
