//! A child's life in the hub: started (at once, or on its first call), restarted after a
//! crash (at most MAX_CRASHES in CRASH_WINDOW), stopped at exit, and a config reload that
//! starts, stops and replaces children while their calls finish.

use super::child::{Child, ChildClient, State, connect, kill_group};
use super::{CRASH_WINDOW, Hub, MAX_CRASHES, ReloadReport};

use kitbag_shared::lock::LockExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::failure::{RELOAD_DRAIN_LIMIT, StartFailure};
use kitbag_config::entry::ServerSpec;
use kitbag_config::settings::DEFAULT_STARTUP_TIMEOUT;

impl Hub {
    /// Start every enabled child in parallel; returns when each is ready or has failed.
    pub async fn start_all(self: &Arc<Self>) {
        let ids: Vec<u64> = self.lock().iter().map(|c| c.id).collect();
        let ids = self.start_in_background(ids);
        let starts: Vec<_> = ids.into_iter().map(|id| self.clone().start(id)).collect();
        futures::future::join_all(starts).await;
        // The first list is what the client will fetch: nothing to announce.
        *self.last_notified.locked() = Some(self.fingerprint());
    }

    /// Boxed with an explicit `Send` bound: start → crash → restart → start is recursive.
    pub(crate) fn start(self: Arc<Self>, id: u64) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            let (entry, name, generation, preset_error) = {
                let mut c = self.lock();
                let Some(child) = c.iter_mut().find(|c| c.id == id) else {
                    return;
                };
                // An idle server starts on its first call (`wake`), which marks it Starting.
                if matches!(child.state, State::Disabled | State::Skipped | State::Idle) {
                    return;
                }
                child.generation += 1;
                child.started = Some(Instant::now());
                (
                    child.spec.entry.clone(),
                    child.spec.name.clone(),
                    child.generation,
                    child.spec.error.clone(),
                )
            };
            if let Some(e) = preset_error {
                self.mark_failed(id, e);
                return;
            }
            let started = Instant::now();
            let timeout = entry
                .startup_timeout_sec
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT);
            let client = ChildClient {
                name: name.clone(),
                id,
                hub: self.me.clone(),
            };
            let config_file = self.config_file.clone();
            // Starting means: spawned, handshake done, tools listed, catalog read — all under
            // the startup timeout. Until it is ready the child's process group is killed when
            // this future ends any other way (error, timeout, drop).
            let start = async {
                let (running, guard, link) =
                    connect(&entry, client, config_file.as_deref()).await?;
                let peer = running.peer().clone();
                peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
                    .await;
                let tools = peer
                    .list_all_tools()
                    .await
                    .map_err(|e| StartFailure::ToolsList(e.to_string()))?;
                let catalog = crate::child_catalog::fetch(&name, &peer).await;
                Ok::<_, StartFailure>((running, guard, link, peer, tools, catalog))
            };
            let result = match tokio::time::timeout(timeout, start).await {
                Ok(r) => r,
                Err(_) => Err(StartFailure::Timeout {
                    secs: timeout.as_secs(),
                }),
            };
            match result {
                Ok((running, guard, link, peer, tools, catalog)) => {
                    let stop = running.cancellation_token();
                    {
                        let mut c = self.lock();
                        let current = c
                            .iter_mut()
                            .find(|c| c.id == id)
                            .filter(|c| c.generation == generation && !c.stopping);
                        let Some(child) = current else {
                            // Removed or restarted while it was starting: nobody will ever
                            // stop this process; dropping the guard stops it now.
                            drop(guard);
                            return;
                        };
                        let pid = guard.ready();
                        // A lazy external server's catalog, kept for the next host when it
                        // is new or changed.
                        let keep = (child.spec.entry.lazy == Some(true)
                            && (child.tools != *tools
                                || child.catalog.families != catalog.families))
                            .then(|| (child.spec.entry.clone(), tools.clone(), catalog.families));
                        if let (Some((entry, tools, families)), Some(cache)) =
                            (keep, self.catalogs.clone())
                        {
                            tokio::task::spawn_blocking(move || {
                                if let Err(e) = cache.save(&entry, &tools, families) {
                                    tracing::warn!("keeping the catalog of a lazy server: {e}");
                                }
                            });
                        }
                        child.peer = Some(peer);
                        child.fast = link;
                        // The same list as known keeps the compiled catalog (its text).
                        if child.tools != *tools {
                            child.tools = super::Tools::parsed(tools);
                        }
                        child.catalog = catalog;
                        child.pid = pid;
                        child.state = State::Ready;
                        child.ready_ms = Some(started.elapsed().as_millis() as u64);
                        child.stop = Some(stop);
                        child.last_error = None;
                        if let Some(after) = child.idle_stop {
                            self.stop_when_idle(id, generation, &child.calls, after);
                        }
                    }
                    self.settled.send_modify(|n| *n += 1);
                    self.invalidate_flat();
                    tracing::info!(server = %name, "ready in {} ms", started.elapsed().as_millis());
                    let hub = self.clone();
                    tokio::spawn(async move {
                        let _ = running.waiting().await;
                        hub.on_exit(id, generation).await;
                    });
                    // A restarted child holds none of the subscriptions its clients hold.
                    let hub = self.clone();
                    tokio::spawn(async move { hub.resubscribe(id).await });
                    self.notify_list_changed().await;
                }
                Err(e) => {
                    let login = e.awaited_login();
                    self.mark_failed(id, e.to_string());
                    if let Some(tokens) = login {
                        self.start_after_login(id, generation, tokens);
                    }
                }
            }
        })
    }

    /// A remote server waiting for `kitbag auth login`: started again once its token file
    /// appears (checked each second while it stays failed), so no reload is needed.
    fn start_after_login(self: &Arc<Self>, id: u64, generation: u64, tokens: std::path::PathBuf) {
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(hub) = hub.upgrade() else { return };
                let waiting = hub
                    .lock()
                    .iter()
                    .any(|c| c.id == id && c.generation == generation && c.state == State::Failed);
                if !waiting {
                    return;
                }
                if tokens.exists() {
                    hub.start(id).await;
                    return;
                }
            }
        });
    }

    fn mark_failed(&self, id: u64, reason: String) {
        let mut c = self.lock();
        if let Some(child) = c.iter_mut().find(|c| c.id == id) {
            tracing::warn!(server = %child.spec.name, "failed: {reason}");
            child.state = State::Failed;
            child.last_error = Some(reason);
        }
        drop(c);
        self.settled.send_modify(|n| *n += 1);
    }

    /// Wait until no child is starting — at most the longest startup timeout among them.
    /// A server a reload starts (or replaces) lists its tools only once it is ready: a call
    /// that comes in meanwhile waits here, then goes to the new server if it has the tool,
    /// or is an unknown tool. Outside a reload nothing is starting and this returns at once
    /// (crash restarts are `Restarting`, answered at once with "try again").
    pub async fn settle(&self) {
        let mut rx = self.settled.subscribe();
        let starting = |c: &Child| c.state == State::Starting;
        let limit = self
            .lock()
            .iter()
            .filter(|c| starting(c))
            .map(|c| {
                c.spec
                    .entry
                    .startup_timeout_sec
                    .map(Duration::from_secs)
                    .unwrap_or(DEFAULT_STARTUP_TIMEOUT)
            })
            .max();
        let Some(limit) = limit else { return };
        // Beyond the startup timeout: a child's first tools/list is not under it. Capped, so
        // that a config's huge `startup_timeout_sec` cannot overflow the deadline.
        let wait = limit
            .saturating_add(Duration::from_secs(5))
            .min(Duration::from_secs(24 * 3600));
        let deadline = tokio::time::Instant::now() + wait;
        // Subscribed before looking: a child that becomes ready in between still wakes us.
        while self.lock().iter().any(starting) {
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                // Out of time, or no sender (the hub is going away): answer with what is.
                _ => return,
            }
        }
    }

    /// A child went away: restart with backoff, or give up after repeated crashes.
    async fn on_exit(self: Arc<Self>, id: u64, generation: u64) {
        let delay = {
            let mut c = self.lock();
            let Some(child) = c.iter_mut().find(|c| c.id == id) else {
                return;
            };
            if child.generation != generation || child.stopping {
                return; // a deliberate stop, or an older incarnation
            }
            if let Some(pid) = child.pid.take() {
                kill_group(pid);
            }
            child.peer = None;
            child.fast = None;
            let now = Instant::now();
            child.crashes.push_back(now);
            while child
                .crashes
                .front()
                .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
            {
                child.crashes.pop_front();
            }
            if child.crashes.len() >= MAX_CRASHES {
                child.state = State::Failed;
                child.last_error = Some(format!(
                    "crashed {MAX_CRASHES} times within {} s; not restarted",
                    CRASH_WINDOW.as_secs()
                ));
                return;
            }
            child.state = State::Restarting;
            child.restarts += 1;
            child.last_error = Some("the server exited; restarting".into());
            // 1 s, doubling per recent crash, at most 30 s.
            Duration::from_secs((1u64 << (child.crashes.len() - 1).min(5)).min(30))
        };
        tokio::time::sleep(delay).await;
        self.start(id).await;
    }

    /// Stop every child and its process group, and wait (at most `grace`) for them to be
    /// gone: a child given time to exit stops what it started (a shell's contained jobs, a
    /// language server) — killed mid-cleanup, those would outlive the host.
    pub fn stop_all(&self, grace: Duration) {
        let mut groups: Vec<u32> = self.lock().iter_mut().filter_map(Child::detach).collect();
        let retiring = std::mem::take(&mut *self.retiring.locked());
        groups.extend(retiring.into_iter().filter_map(|mut c| c.detach()));
        let groups: Vec<i32> = groups.into_iter().map(|p| p as i32).collect();
        kitbag_shared::process::terminate_groups(&groups, grace);
    }

    /// Stop a child a reload took out of the config, once the calls in flight on it have
    /// finished (at most [`RELOAD_DRAIN_LIMIT`]; then it is stopped anyway and those calls
    /// get `server_unavailable`). It is already out of the list, so no new call reaches it.
    fn retire(self: &Arc<Self>, mut child: Child) {
        child.stopping = true;
        child
            .calls
            .retired
            .store(true, std::sync::atomic::Ordering::Release);
        let in_flight = child.calls.in_flight();
        if in_flight == 0 {
            child.stop();
            return;
        }
        let (id, name, calls) = (child.id, child.spec.name.clone(), child.calls.clone());
        tracing::info!(server = %name, "reload: stopping after its {in_flight} call(s) in flight");
        self.retiring.locked().push(child);
        let hub = self.clone();
        tokio::spawn(async move {
            if !calls.idle_within(RELOAD_DRAIN_LIMIT).await {
                tracing::warn!(
                    server = %name,
                    "reload: calls still in flight after {} s; stopping it anyway",
                    RELOAD_DRAIN_LIMIT.as_secs()
                );
                // The calls answer and cancel themselves (see `Calls::cut_off`); they need
                // no more than a turn of the runtime, the bound is for safety only.
                calls.cut_off.cancel();
                let _ = calls.idle_within(Duration::from_secs(1)).await;
            }
            let child = {
                let mut r = hub.retiring.locked();
                r.iter().position(|c| c.id == id).map(|i| r.swap_remove(i))
            };
            // None: stop_all got there first.
            if let Some(mut child) = child {
                child.stop();
            }
        });
    }

    /// Apply a new config: unchanged servers keep running, changed and new ones start,
    /// removed ones stop. The client connection is kept; `list_changed` tells it.
    ///
    /// The new list is in force at once: a call that starts after this goes to the new
    /// child of its tool, or is an unknown tool. A removed or changed child is stopped only
    /// once its calls in flight are answered (see `retire`), so a step in progress keeps its
    /// server while the next one sees the new catalog.
    pub async fn reload(self: &Arc<Self>, specs: Vec<ServerSpec>) -> ReloadReport {
        let mut report = ReloadReport::default();
        let (to_start, retired): (Vec<u64>, Vec<Child>) = {
            let mut c = self.lock();
            let mut old: Vec<Child> = std::mem::take(&mut *c);
            let mut new = Vec::with_capacity(specs.len());
            let mut to_start = Vec::new();
            for spec in specs {
                match old.iter().position(|o| {
                    o.spec.name == spec.name
                        && o.spec.entry == spec.entry
                        && o.spec.error == spec.error
                        && o.spec.skipped == spec.skipped
                }) {
                    Some(pos) => {
                        report.unchanged.push(spec.name.clone());
                        new.push(old.remove(pos));
                    }
                    None => {
                        let id = self
                            .next_id
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        report.started.push(spec.name.clone());
                        to_start.push(id);
                        let tools =
                            super::known_now(self.known.as_ref(), self.catalogs.as_ref(), &spec);
                        new.push(Child::new(spec, id, tools));
                    }
                }
            }
            for gone in &old {
                report.stopped.push(gone.spec.name.clone());
            }
            *c = new;
            (to_start, old)
        };
        self.invalidate_flat();
        self.note_idle();
        for gone in retired {
            self.retire(gone);
        }
        let to_start = self.start_in_background(to_start);
        futures::future::join_all(to_start.into_iter().map(|id| self.clone().start(id))).await;
        self.notify_list_changed().await;
        report
    }

    /// Of `ids`, the idle servers that run from the start all the same (`Known::start_now`):
    /// started now, without waiting for them — their tools are listed already. Returns the
    /// others, to start as usual.
    fn start_in_background(self: &Arc<Self>, ids: Vec<u64>) -> Vec<u64> {
        let (now, others): (Vec<u64>, Vec<u64>) = {
            let c = self.lock();
            ids.into_iter().partition(|id| {
                c.iter()
                    .any(|c| c.id == *id && c.start_now && c.state == State::Idle)
            })
        };
        for id in now {
            let hub = self.clone();
            tokio::spawn(async move { hub.wake(id).await });
        }
        others
    }

    pub async fn refresh_tools(&self, name: &str) {
        let peer = {
            let c = self.lock();
            c.iter()
                .find(|c| c.spec.name == name)
                .and_then(|c| c.peer.clone())
        };
        if let Some(peer) = peer
            && let Ok(tools) = peer.list_all_tools().await
        {
            let changed = {
                let mut c = self.lock();
                match c.iter_mut().find(|c| c.spec.name == name) {
                    Some(child) if child.tools != *tools => {
                        child.tools = super::Tools::parsed(tools);
                        true
                    }
                    _ => false,
                }
            };
            if changed {
                self.invalidate_flat();
                self.notify_list_changed().await;
            }
        }
    }
}
