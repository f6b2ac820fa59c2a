//! A ustar archive writer: the tarball kitbag-vm imports as its default container image
//! (no registry is assumed; the engine's `images/create?fromSrc=-` takes a tar body).

/// One archive in memory (the default image is busybox and a few directories: ~2 MB).
#[derive(Default)]
pub struct Tar {
    out: Vec<u8>,
}

impl Tar {
    pub fn dir(&mut self, name: &str, mode: u32) -> std::io::Result<()> {
        self.entry(
            &format!("{}/", name.trim_end_matches('/')),
            mode,
            b'5',
            "",
            &[],
        )
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
        self.entry(name, mode, b'0', "", data)
    }

    pub fn symlink(&mut self, name: &str, target: &str) -> std::io::Result<()> {
        self.entry(name, 0o777, b'2', target, &[])
    }

    /// Two zero blocks end the archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(&[0u8; 1024]);
        self.out
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        kind: u8,
        link: &str,
        data: &[u8],
    ) -> std::io::Result<()> {
        let name = name.trim_start_matches('/');
        // ustar: a name of up to 100 bytes, or a prefix of up to 155 and a name of 100.
        let (prefix, base) = if name.len() <= 100 {
            ("", name)
        } else {
            let split = name[..name.len().min(156)]
                .rfind('/')
                .filter(|&i| name.len() - i - 1 <= 100)
                .ok_or_else(|| invalid(format!("{name}: too long for a tar header")))?;
            (&name[..split], &name[split + 1..])
        };
        if link.len() > 100 {
            return Err(invalid(format!("{name}: link target too long")));
        }
        let mut h = [0u8; 512];
        let put = |h: &mut [u8; 512], at: usize, bytes: &[u8]| {
            h[at..at + bytes.len()].copy_from_slice(bytes);
        };
        let octal = |v: u64, width: usize| format!("{v:0w$o}\0", w = width - 1);
        put(&mut h, 0, base.as_bytes());
        put(&mut h, 100, octal(u64::from(mode & 0o7777), 8).as_bytes());
        put(&mut h, 108, octal(0, 8).as_bytes());
        put(&mut h, 116, octal(0, 8).as_bytes());
        put(&mut h, 124, octal(data.len() as u64, 12).as_bytes());
        put(&mut h, 136, octal(0, 12).as_bytes());
        h[156] = kind;
        put(&mut h, 157, link.as_bytes());
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        put(&mut h, 345, prefix.as_bytes());
        // The checksum is computed with its own field as spaces.
        put(&mut h, 148, b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        self.out.extend_from_slice(&h);
        self.out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.out.extend(std::iter::repeat_n(0u8, pad));
        Ok(())
    }
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// GNU tar (an independent reader) lists and extracts what was written.
    #[test]
    fn gnu_tar_reads_it() {
        let mut t = Tar::default();
        t.dir("bin", 0o755).unwrap();
        t.file("bin/busybox", 0o755, b"#!fake\n").unwrap();
        t.symlink("bin/sh", "busybox").unwrap();
        let long = format!("{}/file.txt", "d".repeat(120));
        t.file(&long, 0o644, b"deep").unwrap();
        let bytes = t.finish();
        assert_eq!(bytes.len() % 512, 0);
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("tar")
            .args(["-x", "-f", "-"])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(
            std::fs::read(dir.path().join("bin/busybox")).unwrap(),
            b"#!fake\n"
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("bin/sh")).unwrap(),
            std::path::Path::new("busybox")
        );
        assert_eq!(std::fs::read(dir.path().join(&long)).unwrap(), b"deep");
    }
}
