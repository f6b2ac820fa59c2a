//! Objects, resourceVersions and the watch history — the fixture's etcd.
//!
//! One cluster-wide resourceVersion counter (as etcd's revision): every write takes the next
//! value, stores it in the object's `metadata.resourceVersion` and appends an event to a
//! bounded history. Watches replay the history after their start point and then follow the
//! broadcast of new events; a start point older than the history gets `410 Expired`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::resources::Resource;

/// A Kubernetes API error, answered as a `metav1.Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn not_found(r: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", r.qualified()),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }
    pub fn exists(r: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", r.qualified()),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }
    pub fn conflict(r: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                r.qualified()
            ),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }
    /// 422 with one cause per `(field, cause reason, message)`.
    pub fn invalid(r: &Resource, name: &str, causes: &[(String, &str, String)]) -> Self {
        let list: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        let summary = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, reason, m)| json!({"reason": reason, "message": m, "field": f}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {summary}", r.qualified_kind()),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.kind, "causes": causes}))
    }

    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as the history and watches see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub plural: String,
    pub ns: String,
    pub kind: EventType,
    pub object: Value,
    /// The object before a modification (selectors: a watch sees an object leave or enter).
    pub old: Option<Value>,
}

/// (plural, namespace — empty for cluster-scoped —, name).
pub type Key = (String, String, String);

pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    pub history_limit: usize,
    /// The newest resourceVersion whose event left the history: watches from before it
    /// cannot be served.
    compacted: u64,
    tx: broadcast::Sender<Arc<Event>>,
    uid_seed: u64,
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn key(r: &Resource, ns: &str, name: &str) -> Key {
    let ns = if r.namespaced { ns } else { "" };
    (r.plural.to_string(), ns.to_string(), name.to_string())
}

pub fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl Store {
    pub fn new(history_limit: usize) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id()) << 32;
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            tx: broadcast::channel(4096).0,
            uid_seed: seed | 1,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events after `rv` still in the history.
    pub fn since(&self, rv: u64) -> Vec<Arc<Event>> {
        self.history.iter().filter(|e| e.rv > rv).cloned().collect()
    }

    /// A fresh RFC 4122-shaped uid.
    pub fn uid(&mut self) -> String {
        let mut next = || {
            // xorshift64*
            let mut x = self.uid_seed;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.uid_seed = x;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let (a, b) = (next(), next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) & 0x3fff | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    pub fn get(&self, k: &Key) -> Option<&Value> {
        self.objects.get(k)
    }

    /// Objects of `plural` (in `ns`, or every namespace when None), by namespace and name.
    pub fn list(&self, plural: &str, ns: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((p, n, _), _)| p == plural && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every object, for the controllers' passes.
    pub fn all(&self, plural: &str) -> Vec<Value> {
        self.list(plural, None)
    }

    /// Namespaces in use by any object.
    pub fn namespaces_in_use(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<String> = self
            .objects
            .keys()
            .map(|(_, ns, _)| ns.clone())
            .filter(|ns| !ns.is_empty())
            .collect();
        set.into_iter().collect()
    }

    fn emit(&mut self, ev: Event) {
        let ev = Arc::new(ev);
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(gone) = self.history.pop_front() {
                self.compacted = gone.rv;
            }
        }
        let _ = self.tx.send(ev);
    }

    /// Drop history down to the newest `keep` events (a test forcing `410 Expired`).
    pub fn set_history_limit(&mut self, keep: usize) {
        self.history_limit = keep.max(1);
        while self.history.len() > self.history_limit {
            if let Some(gone) = self.history.pop_front() {
                self.compacted = gone.rv;
            }
        }
    }

    /// Insert a new object (metadata already complete but for the resourceVersion).
    pub fn insert(&mut self, r: &Resource, mut obj: Value) -> ApiResult<Value> {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = name_of(&obj);
        let k = key(r, &ns, &name);
        if self.objects.contains_key(&k) {
            return Err(ApiError::exists(r, &name));
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k.clone(), obj.clone());
        self.emit(Event {
            rv: self.rv,
            plural: k.0,
            ns: k.1,
            kind: EventType::Added,
            object: obj.clone(),
            old: None,
        });
        Ok(obj)
    }

    /// Replace a stored object; no event (and no new resourceVersion) when nothing changed.
    pub fn replace(&mut self, k: &Key, mut obj: Value) -> Option<Value> {
        let old = self.objects.get(k)?.clone();
        obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if obj == old {
            return Some(old);
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k.clone(), obj.clone());
        self.emit(Event {
            rv: self.rv,
            plural: k.0.clone(),
            ns: k.1.clone(),
            kind: EventType::Modified,
            object: obj.clone(),
            old: Some(old),
        });
        Some(obj)
    }

    /// Change a stored object in place with `f`; the object after, when it exists.
    pub fn modify(&mut self, k: &Key, f: impl FnOnce(&mut Value)) -> Option<Value> {
        let mut obj = self.objects.get(k)?.clone();
        f(&mut obj);
        self.replace(k, obj)
    }

    /// Remove an object; the DELETED event carries a new resourceVersion.
    pub fn remove(&mut self, k: &Key) -> Option<Value> {
        let mut obj = self.objects.remove(k)?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(Event {
            rv: self.rv,
            plural: k.0.clone(),
            ns: k.1.clone(),
            kind: EventType::Deleted,
            object: obj.clone(),
            old: None,
        });
        Some(obj)
    }

    /// Whether any stored object has the uid.
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.objects
            .values()
            .any(|o| o["metadata"]["uid"].as_str() == Some(uid))
    }

    /// Every stored object with its key.
    pub fn entries(&self) -> Vec<(Key, Value)> {
        self.objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
