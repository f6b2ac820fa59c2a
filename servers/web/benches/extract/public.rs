//! The public article-extraction benchmarks, each scored by its own published metric, with
//! kitbag, trafilatura, the MCP fetch server's extractor and Readability.js run side by side on
//! the same pages in one run.
//!
//! The benchmarks are not copied into this repository: `KITBAG_EXTRACT_CORPORA` names a
//! directory holding their clones, e.g.
//!
//! ```sh
//! mkdir -p ~/corpora && cd ~/corpora
//! git clone https://github.com/scrapinghub/article-extraction-benchmark
//! KITBAG_EXTRACT_CORPORA=~/corpora cargo bench -p kitbag-web --bench extract
//! ```
//!
//! - `article-extraction-benchmark` (Zyte, MIT): 181 news and blog pages with human-written
//!   article bodies, scored by its `evaluate.py` (precision and recall of 4-token shingles per
//!   page, averaged; F1 of the averages; bootstrap ± over pages), run on its own with our
//!   outputs beside its ground truth.
//! - `trafilatura` (Apache-2.0; `git clone https://github.com/adbar/trafilatura`): its
//!   evaluation corpus, 990 pages in many languages (news, blogs, shops, forums, public
//!   bodies) with annotated segments that must be in the main text and segments that must not,
//!   scored by its `tests/eval_common.py` (segment precision, recall, F1 over the corpus).
//!   Every extractor gets the same text: the bytes decoded as web_fetch decodes a page served
//!   without a charset (`kitbag_web::charset`).
//! - `readability` (Apache-2.0; `git clone https://github.com/mozilla/readability`): its 130
//!   test pages. Their `expected.html` is Readability.js's own output, checked by hand when it
//!   was recorded — a reference that favours Readability.js by construction. It has no
//!   published score; each extractor's text is scored against the expected page's text with
//!   the checked-in corpus's bag-of-words F1, averaged over pages.
//!
//! The other extractors run as the benchmark's own scripts run them: trafilatura without
//! comments, Readability.js's `textContent` on jsdom. Markdown (kitbag, the fetch server) is
//! reduced to its text as the checked-in corpus's scoring does.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::corpus;

/// One extractor's texts by page id, and its median time per page in ms.
struct Extracted {
    name: &'static str,
    texts: BTreeMap<String, String>,
    p50_ms: f64,
}

pub fn run() {
    let Some(root) = std::env::var_os("KITBAG_EXTRACT_CORPORA").map(PathBuf::from) else {
        println!(
            "\n*** SKIPPED the public benchmarks: KITBAG_EXTRACT_CORPORA names no directory (see benches/extract/public.rs for the clones it holds) ***"
        );
        return;
    };
    let aeb = root.join("article-extraction-benchmark");
    if aeb.join("ground-truth.json").is_file() {
        article_extraction_benchmark(&aeb);
    } else {
        println!(
            "\n*** SKIPPED article-extraction-benchmark: no {} ***",
            aeb.join("ground-truth.json").display()
        );
    }
    let readability = root.join("readability/test/test-pages");
    if readability.is_dir() {
        readability_test_pages(&readability);
    } else {
        println!(
            "\n*** SKIPPED Readability's test pages: no {} ***",
            readability.display()
        );
    }
    let traf = root.join("trafilatura/tests");
    if traf.join("evaldata.json").is_file() {
        trafilatura_evaluation(&traf);
    } else {
        println!(
            "\n*** SKIPPED trafilatura's evaluation: no {} ***",
            traf.join("evaldata.json").display()
        );
    }
}

/// Every `dir/*.html.gz`, sorted: (id, HTML), the id the file name before its first dot.
fn gz_pages(dir: &Path) -> Vec<(String, String)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.to_string_lossy().ends_with(".html.gz"));
    names.sort();
    names
        .into_iter()
        .filter_map(|p| {
            let id = p
                .file_name()?
                .to_string_lossy()
                .split('.')
                .next()?
                .to_string();
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&p).ok()?)
                .read_to_end(&mut raw)
                .ok()?;
            Some((id, String::from_utf8_lossy(&raw).into_owned()))
        })
        .collect()
}

fn kitbag(pages: &[(String, String)]) -> Extracted {
    let mut times = Vec::new();
    let texts = pages
        .iter()
        .map(|(id, html)| {
            let t = Instant::now();
            let text = corpus::kitbag_text(html);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            (id.clone(), text)
        })
        .collect();
    Extracted {
        name: "kitbag",
        texts,
        p50_ms: crate::median(times),
    }
}

/// JSON lines from a command, or None (with a SKIPPED line) when it cannot run. The lines are
/// kept in `saved`; with `KITBAG_BENCH_REUSE` set, a kept run is read back instead of running
/// the command again (the Python side takes many minutes; kitbag's side is what changes).
fn json_lines(what: &str, cmd: &mut Command, install: &str, saved: &Path) -> Option<Vec<Value>> {
    let parse = |s: &str| -> Vec<Value> {
        s.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    if std::env::var_os("KITBAG_BENCH_REUSE").is_some()
        && let Ok(s) = std::fs::read_to_string(saved)
    {
        println!("(reusing {} — KITBAG_BENCH_REUSE is set)", saved.display());
        return Some(parse(&s));
    }
    let out = match cmd.output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            println!(
                "*** SKIPPED {what}: it failed: {} ***",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return None;
        }
        Err(e) => {
            println!("*** SKIPPED {what}: {e} ({install}) ***");
            return None;
        }
    };
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(dir) = saved.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(saved, &s);
    Some(parse(&s))
}

/// `key`'s text (and `key_ms`'s time) of every line, as one extractor's run.
fn from_lines(name: &'static str, lines: &[Value], key: &str, markdown: bool) -> Extracted {
    let mut times = Vec::new();
    let texts = lines
        .iter()
        .filter_map(|v| {
            let text = v.get(key)?.as_str().unwrap_or_default();
            times.push(v.get(format!("{key}_ms")).or(v.get("ms"))?.as_f64()?);
            let text = if markdown {
                corpus::strip_markdown(text)
            } else {
                text.to_string()
            };
            Some((v["id"].as_str()?.to_string(), text))
        })
        .collect();
    Extracted {
        name,
        texts,
        p50_ms: crate::median(times),
    }
}

/// The other extractors over `html_dir`'s pages; `corpus` names their kept runs.
fn others(corpus: &str, html_dir: &Path) -> Vec<Extracted> {
    let kept = std::env::temp_dir().join("kitbag-extract-runs");
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit");
    let mut runs = Vec::new();
    let py = testkit.join("web-py/.venv/bin/python");
    let install_py = "python3 -m venv testkit/web-py/.venv && testkit/web-py/.venv/bin/pip install -r testkit/web-py/requirements.txt";
    if let Some(lines) = json_lines(
        "trafilatura and mcp-server-fetch",
        Command::new(&py)
            .arg(testkit.join("web-py/extract.py"))
            .arg("--pages")
            .arg(html_dir),
        install_py,
        &kept.join(format!("{corpus}-python.jsonl")),
    ) {
        runs.push(from_lines("trafilatura", &lines, "trafilatura", false));
        runs.push(from_lines("mcp-server-fetch", &lines, "fetch", true));
    }
    let js = testkit.join("web-js");
    if js.join("node_modules/@mozilla/readability").is_dir() {
        if let Some(lines) = json_lines(
            "Readability.js",
            Command::new("node")
                .arg(js.join("readability.mjs"))
                .arg(html_dir),
            "needs node",
            &kept.join(format!("{corpus}-readability.jsonl")),
        ) {
            runs.push(from_lines("readability-js", &lines, "text", false));
        }
    } else {
        println!("*** SKIPPED Readability.js: npm ci --prefix testkit/web-js ***");
    }
    // A run that gave no page (a kept run of an extractor that failed on that machine) would
    // score as zero everywhere, and Zyte's `evaluate.py` stops on an empty column.
    runs.retain(|r| {
        let empty = r.texts.is_empty();
        if empty {
            println!(
                "*** SKIPPED {}: its run holds no page (run again without KITBAG_BENCH_REUSE) ***",
                r.name
            );
        }
        !empty
    });
    runs
}

/// Zyte's benchmark: our outputs written beside its ground truth, then its `evaluate.py`.
fn article_extraction_benchmark(repo: &Path) {
    let pages = gz_pages(&repo.join("html"));
    println!(
        "\narticle-extraction-benchmark: {} pages (news and blogs), scored by its evaluate.py",
        pages.len()
    );
    let mut runs = vec![kitbag(&pages)];
    runs.extend(others("aeb", &repo.join("html")));
    let scratch = std::env::temp_dir().join("kitbag-extract-aeb");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(scratch.join("output")).expect("scratch dir");
    std::fs::copy(
        repo.join("ground-truth.json"),
        scratch.join("ground-truth.json"),
    )
    .expect("ground truth");
    for r in &runs {
        let output: serde_json::Map<String, Value> = pages
            .iter()
            .map(|(id, _)| {
                let body = r.texts.get(id).cloned().unwrap_or_default();
                (id.clone(), json!({ "articleBody": body }))
            })
            .collect();
        let file = json!({"version": format!("p50 {:.1} ms", r.p50_ms), "output": output});
        std::fs::write(
            scratch.join("output").join(format!("{}.json", r.name)),
            file.to_string(),
        )
        .expect("write output");
    }
    match Command::new("python3")
        .arg(repo.join("evaluate.py"))
        .args(["--n-bootstrap", "200"])
        .current_dir(&scratch)
        .output()
    {
        Ok(o) if o.status.success() => print!("{}", String::from_utf8_lossy(&o.stdout)),
        Ok(o) => println!(
            "*** evaluate.py failed: {} ***",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => println!("*** evaluate.py could not run: {e} ***"),
    }
    println!("(the version column holds each extractor's median time per page)");
}

/// trafilatura's evaluation corpus: its pages decoded once and written gzipped to a scratch
/// directory (the form every extractor's runner reads), each extractor's texts by URL handed to
/// its own scoring code.
fn trafilatura_evaluation(tests: &Path) {
    let evaldata: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(tests.join("evaldata.json")).expect("evaldata.json"))
            .expect("evaldata.json is JSON");
    let scratch = std::env::temp_dir().join("kitbag-extract-trafilatura");
    let _ = std::fs::remove_dir_all(&scratch);
    let html_dir = scratch.join("pages");
    std::fs::create_dir_all(&html_dir).expect("scratch dir");
    let mut urls = BTreeMap::new();
    let mut pages = Vec::new();
    for (url, item) in &evaldata {
        let Some(file) = item["file"].as_str() else {
            continue;
        };
        let Some(bytes) = ["cache", "eval"]
            .iter()
            .find_map(|d| std::fs::read(tests.join(d).join(file)).ok())
        else {
            println!("*** {url}: no page {file} ***");
            continue;
        };
        let id = add_page(&html_dir, &mut pages, &bytes);
        urls.insert(id, url.clone());
    }
    println!(
        "\ntrafilatura's evaluation: {} pages in many languages, scored by its eval_common.py",
        pages.len()
    );
    let mut runs = vec![kitbag(&pages)];
    runs.extend(others("trafilatura", &html_dir));
    let outputs: serde_json::Map<String, Value> = runs
        .iter()
        .map(|r| {
            let texts: serde_json::Map<String, Value> = r
                .texts
                .iter()
                .filter_map(|(id, text)| Some((urls.get(id)?.clone(), json!(text))))
                .collect();
            (r.name.to_string(), Value::Object(texts))
        })
        .collect();
    // Which page is which, for looking into one extractor's result page by page.
    std::fs::write(scratch.join("ids.json"), json!(urls).to_string()).expect("write ids");
    let out_file = scratch.join("outputs.json");
    std::fs::write(&out_file, Value::Object(outputs).to_string()).expect("write outputs");
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit/web-py");
    let scored = Command::new(py.join(".venv/bin/python"))
        .arg(py.join("score_trafilatura_eval.py"))
        .arg(tests)
        .arg(&out_file)
        .output();
    let lines = match scored {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            println!(
                "*** eval_common.py scoring failed: {} ***",
                String::from_utf8_lossy(&o.stderr)
            );
            return;
        }
        Err(e) => {
            println!(
                "*** eval_common.py scoring could not run: {e} (it needs testkit/web-py/.venv) ***"
            );
            return;
        }
    };
    println!(
        "{:<18} {:>9} {:>7} {:>8} {:>6} {:>8}",
        "extractor", "precision", "recall", "accuracy", "F1", "p50 ms"
    );
    for line in lines.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [name, p, r, a, f1, _] = f[..] else {
            // The scorer's breakdown by language, as it prints it.
            println!("{line}");
            continue;
        };
        let ms = runs
            .iter()
            .find(|x| x.name == name)
            .map_or(f64::NAN, |x| x.p50_ms);
        println!("{name:<18} {p:>9} {r:>7} {a:>8} {f1:>6} {ms:>8.1}");
    }
}

/// A page's bytes decoded as `web_fetch` decodes a body served without a charset, kept as the
/// next of `pages` and gzipped as `dir/ID.html.gz` (the form every extractor's runner reads);
/// its id.
fn add_page(dir: &Path, pages: &mut Vec<(String, String)>, bytes: &[u8]) -> String {
    let id = format!("{:04}", pages.len());
    let html = kitbag_web::charset::decode(bytes, "");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, html.as_bytes()).expect("gzip");
    std::fs::write(
        dir.join(format!("{id}.html.gz")),
        gz.finish().expect("gzip"),
    )
    .expect("write page");
    pages.push((id.clone(), html));
    id
}

/// The text of an HTML document (every text node, blocks apart), for a reference given as HTML.
fn html_text(html: &str) -> String {
    use html5ever::tendril::TendrilSink;
    use markup5ever_rcdom::{NodeData, RcDom};
    let dom = html5ever::parse_document(RcDom::default(), Default::default()).one(html);
    let mut out = String::new();
    // A clone: the document kept in `dom` till the end (an rcdom node empties its subtree when
    // it is dropped, still-held children included).
    let mut stack = vec![dom.document.clone()];
    while let Some(n) = stack.pop() {
        match &n.data {
            NodeData::Text { contents } => out.push_str(&contents.borrow()),
            NodeData::Element { name, .. } if matches!(&*name.local, "script" | "style") => {
                continue;
            }
            NodeData::Element { .. } => out.push(' '),
            _ => {}
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
    out
}

/// Readability's test pages: every extractor's text against the expected page's text.
fn readability_test_pages(dir: &Path) {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    let scratch = std::env::temp_dir().join("kitbag-extract-readability");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut pages = Vec::new();
    let mut gold = BTreeMap::new();
    for page in names {
        let (Ok(source), Ok(expected)) = (
            std::fs::read(page.join("source.html")),
            std::fs::read_to_string(page.join("expected.html")),
        ) else {
            continue;
        };
        let id = add_page(&scratch, &mut pages, &source);
        gold.insert(id, html_text(&expected));
    }
    println!(
        "\nReadability's test pages: {} pages, bag-of-words F1 against expected.html (Readability.js's own output), mean over pages",
        pages.len()
    );
    let mut runs = vec![kitbag(&pages)];
    runs.extend(others("readability", &scratch));
    println!(
        "{:<18} {:>7} {:>9} {:>7} {:>8}",
        "extractor", "mean F1", "precision", "recall", "p50 ms"
    );
    for r in &runs {
        let scores: Vec<corpus::Score> = gold
            .iter()
            .map(|(id, g)| corpus::score(r.texts.get(id).map_or("", String::as_str), g))
            .collect();
        let n = scores.len().max(1) as f64;
        let mean = |f: fn(&corpus::Score) -> f64| scores.iter().map(f).sum::<f64>() / n;
        println!(
            "{:<18} {:>7.3} {:>9.3} {:>7.3} {:>8.1}",
            r.name,
            mean(|s| s.f1),
            mean(|s| s.precision),
            mean(|s| s.recall),
            r.p50_ms
        );
    }
}
