//! Source maps (version 3) for TypeScript built to JavaScript: where a source line runs in the
//! generated script (to bind a breakpoint) and which source line a generated place is (to
//! show a stop). Lines and columns are 0-based here, as in the maps and in CDP.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

/// The largest map file read.
const MAX_MAP_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Mapping {
    gen_line: i64,
    gen_col: i64,
    source: usize,
    orig_line: i64,
    orig_col: i64,
}

#[derive(Debug)]
pub struct SourceMap {
    sources: Vec<Option<PathBuf>>,
    /// Sorted by generated position.
    mappings: Vec<Mapping>,
}

/// A place in an original source.
#[derive(Debug, PartialEq)]
pub struct Original<'a> {
    pub path: &'a Path,
    pub line: i64,
    pub column: i64,
}

#[derive(Deserialize)]
struct Raw {
    version: u32,
    #[serde(default, rename = "sourceRoot")]
    source_root: Option<String>,
    sources: Vec<Option<String>>,
    mappings: String,
}

/// Read the map a script names (a `data:` URL or a path relative to the script), or None.
pub fn load(source_map_url: &str, script: &Path) -> Option<SourceMap> {
    let base = script.parent()?;
    let (text, map_dir) = if let Some(data) = source_map_url.strip_prefix("data:") {
        let (meta, payload) = data.split_once(',')?;
        let text = if meta.ends_with(";base64") {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(payload.trim())
                .ok()?;
            String::from_utf8(bytes).ok()?
        } else {
            url::form_urlencoded::parse(payload.as_bytes())
                .map(|(k, v)| format!("{k}{v}"))
                .collect()
        };
        (text, base.to_path_buf())
    } else {
        let path = match url::Url::parse(source_map_url) {
            Ok(u) if u.scheme() == "file" => u.to_file_path().ok()?,
            Ok(_) => return None,
            Err(_) => base.join(source_map_url),
        };
        if std::fs::metadata(&path).ok()?.len() > MAX_MAP_BYTES {
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        (text, path.parent()?.to_path_buf())
    };
    let mut map = parse(&text, &map_dir)?;
    // Bun names its own TypeScript source root-relative with a leading slash ("/src/a.ts"
    // for the script /project/src/a.ts): a source that is not there but ends the script's
    // path is the script itself.
    let script_text = script.to_string_lossy();
    for s in map.sources.iter_mut().flatten() {
        if !s.exists() && script_text.ends_with(&*s.to_string_lossy()) {
            *s = script.to_path_buf();
        }
    }
    Some(map)
}

/// Parse a map whose relative sources are relative to `map_dir`.
pub fn parse(text: &str, map_dir: &Path) -> Option<SourceMap> {
    let raw: Raw = serde_json::from_str(text).ok()?;
    if raw.version != 3 {
        return None;
    }
    let root = raw.source_root.unwrap_or_default();
    let sources = raw
        .sources
        .iter()
        .map(|s| {
            let s = s.as_deref()?;
            let joined = if root.is_empty() {
                s.to_string()
            } else {
                format!("{}/{s}", root.trim_end_matches('/'))
            };
            match url::Url::parse(&joined) {
                Ok(u) if u.scheme() == "file" => u.to_file_path().ok(),
                Ok(_) => None,
                Err(_) => Some(normalize(&map_dir.join(joined))),
            }
        })
        .collect();
    let mut mappings = decode(&raw.mappings)?;
    mappings.sort();
    Some(SourceMap { sources, mappings })
}

/// `a/b/../c` → `a/c` without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn vlq_digit(c: u8) -> Option<i64> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as i64)
}

/// The base64 VLQ numbers of one segment.
fn segment(s: &str) -> Option<Vec<i64>> {
    let mut out = Vec::new();
    let (mut value, mut shift) = (0i64, 0u32);
    for &c in s.as_bytes() {
        let d = vlq_digit(c)?;
        value += (d & 31) << shift;
        if d & 32 != 0 {
            shift += 5;
            if shift > 60 {
                return None;
            }
        } else {
            let n = value >> 1;
            out.push(if value & 1 == 1 { -n } else { n });
            value = 0;
            shift = 0;
        }
    }
    Some(out)
}

fn decode(mappings: &str) -> Option<Vec<Mapping>> {
    let mut out = Vec::new();
    let (mut source, mut orig_line, mut orig_col) = (0i64, 0i64, 0i64);
    for (gen_line, line) in mappings.split(';').enumerate() {
        let mut gen_col = 0i64;
        for seg in line.split(',').filter(|s| !s.is_empty()) {
            let f = segment(seg)?;
            gen_col += *f.first()?;
            if f.len() >= 4 {
                source += f[1];
                orig_line += f[2];
                orig_col += f[3];
                out.push(Mapping {
                    gen_line: gen_line as i64,
                    gen_col,
                    source: usize::try_from(source).ok()?,
                    orig_line,
                    orig_col,
                });
            }
        }
    }
    Some(out)
}

impl SourceMap {
    fn index_of(&self, path: &Path) -> Option<usize> {
        self.sources.iter().position(|s| s.as_deref() == Some(path))
    }

    /// Whether `path` is one of the map's sources.
    pub fn covers(&self, path: &Path) -> bool {
        self.index_of(path).is_some()
    }

    pub fn sources(&self) -> Vec<&Path> {
        self.sources
            .iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect()
    }

    /// The first generated place of source line `line` (or of the next mapped line, up to 20
    /// further: a blank or comment line has no code of its own).
    pub fn generated(&self, path: &Path, line: i64) -> Option<(i64, i64)> {
        let src = self.index_of(path)?;
        (line..line + 20).find_map(|l| {
            self.mappings
                .iter()
                .filter(|m| m.source == src && m.orig_line == l)
                .min_by_key(|m| (m.gen_line, m.gen_col))
                .map(|m| (m.gen_line, m.gen_col))
        })
    }

    /// The source place of a generated one: the last mapping at or before it on its line.
    pub fn original(&self, line: i64, column: i64) -> Option<Original<'_>> {
        let after = self
            .mappings
            .partition_point(|m| (m.gen_line, m.gen_col) <= (line, column));
        let m = self.mappings[..after]
            .last()
            .filter(|m| m.gen_line == line)
            .or_else(|| self.mappings.get(after).filter(|m| m.gen_line == line))?;
        Some(Original {
            path: self.sources.get(m.source)?.as_deref()?,
            line: m.orig_line,
            column: m.orig_col,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn vlq_segments_decode() {
        assert_eq!(segment("AAAA").unwrap(), [0, 0, 0, 0]);
        assert_eq!(segment("AACA").unwrap(), [0, 0, 1, 0]);
        assert_eq!(segment("gBAAD").unwrap(), [16, 0, 0, -1]);
        assert_eq!(segment("2HAAC").unwrap(), [123, 0, 0, 1]);
        assert!(segment("A*").is_none());
    }

    /// A map tsc writes for `src/app.ts` → `dist/app.js`: the generated script lost the
    /// type-only first line, so generated line N is source line N+1.
    #[test]
    fn maps_both_ways() {
        let map = parse(
            r#"{"version":3,"file":"app.js","sourceRoot":"","sources":["../src/app.ts"],"names":[],"mappings":"AACA;AACA,IAAI;AACA"}"#,
            Path::new("/p/dist"),
        )
        .unwrap();
        let src = Path::new("/p/src/app.ts");
        assert!(map.covers(src));
        assert!(!map.covers(Path::new("/p/src/other.ts")));
        assert_eq!(map.generated(src, 1), Some((0, 0)));
        assert_eq!(map.generated(src, 2), Some((1, 0)));
        // Line 0 (the type) has no code: the next mapped line is used.
        assert_eq!(map.generated(src, 0), Some((0, 0)));
        let o = map.original(1, 6).unwrap();
        assert_eq!((o.path, o.line, o.column), (src, 2, 4));
        assert_eq!(map.original(2, 0).unwrap().line, 3);
        assert!(map.original(9, 0).is_none());
        assert!(
            parse(
                "{\"version\":2,\"sources\":[],\"mappings\":\"\"}",
                Path::new("/")
            )
            .is_none()
        );
    }

    #[test]
    fn inline_maps_load() {
        let json = r#"{"version":3,"sources":["a.ts"],"mappings":"AAAA"}"#;
        let url = format!(
            "data:application/json;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(json)
        );
        let map = load(&url, Path::new("/p/a.js")).unwrap();
        assert!(map.covers(Path::new("/p/a.ts")));
    }
}
