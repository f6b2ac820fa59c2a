//! What each child offers beside its tools — its prompts, resources and resource templates —
//! and the merged view the host serves from them (names, URI ownership, collisions). Plain
//! data under the hub: `registry/catalog.rs` keeps it current, `catalog.rs` answers clients from
//! it. The rules are in `catalog.rs`'s documentation.

use kitbag_shared::lock::LockExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{Prompt, Resource, ResourceTemplate};
use rmcp::service::{Peer, RoleClient};

/// How long the host waits for a child's prompt or resource list.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `resources/subscribe` to a child may take.
pub(crate) const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);
/// URIs longer than this are matched against listed URIs and schemes only, not templates.
const MAX_TEMPLATE_MATCH_URI: usize = 8 * 1024;

/// The MCP families a child declared in its handshake (beyond tools).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Families {
    pub prompts: bool,
    pub resources: bool,
    pub subscribe: bool,
    pub logging: bool,
}

impl Families {
    fn of(peer: &Peer<RoleClient>) -> Self {
        let Some(info) = peer.peer_info() else {
            return Self::default();
        };
        let caps = &info.capabilities;
        Self {
            prompts: caps.prompts.is_some(),
            resources: caps.resources.is_some(),
            subscribe: caps
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true)),
            logging: caps.logging.is_some(),
        }
    }
}

/// What one child serves besides tools, as of its last handshake and lists. Kept while the
/// child restarts, like its tools.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ChildCatalog {
    pub families: Families,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

pub(crate) async fn bounded<T>(
    what: &str,
    server: &str,
    f: impl std::future::Future<Output = Result<T, rmcp::service::ServiceError>>,
) -> Option<T> {
    match tokio::time::timeout(LIST_TIMEOUT, f).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(server = %server, "{what} failed: {e}");
            None
        }
        Err(_) => {
            tracing::warn!(server = %server, "{what}: no answer within {} s", LIST_TIMEOUT.as_secs());
            None
        }
    }
}

/// Ask a freshly connected child for everything it declared. A list it cannot give is left
/// empty (its tools still work) and logged.
pub async fn fetch(server: &str, peer: &Peer<RoleClient>) -> ChildCatalog {
    let families = Families::of(peer);
    let mut c = ChildCatalog {
        families,
        ..Default::default()
    };
    if families.prompts {
        c.prompts = bounded("prompts/list", server, peer.list_all_prompts())
            .await
            .unwrap_or_default();
    }
    if families.resources {
        let (r, t) = tokio::join!(
            bounded("resources/list", server, peer.list_all_resources()),
            bounded(
                "resources/templates/list",
                server,
                peer.list_all_resource_templates()
            ),
        );
        c.resources = r.unwrap_or_default();
        c.templates = t.unwrap_or_default();
    }
    c
}

/// One server's part in the merged view.
#[derive(Debug, Clone)]
pub struct ServerFamilies {
    pub id: u64,
    pub name: String,
    pub families: Families,
}

#[derive(Debug, Clone)]
pub struct PromptRoute {
    pub child_id: u64,
    pub original: String,
}

/// Every child's prompts and resources merged, collisions resolved by config order.
#[derive(Debug, Default)]
pub struct View {
    /// Offered prompts (prefix applied), sorted by name, with their owners.
    pub prompts: Vec<(u64, Prompt)>,
    pub prompt_routes: BTreeMap<String, PromptRoute>,
    /// Resources in config order, each URI once.
    pub resources: Vec<(u64, Resource)>,
    pub resource_owner: HashMap<String, u64>,
    /// Templates in config order, each template once.
    pub templates: Vec<(u64, ResourceTemplate)>,
    /// Servers in config order.
    pub servers: Vec<ServerFamilies>,
    /// "prompt b.x → x: already offered by a; ..." and "resources of b: ..." reports.
    pub collisions: Vec<String>,
}

impl View {
    /// The merged view of the children's catalogs, in config order: `(id, name, prefix,
    /// catalog)` of each.
    pub(crate) fn build<'a>(
        children: impl Iterator<Item = (u64, &'a str, Option<&'a str>, &'a ChildCatalog)>,
    ) -> View {
        let mut v = View::default();
        let mut prompt_owner: HashMap<String, String> = HashMap::new();
        let mut uri_owner_name: HashMap<String, String> = HashMap::new();
        let mut template_owner: HashMap<String, String> = HashMap::new();
        for (id, name, prefix, cat) in children {
            v.servers.push(ServerFamilies {
                id,
                name: name.to_owned(),
                families: cat.families,
            });
            for p in &cat.prompts {
                let offered = format!("{}{}", prefix.unwrap_or_default(), p.name);
                if let Some(first) = prompt_owner.get(&offered) {
                    v.collisions.push(format!(
                        "prompt {name}.{} → {offered}: already offered by {first}; set `prefix` for {name}",
                        p.name
                    ));
                    continue;
                }
                prompt_owner.insert(offered.clone(), name.to_owned());
                let mut offered_prompt = p.clone();
                offered_prompt.name = offered.clone();
                v.prompts.push((id, offered_prompt));
                v.prompt_routes.insert(
                    offered,
                    PromptRoute {
                        child_id: id,
                        original: p.name.to_owned(),
                    },
                );
            }
            // Resource collisions are reported once per pair of servers: two servers on one
            // store would otherwise report every URI.
            let mut taken: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in &cat.resources {
                if let Some(first) = uri_owner_name.get(&r.uri) {
                    if first != name {
                        taken.entry(first.clone()).or_default().push(r.uri.clone());
                    }
                    continue;
                }
                uri_owner_name.insert(r.uri.clone(), name.to_owned());
                v.resource_owner.insert(r.uri.clone(), id);
                v.resources.push((id, r.clone()));
            }
            for t in &cat.templates {
                if let Some(first) = template_owner.get(&t.uri_template) {
                    if first != name {
                        taken
                            .entry(first.clone())
                            .or_default()
                            .push(t.uri_template.clone());
                    }
                    continue;
                }
                template_owner.insert(t.uri_template.clone(), name.to_owned());
                v.templates.push((id, t.clone()));
            }
            for (first, uris) in taken {
                let shown: Vec<&str> = uris.iter().take(3).map(String::as_str).collect();
                v.collisions.push(format!(
                    "resources of {name}: {} already offered by {first} ({}{}); {first} answers them",
                    if uris.len() == 1 {
                        "1 URI".to_string()
                    } else {
                        format!("{} URIs", uris.len())
                    },
                    shown.join(", "),
                    if uris.len() > shown.len() { ", …" } else { "" },
                ));
            }
        }
        v.prompts.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        v
    }

    /// The owner of `uri` by the routing rules (1)–(3) in the module docs.
    pub(crate) fn route_uri(&self, uri: &str, visible: &Option<HashSet<u64>>) -> Option<u64> {
        let seen = |id: &u64| visible.as_ref().is_none_or(|v| v.contains(id));
        if let Some(id) = self.resource_owner.get(uri).filter(|id| seen(id)) {
            return Some(*id);
        }
        if uri.len() <= MAX_TEMPLATE_MATCH_URI
            && let Some((id, _)) = self
                .templates
                .iter()
                .find(|(id, t)| seen(id) && template_matches(&t.uri_template, uri))
        {
            return Some(*id);
        }
        let scheme = scheme_of(uri)?;
        self.servers
            .iter()
            .filter(|s| seen(&s.id))
            .map(|s| s.id)
            .find(|id| {
                self.resources
                    .iter()
                    .any(|(o, r)| o == id && scheme_of(&r.uri) == Some(scheme))
                    || self
                        .templates
                        .iter()
                        .any(|(o, t)| o == id && scheme_of(&t.uri_template) == Some(scheme))
            })
    }

    /// What this view says is served, for the servers in `visible`.
    pub(crate) fn families(&self, visible: &Option<HashSet<u64>>) -> Families {
        let mut f = Families::default();
        for s in &self.servers {
            if visible.as_ref().is_some_and(|v| !v.contains(&s.id)) {
                continue;
            }
            f.prompts |= s.families.prompts;
            f.resources |= s.families.resources;
            f.subscribe |= s.families.resources && s.families.subscribe;
            f.logging |= s.families.logging;
        }
        f
    }

    pub(crate) fn name_of(&self, id: u64) -> String {
        self.servers
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    /// What the list-changed fingerprint compares: prompt names and descriptions, resource
    /// URIs and templates.
    pub fn fingerprint(&self) -> (Vec<(String, Option<String>)>, Vec<String>) {
        (
            self.prompts
                .iter()
                .map(|(_, p)| (p.name.clone(), p.description.clone()))
                .collect(),
            self.resources
                .iter()
                .map(|(_, r)| r.uri.clone())
                .chain(self.templates.iter().map(|(_, t)| t.uri_template.clone()))
                .collect(),
        )
    }

    /// Whether any server offers prompts / resources at all (whom to tell about changes).
    pub fn any(&self) -> Families {
        self.families(&None)
    }
}

/// `scheme` of `scheme:rest` (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    (chars.next()?.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

#[derive(Debug, PartialEq)]
enum Part<'a> {
    Literal(&'a str),
    /// An expression's operator (`'\0'` for a simple `{var}`).
    Expr(char),
}

fn parse_template(t: &str) -> Option<Vec<Part<'_>>> {
    let mut parts = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let body = &rest[1..end];
                let op = match body.chars().next()? {
                    c @ ('+' | '#' | '.' | '/' | ';' | '?' | '&') => c,
                    _ => '\0',
                };
                parts.push(Part::Expr(op));
                rest = &rest[end + 1..];
            }
            Some(i) => {
                parts.push(Part::Literal(&rest[..i]));
                rest = &rest[i..];
            }
            None => {
                parts.push(Part::Literal(rest));
                rest = "";
            }
        }
    }
    // Backtracking is exponential in the number of expressions; real templates have few.
    (parts.iter().filter(|p| matches!(p, Part::Expr(_))).count() <= 8).then_some(parts)
}

/// What an expression with operator `op` may expand to.
fn expansion_fits(op: char, v: &str) -> bool {
    let no = |set: &[char]| !v.contains(set);
    match op {
        '\0' => !v.is_empty() && no(&['/', '?', '#', '&']),
        '+' => true,
        '#' => v.is_empty() || v.starts_with('#'),
        '.' => v.is_empty() || (v.starts_with('.') && no(&['/', '?', '#'])),
        '/' => v.is_empty() || (v.starts_with('/') && no(&['?', '#'])),
        ';' => v.is_empty() || (v.starts_with(';') && no(&['/', '?', '#'])),
        '?' => v.is_empty() || (v.starts_with('?') && no(&['#'])),
        '&' => v.is_empty() || (v.starts_with('&') && no(&['#'])),
        _ => false,
    }
}

fn parts_match(parts: &[Part<'_>], s: &str) -> bool {
    match parts.split_first() {
        None => s.is_empty(),
        Some((Part::Literal(l), rest)) => s
            .strip_prefix(l)
            .is_some_and(|tail| parts_match(rest, tail)),
        Some((Part::Expr(op), rest)) => (0..=s.len()).rev().any(|i| {
            s.is_char_boundary(i) && expansion_fits(*op, &s[..i]) && parts_match(rest, &s[i..])
        }),
    }
}

/// Whether `uri` is an expansion of the RFC 6570 template `template`.
pub fn template_matches(template: &str, uri: &str) -> bool {
    parse_template(template).is_some_and(|parts| parts_match(&parts, uri))
}

/// The host's share of prompt/resource state: the merged view and who subscribed to what.
#[derive(Default)]
pub struct Relay {
    pub(crate) view: Mutex<Option<Arc<View>>>,
    /// Subscriptions held at children for upstream subscribers: (child id, URI) → how many.
    pub(crate) held: Mutex<HashMap<(u64, String), usize>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
}

impl Relay {
    pub fn invalidate(&self) {
        *lock(&self.view) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_their_expansions_only() {
        assert!(template_matches("issues://{number}", "issues://12"));
        assert!(!template_matches("issues://{number}", "issues://"));
        assert!(!template_matches("issues://{number}", "issues://1/2"));
        assert!(!template_matches("issues://{number}", "other://12"));
        assert!(template_matches("file:///{+path}", "file:///src/main.rs"));
        assert!(template_matches(
            "db://{table}/rows{?limit,offset}",
            "db://t/rows"
        ));
        assert!(template_matches(
            "db://{table}/rows{?limit,offset}",
            "db://t/rows?limit=3"
        ));
        assert!(!template_matches(
            "db://{table}/rows{?limit}",
            "db://t/rows#x"
        ));
        assert!(template_matches("x://a{/seg}", "x://a/b/c"));
        assert!(template_matches("plain://fixed", "plain://fixed"));
        assert!(!template_matches("broken://{x", "broken://{x"));
    }

    #[test]
    fn schemes_follow_rfc_3986() {
        assert_eq!(scheme_of("issues://1"), Some("issues"));
        assert_eq!(scheme_of("git+ssh://h/r"), Some("git+ssh"));
        assert_eq!(scheme_of("1abc://x"), None);
        assert_eq!(scheme_of("no-colon"), None);
    }
}
