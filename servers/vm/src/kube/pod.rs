//! One instance on the cluster: its object (Pod or Sandbox), the pod's agent, and the
//! tasks that keep it: the `hold` line, the main command's watch, the Sandbox's lease.

use crate::backend::Backend;
use crate::disk::{DiskInfo, DiskMethod};
use futures::future::BoxFuture;
use kitbag_shared::lock::LockExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::KubeEngine;
use super::api::{Api, KubeError};
use super::manifest::{self, AGENT_PORT, CONTAINER, Kind, Manifest, WARMPOOL_PREFIX};
use super::wait;
use super::ws;
use crate::cgroup::Limits;
use crate::error::{VmError, VmResult};
use crate::proto::{self, Answer, ExitStatus, Request, Stream};
use crate::remote;

/// The agent and what it needs, as files to put in the pod (paths relative to the agent's
/// directory there).
pub struct Payload {
    files: Vec<(String, Vec<u8>)>,
    /// The loader's relative path, for a dynamically linked agent.
    loader: Option<String>,
}

impl Payload {
    /// The agent (`kitbag-vm-agent` beside the server, else the server), stripped, with
    /// the libraries and loader `ldd` lists: the image need not have a matching C library.
    pub fn build(exe: &Path) -> VmResult<Payload> {
        let agent = crate::agent_link::agent_binary(exe);
        let mut files = vec![("agent".to_string(), crate::qemu::image::stripped(&agent)?)];
        let mut loader = None;
        for lib in crate::qemu::image::shared_libraries(&agent)? {
            let Some(name) = lib.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            let bytes = std::fs::read(&lib).map_err(|e| VmError::io(lib.display(), e))?;
            let dest = format!("lib/{name}");
            if name.starts_with("ld-linux") || name.starts_with("ld64") {
                loader = Some(dest.clone());
            }
            files.push((dest, bytes));
        }
        Ok(Payload { files, loader })
    }

    fn run_script(&self, dir: &str, token: &str) -> String {
        let agent = format!(
            "{dir}/agent __agent --ctl {dir}/ctl --listen 127.0.0.1:{AGENT_PORT} --token {token}"
        );
        match &self.loader {
            Some(ld) => format!("exec {dir}/{ld} --library-path {dir}/lib {agent}\n"),
            None => format!("exec {agent}\n"),
        }
    }

    pub fn bytes(&self) -> usize {
        self.files.iter().map(|(_, b)| b.len()).sum()
    }
}

pub struct PodSpec {
    pub id: String,
    pub hostname: String,
    pub dir: PathBuf,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    pub ttl_seconds: u64,
    /// `network: "outbound"`; otherwise a deny-all NetworkPolicy selects the pod.
    pub outbound: bool,
    /// Once the main command has ended: stop the pod (the instance ends with its command).
    pub main_ended: remote::MainEnded<KubePod>,
}

pub struct KubePod {
    pub id: String,
    pub dir: PathBuf,
    /// The object kitbag-vm created (the Pod, or the Sandbox).
    pub name: String,
    pub kind: Kind,
    /// The pod the agent runs in (a Sandbox's pod may be named otherwise).
    pod: Mutex<String>,
    /// Its first container (`main` in the pods kitbag-vm makes; a warm pool's template names
    /// its own).
    container: Mutex<String>,
    /// The uid of the pod the agent last ran in: after a resume only a new pod will do (the
    /// old one can still read Running while it goes).
    last_pod_uid: Mutex<Option<String>>,
    api: Api,
    token: String,
    setup: remote::Setup,
    lease: Duration,
    exit_tx: watch::Sender<Option<ExitStatus>>,
    exit: watch::Receiver<Option<ExitStatus>>,
    main_exit: Mutex<Option<ExitStatus>>,
    main_ended: remote::MainEnded<KubePod>,
    paused: Mutex<bool>,
    /// Counts the pods this instance had: bumped when a suspension takes its pod away, so
    /// that the tasks of an earlier pod (its `hold` line, its main command's watch), which
    /// may only see their pod go after the resume, know it is not the instance's end.
    incarnation: std::sync::atomic::AtomicU64,
    /// False while a resumed Sandbox's new pod comes up: connections wait for it.
    ready: watch::Sender<bool>,
    log_sync: tokio::sync::Mutex<()>,
    disk: Option<DiskInfo>,
    payload: Arc<Payload>,
}

fn lock<T: Clone>(m: &Mutex<T>) -> T {
    m.locked().clone()
}

fn set<T>(m: &Mutex<T>, v: T) {
    *m.locked() = v;
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl KubePod {
    pub async fn start(
        engine: &KubeEngine,
        spec: PodSpec,
        timeout: Duration,
    ) -> VmResult<Arc<KubePod>> {
        let probe = engine.probe().await;
        if !probe.available {
            return Err(VmError::missing(probe.detail));
        }
        let api = engine
            .api
            .clone()
            .map_err(|e| VmError::missing(e.to_string()))?;
        let payload = engine.payload().await?;
        tokio::fs::create_dir_all(crate::instance_dir::guest_logs_dir(&spec.dir))
            .await
            .map_err(|e| VmError::io(spec.dir.display(), e))?;
        let pool = spec.image.strip_prefix(WARMPOOL_PREFIX);
        let kind = choose_kind(&probe, pool.is_some())?;
        let name = manifest::object_name(&spec.id);
        let owner = crate::owner::owner();
        let m = Manifest {
            name: &name,
            id: &spec.id,
            hostname: &spec.hostname,
            image: &spec.image,
            owner: &owner,
            limits: spec.limits,
            ttl_seconds: spec.ttl_seconds,
        };
        if let Some(pool) = pool {
            check_pool(&api, pool).await?;
        }
        let expires = rfc3339(SystemTime::now() + engine.lease);
        let body = match (kind, pool) {
            (Kind::Claim, Some(pool)) => manifest::claim(&m, pool, &expires),
            (Kind::Sandbox, _) => manifest::sandbox(&m, &expires),
            _ => manifest::pod(&m),
        };
        let created = api
            .create(&kind.collection(api.namespace()), &body)
            .await
            .map_err(|e| creation_error(kind, e))?;
        if !spec.outbound {
            isolate(&api, kind, &name, &spec.id, &created).await?;
        }
        let token = kitbag_shared::random::hex(16).map_err(|e| VmError::io("/dev/urandom", e))?;
        let (exit_tx, exit) = watch::channel(None);
        let pod = Arc::new(KubePod {
            id: spec.id.clone(),
            dir: spec.dir.clone(),
            pod: Mutex::new(name.clone()),
            container: Mutex::new(CONTAINER.to_string()),
            last_pod_uid: Mutex::new(None),
            name,
            kind,
            api,
            token,
            setup: remote::Setup {
                id: spec.id,
                hostname: spec.hostname,
                env: spec.env,
                command: spec.command,
                cwd: spec.cwd,
            },
            lease: engine.lease,
            exit_tx,
            exit,
            main_exit: Mutex::new(None),
            main_ended: spec.main_ended,
            paused: Mutex::new(false),
            incarnation: std::sync::atomic::AtomicU64::new(0),
            ready: watch::channel(true).0,
            log_sync: tokio::sync::Mutex::new(()),
            disk: spec.limits.disk_mb.map(|mb| match pool {
                None => DiskInfo::new(
                    mb,
                    DiskMethod::VolumeSizeLimit,
                    Some("the work volume's sizeLimit: the kubelet evicts the pod past it".into()),
                ),
                Some(_) => DiskInfo::new(
                    mb,
                    DiskMethod::None,
                    Some("not enforced: a warm pool's pods come from its template".into()),
                ),
            }),
            payload,
        });
        if let Err(e) = pod.bring_up(Instant::now() + timeout).await {
            pod.delete_object().await;
            return Err(e);
        }
        if kind != Kind::Pod {
            tokio::spawn(renew_lease(Arc::downgrade(&pod)));
        }
        Ok(pod)
    }

    fn object_path(&self) -> String {
        format!(
            "{}/{}",
            self.kind.collection(self.api.namespace()),
            self.name
        )
    }

    /// Wait for the pod, put the agent in, set it up, hold it.
    async fn bring_up(self: &Arc<Self>, deadline: Instant) -> VmResult<()> {
        let ns = self.api.namespace().to_string();
        let mut sandbox = self.name.clone();
        if self.kind == Kind::Claim {
            let claim = wait::until(
                &self.api,
                &Kind::Claim.collection(&ns),
                &self.name,
                deadline,
                wait::claim_bound,
            )
            .await
            .map_err(|e| VmError::engine(format!("the SandboxClaim was not bound: {e}")))?;
            sandbox = wait::claimed_sandbox(&claim).unwrap_or_default();
        }
        if self.kind != Kind::Pod {
            let sb = wait::until(
                &self.api,
                &Kind::Sandbox.collection(&ns),
                &sandbox,
                deadline,
                wait::sandbox_ready,
            )
            .await
            .map_err(|e| VmError::engine(format!("the Sandbox did not become ready: {e}")))?;
            let pod = sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"]
                .as_str()
                .unwrap_or(&sandbox);
            set(&self.pod, pod.to_string());
        }
        let pod_name = lock(&self.pod);
        let old_uid = lock(&self.last_pod_uid);
        let running = wait::until(
            &self.api,
            &Kind::Pod.collection(&ns),
            &pod_name,
            deadline,
            |pod| match pod {
                Some(p)
                    if old_uid.is_some() && p["metadata"]["uid"].as_str() == old_uid.as_deref() =>
                {
                    wait::Seen::Wait
                }
                other => wait::pod_started(other),
            },
        )
        .await
        .map_err(|e| match e {
            wait::WaitError::Image(why) => VmError::Invalid {
                field: "image",
                message: why,
            },
            other => VmError::engine(format!("the pod did not start: {other}")),
        })?;
        if let Some(c) = running["spec"]["containers"][0]["name"].as_str() {
            set(&self.container, c.to_string());
        }
        set(
            &self.last_pod_uid,
            running["metadata"]["uid"].as_str().map(str::to_string),
        );
        self.upload(&self.payload).await?;
        if self.kind == Kind::Claim {
            self.start_detached().await?;
        }
        let alive = || self.exit_status().is_none();
        remote::until_answers(
            || self.connect(),
            deadline,
            Duration::from_millis(100),
            alive,
        )
        .await
        .map_err(|e| VmError::engine(format!("{e} (pod {pod_name})")))?;
        let has_main = remote::set_up(|| self.connect(), &self.setup).await?;
        let hold = self.hold().await?;
        let incarnation = self.incarnation();
        tokio::spawn(hold_until_end(self.clone(), hold, incarnation));
        if has_main {
            tokio::spawn(watch_main(self.clone(), incarnation));
        }
        Ok(())
    }

    /// Each file through `pods/exec` (`head -c` stops at its size: the v4 channel protocol
    /// cannot close stdin), the start script last: the container's shell waits for it.
    async fn upload(&self, payload: &Payload) -> VmResult<()> {
        let pod = lock(&self.pod);
        let dir = self.kind.agent_dir();
        let script = payload.run_script(dir, &self.token).into_bytes();
        let all = payload
            .files
            .iter()
            .map(|(p, b)| (format!("{dir}/{p}"), b.as_slice()))
            .chain([(format!("{dir}/run"), script.as_slice())]);
        for (path, bytes) in all {
            let cmd = format!(
                "mkdir -p \"$(dirname '{path}')\" && head -c {} > '{path}.part' && chmod 755 '{path}.part' && mv '{path}.part' '{path}'",
                bytes.len()
            );
            let container = lock(&self.container);
            let argv = ["/bin/sh", "-c", cmd.as_str()];
            // A pod just reported Running may not take an exec yet (400 "container … is not
            // running" while it starts): a few more tries.
            let mut tries = 0;
            let out = loop {
                match ws::exec(&self.api, &pod, &container, &argv, Some(bytes)).await {
                    Err(e) if e.code() == Some(400) && tries < 20 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    other => {
                        break other.map_err(|e| {
                            VmError::engine(format!("copying the agent into pod {pod}: {e}"))
                        })?;
                    }
                }
            };
            if out.code != 0 {
                return Err(VmError::engine(format!(
                    "copying the agent into pod {pod} failed (exit {}): {}",
                    out.code,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        Ok(())
    }

    /// A warm pool's pod runs its template's command: the agent starts beside it, in a
    /// session of its own so the exec that started it can end.
    async fn start_detached(&self) -> VmResult<()> {
        let pod = lock(&self.pod);
        let run = format!("{}/run", Kind::Claim.agent_dir());
        let cmd = format!(
            "mkdir -p /work 2>/dev/null; if command -v setsid >/dev/null; then setsid /bin/sh {run} </dev/null >/dev/null 2>&1 & else /bin/sh {run} </dev/null >/dev/null 2>&1 & fi"
        );
        let container = lock(&self.container);
        let out = ws::exec(&self.api, &pod, &container, &["/bin/sh", "-c", &cmd], None)
            .await
            .map_err(|e| VmError::engine(format!("starting the agent in pod {pod}: {e}")))?;
        if out.code != 0 {
            return Err(VmError::engine(format!(
                "starting the agent in pod {pod} failed (exit {})",
                out.code
            )));
        }
        Ok(())
    }

    /// The line whose end ends the instance (see [`proto::Request::Hold`]).
    async fn hold(&self) -> VmResult<tokio::io::BufReader<Stream>> {
        let stream = self
            .connect()
            .await
            .map_err(|e| VmError::io("the agent's hold line", e))?;
        let mut s = tokio::io::BufReader::new(stream);
        proto::write_line(&mut s, &Request::Hold)
            .await
            .map_err(|e| VmError::io("the agent's hold line", e))?;
        match proto::read_line::<_, Answer>(&mut s).await {
            Ok(a) if a.ok => Ok(s),
            other => Err(VmError::engine(format!(
                "the agent refused the hold line: {other:?}"
            ))),
        }
    }

    /// A connection to the agent through `pods/portforward`, past its token check. While a
    /// resumed Sandbox comes back, it waits (at most two minutes).
    pub async fn agent(&self) -> std::io::Result<Stream> {
        let mut ready = self.ready.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(120), async {
            ready.wait_for(|r| *r).await.is_ok()
        })
        .await;
        if !matches!(waited, Ok(true)) {
            return Err(std::io::Error::other("the instance did not come back"));
        }
        self.connect().await
    }

    async fn connect(&self) -> std::io::Result<Stream> {
        let pod = lock(&self.pod);
        let stream = ws::port_forward(&self.api, &pod, AGENT_PORT)
            .await
            .map_err(std::io::Error::other)?;
        remote::hello(stream, &self.token).await
    }

    pub async fn sync_logs(&self) -> std::io::Result<()> {
        if self.exit_status().is_some() || self.is_frozen() {
            return Ok(());
        }
        let _one = self.log_sync.lock().await;
        remote::pull_logs(&self.dir, self.agent().await?).await
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    pub async fn wait(&self) -> ExitStatus {
        proto::wait_exit(&self.exit).await
    }

    pub fn is_frozen(&self) -> bool {
        lock(&self.paused)
    }

    fn incarnation(&self) -> u64 {
        self.incarnation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether what a task of pod `incarnation` saw is about the instance: not while it is
    /// suspended, nor once a suspension took that pod away.
    fn still(&self, incarnation: u64) -> bool {
        !self.is_frozen() && self.incarnation() == incarnation
    }

    /// A Sandbox is suspended (`operatingMode: Suspended`): its pod is deleted, so its
    /// processes are lost; a plain Pod cannot pause.
    pub fn pause(self: &Arc<Self>) -> VmResult<()> {
        match self.kind {
            Kind::Sandbox => {}
            Kind::Pod => {
                return Err(VmError::Unsupported(
                    "backend kube: a plain Pod cannot pause (the cluster has no agent-sandbox CRDs)"
                        .into(),
                ));
            }
            Kind::Claim => {
                return Err(VmError::Unsupported(
                    "backend kube: a warm pool's Sandbox cannot pause: its pod would come back from the \
                     pool's template without the agent's start"
                        .into(),
                ));
            }
        }
        set(&self.paused, true);
        self.incarnation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // `send_replace`: `send` stores nothing while no one waits, and no one does yet.
        self.ready.send_replace(false);
        let me = self.clone();
        tokio::spawn(async move {
            let patch = json!({ "spec": { "operatingMode": "Suspended" } });
            if let Err(e) = me.api.merge_patch(&me.object_path(), &patch).await {
                tracing::warn!(instance = me.id, "suspending the Sandbox: {e}");
            }
        });
        Ok(())
    }

    /// Back to `Running`: a new pod, the agent put in again, the main command started again.
    pub fn resume(self: &Arc<Self>) -> VmResult<()> {
        if !self.is_frozen() {
            return Ok(());
        }
        set(&self.paused, false);
        let me = self.clone();
        tokio::spawn(async move {
            let patch = json!({ "spec": { "operatingMode": "Running" } });
            let result = match me.api.merge_patch(&me.object_path(), &patch).await {
                Err(e) => Err(VmError::from(e)),
                Ok(_) => me.bring_up(Instant::now() + Duration::from_secs(120)).await,
            };
            me.ready.send_replace(true);
            if let Err(e) = result {
                tracing::warn!(instance = me.id, "resuming the Sandbox: {e}");
                me.end(ExitStatus {
                    code: -1,
                    signal: None,
                })
                .await;
            }
        });
        Ok(())
    }

    pub async fn force_end(&self) {
        self.end(ExitStatus {
            code: -1,
            signal: Some(9),
        })
        .await;
    }

    /// For the synchronous paths: the deletion goes on in the background.
    pub fn kill(self: &Arc<Self>) {
        let me = self.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { me.force_end().await });
        }
    }

    async fn delete_object(&self) {
        if let Err(e) = self.api.delete(&self.object_path(), 0).await {
            tracing::warn!(instance = self.id, "deleting {}: {e}", self.name);
        }
    }

    /// The instance is over: its object deleted, then the status published.
    async fn end(&self, status: ExitStatus) {
        if self.exit_status().is_some() {
            return;
        }
        self.delete_object().await;
        let _ = self
            .exit_tx
            .send(Some(lock(&self.main_exit).unwrap_or(status)));
    }
}

/// The agent ends the instance by closing this line (it stopped everything and exits), and
/// the line breaks when the pod goes. Unless the Sandbox was suspended on purpose — even if
/// it was resumed by the time the break is seen — that is the instance's end.
async fn hold_until_end(
    pod: Arc<KubePod>,
    mut hold: tokio::io::BufReader<Stream>,
    incarnation: u64,
) {
    let mut sink = [0u8; 64];
    while matches!(hold.read(&mut sink).await, Ok(n) if n > 0) {}
    if !pod.still(incarnation) {
        return;
    }
    pod.end(ExitStatus {
        code: 0,
        signal: None,
    })
    .await;
}

async fn watch_main(pod: Arc<KubePod>, incarnation: u64) {
    let Some(status) = remote::wait_main(pod.agent().await).await else {
        return;
    };
    // The main command of a pod a suspension took away: the resume starts it again.
    if !pod.still(incarnation) {
        return;
    }
    set(&pod.main_exit, Some(status));
    let main_ended = pod.main_ended;
    main_ended(pod).await;
}

/// Keep the Sandbox's `shutdownTime` a lease ahead, so a server that is gone (even with its
/// host) leaves nothing running for longer than that.
async fn renew_lease(pod: std::sync::Weak<KubePod>) {
    loop {
        let Some(p) = pod.upgrade() else { return };
        let every = (p.lease / 3).max(Duration::from_secs(1));
        drop(p);
        tokio::time::sleep(every).await;
        let Some(p) = pod.upgrade() else { return };
        if p.exit_status().is_some() {
            return;
        }
        let until = rfc3339(SystemTime::now() + p.lease);
        let patch = match p.kind {
            Kind::Claim => json!({ "spec": { "lifecycle": { "shutdownTime": until } } }),
            _ => json!({ "spec": { "shutdownTime": until } }),
        };
        match p.api.merge_patch(&p.object_path(), &patch).await {
            Ok(_) => {}
            Err(e) if e.code() == Some(404) => return,
            Err(e) => tracing::warn!(instance = p.id, "renewing the Sandbox's lease: {e}"),
        }
    }
}

/// The warm pool must exist: a claim on a missing one would wait for nothing.
async fn check_pool(api: &Api, pool: &str) -> VmResult<()> {
    let path = format!(
        "/apis/{}/{}/namespaces/{}/sandboxwarmpools/{pool}",
        manifest::CLAIM_GROUP,
        manifest::SANDBOX_VERSION,
        api.namespace()
    );
    match api.get(&path).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(404) => Err(VmError::Invalid {
            field: "image",
            message: format!(
                "no SandboxWarmPool named {pool:?} in namespace {}",
                api.namespace()
            ),
        }),
        Err(e) => Err(VmError::engine(format!("reading warm pool {pool}: {e}"))),
    }
}

/// A refused create: the caller's image or limits when the API server names them.
fn creation_error(kind: Kind, e: KubeError) -> VmError {
    match &e {
        KubeError::Status {
            code: 422 | 400,
            message,
            ..
        } if message.contains("image") => VmError::Invalid {
            field: "image",
            message: message.clone(),
        },
        KubeError::Status {
            code: 403, message, ..
        } => VmError::missing(format!(
            "not allowed to create a {}: {message}",
            kind.name()
        )),
        _ => VmError::engine(format!("creating the {}: {e}", kind.name())),
    }
}
/// What to create: a SandboxClaim for a warm pool, a Sandbox where agent-sandbox is
/// served, else a plain Pod.
fn choose_kind(probe: &super::Probe, warm_pool: bool) -> VmResult<Kind> {
    Ok(match warm_pool {
        true if !probe.claims => {
            return Err(VmError::Invalid {
                field: "image",
                message: "a warm pool needs agent-sandbox's SandboxClaims \
                          (extensions.agents.x-k8s.io/v1beta1), which this cluster does not serve"
                    .into(),
            });
        }
        true => Kind::Claim,
        false if probe.sandboxes => Kind::Sandbox,
        false => Kind::Pod,
    })
}

/// `network: "none"`: a deny-all NetworkPolicy owned by the object. Without it the pod has
/// the cluster's network: the object is deleted and the spawn refused rather than pretend.
async fn isolate(api: &Api, kind: Kind, name: &str, id: &str, created: &Value) -> VmResult<()> {
    let policy = manifest::deny_all_policy(name, id, created);
    if let Err(e) = api
        .create(&manifest::policies(api.namespace()), &policy)
        .await
    {
        let _ = api
            .delete(&format!("{}/{name}", kind.collection(api.namespace())), 0)
            .await;
        return Err(VmError::engine(format!(
            "network \"none\" needs a NetworkPolicy, which the cluster refused ({e}); spawn with network: \"outbound\" to run without one"
        )));
    }
    Ok(())
}

/// A pod's pause, resume and kill go on in tasks of their own that hold it: the engine holds
/// it by its `Arc`.
impl Backend for Arc<KubePod> {
    fn name(&self) -> &'static str {
        "kube"
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn pid(&self) -> i32 {
        0
    }

    fn exit(&self) -> &watch::Receiver<Option<ExitStatus>> {
        &self.exit
    }

    fn agent(&self) -> BoxFuture<'_, std::io::Result<Stream>> {
        Box::pin(KubePod::agent(self))
    }

    fn sync_logs(&self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(KubePod::sync_logs(self))
    }

    fn is_frozen(&self) -> bool {
        KubePod::is_frozen(self)
    }

    fn pause_method(&self) -> &'static str {
        "sandbox_suspend"
    }

    fn pause(&self) -> VmResult<()> {
        KubePod::pause(self)
    }

    fn resume(&self) -> VmResult<()> {
        KubePod::resume(self)
    }

    fn usage(&self) -> crate::cgroup::Usage {
        crate::cgroup::Usage::default()
    }

    fn disk(&self) -> Option<DiskInfo> {
        self.disk.clone()
    }

    fn limits_enforced(&self) -> (bool, Option<String>) {
        (
            true,
            Some("the pod's resources.limits (memory, cpu), enforced by its node".into()),
        )
    }

    /// A suspended Sandbox has no processes to stop: resuming it would start a pod only to
    /// stop it again.
    fn before_stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if KubePod::is_frozen(self) {
                KubePod::force_end(self).await;
            }
        })
    }

    fn force_end(&self) -> BoxFuture<'_, ()> {
        Box::pin(KubePod::force_end(self))
    }

    fn kill(&self) {
        KubePod::kill(self)
    }

    fn cleanup(&self) {}
}
