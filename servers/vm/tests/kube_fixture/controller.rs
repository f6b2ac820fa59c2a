//! The controllers, level-triggered: one pass on every store change and every 100 ms.
//!
//! - kubelet ([`super::pods`]): pods' sandboxes;
//! - garbage collector: an object whose owners are all gone is deleted; foreground deletion
//!   deletes dependents first, then drops the `foregroundDeletion` finalizer;
//! - Sandbox (agent-sandbox's controller): one Pod named like the Sandbox (owned by it,
//!   labelled `agents.x-k8s.io/sandbox-name-hash`); `Ready` mirrors the pod
//!   (`DependenciesReady`), `podIPs`, `nodeName`; `operatingMode: Suspended` deletes the pod
//!   (`SandboxSuspended`), `Running` again makes a new one; past `shutdownTime` the pod goes,
//!   then the Sandbox (`shutdownPolicy: Delete`) or Ready=False `SandboxExpired` (`Retain`);
//! - SandboxClaim: a Sandbox (named like the claim) from the SandboxTemplate that the claim's
//!   SandboxWarmPool names — a fresh one, no real pre-warming; `status.sandbox` and the
//!   `agents.x-k8s.io/sandbox-name` annotation; `lifecycle.shutdownTime`/`shutdownPolicy`
//!   (Delete, DeleteForeground, Retain).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Inner;
use super::api::{self, DeleteOptions, controller_write, owners};
use super::resources::{self, CLAIMS, PODS, SANDBOXES, TEMPLATES, WARMPOOLS};
use super::store::{key, name_of, now};

pub const TICK: Duration = Duration::from_millis(100);
pub const NAME_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";
pub const CLAIM_UID_LABEL: &str = "agents.x-k8s.io/claim-uid";
pub const SANDBOX_NAME_ANNOTATION: &str = "agents.x-k8s.io/sandbox-name";

pub async fn run(inner: Arc<Inner>) {
    let mut sub = inner.store().subscribe();
    loop {
        reconcile(&inner);
        tokio::select! {
            _ = inner.cancel.cancelled() => return,
            _ = sub.recv() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

fn reconcile(inner: &Arc<Inner>) {
    let pods = inner.store().all(PODS.plural);
    inner.kubelet.reconcile(inner, &pods);
    collect_garbage(inner);
    if inner.opts.sandbox_crds {
        // (The list first: a guard in the `for` header would live through the loop.)
        let sandboxes = inner.store().all(SANDBOXES.plural);
        for sb in sandboxes {
            sandbox(inner, &sb);
        }
        let claims = inner.store().all(CLAIMS.plural);
        for claim in claims {
            claim_pass(inner, &claim);
        }
    }
}

fn ns_of(o: &Value) -> String {
    o["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn uid_of(o: &Value) -> String {
    o["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn deleting(o: &Value) -> bool {
    o["metadata"]["deletionTimestamp"].is_string()
}

fn delete(inner: &Inner, plural: &str, o: &Value, policy: Option<&str>) {
    if let Some(r) = resources::by_plural(plural) {
        let opts = DeleteOptions {
            propagation: policy.map(str::to_string),
            ..Default::default()
        };
        let _ = api::delete(inner, r, &ns_of(o), &name_of(o), &opts);
    }
}

fn collect_garbage(inner: &Inner) {
    let entries = inner.store().entries();
    let uids: std::collections::BTreeSet<String> = entries.iter().map(|(_, o)| uid_of(o)).collect();
    for ((plural, _, _), o) in &entries {
        let own = owners(o);
        if !own.is_empty() && !deleting(o) && own.iter().all(|u| !uids.contains(u)) {
            delete(inner, plural, o, None);
        }
        let foreground = o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion"));
        if deleting(o) && foreground {
            let uid = uid_of(o);
            let deps: Vec<&(super::store::Key, Value)> = entries
                .iter()
                .filter(|(_, d)| owners(d).contains(&uid))
                .collect();
            for ((dp, _, _), d) in &deps {
                if !deleting(d) {
                    delete(inner, dp, d, Some("Foreground"));
                }
            }
            if deps.is_empty() {
                let Some(r) = resources::by_plural(plural) else {
                    continue;
                };
                let mut store = inner.store();
                let k = key(r, &ns_of(o), &name_of(o));
                store.modify(&k, |x| {
                    if let Some(f) = x["metadata"]["finalizers"].as_array_mut() {
                        f.retain(|v| v != "foregroundDeletion");
                    }
                });
                let done = store.get(&k).is_some_and(|x| {
                    x["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|f| f.is_empty())
                });
                if done {
                    store.remove(&k);
                }
            }
        }
    }
}

/// FNV-1a of a name, as hex: the value of the sandbox-name-hash label.
pub fn name_hash(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// Set a `metav1.Condition`, keeping its transition time when its status did not change.
pub fn set_condition(
    status: &mut Value,
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: &Value,
) {
    let st = if ok { "True" } else { "False" };
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conds) = status["conditions"].as_array_mut() else {
        return;
    };
    let old_time = conds
        .iter()
        .find(|c| c["type"] == kind && c["status"] == st)
        .map(|c| c["lastTransitionTime"].clone());
    conds.retain(|c| c["type"] != kind);
    conds.push(json!({
        "type": kind,
        "status": st,
        "observedGeneration": generation,
        "lastTransitionTime": old_time.unwrap_or_else(|| json!(now())),
        "reason": reason,
        "message": message,
    }));
}

fn remove_condition(status: &mut Value, kind: &str) {
    if let Some(c) = status["conditions"].as_array_mut() {
        c.retain(|c| c["type"] != kind);
    }
}

fn expired(lifecycle: &Value) -> bool {
    lifecycle["shutdownTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t <= chrono::Utc::now())
}

fn owner_ref(o: &Value) -> Value {
    json!({
        "apiVersion": o["apiVersion"],
        "kind": o["kind"],
        "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn sandbox(inner: &Inner, sb: &Value) {
    if deleting(sb) {
        return;
    }
    let (ns, name, uid) = (ns_of(sb), name_of(sb), uid_of(sb));
    let spec = &sb["spec"];
    let generation = sb["metadata"]["generation"].clone();
    let is_expired = expired(spec);
    let suspended = spec["operatingMode"] == "Suspended";
    let pod = inner.store().get(&key(&PODS, &ns, &name)).cloned();
    let owned = pod.as_ref().filter(|p| owners(p).contains(&uid));
    let mut status = sb["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["selector"] = json!(format!("{NAME_HASH_LABEL}={}", name_hash(&name)));
    if is_expired || suspended {
        if let Some(p) = owned
            && !deleting(p)
        {
            delete(inner, PODS.plural, p, None);
        }
        if is_expired && spec["shutdownPolicy"] == "Delete" && owned.is_none() {
            delete(inner, SANDBOXES.plural, sb, None);
            return;
        }
        let (reason, msg) = if is_expired {
            ("SandboxExpired", "the sandbox is past its shutdownTime")
        } else {
            (
                "SandboxSuspended",
                "the sandbox is suspended (operatingMode: Suspended)",
            )
        };
        set_condition(&mut status, "Ready", false, reason, msg, &generation);
        if suspended {
            let (r, m) = match owned {
                Some(_) => ("PodNotTerminated", "the pod is being terminated"),
                None => ("PodTerminated", "the pod is terminated"),
            };
            set_condition(&mut status, "Suspended", true, r, m, &generation);
        }
        if let Some(m) = status.as_object_mut() {
            m.remove("podIPs");
            m.remove("nodeName");
        }
    } else {
        remove_condition(&mut status, "Suspended");
        if pod.is_none() {
            create_pod(inner, sb, &mut status, &generation);
        }
        mirror_pod(owned, pod.is_some(), &mut status, &generation);
    }
    if status != sb["status"] {
        controller_write(inner, SANDBOXES.plural, &ns, &name, |o| {
            o["status"] = status
        });
    }
}

fn create_pod(inner: &Inner, sb: &Value, status: &mut Value, generation: &Value) {
    let (ns, name) = (ns_of(sb), name_of(sb));
    let tpl = &sb["spec"]["podTemplate"];
    let mut labels = tpl["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[NAME_HASH_LABEL] = json!(name_hash(&name));
    let mut meta = json!({"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner_ref(sb)]});
    if tpl["metadata"]["annotations"].is_object() {
        meta["annotations"] = tpl["metadata"]["annotations"].clone();
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tpl["spec"]});
    if let Err(e) = api::create(inner, &PODS, &ns, pod) {
        set_condition(
            status,
            "Ready",
            false,
            "DependenciesNotReady",
            &format!("creating the pod: {}", e.message),
            generation,
        );
    }
}

fn mirror_pod(owned: Option<&Value>, exists: bool, status: &mut Value, generation: &Value) {
    let Some(p) = owned else {
        let msg = if exists {
            "a pod of that name exists and is not owned by this sandbox"
        } else {
            "the pod is being created"
        };
        set_condition(
            status,
            "Ready",
            false,
            "DependenciesNotReady",
            msg,
            generation,
        );
        return;
    };
    let phase = p["status"]["phase"].as_str().unwrap_or("Pending");
    let pod_ready = p["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let ready = pod_ready && phase == "Running" && !deleting(p);
    if ready {
        set_condition(
            status,
            "Ready",
            true,
            "DependenciesReady",
            "the pod is ready",
            generation,
        );
        let ips: Vec<Value> = p["status"]["podIPs"]
            .as_array()
            .map(|a| a.iter().map(|i| i["ip"].clone()).collect())
            .unwrap_or_default();
        status["podIPs"] = json!(ips);
    } else {
        let msg = format!(
            "the pod is {}",
            if deleting(p) { "terminating" } else { phase }
        );
        set_condition(
            status,
            "Ready",
            false,
            "DependenciesNotReady",
            &msg,
            generation,
        );
        if let Some(m) = status.as_object_mut() {
            m.remove("podIPs");
        }
    }
    if let Some(n) = p["spec"]["nodeName"].as_str() {
        status["nodeName"] = json!(n);
    }
    match phase {
        "Succeeded" => set_condition(
            status,
            "Finished",
            true,
            "PodSucceeded",
            "the pod completed",
            generation,
        ),
        "Failed" => set_condition(
            status,
            "Finished",
            true,
            "PodFailed",
            "the pod failed",
            generation,
        ),
        _ => remove_condition(status, "Finished"),
    }
}

/// The Sandbox a claim asks for: the template its warm pool names, with the claim's pod
/// metadata and environment.
fn sandbox_for_claim(inner: &Inner, claim: &Value) -> Result<Value, (&'static str, String)> {
    let ns = ns_of(claim);
    let pool_name = claim["spec"]["warmPoolRef"]["name"]
        .as_str()
        .unwrap_or_default();
    let pool = inner
        .store()
        .get(&key(&WARMPOOLS, &ns, pool_name))
        .cloned()
        .ok_or((
            "WarmPoolNotFound",
            format!("sandboxwarmpool {pool_name:?} not found"),
        ))?;
    let tpl_name = pool["spec"]["sandboxTemplateRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let tpl = inner
        .store()
        .get(&key(&TEMPLATES, &ns, &tpl_name))
        .cloned()
        .ok_or((
            "TemplateNotFound",
            format!("sandboxtemplate {tpl_name:?} not found"),
        ))?;
    let mut pod_tpl = tpl["spec"]["podTemplate"].clone();
    let extra = &claim["spec"]["additionalPodMetadata"];
    for field in ["labels", "annotations"] {
        if let Some(m) = extra[field].as_object() {
            for (k, v) in m {
                pod_tpl["metadata"][field][k] = v.clone();
            }
        }
    }
    pod_tpl["metadata"]["labels"][CLAIM_UID_LABEL] = json!(uid_of(claim));
    if let Some(env) = claim["spec"]["env"].as_array()
        && let Some(cs) = pod_tpl["spec"]["containers"].as_array_mut()
    {
        for e in env {
            let target = e["containerName"].as_str();
            let Some(c) = cs
                .iter_mut()
                .enumerate()
                .find(|(i, c)| target.map_or(*i == 0, |t| c["name"] == t))
                .map(|(_, c)| c)
            else {
                continue;
            };
            let mut list = c["env"].as_array().cloned().unwrap_or_default();
            list.retain(|x| x["name"] != e["name"]);
            list.push(json!({"name": e["name"], "value": e["value"]}));
            c["env"] = json!(list);
        }
    }
    let mut spec = json!({"podTemplate": pod_tpl});
    if let Some(v) = tpl["spec"].get("volumeClaimTemplates") {
        spec["volumeClaimTemplates"] = v.clone();
    }
    Ok(json!({
        "apiVersion": SANDBOXES.api_version(),
        "kind": "Sandbox",
        "metadata": {
            "name": name_of(claim),
            "namespace": ns,
            "labels": {"agents.x-k8s.io/launch-type": "cold"},
            "annotations": {"agents.x-k8s.io/sandbox-template-ref": tpl_name},
            "ownerReferences": [owner_ref(claim)],
        },
        "spec": spec,
    }))
}

fn claim_pass(inner: &Inner, claim: &Value) {
    if deleting(claim) {
        return;
    }
    let (ns, name, uid) = (ns_of(claim), name_of(claim), uid_of(claim));
    let generation = claim["metadata"]["generation"].clone();
    let lifecycle = &claim["spec"]["lifecycle"];
    let sb = inner.store().get(&key(&SANDBOXES, &ns, &name)).cloned();
    let owned = sb.as_ref().filter(|s| owners(s).contains(&uid));
    let mut status = claim["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    if expired(lifecycle) {
        match lifecycle["shutdownPolicy"].as_str().unwrap_or("Retain") {
            "Delete" => return delete(inner, CLAIMS.plural, claim, None),
            "DeleteForeground" => return delete(inner, CLAIMS.plural, claim, Some("Foreground")),
            _ => {}
        }
        if let Some(s) = owned
            && !deleting(s)
        {
            delete(inner, SANDBOXES.plural, s, None);
        }
        set_condition(
            &mut status,
            "Ready",
            false,
            "ClaimExpired",
            "the claim is past its shutdownTime",
            &generation,
        );
        status["sandbox"] = json!({"name": name});
    } else {
        if sb.is_none() {
            match sandbox_for_claim(inner, claim) {
                Ok(s) => {
                    if let Err(e) = api::create(inner, &SANDBOXES, &ns, s) {
                        set_condition(
                            &mut status,
                            "Ready",
                            false,
                            "SandboxCreationFailed",
                            &e.message,
                            &generation,
                        );
                    }
                }
                Err((reason, msg)) => {
                    set_condition(&mut status, "Ready", false, reason, &msg, &generation)
                }
            }
        }
        let mut sstatus = json!({"name": name});
        if let Some(s) = owned {
            if let Some(ips) = s["status"]["podIPs"].as_array() {
                sstatus["podIPs"] = json!(ips);
            }
            let ready = s["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .cloned();
            match ready {
                Some(c) => set_condition(
                    &mut status,
                    "Ready",
                    c["status"] == "True",
                    c["reason"].as_str().unwrap_or("DependenciesNotReady"),
                    c["message"].as_str().unwrap_or_default(),
                    &generation,
                ),
                None => set_condition(
                    &mut status,
                    "Ready",
                    false,
                    "SandboxNotReady",
                    "the sandbox is starting",
                    &generation,
                ),
            }
        }
        status["sandbox"] = sstatus;
    }
    let annotated = claim["metadata"]["annotations"][SANDBOX_NAME_ANNOTATION] == json!(name);
    if status != claim["status"] || !annotated {
        controller_write(inner, CLAIMS.plural, &ns, &name, |o| {
            o["status"] = status;
            o["metadata"]["annotations"][SANDBOX_NAME_ANNOTATION] = json!(name);
        });
    }
}
