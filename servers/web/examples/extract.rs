//! kitbag's main-content extraction of saved pages, for looking at what it keeps:
//!
//! ```sh
//! cargo run -p kitbag-web --example extract -- page.html      # or page.html.gz
//! cargo run -p kitbag-web --example extract -- DIR            # every DIR/*.html.gz
//! ```
//!
//! A page prints its title, then the markdown `web_fetch` would answer with. A directory prints
//! one JSON object per page, `{"id", "text"}`, the text as the extraction benchmark scores it
//! (markdown reduced to its text; the id is the file name before its first dot).

#[path = "../tests/common/corpus.rs"]
mod corpus;

use std::io::Read;
use std::path::Path;

fn read(path: &Path) -> std::io::Result<String> {
    let mut raw = Vec::new();
    let mut f = std::fs::File::open(path)?;
    if path.to_string_lossy().ends_with(".gz") {
        flate2::read::GzDecoder::new(f).read_to_end(&mut raw)?;
    } else {
        f.read_to_end(&mut raw)?;
    }
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

fn main() {
    let Some(arg) = std::env::args().nth(1) else {
        eprintln!("usage: extract PAGE.html[.gz] | DIR");
        std::process::exit(2);
    };
    let path = Path::new(&arg);
    if path.is_dir() {
        let mut pages: Vec<_> = std::fs::read_dir(path)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        pages.retain(|p| p.to_string_lossy().ends_with(".html.gz"));
        pages.sort();
        for p in pages {
            let id = p
                .file_name()
                .map(|n| {
                    n.to_string_lossy()
                        .split('.')
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default();
            match read(&p) {
                Ok(html) => println!(
                    "{}",
                    serde_json::json!({"id": id, "text": corpus::kitbag_text(&html)})
                ),
                Err(e) => eprintln!("{}: {e}", p.display()),
            }
        }
        return;
    }
    match read(path) {
        Ok(html) => {
            let (title, markdown, _) = kitbag_web::html::to_markdown(&html);
            println!("title: {}\n\n{markdown}", title.unwrap_or_default());
        }
        Err(e) => {
            eprintln!("{arg}: {e}");
            std::process::exit(1);
        }
    }
}
