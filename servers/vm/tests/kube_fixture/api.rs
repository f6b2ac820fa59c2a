//! What the apiserver does to objects: create (defaults, generated names, validation),
//! update and patch (resourceVersion preconditions, the status subresource kept apart,
//! generation), and delete (graceful for pods, finalizers, propagation policies).

use serde_json::{Value, json};

use super::Inner;
use super::patch;
use super::resources::{self, NAMESPACES, PODS, Resource};
use super::store::{ApiError, ApiResult, Key, key, name_of, now};

/// `default`, `kube-system` and `kube-public`, as in any cluster.
pub fn create_builtin_namespaces(inner: &Inner) {
    for ns in ["default", "kube-system", "kube-public"] {
        ensure_namespace(inner, ns);
    }
}

/// Namespaces exist implicitly: the first object in one creates it.
pub fn ensure_namespace(inner: &Inner, ns: &str) {
    if ns.is_empty() {
        return;
    }
    let mut store = inner.store();
    if store.get(&key(&NAMESPACES, "", ns)).is_some() {
        return;
    }
    let uid = store.uid();
    let obj = json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": ns,
            "uid": uid,
            "creationTimestamp": now(),
            "labels": {"kubernetes.io/metadata.name": ns},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    let _ = store.insert(&NAMESPACES, obj);
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Five random lowercase alphanumerics, as the apiserver appends to `generateName`.
fn suffix(inner: &Inner) -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = inner.store().uid().replace('-', "");
    uid.bytes()
        .take(5)
        .map(|b| ALPHA[b as usize % ALPHA.len()] as char)
        .collect()
}

/// The body's kind/apiVersion must be the resource's (or absent).
fn check_type(r: &Resource, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request must be a {} object",
            r.kind
        )));
    }
    let kind = obj["kind"].as_str().unwrap_or(r.kind);
    let av = obj["apiVersion"].as_str().map(str::to_string);
    if kind != r.kind || av.is_some_and(|a| a != r.api_version()) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            obj["apiVersion"].as_str().unwrap_or_default(),
            r.api_version()
        )));
    }
    if !obj["metadata"].is_object() && !obj["metadata"].is_null() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

fn check_namespace(r: &Resource, ns: &str, obj: &Value) -> ApiResult<()> {
    match obj["metadata"]["namespace"].as_str() {
        Some(n) if r.namespaced && !n.is_empty() && n != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
    }
}

/// Defaults the apiserver fills in (a few of them: those clients read back).
fn defaults(r: &Resource, obj: &mut Value) {
    match r.plural {
        "pods" => {
            let spec = &mut obj["spec"];
            for (k, v) in [
                ("restartPolicy", json!("Always")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("securityContext", json!({})),
                ("enableServiceLinks", json!(true)),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = v;
                }
            }
            if let Some(cs) = spec["containers"].as_array_mut() {
                for c in cs {
                    let latest = c["image"]
                        .as_str()
                        .is_some_and(|i| !i.contains(':') || i.ends_with(":latest"));
                    for (k, v) in [
                        (
                            "imagePullPolicy",
                            json!(if latest { "Always" } else { "IfNotPresent" }),
                        ),
                        ("terminationMessagePath", json!("/dev/termination-log")),
                        ("terminationMessagePolicy", json!("File")),
                        ("resources", json!({})),
                    ] {
                        if c.get(k).is_none() {
                            c[k] = v;
                        }
                    }
                }
            }
        }
        "sandboxes" => {
            let spec = &mut obj["spec"];
            if spec.get("operatingMode").is_none() {
                spec["operatingMode"] = json!("Running");
            }
            if spec.get("shutdownPolicy").is_none() {
                spec["shutdownPolicy"] = json!("Retain");
            }
        }
        "sandboxwarmpools" if obj["spec"].get("replicas").is_none() => {
            obj["spec"]["replicas"] = json!(1);
        }
        _ => {}
    }
}

type Causes = Vec<(String, &'static str, String)>;

fn validate_pod(obj: &Value, causes: &mut Causes) {
    let spec = &obj["spec"];
    match spec["containers"].as_array() {
        None => causes.push((
            "spec.containers".into(),
            "FieldValueRequired",
            "Required value".into(),
        )),
        Some(cs) if cs.is_empty() => causes.push((
            "spec.containers".into(),
            "FieldValueRequired",
            "Required value".into(),
        )),
        Some(cs) => {
            for (i, c) in cs.iter().enumerate() {
                if c["name"].as_str().is_none_or(str::is_empty) {
                    causes.push((
                        format!("spec.containers[{i}].name"),
                        "FieldValueRequired",
                        "Required value".into(),
                    ));
                }
                if c["image"].as_str().is_none_or(str::is_empty) {
                    causes.push((
                        format!("spec.containers[{i}].image"),
                        "FieldValueRequired",
                        "Required value".into(),
                    ));
                }
            }
        }
    }
    if let Some(p) = spec["restartPolicy"].as_str()
        && !["Always", "OnFailure", "Never"].contains(&p)
    {
        causes.push((
            "spec.restartPolicy".into(),
            "FieldValueNotSupported",
            format!(
                "Unsupported value: \"{p}\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
        ));
    }
}

fn enum_field(obj: &Value, field: &str, allowed: &[&str], causes: &mut Causes) {
    if let Some(v) = obj["spec"].get(field)
        && !v.as_str().is_some_and(|s| allowed.contains(&s))
    {
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        causes.push((
            format!("spec.{field}"),
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {v}: supported values: {}",
                list.join(", ")
            ),
        ));
    }
}

fn validate_sandbox(obj: &Value, causes: &mut Causes) {
    if !obj["spec"]["podTemplate"]["spec"].is_object() {
        causes.push((
            "spec.podTemplate.spec".into(),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    enum_field(obj, "operatingMode", &["Running", "Suspended"], causes);
    enum_field(obj, "shutdownPolicy", &["Delete", "Retain"], causes);
    if let Some(t) = obj["spec"].get("shutdownTime")
        && !t.is_null()
        && t.as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .is_none()
    {
        causes.push((
            "spec.shutdownTime".into(),
            "FieldValueInvalid",
            format!("Invalid value: {t}: spec.shutdownTime in body must be of type date-time"),
        ));
    }
}

/// The resource's schema checks: 422 naming each bad field.
pub fn validate(r: &Resource, obj: &Value) -> ApiResult<()> {
    let mut causes = Causes::new();
    let name = name_of(obj);
    if !valid_name(&name) {
        causes.push((
            "metadata.name".into(),
            "FieldValueInvalid",
            format!("Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    match r.plural {
        "pods" => validate_pod(obj, &mut causes),
        "sandboxes" => validate_sandbox(obj, &mut causes),
        "sandboxclaims" if obj["spec"]["warmPoolRef"]["name"].as_str().is_none() => causes.push((
            "spec.warmPoolRef.name".into(),
            "FieldValueRequired",
            "Required value".into(),
        )),
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(r, &name, &causes))
    }
}

/// The field types the fixture relies on: 422 naming each wrong one.
fn check_shape(r: &Resource, obj: &Value) -> ApiResult<()> {
    let bad = super::shape::errors(r.plural, obj);
    if bad.is_empty() {
        return Ok(());
    }
    let causes: Causes = bad
        .into_iter()
        .map(|(f, m)| (f, "FieldValueTypeInvalid", m))
        .collect();
    Err(ApiError::invalid(r, &name_of(obj), &causes))
}

/// POST: a new object from a client's body.
pub fn create(inner: &Inner, r: &Resource, ns: &str, mut obj: Value) -> ApiResult<Value> {
    check_type(r, &obj)?;
    check_namespace(r, ns, &obj)?;
    check_shape(r, &obj)?;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        match obj["metadata"]["generateName"].as_str() {
            Some(g) if !g.is_empty() => {
                obj["metadata"]["name"] = json!(format!("{g}{}", suffix(inner)));
            }
            _ => {
                return Err(ApiError::invalid(
                    r,
                    "",
                    &[(
                        "metadata.name".into(),
                        "FieldValueRequired",
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        }
    }
    obj["kind"] = json!(r.kind);
    obj["apiVersion"] = json!(r.api_version());
    defaults(r, &mut obj);
    validate(r, &obj)?;
    let meta = &mut obj["metadata"];
    if r.namespaced {
        meta["namespace"] = json!(ns);
    } else if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
    }
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        if let Some(m) = meta.as_object_mut() {
            m.remove(k);
        }
    }
    meta["creationTimestamp"] = json!(now());
    meta["generation"] = json!(1);
    // The status subresource: what a client sends as status on create is dropped.
    match r.plural {
        "pods" => obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"}),
        "namespaces" => obj["status"] = json!({"phase": "Active"}),
        _ if r.status => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        _ => {}
    }
    ensure_namespace(inner, if r.namespaced { ns } else { "" });
    let mut store = inner.store();
    obj["metadata"]["uid"] = json!(store.uid());
    store.insert(r, obj)
}

/// Fields of a pod's spec an update may change (the apiserver forbids the rest).
fn pod_spec_mutable_only(old: &Value, new: &Value) -> bool {
    let strip = |spec: &Value| {
        let mut s = spec.clone();
        if let Some(m) = s.as_object_mut() {
            m.remove("activeDeadlineSeconds");
            m.remove("tolerations");
        }
        if let Some(cs) = s["containers"].as_array_mut() {
            for c in cs {
                if let Some(m) = c.as_object_mut() {
                    m.remove("image");
                }
            }
        }
        s
    };
    strip(old) == strip(new)
}

/// PUT (and the end of PATCH): `new` replaces the stored object, with the status
/// subresource's rules: through `/status` only `status` changes; otherwise everything but.
pub fn update(
    inner: &Inner,
    r: &Resource,
    ns: &str,
    name: &str,
    mut new: Value,
    status: bool,
) -> ApiResult<Value> {
    check_type(r, &new)?;
    check_namespace(r, ns, &new)?;
    check_shape(r, &new)?;
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    let k = key(r, ns, name);
    let old = inner
        .store()
        .get(&k)
        .cloned()
        .ok_or_else(|| ApiError::not_found(r, name))?;
    if let Some(n) = new["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if !rv.is_empty() && old["metadata"]["resourceVersion"].as_str() != Some(rv) => {
            return Err(ApiError::conflict(r, name));
        }
        _ => {}
    }
    let merged = if status {
        let mut m = old.clone();
        m["status"] = new["status"].clone();
        m
    } else {
        if r.status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        // System metadata stays the server's.
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ] {
            match old["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(f);
                    }
                }
            }
        }
        new["metadata"]["name"] = json!(name);
        new["kind"] = json!(r.kind);
        new["apiVersion"] = json!(r.api_version());
        defaults(r, &mut new);
        validate(r, &new)?;
        if r.plural == "pods" && !pod_spec_mutable_only(&old["spec"], &new["spec"]) {
            return Err(ApiError::invalid(
                r,
                name,
                &[("spec".into(), "FieldValueForbidden", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)".into())],
            ));
        }
        if new["spec"] != old["spec"] {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        new
    };
    check_shape(r, &merged)?;
    store_update(inner, r, &k, merged)
}

/// Write an update; an object being deleted whose finalizers are all gone goes away.
fn store_update(inner: &Inner, r: &Resource, k: &Key, obj: Value) -> ApiResult<Value> {
    let mut store = inner.store();
    let deleting = obj["metadata"]["deletionTimestamp"].is_string();
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let out = store
        .replace(k, obj)
        .ok_or_else(|| ApiError::not_found(r, &k.2))?;
    if deleting && !finalizers && r.plural != "pods" {
        return store.remove(k).ok_or_else(|| ApiError::not_found(r, &k.2));
    }
    Ok(out)
}

/// PATCH with one of the patch content types.
pub fn patch(
    inner: &Inner,
    r: &Resource,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &Value,
    status: bool,
) -> ApiResult<Value> {
    let old = inner
        .store()
        .get(&key(r, ns, name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(r, name))?;
    let mut obj = old.clone();
    let ct = content_type.split(';').next().unwrap_or_default().trim();
    match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            patch::merge(&mut obj, body)
        }
        "application/json-patch+json" => patch::json_patch(&mut obj, body)?,
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"
                ),
            ));
        }
    }
    update(inner, r, ns, name, obj, status)
}

/// `DeleteOptions` from the body and query.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace: Option<i64>,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    pub fn parse(body: &Value, query: &[(String, String)]) -> Self {
        let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        DeleteOptions {
            grace: body["gracePeriodSeconds"]
                .as_i64()
                .or_else(|| q("gracePeriodSeconds").and_then(|v| v.parse().ok())),
            propagation: body["propagationPolicy"]
                .as_str()
                .map(str::to_string)
                .or_else(|| q("propagationPolicy")),
            uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        }
    }
}

/// DELETE: pods on a node end gracefully (deletionTimestamp now, removed once the kubelet
/// stopped the sandbox); objects with finalizers wait for them; the rest go at once, their
/// dependents after them (garbage collector) unless orphaned.
pub fn delete(
    inner: &Inner,
    r: &Resource,
    ns: &str,
    name: &str,
    o: &DeleteOptions,
) -> ApiResult<Value> {
    let k = key(r, ns, name);
    let mut store = inner.store();
    let old = store
        .get(&k)
        .cloned()
        .ok_or_else(|| ApiError::not_found(r, name))?;
    let precondition_failed = |what: &str, want: &str, got: &str| {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Precondition failed: {what} in precondition: {want}, {what} in object meta: {got}"
            ),
        )
    };
    let uid = old["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(u) = &o.uid
        && *u != uid
    {
        return Err(precondition_failed("UID", u, &uid));
    }
    let rv = old["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(v) = &o.resource_version
        && *v != rv
    {
        return Err(precondition_failed("ResourceVersion", v, &rv));
    }
    let policy = o.propagation.as_deref().unwrap_or("Background");
    if policy == "Orphan" {
        for (dk, dep) in store.entries() {
            if owners(&dep).contains(&uid) {
                store.modify(&dk, |d| {
                    if let Some(refs) = d["metadata"]["ownerReferences"].as_array_mut() {
                        refs.retain(|x| x["uid"].as_str() != Some(uid.as_str()));
                    }
                });
            }
        }
    }
    let terminal = matches!(
        old["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    let graceful_pod = r.plural == PODS.plural
        && old["spec"]["nodeName"].is_string()
        && !terminal
        && o.grace.unwrap_or(1) > 0;
    let has_finalizers = old["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if graceful_pod || has_finalizers || policy == "Foreground" {
        let grace = o
            .grace
            .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        let out = store.modify(&k, |obj| {
            let m = &mut obj["metadata"];
            let shorter = m["deletionGracePeriodSeconds"]
                .as_i64()
                .is_none_or(|g| grace < g);
            if m["deletionTimestamp"].is_null() || shorter {
                let at = chrono::Utc::now()
                    + chrono::Duration::seconds(if graceful_pod { grace } else { 0 });
                m["deletionTimestamp"] =
                    json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                m["deletionGracePeriodSeconds"] = json!(if graceful_pod { grace } else { 0 });
            }
            if policy == "Foreground" && r.plural != PODS.plural {
                let f = m["finalizers"].as_array().cloned().unwrap_or_default();
                if !f.iter().any(|x| x == "foregroundDeletion") {
                    let mut f = f;
                    f.push(json!("foregroundDeletion"));
                    m["finalizers"] = json!(f);
                }
            }
        });
        return out.ok_or_else(|| ApiError::not_found(r, name));
    }
    store.remove(&k).ok_or_else(|| ApiError::not_found(r, name))
}

/// The uids in an object's ownerReferences.
pub fn owners(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A controller's own writes: `f` edits the stored object; status and metadata alike, no
/// preconditions. The object after, if it still exists.
pub fn controller_write(
    inner: &Inner,
    plural: &str,
    ns: &str,
    name: &str,
    f: impl FnOnce(&mut Value),
) -> Option<Value> {
    let r = resources::by_plural(plural)?;
    inner.store().modify(&key(r, ns, name), f)
}
