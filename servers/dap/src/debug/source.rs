//! Sources as the model sees them: an adapter's path shown root-relative, a file's text read
//! beneath the root, and a frame's place with the text of its line. Shared by the session,
//! control, inspection, breakpoint and memory actions.

use std::path::{Path, PathBuf};

use kitbag_shared::{Access, PathPolicy};
use serde_json::Value;

use super::cap;
use super::result::Location;

/// A source file's text, read through a descriptor opened beneath the root without following
/// a link: a directory swapped for a link after the path was resolved (or after the adapter
/// named it) is refused, never followed outside.
pub fn read_source(policy: &PathPolicy, abs: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    policy.open_real_read(abs)?.read_to_string(&mut text)?;
    Ok(text)
}

/// An adapter's source path as the model should see it: root-relative inside the root.
pub fn shown_path(policy: &PathPolicy, path: Option<&str>) -> String {
    path.map(|s| policy.display(&PathBuf::from(s)))
        .unwrap_or_default()
}

/// A frame's place: path as the model sees it, line, column, the line's text, function.
pub fn location_of(policy: &PathPolicy, frame: &Value) -> Location {
    let line = frame["line"].as_i64().unwrap_or(0);
    let raw = frame["source"]["path"].as_str();
    let preview = raw
        .filter(|p| policy.allows(Path::new(p), Access::Read))
        .and_then(|p| read_source(policy, Path::new(p)).ok())
        .and_then(|t| {
            t.lines()
                .nth((line.max(1) - 1) as usize)
                .map(|l| l.trim_end().to_string())
        })
        .unwrap_or_default();
    Location {
        path: shown_path(policy, raw),
        line,
        column: frame["column"].as_i64().unwrap_or(0),
        source_preview: cap(&preview),
        function: cap(frame["name"].as_str().unwrap_or("")),
    }
}
