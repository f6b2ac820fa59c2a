#!/usr/bin/env python3
"""How the corpus pages and their gold text were made (a record, run once; not part of any test).

Every page comes from a package in a public registry or was written for this corpus; each page's
line in manifest.tsv names its source and licence.
  n4k-      newspaper4k 0.9.6's sdist from PyPI (MIT; tests/data/html/<name>.html): real news pages
            saved by that project, gold = its tests/data/txt/<name>.txt, the article text its
            test suite expects (asserted verbatim there). Left out: pages without a text file or
            whose text the suite does not assert (cleveland.com1, video_article_01 — one HTML,
            two different texts), japanese_article (a 200-character stub of a long page), and
            Thai/Burmese (no word separators, so token F1 says little).
  deb-      HTML documentation from Debian bookworm packages (apt-get download; Sphinx, mdBook,
            rustdoc, AsciiDoc and Publican/DocBook layouts); gold = the text of the element(s)
            that hold the page's own content, chosen per generator below (headerlink pilcrows,
            index anchors and copy buttons removed).
  hand-     pages written for this corpus (forum, video, portal, blog layouts) with hand-written
            gold; same licence as kitbag.

Usage: build.py NEWSPAPER4K_DIR DEBIAN_ROOT — the unpacked sdist (newspaper4k-0.9.6/) and a
directory holding each .deb unpacked into a directory named after its package.
"""
import gzip
import sys
from pathlib import Path

import lxml.html

OUT = Path(__file__).resolve().parent
PAGES = OUT / "pages"

BLOCK = {
    "p", "div", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote",
    "table", "tr", "td", "th", "dt", "dd", "dl", "section", "article", "figure", "figcaption",
    "br", "hr", "header", "footer", "main", "aside", "nav",
}


def block_text(el):
    """The text of an element, one line per block, scripts and styles dropped."""
    for bad in el.xpath(".//script|.//style|.//noscript"):
        bad.drop_tree()
    # Generator chrome inside the content element: Sphinx's pilcrow links, rustdoc's
    # "1.0.0 · source · [−]" and its "Expand description" toggle label.
    for a in el.xpath(".//a[contains(@class,'headerlink')]|.//*[@class='out-of-band']"
                      "|.//summary[@class='hideme']"):
        a.drop_tree()
    parts = []

    def walk(e):
        tag = e.tag if isinstance(e.tag, str) else ""
        if tag in BLOCK:
            parts.append("\n")
        if e.text and tag:
            parts.append(e.text)
        for c in e:
            walk(c)
        if tag in BLOCK:
            parts.append("\n")
        if e.tail:
            parts.append(e.tail)

    walk(el)
    lines = (" ".join(l.split()) for l in "".join(parts).split("\n"))
    return "\n".join(l for l in lines if l) + "\n"


def write(pid, html_bytes, gold):
    (PAGES / f"{pid}.html.gz").write_bytes(gzip.compress(html_bytes, 9, mtime=0))
    (PAGES / f"{pid}.gold.txt").write_text(gold.strip() + "\n")


def main(n4k, deb):
    rows = []
    data = Path(n4k) / "tests" / "data"
    for name, kind in NEWSPAPER:
        pid = "n4k-" + name.replace("_", "-")
        gold = (data / "txt" / f"{name}.txt").read_text(encoding="utf-8")
        write(pid, (data / "html" / f"{name}.html").read_bytes(), gold)
        rows.append((pid, kind, f"newspaper4k 0.9.6 sdist (PyPI): tests/data/html/{name}.html, gold tests/data/txt/{name}.txt", "MIT (test data); page © its publisher"))
    for rel, kind, lic, xpath in DEBIAN:
        path = Path(deb) / rel
        raw = path.read_bytes()
        doc = lxml.html.fromstring(raw)
        parts = doc.xpath(xpath)
        assert parts, f"{rel}: nothing at {xpath}"
        pkg = rel.split("/")[0]
        pid = "deb-" + pkg + "-" + path.stem.replace("_", "-").replace(".", "-")
        write(pid, raw, "".join(block_text(el) for el in parts))
        rows.append((pid, kind, f"Debian package {pkg}: {rel.split('/', 1)[1]}", lic))
    hand = OUT / "hand"
    for meta in sorted(hand.glob("*.meta")):
        pid, kind = meta.stem, meta.read_text().strip()
        write(pid, (hand / f"{pid}.html").read_bytes(), (hand / f"{pid}.txt").read_text())
        rows.append((pid, kind, f"written for this corpus (tests/corpus/hand/{pid}.html)", "same as kitbag"))
    with open(OUT / "manifest.tsv", "w") as f:
        f.write("id\tkind\tsource\tlicence\n")
        for r in rows:
            f.write("\t".join(r) + "\n")


NEWSPAPER = [
    ("cnn_article", "news"), ("cnn_001", "news"), ("cnn_002", "news"), ("cnn_test_nlp", "news"),
    ("time_001", "news"), ("wired_001", "news"), ("article_with_br", "news"),
    ("article_with_divs", "news"), ("yna_co_kr", "news"), ("fox13now_001", "news"),
    ("arabic_article", "news"), ("spanish_article", "news"), ("chinese_article", "news"),
    ("chinese_article_001", "news"), ("chinese_article_002", "news"),
    ("japanese_article2", "news"), ("latvian_article", "news"), ("video_article_02", "video"),
]

SPHINX = "//*[@role='main']"
DOCS = "usr/share/doc"
DEBIAN = [
    (f"python3.11-doc/{DOCS}/python3.11/html/library/json.html", "docs", "PSF-2.0", SPHINX),
    (f"python3.11-doc/{DOCS}/python3.11/html/tutorial/controlflow.html", "docs", "PSF-2.0", SPHINX),
    (f"python3.11-doc/{DOCS}/python3.11/html/howto/logging.html", "docs", "PSF-2.0", SPHINX),
    (f"sphinx-doc/{DOCS}/sphinx-doc/html/faq.html", "docs", "BSD-2-Clause", SPHINX),
    (f"sphinx-doc/{DOCS}/sphinx-doc/html/usage/quickstart.html", "docs", "BSD-2-Clause", SPHINX),
    (f"python3-marshmallow-doc/{DOCS}/python3-marshmallow/html/custom_fields.html", "docs", "MIT", SPHINX),
    (f"python3-clevercsv-doc/{DOCS}/python3-clevercsv-doc/html/README.html", "docs", "MIT", SPHINX),
    (f"python3-aiortc-doc/{DOCS}/python3-aiortc-doc/html/index.html", "docs", "BSD-3-Clause", SPHINX),
    # mdBook: the chapter is <main>; the sidebar holds the whole book's table of contents.
    (f"rust-doc/{DOCS}/rust-doc/html/book/ch04-01-what-is-ownership.html", "docs", "MIT or Apache-2.0", "//main"),
    (f"rust-doc/{DOCS}/rust-doc/html/nomicon/ownership.html", "docs", "MIT or Apache-2.0", "//main"),
    (f"rust-doc/{DOCS}/rust-doc/html/rust-by-example/fn/closures.html", "docs", "MIT or Apache-2.0", "//main"),
    # rustdoc: the item's documentation.
    (f"rust-doc/{DOCS}/rust-doc/html/std/option/index.html", "docs", "MIT or Apache-2.0", "//section[@id='main-content']"),
    # AsciiDoc: the title and the content, not the footer.
    (f"git-doc/{DOCS}/git-doc/gitworkflows.html", "docs", "GPL-2.0", "//div[@id='header']/h1|//div[@id='content']"),
    (f"git-doc/{DOCS}/git-doc/gitfaq.html", "docs", "GPL-2.0", "//div[@id='header']/h1|//div[@id='content']"),
    # Publican (DocBook): the section, not the previous/next navigation.
    (f"debian-handbook/{DOCS}/debian-handbook/html/en-US/sect.apt-get.html", "docs", "GPL-2.0+ or CC-BY-SA-3.0", "/html/body/div[contains(@class,'section')]"),
    (f"debian-handbook/{DOCS}/debian-handbook/html/en-US/sect.remote-login.html", "docs", "GPL-2.0+ or CC-BY-SA-3.0", "/html/body/div[contains(@class,'section')]"),
]

if __name__ == "__main__":
    main(*sys.argv[1:3])
