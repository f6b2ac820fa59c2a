//! No module cycle in any crate: the modules of a crate import from one another in one
//! direction only, so each can be read (and split out) knowing only the ones below it.
//!
//! The graph is built from the sources themselves: `use` lines (grouped ones and `pub use`
//! re-exports too) and `a::b` paths in code (from `crate`, `super`, `self` or a module a `use`
//! named), each resolved to the deepest module file it names. An import between two files
//! counts between the two children of their nearest common module that hold them — sibling
//! modules, each with everything it contains — so `http/listen.rs` importing from `server.rs`
//! while `server.rs` imports from `http.rs` is the cycle `http` ↔ `server`. A module and what
//! it contains are one unit: a parent using the child it declares with `mod` (or a child using
//! its parent) is containment, not an import. Test code (`#[cfg(test)]` items) is left out.

use kitbag_e2e::workspace::{self, crate_dirs, rust_files};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Every `.rs` file under `src`, as its path relative to `src` (with `/` separators).
fn crate_sources(src: &Path) -> Vec<String> {
    rust_files(src)
        .iter()
        .filter_map(|path| path.strip_prefix(src).ok())
        .map(|rel| {
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Reading a source file: comments and literals out, then tokens.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// The file's tokens, without comments, string and character literals, lifetimes and numbers
/// (none of which can name a module).
fn tokens(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |j: usize| chars.get(j).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_quoted(&chars, i + 1, '"');
        } else if (c == 'r' || c == 'b' || c == 'c')
            && let Some(end) = raw_or_prefixed_string(&chars, i)
        {
            i = end;
        } else if c == '\'' {
            // A character literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime / label (`'a`).
            if at(i + 1) == '\\' {
                i = skip_quoted(&chars, i + 1, '\'');
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `r#type`: a raw identifier is the identifier.
            if word == "r" && at(i) == '#' && (at(i + 1).is_alphabetic() || at(i + 1) == '_') {
                i += 1;
                continue;
            }
            out.push(Tok::Ident(word));
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Tok::Sep);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// The index just past the closing `quote` of a literal whose body starts at `i`.
fn skip_quoted(chars: &[char], mut i: usize, quote: char) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// A string with a prefix (`b"…"`, `c"…"`, `r"…"`, `r#"…"#`, `br#"…"#`) starting at `i`: the
/// index just past it, or `None` when `i` starts an identifier instead.
fn raw_or_prefixed_string(chars: &[char], i: usize) -> Option<usize> {
    // Only at the start of a word.
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') || chars.get(j) == Some(&'c') {
        j += 1;
        match chars.get(j) {
            Some('"') => return Some(skip_quoted(chars, j + 1, '"')),
            Some('\'') if chars[i] == 'b' => return Some(skip_quoted(chars, j + 1, '\'')),
            Some('r') => {}
            _ => return None,
        }
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(j)
}

// ---------------------------------------------------------------------------------------------
// What a file refers to.

/// A path the file uses, as written, and the module the code using it sits in (relative to the
/// file's own module: the inline `mod x { … }` blocks around it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    inline: Vec<String>,
    path: Vec<String>,
    /// For a `use`: the name it brings into scope (the last segment, or the one after `as`).
    alias: Option<String>,
}

/// The paths a file's code uses (`use` trees flattened, and every `a::b` path in code), leaving
/// out items under `#[cfg(test)]`.
fn references(text: &str) -> Vec<Reference> {
    let toks = tokens(text);
    let mut out = Vec::new();
    // Inline modules around the current token: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |j: usize| match toks.get(j) {
        Some(Tok::Ident(s)) => Some(s.as_str()),
        _ => None,
    };
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('#') if toks.get(i + 1) == Some(&Tok::Punct('[')) => {
                let end = matching(&toks, i + 1);
                let attr = &toks[i + 2..end.saturating_sub(1).max(i + 2)];
                i = end;
                if is_cfg_test(attr) {
                    i = skip_item(&toks, i);
                }
            }
            // `#![…]` inner attributes: nothing to read.
            Tok::Punct('#')
                if toks.get(i + 1) == Some(&Tok::Punct('!'))
                    && toks.get(i + 2) == Some(&Tok::Punct('[')) =>
            {
                i = matching(&toks, i + 2);
            }
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(i + 1)
                    && toks.get(i + 2) == Some(&Tok::Punct('{'))
                {
                    depth += 1;
                    inline.push((name.to_string(), depth));
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(w) if w == "use" => {
                let end = toks[i..]
                    .iter()
                    .position(|t| *t == Tok::Punct(';'))
                    .map_or(toks.len(), |p| i + p);
                let here: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                for (path, alias) in use_tree(&toks[i + 1..end]) {
                    out.push(Reference {
                        inline: here.clone(),
                        path,
                        alias: Some(alias),
                    });
                }
                i = end + 1;
            }
            // A path's start (`a::b`, not the `b` of it).
            Tok::Ident(w)
                if toks.get(i + 1) == Some(&Tok::Sep)
                    && i.checked_sub(1).is_none_or(|p| toks[p] != Tok::Sep) =>
            {
                let mut path = vec![w.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Sep)
                    && let Some(next) = ident(j + 1)
                {
                    path.push(next.to_string());
                    j += 2;
                }
                out.push(Reference {
                    inline: inline.iter().map(|(n, _)| n.clone()).collect(),
                    path,
                    alias: None,
                });
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// The index just past the bracket that closes the one at `open`.
fn matching(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// Whether an attribute's tokens are `cfg(test)`.
fn is_cfg_test(attr: &[Tok]) -> bool {
    attr == [
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
    ]
}

/// The index just past the item starting at `i` (after any further attributes): its `;`, or
/// the `}` closing its first block.
fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    while toks.get(i) == Some(&Tok::Punct('#')) && toks.get(i + 1) == Some(&Tok::Punct('[')) {
        i = matching(toks, i + 1);
    }
    while i < toks.len() {
        match toks[i] {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => return matching(toks, i),
            Tok::Punct('(' | '[') => i = matching(toks, i),
            _ => i += 1,
        }
    }
    i
}

/// A `use` declaration's tree (the tokens between `use` and `;`) as the paths it names, each
/// with the name it brings into scope: `a::{b, c::{d, self}, e as f, *}` gives `a::b` (b),
/// `a::c::d` (d), `a::c` (c), `a::e` (f) and `a::*` (*).
fn use_tree(toks: &[Tok]) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    tree_into(toks, &mut Vec::new(), &mut out);
    out
}

fn tree_into(toks: &[Tok], prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let depth = prefix.len();
    let mut i = 0;
    // A leading `::` (an external crate by its absolute path) changes nothing for us.
    if toks.first() == Some(&Tok::Sep) {
        i += 1;
    }
    // The name after `as`, if the tree ends with one.
    let renamed = |j: usize| match (toks.get(j), toks.get(j + 1)) {
        (Some(Tok::Ident(a)), Some(Tok::Ident(name))) if a == "as" => Some(name.clone()),
        _ => None,
    };
    loop {
        match toks.get(i) {
            Some(Tok::Ident(w)) if w == "self" && depth > 0 && prefix.len() == depth => {
                // `{self}`: the module named so far.
                let alias =
                    renamed(i + 1).unwrap_or_else(|| prefix.last().cloned().unwrap_or_default());
                out.push((prefix.clone(), alias));
                break;
            }
            Some(Tok::Ident(w)) => {
                prefix.push(w.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::Sep) {
                    i += 1;
                } else {
                    // `as name` or the end: this path is whole.
                    out.push((prefix.clone(), renamed(i).unwrap_or_else(|| w.clone())));
                    break;
                }
            }
            Some(Tok::Punct('*')) => {
                prefix.push("*".into());
                out.push((prefix.clone(), "*".into()));
                break;
            }
            Some(Tok::Punct('{')) => {
                let end = matching(toks, i).saturating_sub(1);
                let inner = &toks[i + 1..end.max(i + 1)];
                let mut level = 0usize;
                let mut start = 0;
                for (k, t) in inner.iter().enumerate() {
                    match t {
                        Tok::Punct('{') => level += 1,
                        Tok::Punct('}') => level = level.saturating_sub(1),
                        Tok::Punct(',') if level == 0 => {
                            tree_into(&inner[start..k], prefix, out);
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
                tree_into(&inner[start..], prefix, out);
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(depth);
}

// ---------------------------------------------------------------------------------------------
// The graph of one crate.

/// Which file of a crate imports from which, and the names it takes.
#[derive(Debug, Default)]
struct Graph {
    files: Vec<String>,
    /// (from, to) → names, for `from` importing from `to`.
    edges: BTreeMap<(usize, usize), BTreeSet<String>>,
}

/// The module a file under `src` is: `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`, and
/// `lib.rs` / `main.rs` the crate root. A binary under `src/bin/` is a crate of its own, whose
/// root is `bin::name`; the second value is the module `crate::` means in the file.
fn module_of(file: &str) -> (Vec<String>, Vec<String>) {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    let root: Vec<String> = if parts.first().map(String::as_str) == Some("bin") {
        parts.iter().take(2).cloned().collect()
    } else {
        Vec::new()
    };
    if parts.last().map(String::as_str) == Some("mod")
        || (parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main"))
        || (parts.len() == 3 && root.len() == 2 && parts[2] == "main")
    {
        parts.pop();
    }
    (parts, root)
}

/// The crate's graph from its files (path under `src`, text).
fn crate_graph(sources: &[(String, String)]) -> Graph {
    let files: Vec<String> = sources.iter().map(|(f, _)| f.clone()).collect();
    let mut modules: HashMap<Vec<String>, usize> = HashMap::new();
    for (n, f) in files.iter().enumerate() {
        let (module, _) = module_of(f);
        // `lib.rs` and `main.rs` are both the root; the library is what `crate::` names in it.
        if f != "main.rs" || !modules.contains_key(&module) {
            modules.insert(module, n);
        }
    }
    let mut graph = Graph {
        files,
        ..Graph::default()
    };
    for (from, (file, text)) in sources.iter().enumerate() {
        let (own, root) = module_of(file);
        let refs = references(text);
        let scope = |r: &Reference| {
            let mut here = own.clone();
            here.extend(r.inline.iter().cloned());
            here
        };
        // Modules the file's `use` lines bring into scope by name (`use super::control;`), so
        // that `control::settle()` in code is an import of `settle`.
        let mut aliases: HashMap<String, Vec<String>> = HashMap::new();
        for r in &refs {
            if let Some(alias) = &r.alias
                && let Some(target) = resolve(&scope(r), &root, &r.path, &modules, &HashMap::new())
                && target.name.is_none()
            {
                aliases.insert(alias.clone(), target.module);
            }
        }
        for r in &refs {
            let Some(target) = resolve(&scope(r), &root, &r.path, &modules, &aliases) else {
                continue;
            };
            if target.file != from {
                let name = target.name.unwrap_or_else(|| "self".into());
                graph
                    .edges
                    .entry((from, target.file))
                    .or_default()
                    .insert(name);
            }
        }
    }
    // A module imported by name and then used: its items say more than `self`.
    for names in graph.edges.values_mut() {
        if names.len() > 1 {
            names.remove("self");
        }
    }
    graph
}

/// Where a path leads: the deepest module file it names, and the item it takes there (none
/// when the path names the module itself).
struct Target {
    file: usize,
    module: Vec<String>,
    name: Option<String>,
}

/// The file a path used in module `here` imports from, if it is one of the crate's.
fn resolve(
    here: &[String],
    root: &[String],
    path: &[String],
    modules: &HashMap<Vec<String>, usize>,
    aliases: &HashMap<String, Vec<String>>,
) -> Option<Target> {
    let mut base: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = root.to_vec();
            rest = &path[1..];
        }
        Some("self") => {
            base = here.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = here.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) => {
            if let Some(module) = aliases.get(first) {
                base = module.clone();
                rest = &path[1..];
            } else {
                // A path relative to this module: only its own submodules are ours.
                let mut child = here.to_vec();
                child.push(first.to_string());
                if !modules.contains_key(&child) {
                    return None;
                }
                base = here.to_vec();
            }
        }
        None => return None,
    }
    // The deepest existing module file along base + rest.
    let mut full = base.clone();
    full.extend(rest.iter().cloned());
    let mut best = None;
    // Nothing above the crate's root is ours (a binary under `src/bin/` does not see the library).
    for len in root.len()..=full.len() {
        if let Some(&f) = modules.get(&full[..len]) {
            best = Some((f, len));
        }
        if len >= base.len() && len < full.len() && !modules.contains_key(&full[..=len]) {
            // Past the base, the first segment that is no module is an item: stop there.
            break;
        }
    }
    let (file, len) = best?;
    Some(Target {
        file,
        module: full[..len].to_vec(),
        name: full.get(len).cloned(),
    })
}

/// A cycle: sibling modules (children of one module) each of which, with what it contains,
/// imports from the next.
#[derive(Debug)]
struct Cycle {
    modules: Vec<Vec<String>>,
    /// The file-to-file imports that tie them.
    ties: Vec<(usize, usize)>,
}

/// The cycles among sibling modules. An import between two files counts between the two
/// children of their nearest common module that hold them; a file's import of a module that
/// contains it (a child using its parent) or of one it contains (a parent using what it
/// declares with `mod`) is containment, and no cycle goes through it.
fn cycles(graph: &Graph) -> Vec<Cycle> {
    let mut nodes: Vec<Vec<String>> = Vec::new();
    let mut index: HashMap<Vec<String>, usize> = HashMap::new();
    let mut ties: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    for &(a, b) in graph.edges.keys() {
        let (ma, _) = module_of(&graph.files[a]);
        let (mb, _) = module_of(&graph.files[b]);
        let common = ma.iter().zip(&mb).take_while(|(x, y)| x == y).count();
        if common == ma.len() || common == mb.len() {
            continue;
        }
        let mut id = |m: &[String]| {
            *index.entry(m.to_vec()).or_insert_with(|| {
                nodes.push(m.to_vec());
                nodes.len() - 1
            })
        };
        let (sa, sb) = (id(&ma[..=common]), id(&mb[..=common]));
        ties.entry((sa, sb)).or_default().push((a, b));
    }
    let mut next = vec![Vec::new(); nodes.len()];
    for &(a, b) in ties.keys() {
        next[a].push(b);
    }
    let mut found: Vec<Cycle> = strongly_connected(&next)
        .into_iter()
        .map(|component| {
            let mut modules: Vec<Vec<String>> =
                component.iter().map(|&n| nodes[n].clone()).collect();
            modules.sort();
            let ties = ties
                .iter()
                .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                .flat_map(|(_, t)| t.iter().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            Cycle { modules, ties }
        })
        .collect();
    found.sort_by(|x, y| x.modules.cmp(&y.modules));
    found
}

/// Tarjan's strongly connected components with more than one node.
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk<'_>, v: usize) {
        w.index[v] = Some(w.counter);
        w.low[v] = w.counter;
        w.counter += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.next[v].iter() {
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(iu) if w.on_stack[u] => w.low[v] = w.low[v].min(iu),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                component.push(u);
                if u == v {
                    break;
                }
            }
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let n = next.len();
    let mut walk = Walk {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            visit(&mut walk, v);
        }
    }
    walk.found
}

/// A cycle as text: its modules, then each import that ties them with the names it takes.
fn describe(graph: &Graph, prefix: &str, cycle: &Cycle) -> String {
    let mut out = format!(
        "cycle in {}: {}",
        prefix.trim_end_matches('/'),
        cycle
            .modules
            .iter()
            .map(|m| m.join("::"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for &(a, b) in &cycle.ties {
        let names: Vec<&str> = graph.edges[&(a, b)].iter().map(String::as_str).collect();
        out.push_str(&format!(
            "\n    {prefix}{} -> {prefix}{}: {}",
            graph.files[a],
            graph.files[b],
            names.join(", ")
        ));
    }
    out
}

/// Every cycle of every crate, as (the files it ties, relative to the workspace root, its
/// description).
fn workspace_cycles(root: &Path) -> (usize, Vec<(Vec<String>, String)>) {
    let crates = crate_dirs(root);
    let mut found = Vec::new();
    for dir in &crates {
        let src = dir.join("src");
        let sources: Vec<(String, String)> = crate_sources(&src)
            .into_iter()
            .map(|f| {
                let text = std::fs::read_to_string(src.join(&f)).expect("a source file reads");
                (f, text)
            })
            .collect();
        let graph = crate_graph(&sources);
        let rel = src.strip_prefix(root).unwrap_or(&src);
        let prefix = format!("{}/", rel.to_string_lossy().replace('\\', "/"));
        for cycle in cycles(&graph) {
            let files = cycle
                .ties
                .iter()
                .flat_map(|&(a, b)| [a, b])
                .map(|f| format!("{prefix}{}", graph.files[f]))
                .collect();
            found.push((files, describe(&graph, &prefix, &cycle)));
        }
    }
    (crates.len(), found)
}

#[test]
fn no_module_cycle_in_any_crate() {
    let root = workspace::root();
    let (crates, found) = workspace_cycles(root);
    assert!(
        crates >= 10,
        "the walk found only {crates} crates under {}",
        root.display()
    );
    let offenders: Vec<String> = found.into_iter().map(|(_, text)| text).collect();
    assert!(
        offenders.is_empty(),
        "modules that import from one another (move what ties them into a module below both):\n{}",
        offenders.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The checker itself.

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect();
    crate_graph(&sources)
}

fn named_cycles(graph: &Graph) -> Vec<Vec<String>> {
    cycles(graph)
        .into_iter()
        .map(|c| c.modules.iter().map(|m| m.join("::")).collect())
        .collect()
}

/// The names `a` takes from `b`.
fn names(graph: &Graph, a: &str, b: &str) -> Vec<String> {
    let index = |f: &str| graph.files.iter().position(|x| x == f).expect("file");
    graph
        .edges
        .get(&(index(a), index(b)))
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn a_cycle_between_two_files_is_found_and_named() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::b::Beta;\npub struct Alpha;\n"),
        (
            "b.rs",
            "pub struct Beta;\npub fn f() { crate::a::helper(); }\n",
        ),
        ("c.rs", "use crate::a::Alpha;\n"),
    ]);
    assert_eq!(named_cycles(&graph), [["a", "b"]]);
    let text = describe(&graph, "x/src/", &cycles(&graph)[0]);
    assert!(text.contains("x/src/a.rs -> x/src/b.rs: Beta"), "{text}");
    assert!(text.contains("x/src/b.rs -> x/src/a.rs: helper"), "{text}");
    assert!(!text.contains("c.rs"), "{text}");
}

#[test]
fn a_parent_and_its_own_children_are_no_cycle() {
    // The parent declares and re-exports its child, the child uses the parent: containment.
    let graph = graph_of(&[
        ("lib.rs", "pub mod debug;\n"),
        (
            "debug/mod.rs",
            "mod session;\npub use session::Session;\npub struct Shared;\n\
             pub fn run() { session::launch() }\n",
        ),
        (
            "debug/session.rs",
            "use super::Shared;\npub struct Session;\n",
        ),
    ]);
    assert_eq!(
        names(&graph, "debug/session.rs", "debug/mod.rs"),
        ["Shared"]
    );
    assert_eq!(
        names(&graph, "debug/mod.rs", "debug/session.rs"),
        ["Session", "launch"]
    );
    assert!(named_cycles(&graph).is_empty());
}

#[test]
fn a_cycle_through_a_child_is_one_between_its_parent_and_the_other_module() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod http;\npub mod server;\n"),
        (
            "http.rs",
            "mod listen;\npub fn serve() { listen::accept() }\n",
        ),
        (
            "http/listen.rs",
            "pub fn accept() { crate::server::shutdown_signal() }\n",
        ),
        (
            "server.rs",
            "use crate::http::serve;\npub fn shutdown_signal() {}\n",
        ),
    ]);
    assert_eq!(named_cycles(&graph), [["http", "server"]]);
    let text = describe(&graph, "", &cycles(&graph)[0]);
    assert!(
        text.contains("http/listen.rs -> server.rs: shutdown_signal"),
        "{text}"
    );
    assert!(text.contains("server.rs -> http.rs: serve"), "{text}");
}

#[test]
fn grouped_uses_resolve_to_the_deepest_module_file() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a/mod.rs", "pub mod inner;\n"),
        ("a/inner.rs", "use crate::b::{self, Beta as B};\n"),
        (
            "b.rs",
            "use crate::{a::{inner::{Deep, deeper::X}, Top}, b};\nuse super::*;\n",
        ),
    ]);
    assert_eq!(names(&graph, "b.rs", "a/inner.rs"), ["Deep", "deeper"]);
    assert_eq!(names(&graph, "b.rs", "a/mod.rs"), ["Top"]);
    assert_eq!(names(&graph, "b.rs", "lib.rs"), ["*"]);
    assert_eq!(names(&graph, "a/inner.rs", "b.rs"), ["Beta"]);
    assert_eq!(named_cycles(&graph), [["a", "b"]]);
}

#[test]
fn a_module_imported_by_name_is_named_by_what_the_code_takes() {
    let graph = graph_of(&[
        ("lib.rs", "mod debug;\n"),
        ("debug/mod.rs", "mod control;\nmod session;\n"),
        (
            "debug/session.rs",
            "use super::control;\nuse super::inspect as look;\n\
             fn f() { control::settle(); look::thread_list(); }\n",
        ),
        ("debug/control.rs", ""),
        ("debug/inspect.rs", ""),
    ]);
    assert_eq!(
        names(&graph, "debug/session.rs", "debug/control.rs"),
        ["settle"]
    );
    assert_eq!(
        names(&graph, "debug/session.rs", "debug/inspect.rs"),
        ["thread_list"]
    );
    let only_imported = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b;\n"),
        ("b.rs", ""),
    ]);
    assert_eq!(names(&only_imported, "a.rs", "b.rs"), ["self"]);
}

#[test]
fn tests_comments_and_strings_are_not_imports() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "// use crate::b::X;\n/// See [`crate::b::Y`].\nfn f() { let s = \"crate::b::Z\"; \
             let r = r#\"use crate::b::W;\"#; let c = '\"'; }\n\
             #[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n    use crate::b::V;\n}\n\
             #[cfg(test)]\nuse crate::b::U;\n",
        ),
        ("b.rs", "use crate::a::f;\n"),
    ]);
    assert!(named_cycles(&graph).is_empty(), "{:?}", graph.edges);
    assert_eq!(graph.edges.len(), 1);
}

#[test]
fn super_inside_an_inline_module_is_the_file_itself() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "mod inner {\n    use super::Local;\n}\nstruct Local;\n",
        ),
        ("b.rs", "use crate::a::Local;\n"),
    ]);
    assert!(graph.edges.keys().all(|&(from, _)| from != 1));
}
