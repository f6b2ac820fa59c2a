//! Tool results on their way to the model and into the session (issue #42, N11). kitbag's own
//! servers cap what they return; a foreign server may answer with megabytes, and every later
//! step of the turn would send them to the model again. So each result keeps at most
//! `max_tool_result_bytes` of text — its beginning and end, after a note saying how large it
//! was and where the whole text is — and at most [`MAX_RESULT_IMAGE_BYTES`] of images. What is
//! cut is kept whole in the session's results directory, where the model can read it in parts
//! with the file tools.

use std::io::Write;
use std::path::PathBuf;

use base64::Engine;
use kitbag_llm::{Block, ResultPart};
use kitbag_shared::limits::head_tail;
use kitbag_shared::state::{OFlags, StateDir};

use super::session::Session;

/// Base64 image data one result may carry: the providers' limit for one image is about 5 MB.
pub const MAX_RESULT_IMAGE_BYTES: usize = 5 << 20;

/// The most `head_tail`'s "… [N bytes elided] …" line adds beyond the bytes it is given.
const ELISION_MARKER_MAX: usize = 48;

/// Names tried for one kept file before giving up (`ID.txt`, `ID-2.txt`, …): ids repeat
/// across turns with some models and in replays.
const MAX_NAME_TRIES: usize = 100;

/// A part of a result that was cut, for progress output.
#[derive(Debug)]
pub struct Cut {
    /// The whole part's size in bytes (text, or an image's base64 data).
    pub bytes: usize,
    /// Where the whole part is, or why it could not be kept.
    pub kept: Result<PathBuf, KeepError>,
}

/// Why a cut part could not be kept (the model is told; the turn goes on).
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error("{0:#}")]
    Dir(anyhow::Error),
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The session's results directory, opened when the first part is cut.
struct Keeper<'a> {
    session: &'a Session,
    dir: Option<StateDir>,
}

impl Keeper<'_> {
    /// Write `bytes` to a new file `STEM.EXT` (or `STEM-N.EXT`) and return its path.
    fn keep(&mut self, stem: &str, ext: &str, bytes: &[u8]) -> Result<PathBuf, KeepError> {
        let dir = match self.dir.take() {
            Some(d) => d,
            None => self.session.results_dir().map_err(KeepError::Dir)?,
        };
        let dir = self.dir.insert(dir);
        let write_err = |name: &str, source| KeepError::Write {
            path: dir.shown_path(name),
            source,
        };
        for n in 1..=MAX_NAME_TRIES {
            let name = match n {
                1 => format!("{stem}.{ext}"),
                _ => format!("{stem}-{n}.{ext}"),
            };
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
            let mut file = match dir.open_file(&name, flags) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(write_err(&name, e)),
            };
            file.write_all(bytes).map_err(|e| write_err(&name, e))?;
            return Ok(dir.shown_path(&name));
        }
        Err(write_err(
            &format!("{stem}.{ext}"),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{MAX_NAME_TRIES} files of this name exist already"),
            ),
        ))
    }
}

/// One step's results together carry at most this many results' worth of text: a model that
/// calls many tools at once would otherwise send many caps in one request (3,000 parallel
/// calls of 64 KiB each were ~190 MB).
pub const STEP_RESULTS_FACTOR: usize = 4;

/// A result's share of a crowded step never goes below this (its note and a glimpse of the
/// head and tail must fit).
pub const MIN_RESULT_TEXT: usize = 1024;

/// Bound every `tool_result` block of one step's results to `max_text` bytes of text — less
/// when the step's results together would pass `max_text × STEP_RESULTS_FACTOR` — and
/// [`MAX_RESULT_IMAGE_BYTES`] of images, keeping what is cut in the session's results
/// directory. Returns the blocks and what was cut.
pub fn bound(blocks: Vec<Block>, max_text: usize, session: &Session) -> (Vec<Block>, Vec<Cut>) {
    let mut keeper = Keeper { session, dir: None };
    let mut cuts = Vec::new();
    let sizes: Vec<usize> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult { content, .. } => Some(text_len(content)),
            _ => None,
        })
        .collect();
    let share = step_share(&sizes, max_text);
    let blocks = blocks
        .into_iter()
        .map(|b| match b {
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                let stem = file_stem(&tool_use_id);
                let content = bound_images(content, &stem, &mut keeper, &mut cuts);
                let content = bound_text(content, share, &stem, &mut keeper, &mut cuts);
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                }
            }
            other => other,
        })
        .collect();
    (blocks, cuts)
}

/// The text cap of each result in a step whose results have `sizes` bytes of text: `max_text`
/// while the step fits `max_text × STEP_RESULTS_FACTOR`; else the level at which the results
/// that pass it, cut to it, fill what the smaller ones leave (never under
/// [`MIN_RESULT_TEXT`]).
fn step_share(sizes: &[usize], max_text: usize) -> usize {
    let budget = max_text.saturating_mul(STEP_RESULTS_FACTOR);
    let mut wants: Vec<usize> = sizes.iter().map(|s| (*s).min(max_text)).collect();
    if wants.iter().sum::<usize>() <= budget {
        return max_text;
    }
    wants.sort_unstable();
    let mut left = budget;
    let mut n = wants.len();
    for w in wants {
        let even = left / n;
        if w > even {
            return even.max(MIN_RESULT_TEXT).min(max_text);
        }
        left -= w;
        n -= 1;
    }
    max_text
}

fn text_len(parts: &[ResultPart]) -> usize {
    parts
        .iter()
        .map(|p| match p {
            ResultPart::Text { text } => text.len(),
            ResultPart::Image { .. } => 0,
        })
        .sum()
}

/// Images after the first [`MAX_RESULT_IMAGE_BYTES`] become a text part naming the file that
/// holds them. First, so that those notes count as text.
fn bound_images(
    parts: Vec<ResultPart>,
    stem: &str,
    keeper: &mut Keeper<'_>,
    cuts: &mut Vec<Cut>,
) -> Vec<ResultPart> {
    let mut carried = 0;
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| match p {
            ResultPart::Image { media_type, data }
                if carried + data.len() > MAX_RESULT_IMAGE_BYTES =>
            {
                let size = data.len();
                // Kept as the image itself when the data is base64, else as the text it is.
                let (ext, bytes) = match base64::engine::general_purpose::STANDARD.decode(&data) {
                    Ok(b) => (image_ext(&media_type), b),
                    Err(_) => ("b64".to_owned(), data.into_bytes()),
                };
                let kept = keeper.keep(&format!("{stem}-image{}", i + 1), &ext, &bytes);
                let place = match &kept {
                    Ok(p) => format!("kept in {}", p.display()),
                    Err(e) => format!("it could not be kept: {e}"),
                };
                cuts.push(Cut {
                    bytes: size,
                    kept,
                });
                ResultPart::Text {
                    text: format!(
                        "[image {media_type} of {size} bytes not shown: a tool result carries at most {MAX_RESULT_IMAGE_BYTES} bytes of images; {place}]"
                    ),
                }
            }
            ResultPart::Image { media_type, data } => {
                carried += data.len();
                ResultPart::Image { media_type, data }
            }
            text => text,
        })
        .collect()
}

/// Text over `max_text` bytes in all: the whole text goes to a file, and the model gets one
/// text part in place of the first — a note, then the beginning and the end.
fn bound_text(
    parts: Vec<ResultPart>,
    max_text: usize,
    stem: &str,
    keeper: &mut Keeper<'_>,
    cuts: &mut Vec<Cut>,
) -> Vec<ResultPart> {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            ResultPart::Text { text } => Some(text.as_str()),
            ResultPart::Image { .. } => None,
        })
        .collect();
    if texts.iter().map(|t| t.len()).sum::<usize>() <= max_text {
        return parts;
    }
    let whole = texts.join("\n");
    let kept = keeper.keep(stem, "txt", whole.as_bytes());
    let mut shown = Some(cut_text(&whole, max_text, &kept));
    cuts.push(Cut {
        bytes: whole.len(),
        kept,
    });
    parts
        .into_iter()
        .filter_map(|p| match p {
            ResultPart::Text { .. } => shown.take().map(|text| ResultPart::Text { text }),
            image => Some(image),
        })
        .collect()
}

/// What the model sees of a text too long for it: what happened and where the whole is, then
/// the beginning and the end within `max_text` bytes in all.
fn cut_text(whole: &str, max_text: usize, kept: &Result<PathBuf, KeepError>) -> String {
    let place = match kept {
        Ok(p) => format!(
            "the whole result is in {} (read it in parts with file_read offset/limit, or search it with grep)",
            p.display()
        ),
        Err(e) => format!("the whole result could not be kept: {e}"),
    };
    let note = format!(
        "[tool result cut: {} bytes of text, over the {max_text} this result may carry; its beginning and end follow; {place}]\n",
        whole.len()
    );
    let room = max_text.saturating_sub(note.len() + ELISION_MARKER_MAX);
    let (shown, _) = head_tail(whole, room);
    note + &shown
}

/// A tool-use id as a file name: the model chose it.
fn file_stem(id: &str) -> String {
    let stem: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(64)
        .collect();
    if stem.is_empty() {
        "result".to_owned()
    } else {
        stem
    }
}

/// `image/png` → `png`; anything else → `img`.
fn image_ext(media_type: &str) -> String {
    let sub = media_type.rsplit('/').next().unwrap_or_default();
    if !sub.is_empty() && sub.len() <= 8 && sub.chars().all(|c| c.is_ascii_alphanumeric()) {
        sub.to_ascii_lowercase()
    } else {
        "img".to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn result(id: &str, parts: Vec<ResultPart>) -> Block {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: parts,
            is_error: false,
        }
    }

    fn text(t: &str) -> ResultPart {
        ResultPart::Text { text: t.into() }
    }

    fn parts(b: &Block) -> &[ResultPart] {
        match b {
            Block::ToolResult { content, .. } => content,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_step_shares_its_budget_and_small_results_keep_theirs() {
        // Fits: every result keeps the whole cap.
        assert_eq!(step_share(&[100, 64_000, 64_000], 65_536), 65_536);
        // Eight results at the cap: four caps' worth, shared evenly.
        assert_eq!(step_share(&[100_000; 8], 65_536), 32_768);
        // Small ones keep theirs; the big ones split what is left.
        let share = step_share(
            &[1_000, 1_000, 200_000, 200_000, 200_000, 200_000, 200_000],
            65_536,
        );
        assert_eq!(share, (4 * 65_536 - 2_000) / 5);
        // Thousands at once: a floor, so each still says what happened.
        assert_eq!(step_share(&[70_000; 3_000], 65_536), MIN_RESULT_TEXT);
    }

    /// 3,000 parallel results of 64 KiB each were ~190 MB in one request: now the step's text
    /// is bounded by its share, and each result's whole text is kept in a file.
    #[test]
    fn many_results_in_one_step_are_bounded_together() {
        let d = tempfile::tempdir().unwrap();
        let session = Session::open(d.path(), "s").unwrap();
        let big = "x".repeat(60_000);
        let blocks: Vec<Block> = (0..40)
            .map(|i| result(&format!("t{i}"), vec![text(&big)]))
            .collect();
        let (out, cuts) = bound(blocks, 65_536, &session);
        assert_eq!(cuts.len(), 40, "every result was over its share");
        let total: usize = out.iter().map(|b| text_len(parts(b))).sum();
        assert!(
            total <= 4 * 65_536 + 40 * 64,
            "the step carries {total} bytes"
        );
        assert!(cuts.iter().all(|c| c.kept.is_ok()));
    }

    /// Two text parts over the cap become one: the note naming the file, the head and the
    /// tail; the file holds both parts whole; an image between them stays; a result under
    /// the cap is untouched and nothing is written for it.
    #[test]
    fn long_text_is_cut_to_head_and_tail_and_kept_whole() {
        let d = tempfile::tempdir().unwrap();
        let session = Session::open(d.path(), "s").unwrap();
        let long: String = (0..2000).map(|i| format!("line {i:05}\n")).collect();
        let image = ResultPart::Image {
            media_type: "image/png".into(),
            data: "aGk=".into(),
        };
        let blocks = vec![
            result("toolu/../1", vec![text(&long), image.clone(), text("end")]),
            result("t2", vec![text("short")]),
        ];
        let (out, cuts) = bound(blocks, 1000, &session);
        assert_eq!(cuts.len(), 1);
        let file = d.path().join(".kitbag/sessions/s.results/toolu1.txt");
        assert_eq!(cuts[0].kept.as_ref().unwrap(), &file);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{long}\nend")
        );
        let first = parts(&out[0]);
        assert_eq!(first.len(), 2);
        assert_eq!(first[1], image);
        let ResultPart::Text { text: shown } = &first[0] else {
            panic!("{first:?}")
        };
        assert!(shown.len() <= 1000, "{}", shown.len());
        assert!(shown.starts_with("[tool result cut: 22004 bytes of text"));
        assert!(shown.contains(&file.display().to_string()));
        assert!(shown.contains("line 00000\n") && shown.ends_with("line 01999\n\nend"));
        assert_eq!(parts(&out[1]), [text("short")]);
        // The same id again (a replayed turn): a second file, the first kept.
        let (_, again) = bound(
            vec![result("toolu/../1", vec![text(&long)])],
            1000,
            &session,
        );
        let second = d.path().join(".kitbag/sessions/s.results/toolu1-2.txt");
        assert_eq!(again[0].kept.as_ref().unwrap(), &second);
        assert_eq!(std::fs::read_to_string(second).unwrap(), long);
    }

    /// Images past the result's image budget are written out as images and named in a note.
    #[test]
    fn images_over_the_budget_are_kept_in_files() {
        let d = tempfile::tempdir().unwrap();
        let session = Session::open(d.path(), "s").unwrap();
        let raw = vec![7u8; 3 << 20];
        let data = base64::engine::general_purpose::STANDARD.encode(&raw);
        let image = |data: &str| ResultPart::Image {
            media_type: "image/png".into(),
            data: data.into(),
        };
        let blocks = vec![result("t", vec![image(&data), image(&data)])];
        let (out, cuts) = bound(blocks, 1 << 16, &session);
        let got = parts(&out[0]);
        assert_eq!(got[0], image(&data));
        let ResultPart::Text { text } = &got[1] else {
            panic!("{got:?}")
        };
        let file = d.path().join(".kitbag/sessions/s.results/t-image2.png");
        assert!(text.contains(&file.display().to_string()), "{text}");
        assert_eq!(cuts[0].bytes, data.len());
        assert_eq!(std::fs::read(file).unwrap(), raw);
    }
}
