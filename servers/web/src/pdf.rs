//! `application/pdf` bodies as text: each page's text layer after a `--- page N ---` marker,
//! the first [`MAX_PAGES`] pages (the rest counted, not dropped silently). What cannot become
//! text says why instead: a body cut at the size cap, an encrypted file, a file with no text
//! layer (scanned images), a broken file.

/// Pages turned into text at most.
pub const MAX_PAGES: usize = 300;
/// Bytes any one page's streams may inflate to: a small compressed stream cannot become
/// gigabytes.
const MAX_PAGE_INFLATED: usize = 64 * 1024 * 1024;

/// A PDF's text.
#[derive(Debug, Clone, PartialEq)]
pub struct PdfText {
    pub text: String,
    /// Pages in the document.
    pub pages: usize,
    /// Pages in `text` (the first ones).
    pub shown: usize,
}

/// Why a PDF gives no text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PdfError {
    #[error(
        "the PDF is larger than the body limit and was cut, so it cannot be read; raise the server's --max-body-bytes"
    )]
    Cut,
    #[error("the PDF is encrypted; its text cannot be read without the password")]
    Encrypted,
    #[error("the PDF has no text layer (scanned pages are images); it needs OCR")]
    ImageOnly,
    #[error("not a readable PDF: {0}")]
    Broken(String),
}

impl PdfError {
    /// A word for the error's `detail.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            PdfError::Cut => "cut",
            PdfError::Encrypted => "encrypted",
            PdfError::ImageOnly => "image_only",
            PdfError::Broken(_) => "broken",
        }
    }
}

/// The text of the PDF `body`.
pub fn to_text(body: &[u8], body_truncated: bool) -> Result<PdfText, PdfError> {
    if body_truncated {
        return Err(PdfError::Cut);
    }
    let doc = lopdf::Document::load_mem(body).map_err(|e| match e {
        lopdf::Error::Decryption(_) | lopdf::Error::AlreadyEncrypted => PdfError::Encrypted,
        other => PdfError::Broken(other.to_string()),
    })?;
    if doc.is_encrypted() {
        return Err(PdfError::Encrypted);
    }
    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
    let mut text = String::new();
    let mut any = false;
    for &n in numbers.iter().take(MAX_PAGES) {
        let page = doc
            .extract_text_with_limit(&[n], MAX_PAGE_INFLATED)
            .unwrap_or_default();
        let page = page.trim();
        any |= !page.is_empty();
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!("--- page {n} ---\n{page}"));
    }
    if !any && !numbers.is_empty() {
        return Err(PdfError::ImageOnly);
    }
    let shown = numbers.len().min(MAX_PAGES);
    if numbers.len() > shown {
        text.push_str(&format!(
            "\n\n[{} more pages not converted: the first {MAX_PAGES} are]",
            numbers.len() - shown
        ));
    }
    Ok(PdfText {
        text,
        pages: numbers.len(),
        shown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_and_cut_bodies_say_why() {
        assert_eq!(to_text(b"%PDF-1.4\n", true), Err(PdfError::Cut));
        assert!(matches!(
            to_text(b"not a pdf at all", false),
            Err(PdfError::Broken(_))
        ));
        assert!(matches!(to_text(b"", false), Err(PdfError::Broken(_))));
    }
}
