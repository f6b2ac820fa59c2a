//! A `newc` cpio archive writer: the format the Linux kernel unpacks as an initramfs. Small
//! enough to write here rather than shell out to `cpio`, which a fresh machine may lack.

use std::io::Write;

/// One archive being written.
pub struct Cpio<W: Write> {
    out: W,
    next_ino: u32,
    written: u64,
}

impl<W: Write> Cpio<W> {
    pub fn new(out: W) -> Self {
        Cpio {
            out,
            next_ino: 1,
            written: 0,
        }
    }

    pub fn dir(&mut self, name: &str) -> std::io::Result<()> {
        self.entry(name, 0o040755, &[])
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        self.entry(name, 0o100000 | (mode & 0o7777), data)
    }

    pub fn symlink(&mut self, name: &str, target: &str) -> std::io::Result<()> {
        self.entry(name, 0o120777, target.as_bytes())
    }

    /// The trailer, and the writer back.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.entry("TRAILER!!!", 0, &[])?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        let name = name.trim_start_matches('/');
        let size = u32::try_from(data.len()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a file over 4 GiB")
        })?;
        let ino = self.next_ino;
        self.next_ino += 1;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
        // rdevminor, namesize (with its NUL), check
        let header = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{:08x}{size:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// newc aligns every header and every file's data on four bytes.
    fn pad(&mut self) -> std::io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..n])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The archive is read back by GNU cpio when the machine has it (an independent reader);
    /// the layout is checked by hand either way.
    #[test]
    fn writes_newc_entries_aligned() {
        let mut c = Cpio::new(Vec::new());
        c.dir("etc").unwrap();
        c.file("etc/hello", 0o644, b"hi\n").unwrap();
        c.symlink("bin/sh", "busybox").unwrap();
        let bytes = c.finish().unwrap();
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("etc/hello\0"));
        assert!(text.contains("hi\n"));
        assert!(text.contains("TRAILER!!!\0"));
        if std::process::Command::new("cpio")
            .arg("--version")
            .output()
            .is_ok()
        {
            let dir = tempfile::tempdir().unwrap();
            let mut child = std::process::Command::new("cpio")
                .args(["-i", "-d", "--quiet"])
                .current_dir(dir.path())
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&bytes).unwrap();
            assert!(child.wait().unwrap().success());
            assert_eq!(
                std::fs::read(dir.path().join("etc/hello")).unwrap(),
                b"hi\n"
            );
            assert_eq!(
                std::fs::read_link(dir.path().join("bin/sh")).unwrap(),
                std::path::Path::new("busybox")
            );
        }
    }
}
