//! Random bytes from the kernel (`getrandom`): secrets such as bearer tokens and an instance's
//! agent token, and the seeds of trace ids.

use std::io;

/// Fill `buf` from the kernel's random source (blocks only before the pool is first seeded,
/// at early boot).
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `bytes` random bytes as hex: a secret.
pub fn hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hex_of_the_length_asked_and_differ() {
        let a = hex(32).expect("random");
        let b = hex(32).expect("random");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
