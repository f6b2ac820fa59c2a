//! 2026-07-28 calls whose child may ask the client something mid-call (SEP-2322), for both
//! fronts — HTTP (`http.rs`) and stdio (`stdio.rs`): a plain call is driven through `mrtr.rs`,
//! so what its child asks (an elicitation, a sample, the roots) becomes an
//! `InputRequiredResult`; a call that carries `inputResponses` / `requestState` resumes its
//! parked call, or starts one with the answers given in advance.

use std::sync::Arc;

use futures::future::BoxFuture;
use kitbag_shared::http::{Answer, Principal};
use kitbag_shared::otel::Propagate;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::fastpath::{self, FastLink};
use crate::mrtr::Caps;
use crate::serve::HostServer;

/// A call under way: what cancels it at its child, and its answer to come.
pub struct Asking {
    /// The client's request id, as it wrote it.
    pub id: String,
    pub link: Arc<FastLink>,
    pub child_id: String,
    pub answer: BoxFuture<'static, Answer>,
}

/// Where a call comes from: its caller (HTTP), its trace context, its own span when the
/// front opened one, and why its child's call is cancelled if the answer is dropped
/// unawaited.
pub struct From<'a> {
    pub principal: Option<&'a Principal>,
    pub trace: Option<&'a Propagate>,
    pub span: Option<kitbag_shared::otel::Span>,
    pub gone: &'static str,
}

/// A call with `inputResponses` / `requestState`, as this module takes it on.
pub enum InputCall {
    /// A first call, with answers given in advance.
    Start(Asking),
    /// A retry: its parked call resumes (or the error saying why it cannot).
    Resume(BoxFuture<'static, Answer>),
}

/// A `tools/call` as SEP-2322 shapes its retries.
#[derive(serde::Deserialize)]
struct Retry<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    params: RetryParams<'a>,
}

#[derive(serde::Deserialize)]
struct RetryParams<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", default)]
    meta: Option<Value>,
    /// `Some` also for `null` (a protocol error to answer, not an absent field).
    #[serde(
        rename = "inputResponses",
        borrow,
        default,
        deserialize_with = "present"
    )]
    input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", default)]
    request_state: Option<String>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// A string key of a request's `_meta` (its W3C trace context).
fn meta_text(meta: &Option<Value>, key: &str) -> Option<std::borrow::Cow<'static, str>> {
    let text = meta.as_ref()?.get(key)?.as_str()?;
    Some(std::borrow::Cow::Owned(text.to_owned()))
}

/// A request's `params._meta`, parsed (only on the 2026-07-28 path, which needs its declared
/// client capabilities).
pub fn request_meta(text: &str) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Peek {
        params: PeekParams,
    }
    #[derive(serde::Deserialize)]
    struct PeekParams {
        #[serde(rename = "_meta", default)]
        meta: Option<Value>,
    }
    serde_json::from_str::<Peek>(text).ok()?.params.meta
}

/// The tool a parked call's state is sealed to, with who called it: another caller's token
/// cannot resume it (a token without a subject is its own caller: see
/// `kitbag_shared::http::oauth::unnamed_subject`).
fn bound_tool(tool: &str, principal: Option<&Principal>) -> String {
    match principal {
        Some(p) => format!("{tool}\u{0}{}", p.subject),
        None => tool.to_owned(),
    }
}

/// A 2026-07-28 call through the byte path, its child's requests turned into an
/// `InputRequiredResult` (`meta`: the request's `_meta`, with the client's capabilities;
/// `supplied`: answers given in advance).
pub fn modern_call(
    host: &HostServer,
    call: &fastpath::FastCall<'_>,
    meta: &Option<Value>,
    supplied: Map<String, Value>,
    from: From<'_>,
) -> Option<Asking> {
    let From {
        principal,
        trace,
        span,
        gone,
    } = from;
    let registry = host.hub.mrtr().clone();
    let child = host.hub.route(call.name.as_ref())?.child_id;
    let slot = registry.slot(child, Caps::from_meta(meta.as_ref()), supplied);
    let pending = crate::access::as_caller_sync(principal.cloned(), || {
        host.pipeline().start_bytes(call, trace)
    })?
    .with_span(span);
    let (link, child_id) = (pending.link.clone(), pending.child_id.clone());
    let stop = fastpath::CancelOnDrop {
        link: link.clone(),
        child_id: child_id.clone(),
        reason: gone,
    };
    let tool = bound_tool(call.name.as_ref(), principal);
    let id = call.id.get().to_owned();
    let answer = Box::pin(async move {
        let answer: crate::mrtr::CallFuture = Box::pin(pending.answer(|| true));
        registry.drive(answer, slot, &tool, stop, &id).await
    });
    Some(Asking {
        id: call.id.get().to_owned(),
        link,
        child_id,
        answer,
    })
}

/// A `tools/call` with `inputResponses` and/or `requestState` (SEP-2322): a retry resumes
/// its parked call; a first call with responses given in advance starts with them. `None`
/// for any other line, or a call `agree` turns down (the HTTP front's header checks).
pub fn input_call(
    host: &HostServer,
    text: &str,
    principal: Option<&Principal>,
    trace: Option<&Propagate>,
    agree: &dyn Fn(&fastpath::FastCall<'_>) -> bool,
    gone: &'static str,
) -> Option<InputCall> {
    let req: Retry<'_> = serde_json::from_str(text).ok()?;
    let p = &req.params;
    if req.method != "tools/call" || (p.input_responses.is_none() && p.request_state.is_none()) {
        return None;
    }
    let modern = p
        .meta
        .as_ref()
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str)
        == Some(fastpath::MODERN_VERSION);
    let call = fastpath::FastCall {
        id: req.id,
        name: p.name.clone(),
        arguments: p.arguments,
        modern,
        traceparent: meta_text(&p.meta, "traceparent"),
        tracestate: meta_text(&p.meta, "tracestate"),
        baggage: meta_text(&p.meta, "baggage"),
    };
    if !modern || !agree(&call) {
        return None;
    }
    let id = req.id.get().to_owned();
    let refuse = |message: String| -> Option<InputCall> {
        let line = fastpath::protocol_error_line(&id, -32602, &message);
        Some(InputCall::Resume(Box::pin(
            async move { Answer::unread(line) },
        )))
    };
    let responses = match p
        .input_responses
        .map(|r| serde_json::from_str::<Value>(r.get()))
    {
        None => Map::new(),
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            return refuse(
                "inputResponses: must be an object whose keys are the inputRequests keys and whose values are the client's results".into(),
            );
        }
    };
    if let Some((key, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
        return refuse(format!(
            "inputResponses.{key}: must be an object (the result of that input request)"
        ));
    }
    let Some(state) = p.request_state.clone() else {
        let trace = trace.cloned().or_else(|| call.passthrough());
        let from = From {
            principal,
            trace: trace.as_ref(),
            span: None,
            gone,
        };
        return modern_call(host, &call, &p.meta, responses, from).map(InputCall::Start);
    };
    let registry = host.hub.mrtr().clone();
    let tool = bound_tool(&p.name, principal);
    Some(InputCall::Resume(Box::pin(async move {
        match registry.resume(&state, &tool, &responses, &id).await {
            Ok(answer) => answer,
            Err(e) => Answer::unread(fastpath::protocol_error_line(&id, -32602, &e.to_string())),
        }
    })))
}

/// Whether a 2026-07-28 call's client declared something its child could ask for
/// (elicitation, sampling, roots): only such calls need `mrtr.rs`. The bytes are looked at
/// first so that the usual call is not parsed twice.
pub fn may_ask(text: &str) -> bool {
    let found = |word: &[u8]| memchr::memmem::find(text.as_bytes(), word).is_some();
    if !(found(b"\"elicitation\"") || found(b"\"sampling\"") || found(b"\"roots\"")) {
        return false;
    }
    let caps = Caps::from_meta(request_meta(text).as_ref());
    caps != Caps::default()
}

/// Whether a line may be a SEP-2322 retry (`inputResponses` / `requestState`).
pub fn may_be_retry(text: &str) -> bool {
    let found = |word: &[u8]| memchr::memmem::find(text.as_bytes(), word).is_some();
    found(b"\"inputResponses\"") || found(b"\"requestState\"")
}
