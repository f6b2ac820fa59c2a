//! Giving back the pages start-up touched: once a server idles after its start, the code and
//! read-only data it ran only to start (argument parsing, schema generation, set-up) leave its
//! resident set.
//!
//! Why this matters: the kernel maps a binary's pages 64 KiB at a time around each fault
//! (fault-around), and start-up code is spread over the whole binary, so a server that ran a
//! few hundred functions once holds most of its `.text` resident — 6.6 of kitbag-files'
//! 11 MB, 18.8 MB of the host's. Those pages are clean copies of the file: dropping them from
//! this process's page tables (`MADV_DONTNEED` on a private, never-written file mapping) loses
//! nothing, and they stay in the page cache, where the next call that needs one maps it again
//! with a minor fault.
//!
//! Only what holds the file's own bytes is dropped: each mapped file's executable segment
//! and the read-only segment before it (headers, `.rodata`, unwind tables, the relocation
//! entries the loader read). The RELRO segment after the code holds relocated pointers — this
//! process's private copies — and is never touched, nor is anything writable or anonymous.

use std::time::Duration;

/// How long after start-up the pages are given back: by then the client's handshake and
/// first list are answered.
pub const AFTER_START: Duration = Duration::from_secs(1);

/// One line of `/proc/self/maps` that maps a file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    offset: u64,
    inode: u64,
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?.to_string();
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let _device = f.next()?;
    let inode = f.next()?.parse().ok()?;
    Some(Mapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        inode,
    })
}

/// The mappings whose pages are the file's own bytes: per file, the executable mapping
/// (`r-xp`) and a read-only one (`r--p`) lying before it in the file. Anything after the
/// code in a file (RELRO, data) and every anonymous mapping is left alone.
fn file_pages(maps: &str) -> Vec<(usize, usize)> {
    let all: Vec<Mapping> = maps
        .lines()
        .filter_map(parse_line)
        .filter(|m| m.inode != 0)
        .collect();
    let mut out = Vec::new();
    for text in all.iter().filter(|m| m.perms == "r-xp") {
        out.push((text.start, text.end));
        out.extend(
            all.iter()
                .filter(|m| m.inode == text.inode && m.perms == "r--p" && m.offset < text.offset)
                .map(|m| (m.start, m.end)),
        );
    }
    out
}

/// Drop this process's resident pages of mapped code and read-only file data (see the
/// module). Returns the bytes of the mappings advised; an error only when
/// `/proc/self/maps` cannot be read.
pub fn trim() -> std::io::Result<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut advised = 0;
    for (start, end) in file_pages(&maps) {
        let Some(ptr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) else {
            continue;
        };
        // SAFETY: the range is a whole private, read-only mapping of a file that this process
        // has never written (its executable segment, or the read-only segment before it,
        // which the loader does not relocate): MADV_DONTNEED only removes its pages from our
        // page tables, and any later access faults the same bytes in again from the file.
        #[allow(unsafe_code)]
        let done = unsafe {
            nix::sys::mman::madvise(ptr, end - start, nix::sys::mman::MmapAdvise::MADV_DONTNEED)
        };
        if done.is_ok() {
            advised += end - start;
        }
    }
    Ok(advised)
}

/// Trim once, [`AFTER_START`] from now, on the blocking pool (it reads `/proc`).
pub fn trim_after_start() {
    tokio::spawn(async {
        tokio::time::sleep(AFTER_START).await;
        let _ = tokio::task::spawn_blocking(trim).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55f8b49e7000-55f8b4d68000 r--p 00000000 fd:01 1234   /usr/bin/kitbag-files
55f8b4d68000-55f8b5842000 r-xp 00380000 fd:01 1234   /usr/bin/kitbag-files
55f8b5842000-55f8b58c7000 r--p 00e59000 fd:01 1234   /usr/bin/kitbag-files
55f8b58c7000-55f8b58cc000 rw-p 00ede000 fd:01 1234   /usr/bin/kitbag-files
55f8b58cc000-55f8b58d4000 rw-p 00000000 00:00 0
7ff02f1cd000-7ff02f1f3000 r--p 00000000 fd:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7ff02f1f3000-7ff02f349000 r-xp 00026000 fd:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7ff02f349000-7ff02f39c000 r--p 0017c000 fd:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7ff02f39c000-7ff02f3a0000 r--p 001cf000 fd:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7fffbdac6000-7fffbdae7000 rw-p 00000000 00:00 0      [stack]
7fffbdbf1000-7fffbdbf3000 r-xp 00000000 00:00 0      [vdso]
";

    #[test]
    fn only_code_and_the_read_only_data_before_it_are_trimmed() {
        let got = file_pages(MAPS);
        assert_eq!(
            got,
            vec![
                (0x55f8b4d68000, 0x55f8b5842000),
                (0x55f8b49e7000, 0x55f8b4d68000),
                (0x7ff02f1f3000, 0x7ff02f349000),
                (0x7ff02f1cd000, 0x7ff02f1f3000),
            ],
            "not the RELRO or data after the code, not [vdso] or anything anonymous"
        );
    }

    #[test]
    fn a_trimmed_process_runs_on_with_its_relocated_data_intact() {
        // This test process (its other tests running in threads beside) must go on running
        // code and reading statics and vtables — relocated pointers — after the trim.
        let advised = trim().unwrap_or_else(|e| panic!("{e}"));
        assert!(advised > 0);
        let v: Vec<Box<dyn std::fmt::Display>> = vec![Box::new(1), Box::new("two")];
        let shown: Vec<String> = v.iter().map(|d| d.to_string()).collect();
        assert_eq!(shown, ["1", "two"]);
        assert!(trim().unwrap_or_else(|e| panic!("{e}")) > 0, "trims again");
    }
}
