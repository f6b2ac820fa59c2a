//! `?watch=true`: newline-separated JSON events (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`,
//! `ERROR`) on a chunked response, as the apiserver streams them.
//!
//! Start point: no `resourceVersion` (or `"0"`, or `sendInitialEvents=true`) sends the current
//! objects as synthetic `ADDED` events first; a resourceVersion replays the history after it,
//! or — when it is older than the kept history — one `ERROR` event with a `410 Expired`
//! Status, and the stream ends. Selectors apply per event: an object that stops matching
//! is seen `DELETED`, one that starts matching `ADDED`. With `allowWatchBookmarks=true` a
//! `BOOKMARK` goes out every 2 s and when `timeoutSeconds` ends the watch.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::Inner;
use super::http::{Query, Resp, error_response, q_get, q_true};
use super::resources::Resource;
use super::select::Filter;
use super::store::{ApiError, Event, EventType};

pub const BOOKMARK_EVERY: Duration = Duration::from_secs(2);

/// What one watch sees.
struct Scope {
    plural: String,
    ns: Option<String>,
    filter: Filter,
}

impl Scope {
    fn in_scope(&self, ev: &Event) -> bool {
        ev.plural == self.plural && self.ns.as_ref().is_none_or(|n| *n == ev.ns)
    }

    /// The event as this watch reports it, if at all.
    fn view(&self, ev: &Event) -> Option<(&'static str, Value)> {
        if !self.in_scope(ev) {
            return None;
        }
        let now = self.filter.matches(&ev.object);
        let kind = match ev.kind {
            EventType::Modified => {
                let before = ev.old.as_ref().is_some_and(|o| self.filter.matches(o));
                match (before, now) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return None,
                }
            }
            k if now => k.as_str(),
            _ => return None,
        };
        Some((kind, ev.object.clone()))
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

fn bookmark(r: &Resource, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": meta}),
    )
}

/// The events before following (a snapshot as ADDED, or the history after `start`), the
/// subscription, the resourceVersion they reach, and whether `start` is too old — taken
/// under the store's lock so that the snapshot and the subscription agree.
fn start_point(
    inner: &Inner,
    scope: &Scope,
    start: Option<u64>,
    initial: bool,
) -> (Vec<Bytes>, broadcast::Receiver<Arc<Event>>, u64, bool) {
    let store = inner.store();
    let sub = store.subscribe();
    let at = store.current_rv();
    match start {
        Some(n) if !initial && n < store.compacted() => (Vec::new(), sub, at, true),
        Some(n) if !initial => {
            let lines: Vec<Bytes> = store
                .since(n)
                .iter()
                .filter_map(|e| scope.view(e).map(|(k, o)| line(k, &o)))
                .collect();
            (lines, sub, at, false)
        }
        _ => {
            let lines: Vec<Bytes> = store
                .list(&scope.plural, scope.ns.as_deref())
                .into_iter()
                .filter(|o| scope.filter.matches(o))
                .map(|o| line("ADDED", &o))
                .collect();
            (lines, sub, at, false)
        }
    }
}

pub fn watch(
    inner: Arc<Inner>,
    r: &'static Resource,
    ns: Option<String>,
    filter: Filter,
    q: &Query,
) -> Resp {
    let scope = Scope {
        plural: r.plural.to_string(),
        ns,
        filter,
    };
    let rv = q_get(q, "resourceVersion").unwrap_or_default().to_string();
    let initial = q_true(q, "sendInitialEvents");
    let bookmarks = q_true(q, "allowWatchBookmarks");
    let timeout = q_get(q, "timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let start: Option<u64> = match rv.as_str() {
        "" | "0" => None,
        v => match v.parse() {
            Ok(n) => Some(n),
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resource version: {v:?}"
                )));
            }
        },
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let (first, sub, at, expired) = start_point(&inner, &scope, start, initial);
    let task = Follow {
        inner: inner.clone(),
        r,
        scope,
        tx,
        sub,
        last: at,
        bookmarks,
        timeout,
    };
    tokio::spawn(async move {
        if expired {
            let status = ApiError::new(
                410,
                "Expired",
                format!(
                    "too old resource version: {} ({})",
                    start.unwrap_or(0),
                    task.inner.store().compacted() + 1
                ),
            )
            .status();
            let _ = task.tx.send(line("ERROR", &status)).await;
            return;
        }
        for l in first {
            if task.tx.send(l).await.is_err() {
                return;
            }
        }
        if initial && bookmarks {
            let _ = task.tx.send(bookmark(r, at, true)).await;
        }
        task.run().await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = hyper::Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

struct Follow {
    inner: Arc<Inner>,
    r: &'static Resource,
    scope: Scope,
    tx: mpsc::Sender<Bytes>,
    sub: broadcast::Receiver<Arc<Event>>,
    /// The newest resourceVersion sent (or seen).
    last: u64,
    bookmarks: bool,
    timeout: Option<Duration>,
}

impl Follow {
    async fn send_event(&mut self, ev: &Event) -> bool {
        if ev.rv <= self.last {
            return true;
        }
        self.last = ev.rv;
        match self.scope.view(ev) {
            Some((k, o)) => self.tx.send(line(k, &o)).await.is_ok(),
            None => true,
        }
    }

    async fn run(mut self) {
        let end = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        let cancel = self.inner.cancel.clone();
        loop {
            let until_end = async {
                match end {
                    Some(e) => tokio::time::sleep_until(e).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.tx.closed() => return,
                _ = until_end => {
                    if self.bookmarks {
                        let _ = self.tx.send(bookmark(self.r, self.last, false)).await;
                    }
                    return;
                }
                _ = tick.tick(), if self.bookmarks => {
                    if self.tx.send(bookmark(self.r, self.last, false)).await.is_err() {
                        return;
                    }
                }
                ev = self.sub.recv() => match ev {
                    Ok(ev) => {
                        if !self.send_event(&ev).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Catch up from the history (still there: it is far longer than
                        // the channel's lag).
                        let backlog = self.inner.store().since(self.last);
                        for ev in backlog {
                            if !self.send_event(&ev).await {
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }
}
