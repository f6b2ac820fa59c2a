//! Which user namespace owns a process's network namespace (`ioctl(NS_GET_USERNS)`): what
//! slirp4netns must join to configure a sandbox's network, whatever user namespaces bwrap
//! nested inside it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `NS_GET_USERNS` = `_IO(0xb7, 0x1)` (linux/nsfs.h).
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// A descriptor of the user namespace owning `pid`'s network namespace.
pub fn owner_of_net_ns(pid: i32) -> std::io::Result<OwnedFd> {
    let net = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    owner(&net)
}

// The one ioctl kitbag-vm makes: no argument, a new descriptor back.
#[allow(unsafe_code)]
fn owner(ns: &std::fs::File) -> std::io::Result<OwnedFd> {
    // SAFETY: NS_GET_USERNS takes no argument; it returns a new descriptor (close-on-exec)
    // or -1 with errno, and touches no memory of ours.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS as _) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_network_namespace_is_owned_by_our_user_namespace() {
        let owner = owner_of_net_ns(std::process::id() as i32).expect("ioctl");
        let ours = kitbag_shared::rustix::fs::stat("/proc/self/ns/user").expect("stat");
        let got = kitbag_shared::rustix::fs::fstat(&owner).expect("fstat");
        assert_eq!((got.st_dev, got.st_ino), (ours.st_dev, ours.st_ino));
    }
}
