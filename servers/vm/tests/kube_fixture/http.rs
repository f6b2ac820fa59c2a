//! The HTTP/1.1 server: bearer-token check, request log, routing of discovery, resource
//! and subresource paths. Every error is a `metav1.Status`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::Inner;
use super::api::{self, DeleteOptions};
use super::resources::{self, Resource};
use super::select::{FieldSelector, Filter, LabelSelector};
use super::store::{ApiError, ApiResult, key, name_of};

pub type Body = BoxBody<Bytes, Infallible>;
pub type Resp = Response<Body>;
pub type Query = Vec<(String, String)>;

/// The largest request body read (objects are small).
const MAX_BODY: usize = 8 << 20;

pub async fn serve(inner: Arc<Inner>, listener: tokio::net::TcpListener) {
    loop {
        let accepted = tokio::select! {
            _ = inner.cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let inner = inner.clone();
        tokio::spawn(async move {
            let cancel = inner.cancel.clone();
            tokio::select! {
                _ = connection(inner, tcp) => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}

/// One connection, plain or TLS (a ClientHello's first byte is 0x16).
async fn connection(inner: Arc<Inner>, tcp: tokio::net::TcpStream) {
    let mut first = [0u8; 1];
    let tls = matches!(tcp.peek(&mut first).await, Ok(1) if first[0] == 0x16);
    let acceptor = inner.tls.acceptor.clone();
    let svc = hyper::service::service_fn(move |req| {
        let inner = inner.clone();
        async move { Ok::<_, Infallible>(handle(inner, req).await) }
    });
    let builder = hyper::server::conn::http1::Builder::new();
    if tls {
        if let Ok(stream) = acceptor.accept(tcp).await {
            let _ = builder
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        }
    } else {
        let _ = builder
            .serve_connection(TokioIo::new(tcp), svc)
            .with_upgrades()
            .await;
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json_response(code: u16, v: &Value) -> Resp {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

pub fn error_response(e: &ApiError) -> Resp {
    json_response(e.code, &e.status())
}

fn reply(r: ApiResult<Value>, ok: u16) -> Resp {
    match r {
        Ok(v) => json_response(ok, &v),
        Err(e) => error_response(&e),
    }
}

fn pct_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_query(q: Option<&str>) -> Query {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (pct_decode(k), pct_decode(v)),
            None => (pct_decode(p), String::new()),
        })
        .collect()
}

pub fn q_get<'a>(q: &'a Query, k: &str) -> Option<&'a str> {
    q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

pub fn q_true(q: &Query, k: &str) -> bool {
    matches!(q_get(q, k), Some("true" | "1"))
}

async fn handle(inner: Arc<Inner>, req: Request<Incoming>) -> Resp {
    let line = match req.uri().query() {
        Some(q) => format!("{} {}?{q}", req.method(), req.uri().path()),
        None => format!("{} {}", req.method(), req.uri().path()),
    };
    inner.log_request(line);
    let want = format!("Bearer {}", inner.opts.token);
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(want.as_str());
    if !authorized {
        return error_response(&ApiError::new(401, "Unauthorized", "Unauthorized"));
    }
    match route(inner, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

/// What a resource path names.
pub struct Target {
    pub res: &'static Resource,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

fn not_found_path(path: &str) -> ApiError {
    ApiError::new(404, "NotFound", "the server could not find the requested resource")
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": format!("404 page not found: {path}")}]}))
}

fn parse_target(inner: &Inner, path: &str) -> ApiResult<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let crds = inner.opts.sandbox_crds;
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found_path(path)),
    };
    let find = |plural: &str| {
        resources::find(group, version, plural, crds).ok_or_else(|| not_found_path(path))
    };
    let own = |s: &&str| s.to_string();
    let t = match rest {
        ["namespaces", ns, plural, more @ ..] if !matches!(*plural, "status" | "finalize") => {
            let res = find(plural)?;
            if !res.namespaced {
                return Err(not_found_path(path));
            }
            Target {
                res,
                ns: Some(ns.to_string()),
                name: more.first().map(own),
                sub: more.get(1).map(own),
            }
        }
        [plural, more @ ..] => Target {
            res: find(plural)?,
            ns: None,
            name: more.first().map(own),
            sub: more.get(1).map(own),
        },
        [] => return Err(not_found_path(path)),
    };
    let too_long = match rest {
        ["namespaces", _, p, ..] if !matches!(*p, "status" | "finalize") => rest.len() > 5,
        _ => rest.len() > 3,
    };
    if too_long || (t.res.namespaced && t.name.is_some() && t.ns.is_none()) {
        return Err(not_found_path(path));
    }
    Ok(t)
}

async fn route(inner: Arc<Inner>, req: Request<Incoming>) -> ApiResult<Resp> {
    let path = req.uri().path().to_string();
    let crds = inner.opts.sandbox_crds;
    if req.method() == Method::GET {
        let doc = match path.trim_end_matches('/') {
            "/version" => Some(resources::version()),
            "/api" => Some(resources::core_versions(&inner.addr)),
            "/apis" => Some(resources::group_list(crds)),
            "/api/v1" => resources::resource_list("", "v1", crds),
            p => match p
                .trim_start_matches('/')
                .split('/')
                .collect::<Vec<_>>()
                .as_slice()
            {
                ["apis", g] => {
                    Some(resources::group(g, crds).ok_or_else(|| not_found_path(&path))?)
                }
                ["apis", g, v] => Some(
                    resources::resource_list(g, v, crds).ok_or_else(|| not_found_path(&path))?,
                ),
                _ => None,
            },
        };
        if let Some(d) = doc {
            return Ok(json_response(200, &d));
        }
    }
    let t = parse_target(&inner, &path)?;
    let query = parse_query(req.uri().query());
    match (t.name.is_some(), t.sub.as_deref()) {
        (false, _) => collection(inner, req, t, query).await,
        (true, None | Some("status")) => item(inner, req, t, query).await,
        (true, Some(sub)) if t.res.plural == "pods" => {
            let sub = sub.to_string();
            super::stream::handle(inner, req, t, &sub, query).await
        }
        _ => Err(not_found_path(&path)),
    }
}

pub async fn read_json(req: Request<Incoming>, allow_empty: bool) -> ApiResult<Value> {
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?
        .to_bytes();
    if body.iter().all(u8::is_ascii_whitespace) {
        if allow_empty {
            return Ok(Value::Null);
        }
        return Err(ApiError::bad_request("the body of the request is empty"));
    }
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json (error: {e})"
        ))
    })
}

fn method_not_allowed(m: &Method) -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource ({m})"),
    )
}

pub fn filter_of(plural: &str, q: &Query) -> ApiResult<Filter> {
    Ok(Filter {
        labels: LabelSelector::parse(q_get(q, "labelSelector").unwrap_or_default())?,
        fields: FieldSelector::parse(plural, q_get(q, "fieldSelector").unwrap_or_default())?,
    })
}

async fn collection(
    inner: Arc<Inner>,
    req: Request<Incoming>,
    t: Target,
    q: Query,
) -> ApiResult<Resp> {
    let ns = t.ns.clone().unwrap_or_default();
    match req.method().clone() {
        Method::GET if q_true(&q, "watch") => {
            let filter = filter_of(t.res.plural, &q)?;
            Ok(super::watch::watch(inner, t.res, t.ns, filter, &q))
        }
        Method::GET => Ok(json_response(
            200,
            &list(&inner, t.res, t.ns.as_deref(), &q)?,
        )),
        Method::POST => {
            if t.res.namespaced && t.ns.is_none() {
                return Err(method_not_allowed(req.method()));
            }
            let body = read_json(req, false).await?;
            Ok(reply(api::create(&inner, t.res, &ns, body), 201))
        }
        Method::DELETE => {
            let filter = filter_of(t.res.plural, &q)?;
            let body = read_json(req, true).await?;
            let opts = DeleteOptions::parse(&body, &q);
            let names: Vec<Value> = inner.store().list(t.res.plural, t.ns.as_deref());
            let mut items = Vec::new();
            for o in names.iter().filter(|o| filter.matches(o)) {
                let ons = o["metadata"]["namespace"].as_str().unwrap_or_default();
                if let Ok(v) = api::delete(&inner, t.res, ons, &name_of(o), &opts) {
                    items.push(v);
                }
            }
            let rv = inner.store().current_rv().to_string();
            Ok(json_response(
                200,
                &json!({"kind": t.res.list_kind(), "apiVersion": t.res.api_version(), "metadata": {"resourceVersion": rv}, "items": items}),
            ))
        }
        m => Err(method_not_allowed(&m)),
    }
}

/// LIST with selectors and `limit`/`continue` paging (the token is the last name served).
pub fn list(inner: &Inner, r: &Resource, ns: Option<&str>, q: &Query) -> ApiResult<Value> {
    let filter = filter_of(r.plural, q)?;
    let (items, rv) = {
        let store = inner.store();
        (store.list(r.plural, ns), store.current_rv())
    };
    let after = q_get(q, "continue")
        .filter(|c| !c.is_empty())
        .map(|c| c.to_string());
    let limit = q_get(q, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let sort_key = |o: &Value| {
        format!(
            "{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            name_of(o)
        )
    };
    let mut matched: Vec<Value> = items
        .into_iter()
        .filter(|o| filter.matches(o))
        .filter(|o| after.as_ref().is_none_or(|a| sort_key(o) > *a))
        .collect();
    matched.sort_by_key(|o| sort_key(o));
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(l) = limit
        && matched.len() > l
    {
        let remaining = matched.len() - l;
        matched.truncate(l);
        if let Some(last) = matched.last() {
            meta["continue"] = json!(sort_key(last));
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    // Built-in kinds' list items carry no kind/apiVersion; custom resources' do.
    if !r.crd {
        for o in &mut matched {
            if let Some(m) = o.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
        }
    }
    Ok(
        json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": meta, "items": matched}),
    )
}

async fn item(inner: Arc<Inner>, req: Request<Incoming>, t: Target, q: Query) -> ApiResult<Resp> {
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let status = t.sub.as_deref() == Some("status");
    if status && !t.res.status {
        return Err(not_found_path(req.uri().path()));
    }
    let r = t.res;
    match req.method().clone() {
        Method::GET => {
            let obj = inner.store().get(&key(r, &ns, &name)).cloned();
            obj.map(|o| json_response(200, &o))
                .ok_or_else(|| ApiError::not_found(r, &name))
        }
        Method::PUT => {
            let body = read_json(req, false).await?;
            Ok(reply(api::update(&inner, r, &ns, &name, body, status), 200))
        }
        Method::PATCH => {
            let ct = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let body = read_json(req, false).await?;
            Ok(reply(
                api::patch(&inner, r, &ns, &name, &ct, &body, status),
                200,
            ))
        }
        Method::DELETE if !status => {
            let body = read_json(req, true).await?;
            let opts = DeleteOptions::parse(&body, &q);
            Ok(reply(api::delete(&inner, r, &ns, &name, &opts), 200))
        }
        m => Err(method_not_allowed(&m)),
    }
}
