"""Extract every corpus page with trafilatura and with the official MCP fetch server's extractor.

Run by servers/web/benches/extract.rs (`cargo bench -p kitbag-web --bench extract`):
    extract.py CORPUS_DIR          the checked-in corpus (its manifest.tsv and pages/)
    extract.py --pages DIR         every DIR/*.html.gz, sorted (a public benchmark's pages;
                                   the id is the file name before its first dot), one run each
prints one JSON object per page: {"id", "trafilatura", "trafilatura_ms", "fetch", "fetch_ms"}.
Times are in-process extraction only (the page is already decoded text), the median of RUNS runs.
trafilatura runs with its defaults (plain text); the fetch server's extractor is
mcp_server_fetch.server.extract_content_from_html (readabilipy + markdownify), which takes
readabilipy's pure-Python path unless a Node.js install was made inside readabilipy's package.
"""
import contextlib
import gzip
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import trafilatura

warnings.filterwarnings("ignore")
try:
    from mcp_server_fetch.server import extract_content_from_html
except Exception:  # optional: the fetch server may be missing
    extract_content_from_html = None

RUNS = 3


def timed(fn, html):
    out, times = None, []
    for _ in range(RUNS):
        t = time.perf_counter()
        try:
            # Anything a library prints goes to stderr: stdout carries only the JSON lines.
            with contextlib.redirect_stdout(sys.stderr):
                out = fn(html)
        except Exception as e:  # a crash scores as an empty extraction
            out = ""
            print(f"warning: {fn.__name__}: {e}", file=sys.stderr)
        times.append((time.perf_counter() - t) * 1e3)
    return out or "", statistics.median(times)


COMMENTS = True


def run_trafilatura(html):
    # A public benchmark's pages are extracted as its own scripts do (comments left out).
    return trafilatura.extract(html, include_comments=COMMENTS)


def pages(args):
    """(id, gzipped file) of every page to extract."""
    if args[0] == "--pages":
        for path in sorted(Path(args[1]).glob("*.html.gz")):
            yield path.name.split(".")[0], path
        return
    corpus = Path(args[0])
    for row in (corpus / "manifest.tsv").read_text().splitlines()[1:]:
        pid = row.split("\t")[0]
        yield pid, corpus / "pages" / f"{pid}.html.gz"


def main():
    global RUNS, COMMENTS
    if sys.argv[1] == "--pages":
        RUNS, COMMENTS = 1, False
    for pid, path in pages(sys.argv[1:]):
        html = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        rec = {"id": pid}
        rec["trafilatura"], rec["trafilatura_ms"] = timed(run_trafilatura, html)
        if extract_content_from_html is not None:
            rec["fetch"], rec["fetch_ms"] = timed(extract_content_from_html, html)
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
