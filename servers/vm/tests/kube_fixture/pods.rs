//! The kubelet: each Pod is a real kitbag-vm bubblewrap sandbox.
//!
//! The first container's `command` + `args` is the sandbox's main command (a pod without a
//! command runs only the agent, like a pause container), its `env` (plain values, and
//! `fieldRef` to the pod's name, namespace, uid, node and IP) the environment, its
//! `workingDir` the cwd (default `/work`). The image is recorded, never pulled: the root is
//! the host's, read-only. `emptyDir` volumes are fresh host directories bound read-write at
//! each `volumeMounts[].mountPath`. `resources.limits.memory`/`cpu` become the sandbox's
//! cgroup limits. Only `restartPolicy: Never` semantics: a container that ends is not
//! restarted, whatever the policy says. Other containers of the pod are ignored.
//!
//! Status as a kubelet reports it: Pending (scheduled, ContainerCreating) → Running (Ready,
//! ContainersReady, podIP 127.0.0.1) → Succeeded/Failed with the exit code;
//! `activeDeadlineSeconds` ends it as Failed/DeadlineExceeded. Deletion stops the sandbox
//! with the pod's grace period, then removes the object.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kitbag_vm::bwrap::{Sandbox, SandboxSpec};
use kitbag_vm::cgroup::Limits;
use kitbag_vm::engine::Engine;
use kitbag_vm::proto::ExitStatus;
use kitbag_vm::spawner::Spawner;
use serde_json::{Value, json};

use super::Inner;
use super::api::controller_write;
use super::resources::PODS;
use super::store::{key, now};

pub const NODE: &str = "kitbag-node";
pub const POD_IP: &str = "127.0.0.1";

#[derive(Clone)]
pub enum Phase {
    Starting,
    Running(Arc<Engine>),
    /// Being stopped (deletion or deadline); the stopper writes the outcome.
    Stopping(Arc<Engine>),
    Ended,
}

/// One pod's sandbox, by pod uid.
#[derive(Clone)]
pub struct PodRt {
    pub name: String,
    pub ns: String,
    pub phase: Phase,
    /// `<state>/instances/<id>`.
    pub dir: PathBuf,
    /// emptyDir volumes: `<state>/volumes/<id>`.
    pub volumes: PathBuf,
    pub containers: Vec<String>,
    pub cwd: String,
    /// The deletion stopper already runs.
    pub deleting: bool,
}

pub struct Kubelet {
    spawner: Spawner,
    pods: Mutex<BTreeMap<String, PodRt>>,
}

/// Sandbox ids, unique in the process: they name cgroups (`kitbag-vm-<pid>/<id>`), which
/// fixtures of parallel tests share.
static SEQ: AtomicU64 = AtomicU64::new(0);

fn uid_of(pod: &Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ns_name(pod: &Value) -> (String, String) {
    let m = &pod["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// `128Mi`, `1G`, `1000000` → MiB.
pub fn memory_mb(q: &str) -> Option<u64> {
    let q = q.trim();
    let units: [(&str, f64); 10] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024f64.powi(4)),
        ("k", 1e3),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("m", 1e-3),
    ];
    let (num, mult) = units
        .iter()
        .find_map(|(u, m)| q.strip_suffix(u).map(|n| (n, *m)))
        .unwrap_or((q, 1.0));
    let bytes = num.parse::<f64>().ok()? * mult;
    Some(((bytes / (1024.0 * 1024.0)).ceil() as u64).max(16))
}

/// `500m`, `1`, `0.5` → CPUs.
pub fn cpus(q: &str) -> Option<f64> {
    match q.trim().strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok().map(|m| m / 1000.0),
        None => q.trim().parse().ok(),
    }
}

fn limits(container: &Value) -> Limits {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let l = &container["resources"]["limits"];
    let q = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Limits {
        memory_mb: q(&l["memory"]).and_then(|m| memory_mb(&m)).unwrap_or(1024),
        cpus: q(&l["cpu"])
            .and_then(|c| cpus(&c))
            .unwrap_or(ncpu)
            .clamp(0.01, ncpu),
        pids: 512,
        // A volume's sizeLimit is the kubelet's eviction, which this stand-in does not model.
        disk_mb: None,
    }
}

fn env_of(pod: &Value, container: &Value) -> Vec<(String, String)> {
    let field = |path: &str| -> Option<String> {
        match path {
            "status.podIP" | "status.hostIP" => Some(POD_IP.into()),
            "spec.nodeName" => Some(NODE.into()),
            p => {
                let mut v = pod;
                for part in p.split('.') {
                    v = &v[part];
                }
                v.as_str().map(str::to_string)
            }
        }
    };
    container["env"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|e| {
                    let name = e["name"].as_str()?.to_string();
                    let value = match e["value"].as_str() {
                        Some(v) => Some(v.to_string()),
                        None => e["valueFrom"]["fieldRef"]["fieldPath"]
                            .as_str()
                            .and_then(field),
                    };
                    Some((name, value.unwrap_or_default()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// emptyDir volumes as bind mounts: (host dir, mountPath, writable, (dev, inode)).
#[allow(clippy::type_complexity)]
fn mounts(
    pod: &Value,
    container: &Value,
    vol_root: &std::path::Path,
) -> Result<Vec<(PathBuf, String, bool, (u64, u64))>, String> {
    use std::os::unix::fs::MetadataExt;
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = m["name"].as_str().unwrap_or_default();
        let path = m["mountPath"].as_str().unwrap_or_default();
        if !path.starts_with('/') || path.split('/').any(|p| p == "..") {
            return Err(format!(
                "volumeMount {name:?}: mountPath {path:?} must be absolute"
            ));
        }
        let Some(v) = volumes.iter().find(|v| v["name"] == name) else {
            return Err(format!("volumeMount {name:?}: no such volume"));
        };
        if v.get("emptyDir").is_none() {
            return Err(format!(
                "volume {name:?}: only emptyDir volumes are supported"
            ));
        }
        let host = vol_root.join(name);
        std::fs::create_dir_all(&host).map_err(|e| format!("{}: {e}", host.display()))?;
        let meta = std::fs::metadata(&host).map_err(|e| e.to_string())?;
        let rw = !m["readOnly"].as_bool().unwrap_or(false);
        out.push((host, path.to_string(), rw, (meta.dev(), meta.ino())));
    }
    Ok(out)
}

fn condition(kind: &str, status: bool, at: &str) -> Value {
    json!({"type": kind, "status": if status {"True"} else {"False"}, "lastProbeTime": null, "lastTransitionTime": at})
}

fn container_status(pod: &Value, id: &str, state: Value, ready: bool) -> Value {
    let c = &pod["spec"]["containers"][0];
    json!({
        "name": c["name"],
        "state": state,
        "lastState": {},
        "ready": ready,
        "restartCount": 0,
        "image": c["image"],
        "imageID": "",
        "containerID": format!("kitbag-vm://{id}"),
        "started": ready,
    })
}

impl Kubelet {
    pub fn new() -> std::io::Result<Self> {
        Ok(Kubelet {
            spawner: Spawner::start()?,
            pods: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PodRt>> {
        self.pods
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get(&self, uid: &str) -> Option<PodRt> {
        self.lock().get(uid).cloned()
    }

    /// The running sandbox of pod `ns/name`, with its runtime record.
    pub fn running(&self, ns: &str, name: &str) -> Option<(Arc<Engine>, PodRt)> {
        self.lock()
            .values()
            .find(|p| p.ns == ns && p.name == name)
            .and_then(|p| match &p.phase {
                Phase::Running(e) if e.exit_status().is_none() => Some((e.clone(), p.clone())),
                _ => None,
            })
    }

    /// The pod `ns/name`'s directory (its logs), while the kubelet knows it.
    pub fn dir_of(&self, ns: &str, name: &str) -> Option<PathBuf> {
        self.lock()
            .values()
            .find(|p| p.ns == ns && p.name == name)
            .map(|p| p.dir.clone())
    }

    pub fn live(&self) -> Vec<String> {
        self.lock()
            .values()
            .filter(|p| match &p.phase {
                Phase::Running(e) | Phase::Stopping(e) => e.exit_status().is_none(),
                Phase::Starting => true,
                Phase::Ended => false,
            })
            .map(|p| p.name.clone())
            .collect()
    }

    /// One pass over the pods: start new ones, stop deleted or overdue ones, forget the
    /// runtimes of pods that are gone.
    pub fn reconcile(&self, inner: &Arc<Inner>, pods: &[Value]) {
        let now_t = chrono::Utc::now();
        let mut uids = std::collections::BTreeSet::new();
        for pod in pods {
            let uid = uid_of(pod);
            uids.insert(uid.clone());
            let rt = self.get(&uid);
            let deleting = pod["metadata"]["deletionTimestamp"].is_string();
            let terminal = matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            match rt {
                None if deleting => {
                    // Never started (or long ended): the kubelet confirms at once.
                    let (ns, name) = ns_name(pod);
                    inner.store().remove(&key(&PODS, &ns, &name));
                }
                None if !terminal => self.admit(inner, pod),
                Some(rt) if deleting && !rt.deleting => {
                    if let Some(p) = self.lock().get_mut(&uid) {
                        p.deleting = true;
                    }
                    let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                        .as_u64()
                        .unwrap_or(30);
                    tokio::spawn(stop(inner.clone(), uid, Duration::from_secs(grace), None));
                }
                Some(PodRt {
                    phase: Phase::Running(_),
                    ..
                }) if !deleting => {
                    let started = pod["status"]["startTime"]
                        .as_str()
                        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok());
                    if let (Some(ads), Some(st)) =
                        (pod["spec"]["activeDeadlineSeconds"].as_i64(), started)
                        && st + chrono::Duration::seconds(ads) <= now_t
                    {
                        if let Some(p) = self.lock().get_mut(&uid)
                            && let Phase::Running(e) = &p.phase
                        {
                            p.phase = Phase::Stopping(e.clone());
                        }
                        tokio::spawn(stop(inner.clone(), uid, Duration::ZERO, Some(ads)));
                    }
                }
                _ => {}
            }
        }
        // Runtimes whose pod is gone (force-deleted, or removed after a stop).
        let gone: Vec<PodRt> = {
            let mut map = self.lock();
            let keys: Vec<String> = map.keys().filter(|u| !uids.contains(*u)).cloned().collect();
            keys.into_iter().filter_map(|k| map.remove(&k)).collect()
        };
        for rt in gone {
            tokio::spawn(async move {
                if let Phase::Running(e) | Phase::Stopping(e) = &rt.phase {
                    e.stop(Duration::ZERO).await;
                }
                let _ = std::fs::remove_dir_all(&rt.dir);
                let _ = std::fs::remove_dir_all(&rt.volumes);
            });
        }
    }

    /// A new pod: bind it to the node and start its sandbox.
    fn admit(&self, inner: &Arc<Inner>, pod: &Value) {
        let uid = uid_of(pod);
        let (ns, name) = ns_name(pod);
        let id = format!("kube{}", SEQ.fetch_add(1, Ordering::SeqCst) + 1);
        let state = &inner.opts.state_dir;
        let c = &pod["spec"]["containers"][0];
        let rt = PodRt {
            name: name.clone(),
            ns: ns.clone(),
            phase: Phase::Starting,
            dir: state.join("instances").join(&id),
            volumes: state.join("volumes").join(&id),
            containers: pod["spec"]["containers"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            cwd: c["workingDir"].as_str().unwrap_or("/work").to_string(),
            deleting: false,
        };
        self.lock().insert(uid.clone(), rt.clone());
        let at = now();
        let waiting = container_status(
            pod,
            &id,
            json!({"waiting": {"reason": "ContainerCreating"}}),
            false,
        );
        controller_write(inner, "pods", &ns, &name, |p| {
            p["spec"]["nodeName"] = json!(NODE);
            p["status"] = json!({
                "phase": "Pending",
                "conditions": [condition("PodScheduled", true, &at)],
                "hostIP": POD_IP,
                "hostIPs": [{"ip": POD_IP}],
                "startTime": at,
                "qosClass": p["status"]["qosClass"],
                "containerStatuses": [waiting],
            });
        });
        tokio::spawn(start(inner.clone(), uid, id, pod.clone(), rt));
    }

    /// Stop every sandbox (the fixture's end); what is left of any (pids), for the caller to
    /// complain about.
    pub async fn stop_all(&self) -> Vec<String> {
        // Starts in flight finish first.
        for _ in 0..200 {
            if !self
                .lock()
                .values()
                .any(|p| matches!(p.phase, Phase::Starting))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let all: Vec<PodRt> = std::mem::take(&mut *self.lock()).into_values().collect();
        let mut left = Vec::new();
        for rt in all {
            if let Phase::Running(e) | Phase::Stopping(e) = &rt.phase {
                e.stop(Duration::from_millis(200)).await;
                if e.exit_status().is_none() || kitbag_testkit::process_alive(e.pid() as u32) {
                    left.push(format!("{} (pid {})", rt.name, e.pid()));
                }
            }
            let _ = std::fs::remove_dir_all(&rt.dir);
            let _ = std::fs::remove_dir_all(&rt.volumes);
        }
        left
    }

    fn set_phase(&self, uid: &str, phase: Phase) {
        if let Some(p) = self.lock().get_mut(uid) {
            p.phase = phase;
        }
    }
}

async fn start(inner: Arc<Inner>, uid: String, id: String, pod: Value, rt: PodRt) {
    let kubelet = &inner.kubelet;
    let c = pod["spec"]["containers"][0].clone();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut argv = strings(&c["command"]);
    argv.extend(strings(&c["args"]));
    let spec = mounts(&pod, &c, &rt.volumes).map(|mounts| SandboxSpec {
        id: id.clone(),
        hostname: rt.name.chars().take(63).collect(),
        dir: rt.dir.clone(),
        state_dir: inner.opts.state_dir.clone(),
        command: (!argv.is_empty()).then_some(argv),
        cwd: rt.cwd.clone(),
        env: env_of(&pod, &c),
        outbound: false,
        limits: limits(&c),
        mounts,
        exe: inner.opts.agent_exe.clone(),
        agent: None,
        rootfs: None,
    });
    let started = match spec {
        Ok(spec) => Sandbox::start(spec, &kubelet.spawner, Duration::from_secs(20))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let engine = match started {
        Ok(s) => Arc::new(Engine::new(s)),
        Err(e) => {
            kubelet.set_phase(&uid, Phase::Ended);
            let st = container_status(
                &pod,
                &id,
                json!({"waiting": {"reason": "CreateContainerError", "message": e}}),
                false,
            );
            controller_write(&inner, "pods", &rt.ns, &rt.name, |p| {
                p["status"]["containerStatuses"] = json!([st]);
            });
            return;
        }
    };
    let deleting = kubelet.get(&uid).is_none_or(|p| p.deleting);
    kubelet.set_phase(&uid, Phase::Running(engine.clone()));
    if deleting {
        // Deleted while it started: the reconcile pass stops it (or it is gone already).
        if kubelet.get(&uid).is_none() {
            engine.stop(Duration::ZERO).await;
        }
        return;
    }
    let at = now();
    let running = container_status(&pod, &id, json!({"running": {"startedAt": at}}), true);
    controller_write(&inner, "pods", &rt.ns, &rt.name, |p| {
        let s = &mut p["status"];
        s["phase"] = json!("Running");
        s["podIP"] = json!(POD_IP);
        s["podIPs"] = json!([{"ip": POD_IP}]);
        let scheduled = s["conditions"][0].clone();
        s["conditions"] = json!([
            condition("PodReadyToStartContainers", true, &at),
            condition("Initialized", true, &at),
            condition("Ready", true, &at),
            condition("ContainersReady", true, &at),
            scheduled,
        ]);
        s["containerStatuses"] = json!([running]);
    });
    tokio::spawn(wait_main(inner.clone(), uid, id, pod, engine, at));
}

/// The main command ended on its own: Succeeded or Failed with its exit code.
async fn wait_main(
    inner: Arc<Inner>,
    uid: String,
    id: String,
    pod: Value,
    engine: Arc<Engine>,
    started: String,
) {
    let status = engine.wait().await;
    let stopping = !matches!(
        inner.kubelet.get(&uid).map(|p| p.phase),
        Some(Phase::Running(_))
    );
    if stopping {
        return;
    }
    engine.cleanup();
    inner.kubelet.set_phase(&uid, Phase::Ended);
    let (ns, name) = ns_name(&pod);
    finish(&inner, &ns, &name, &pod, &id, status, &started, None);
}

/// Write a terminal status.
#[allow(clippy::too_many_arguments)]
fn finish(
    inner: &Inner,
    ns: &str,
    name: &str,
    pod: &Value,
    id: &str,
    status: ExitStatus,
    started: &str,
    deadline: Option<i64>,
) {
    let at = now();
    let ok = status.code == 0 && deadline.is_none();
    let reason = match (deadline, ok) {
        (Some(_), _) => "DeadlineExceeded",
        (None, true) => "Completed",
        (None, false) => "Error",
    };
    let term = container_status(
        pod,
        id,
        json!({"terminated": {"exitCode": status.code, "reason": reason, "startedAt": started, "finishedAt": at, "containerID": format!("kitbag-vm://{id}")}}),
        false,
    );
    controller_write(inner, "pods", ns, name, |p| {
        let s = &mut p["status"];
        s["phase"] = json!(if ok { "Succeeded" } else { "Failed" });
        if let Some(ads) = deadline {
            s["reason"] = json!("DeadlineExceeded");
            s["message"] = json!(format!(
                "Pod was active on the node longer than the specified deadline ({ads} s)"
            ));
        }
        if let Some(conds) = s["conditions"].as_array_mut() {
            for c in conds {
                if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                    c["status"] = json!("False");
                    c["reason"] = json!("PodCompleted");
                    c["lastTransitionTime"] = json!(at);
                }
            }
        }
        s["containerStatuses"] = json!([term]);
    });
}

/// Stop a pod's sandbox with `grace`: for a deletion (then the object goes) or an
/// `activeDeadlineSeconds` overrun (then the pod is Failed).
async fn stop(inner: Arc<Inner>, uid: String, grace: Duration, deadline: Option<i64>) {
    // A start in flight finishes first.
    for _ in 0..600 {
        match inner.kubelet.get(&uid).map(|p| p.phase) {
            Some(Phase::Starting) => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => break,
        }
    }
    let Some(rt) = inner.kubelet.get(&uid) else {
        return;
    };
    let engine = match &rt.phase {
        Phase::Running(e) | Phase::Stopping(e) => Some(e.clone()),
        _ => None,
    };
    if let Some(e) = &engine {
        inner.kubelet.set_phase(&uid, Phase::Stopping(e.clone()));
        let status = e.stop(grace).await;
        inner.kubelet.set_phase(&uid, Phase::Ended);
        if let Some(ads) = deadline {
            let pod = inner.store().get(&key(&PODS, &rt.ns, &rt.name)).cloned();
            if let Some(pod) = pod {
                let id = rt
                    .dir
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let started = pod["status"]["startTime"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                finish(
                    &inner,
                    &rt.ns,
                    &rt.name,
                    &pod,
                    &id,
                    status,
                    &started,
                    Some(ads),
                );
            }
            return;
        }
    }
    if deadline.is_none() {
        inner.store().remove(&key(&PODS, &rt.ns, &rt.name));
    }
}
