#!/usr/bin/env python3
"""`search_glob` (warm release server over stdio) side by side with `fdfind` on one large tree.

    cargo build --release -p kitbag-search
    python3 servers/search/benches/glob_vs_fd.py [--bin LABEL=PATH ...] [--runs N] [--tree DIR]

The tree defaults to a hard-linked copy of the cargo registry sources (~/.cargo/registry/src,
made under $TMPDIR and removed afterwards) with an empty `.git` at its top, so that fd (which
applies .gitignore files only inside a git work tree) and kitbag (which applies them
everywhere) honour the same ignore files (a `--tree` of your own should be a git work tree, or
hold no ignore files, for the same reason). Defaults on both sides otherwise: hidden files
skipped, ignore files respected. Each `--bin` is a kitbag-search binary (default: the release
build); several give a before/after comparison. Calls are alternated round by round (binaries
and fd), and the median of each is printed with its ratio to fd. Every run asserts that each
binary found as many files as fd.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PATTERNS = ["*.rs", "**/*.toml", "*/src/**/*.rs", "lib.rs", "*.sh"]
# (label, pattern, extra arguments): every pattern with ignore files on (both sides' default)
# and off (`no_ignore` / `fd -I`, no ignore matchers to build), sorted by path; then the
# default sort (newest first), which needs every hit's mtime. A pattern with `/` is matched by
# fd against the full path.
QUERIES = (
    [(p, p, {}) for p in PATTERNS]
    + [(f"{p}, no_ignore", p, {"no_ignore": True}) for p in PATTERNS]
    + [("*.rs, sort mtime", "*.rs", {"sort": "mtime"})]
)


class Server:
    def __init__(self, path, root):
        self.p = subprocess.Popen(
            [path, "--root", root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=root,
        )
        self.next_id = 0
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "glob_vs_fd", "version": "0"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("the server exited")
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    sys.exit(f"{method}: {msg['error']}")
                return msg["result"]

    def glob(self, args):
        t = time.perf_counter()
        r = self.request("tools/call", {"name": "search_glob", "arguments": args})
        dt = time.perf_counter() - t
        if r.get("isError"):
            sys.exit(f"search_glob {args}: {r}")
        return dt, r["structuredContent"]["total"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def fd(tree, pattern, no_ignore):
    args = ["fdfind", "--glob", "--type", "f", "--color", "never"] + (["-I"] if no_ignore else [])
    if "/" in pattern:
        args += ["--full-path", os.path.join(tree, pattern)]
    else:
        args.append(pattern)
    t = time.perf_counter()
    out = subprocess.run(args, cwd=tree, capture_output=True, check=True).stdout
    return time.perf_counter() - t, out.count(b"\n")


def make_tree():
    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    src = sorted(glob.glob(os.path.join(home, "registry/src/*")))
    if not src:
        sys.exit("no cargo registry sources; pass --tree")
    tmp = tempfile.mkdtemp(prefix="glob-vs-fd-")
    tree = os.path.join(tmp, "tree")
    os.mkdir(tree)
    # The crates at the top (`*/src/**/*.rs` is every crate's src); hard links cost no space.
    for s in src:
        if subprocess.run(["cp", "-al", s + "/.", tree], stderr=subprocess.DEVNULL).returncode:
            print(f"{s}: hard links failed, copying", file=sys.stderr)
            subprocess.run(["cp", "-r", s + "/.", tree], check=True)
    os.mkdir(os.path.join(tree, ".git"))
    return tmp, tree


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap.add_argument("--bin", action="append", default=[],
                    help="LABEL=PATH of a kitbag-search binary (repeatable)")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--tree", help="tree to search (default: copy of the registry sources)")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin] or [["kitbag", os.path.join(target, "release/kitbag-search")]]
    if shutil.which("fdfind") is None:
        sys.exit("fdfind not installed (apt-get install fd-find)")
    tmp = None
    if a.tree:
        tree = os.path.realpath(a.tree)
    else:
        tmp, tree = make_tree()
    try:
        files = sum(len(f) for _, _, f in os.walk(tree))
        print(f"tree: {tree}: {files} files; fd {subprocess.run(['fdfind', '--version'], capture_output=True, text=True).stdout.strip()}; "
              f"{os.cpu_count()} cores; median of {a.runs}")
        servers = [(label, Server(os.path.abspath(path), tree)) for label, path in bins]
        for _, s in servers:  # warm the page cache and the servers
            s.glob({"pattern": "*.rs", "limit": 10})
        fd(tree, "*.rs", False)
        times = {}
        for _ in range(a.runs):
            for label, pattern, extra in QUERIES:
                args = {"pattern": pattern, "limit": 10000, "sort": "path", **extra}
                dt, n_fd = fd(tree, pattern, extra.get("no_ignore", False))
                times.setdefault((label, "fd"), []).append(dt)
                for name, s in servers:
                    dt, n = s.glob(args)
                    assert n == n_fd, f"{label}: {name} found {n}, fd {n_fd}"
                    times.setdefault((label, name), []).append(dt)
                times[(label, "n")] = [n_fd]
        head = ["query", "hits", "fd ms"] + [f"{n} ms" for n, _ in servers] + [f"{n}/fd" for n, _ in servers]
        print("\n| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for label, _, _ in QUERIES:
            f = statistics.median(times[(label, "fd")])
            ms = [statistics.median(times[(label, n)]) for n, _ in servers]
            row = [f"`{label}`", str(times[(label, "n")][0]), f"{f * 1e3:.1f}"]
            row += [f"{m * 1e3:.1f}" for m in ms] + [f"{m / f:.2f}" for m in ms]
            print("| " + " | ".join(row) + " |")
        for _, s in servers:
            s.close()
    finally:
        if tmp:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
