//! RSS (0.9x, 1.0 RDF, 2.0) and Atom feeds as a list of entries — title, link, date and a
//! plain-text summary each — instead of raw XML.

use quick_xml::events::Event;
use quick_xml::reader::Reader;

/// Characters of a summary kept.
const SUMMARY_CHARS: usize = 400;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    pub title: String,
    pub link: String,
    pub date: String,
    pub summary: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feed {
    pub title: String,
    pub entries: Vec<Entry>,
}

/// Which part of the document the reader is in.
#[derive(PartialEq)]
enum At {
    Channel,
    Entry,
}

/// The feed in `xml`, or `None` when the document is not one (its root is not `rss`,
/// `feed` or `RDF`) or is not well-formed.
pub fn parse(xml: &str) -> Option<Feed> {
    let mut reader = Reader::from_str(xml);
    let mut feed = Feed::default();
    let mut root_seen = false;
    let mut at = At::Channel;
    let mut entry = Entry::default();
    // The element whose text is being read (by local name), its text so far, and how deep
    // inside it the reader is (markup inside a summary).
    let mut field: Option<(String, String)> = None;
    let mut depth_in_field = 0usize;
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) | Event::Empty(e) if !root_seen => {
                if !matches!(local(e.name().as_ref()), "rss" | "feed" | "RDF") {
                    return None;
                }
                root_seen = true;
            }
            Event::Start(e) => {
                if field.is_some() {
                    depth_in_field += 1;
                    continue;
                }
                let name = local(e.name().as_ref()).to_string();
                match name.as_str() {
                    "item" | "entry" => {
                        at = At::Entry;
                        entry = Entry::default();
                    }
                    "link" if at == At::Entry && attr(&e, "href").is_some() => {
                        link_href(&mut entry, &e);
                        field = Some((name, String::new()));
                    }
                    "title" | "link" | "pubDate" | "published" | "updated" | "date"
                    | "description" | "summary" | "content" | "encoded" => {
                        field = Some((name, String::new()));
                    }
                    _ => {}
                }
            }
            Event::Empty(e) if at == At::Entry && local(e.name().as_ref()) == "link" => {
                link_href(&mut entry, &e);
            }
            Event::Text(t) => {
                if let Some((_, buf)) = &mut field {
                    buf.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some((_, buf)) = &mut field {
                    buf.push_str(&t.into_inner());
                }
            }
            Event::GeneralRef(r) => {
                if let Some((_, buf)) = &mut field {
                    let reference = format!("&{};", r.xml10_content());
                    match quick_xml::escape::unescape(&reference) {
                        Ok(c) => buf.push_str(&c),
                        Err(_) => buf.push_str(&reference),
                    }
                }
            }
            Event::End(e) => {
                if field.is_some() {
                    if depth_in_field > 0 {
                        depth_in_field -= 1;
                    } else if let Some((name, buf)) = field.take() {
                        take(&mut feed, &mut entry, &at, &name, &buf);
                    }
                    continue;
                }
                if matches!(local(e.name().as_ref()), "item" | "entry") && at == At::Entry {
                    feed.entries.push(std::mem::take(&mut entry));
                    at = At::Channel;
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    root_seen.then_some(feed)
}

/// An Atom `<link href>`: the first one, or the `alternate` one.
fn link_href(entry: &mut Entry, e: &quick_xml::events::BytesStart<'_>) {
    if let Some(href) = attr(e, "href")
        && (entry.link.is_empty() || attr(e, "rel").as_deref() == Some("alternate"))
    {
        entry.link = href;
    }
}

/// Keep the text of `field` where it belongs.
fn take(feed: &mut Feed, entry: &mut Entry, at: &At, field: &str, text: &str) {
    match (at, field) {
        (At::Channel, "title") if feed.title.is_empty() => feed.title = text.trim().to_string(),
        (At::Entry, "title") => entry.title = text.trim().to_string(),
        (At::Entry, "link") if entry.link.is_empty() => entry.link = text.trim().to_string(),
        (At::Entry, "pubDate" | "published" | "updated" | "date") if entry.date.is_empty() => {
            entry.date = text.trim().to_string()
        }
        (At::Entry, "description" | "summary" | "content" | "encoded")
            if entry.summary.is_empty() =>
        {
            entry.summary = plain(text)
        }
        _ => {}
    }
}

/// A summary's HTML as plain text: tags dropped, entities decoded, whitespace collapsed, cut.
fn plain(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = quick_xml::escape::unescape(&out)
        .map(|c| c.into_owned())
        .unwrap_or(out);
    let words: Vec<&str> = decoded.split_whitespace().collect();
    let joined = words.join(" ");
    match joined.char_indices().nth(SUMMARY_CHARS) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

/// A name without its namespace prefix.
fn local(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or("")
}

fn attr(e: &quick_xml::events::BytesStart<'_>, key: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .and_then(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// The feed as markdown: its title, then one block per entry.
pub fn to_text(feed: &Feed) -> String {
    let mut out = String::new();
    if !feed.title.is_empty() {
        out.push_str(&format!("# {}\n\n", feed.title));
    }
    for (i, e) in feed.entries.iter().enumerate() {
        let title = if e.title.is_empty() {
            "(untitled)"
        } else {
            &e.title
        };
        out.push_str(&format!("{}. **{title}**", i + 1));
        if !e.date.is_empty() {
            out.push_str(&format!(" — {}", e.date));
        }
        out.push('\n');
        if !e.link.is_empty() {
            out.push_str(&format!("   {}\n", e.link));
        }
        if !e.summary.is_empty() {
            out.push_str(&format!("   {}\n", e.summary));
        }
        out.push('\n');
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_two_entries() {
        let xml = r#"<?xml version="1.0"?><rss version="2.0"><channel><title>Kit &amp; Bag</title>
            <item><title>First</title><link>https://example.org/1</link><pubDate>Mon, 02 Nov 2026 10:00:00 GMT</pubDate>
            <description><![CDATA[<p>Hello <b>world</b> &amp; more</p>]]></description></item>
            <item><title>Second</title><link>https://example.org/2</link><description>Plain</description></item>
            </channel></rss>"#;
        let f = parse(xml).expect("feed");
        assert_eq!(f.title, "Kit & Bag");
        assert_eq!(f.entries.len(), 2);
        assert_eq!(f.entries[0].link, "https://example.org/1");
        assert_eq!(f.entries[0].summary, "Hello world & more");
        assert_eq!(f.entries[0].date, "Mon, 02 Nov 2026 10:00:00 GMT");
        let text = to_text(&f);
        assert!(
            text.starts_with("# Kit & Bag\n\n1. **First** — Mon"),
            "{text}"
        );
    }

    #[test]
    fn atom_links_by_href_and_rel() {
        let xml = r#"<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Atom</title>
            <entry><title>A</title><link rel="self" href="https://x/self"/><link rel="alternate" href="https://x/a"/>
            <updated>2026-11-01T00:00:00Z</updated><summary type="html">&lt;i&gt;sum&lt;/i&gt;</summary></entry></feed>"#;
        let f = parse(xml).expect("feed");
        assert_eq!(f.title, "Atom");
        assert_eq!(f.entries[0].link, "https://x/a");
        assert_eq!(f.entries[0].date, "2026-11-01T00:00:00Z");
        assert_eq!(f.entries[0].summary, "sum");
    }

    #[test]
    fn other_xml_and_broken_xml_are_not_feeds() {
        assert_eq!(parse("<html><body>x</body></html>"), None);
        assert_eq!(parse("<rss><channel><item><title>x</rss>"), None);
        assert_eq!(parse("plain text"), None);
    }
}
