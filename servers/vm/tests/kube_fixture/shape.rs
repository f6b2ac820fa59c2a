//! Type checks of the fields the fixture reads or writes (the part of an OpenAPI schema that
//! matters here): a body with `spec: "x"` or `labels: [1]` is a 422 naming the field, as the
//! apiserver's decoding or schema validation would make it — never a panic later.

use serde_json::Value;

#[derive(Clone, Copy)]
enum T {
    Obj,
    Arr,
    Str,
    StrMap,
    StrArr,
    Int,
}

const META: &[(&str, T)] = &[
    ("metadata", T::Obj),
    ("metadata.name", T::Str),
    ("metadata.generateName", T::Str),
    ("metadata.namespace", T::Str),
    ("metadata.resourceVersion", T::Str),
    ("metadata.labels", T::StrMap),
    ("metadata.annotations", T::StrMap),
    ("metadata.ownerReferences", T::Arr),
    ("metadata.ownerReferences[]", T::Obj),
    ("metadata.finalizers", T::StrArr),
    ("spec", T::Obj),
    ("status", T::Obj),
];

const POD_SPEC: &[(&str, T)] = &[
    ("containers", T::Arr),
    ("containers[]", T::Obj),
    ("containers[].name", T::Str),
    ("containers[].image", T::Str),
    ("containers[].command", T::StrArr),
    ("containers[].args", T::StrArr),
    ("containers[].workingDir", T::Str),
    ("containers[].env", T::Arr),
    ("containers[].env[]", T::Obj),
    ("containers[].env[].name", T::Str),
    ("containers[].env[].value", T::Str),
    ("containers[].volumeMounts", T::Arr),
    ("containers[].volumeMounts[]", T::Obj),
    ("containers[].volumeMounts[].mountPath", T::Str),
    ("containers[].resources", T::Obj),
    ("containers[].resources.limits", T::Obj),
    ("volumes", T::Arr),
    ("volumes[]", T::Obj),
    ("volumes[].name", T::Str),
    ("activeDeadlineSeconds", T::Int),
    ("terminationGracePeriodSeconds", T::Int),
    ("restartPolicy", T::Str),
];

const POD_STATUS: &[(&str, T)] = &[
    ("status.conditions", T::Arr),
    ("status.conditions[]", T::Obj),
    ("status.podIPs", T::Arr),
    ("status.podIPs[]", T::Obj),
    ("status.containerStatuses", T::Arr),
    ("status.containerStatuses[]", T::Obj),
    ("status.phase", T::Str),
];

const TEMPLATE: &[(&str, T)] = &[
    ("spec.podTemplate", T::Obj),
    ("spec.podTemplate.metadata", T::Obj),
    ("spec.podTemplate.metadata.labels", T::StrMap),
    ("spec.podTemplate.metadata.annotations", T::StrMap),
    ("spec.podTemplate.spec", T::Obj),
];

const CRD_STATUS: &[(&str, T)] = &[
    ("status.conditions", T::Arr),
    ("status.conditions[]", T::Obj),
    ("status.podIPs", T::StrArr),
];

const CLAIM: &[(&str, T)] = &[
    ("spec.warmPoolRef", T::Obj),
    ("spec.warmPoolRef.name", T::Str),
    ("spec.lifecycle", T::Obj),
    ("spec.lifecycle.shutdownTime", T::Str),
    ("spec.lifecycle.shutdownPolicy", T::Str),
    ("spec.additionalPodMetadata", T::Obj),
    ("spec.additionalPodMetadata.labels", T::StrMap),
    ("spec.additionalPodMetadata.annotations", T::StrMap),
    ("spec.env", T::Arr),
    ("spec.env[]", T::Obj),
    ("spec.env[].name", T::Str),
    ("spec.env[].value", T::Str),
    ("spec.env[].containerName", T::Str),
    ("status.conditions", T::Arr),
    ("status.conditions[]", T::Obj),
    ("status.sandbox", T::Obj),
];

fn ok(v: &Value, t: T) -> bool {
    match t {
        T::Obj => v.is_object(),
        T::Arr => v.is_array(),
        T::Str => v.is_string(),
        T::StrMap => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string)),
        T::StrArr => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        T::Int => v.is_i64() || v.is_u64(),
    }
}

fn type_name(t: T) -> &'static str {
    match t {
        T::Obj | T::StrMap => "object",
        T::Arr | T::StrArr => "array",
        T::Str => "string",
        T::Int => "integer",
    }
}

/// Check `path` (dots between fields, `[]` for each element) under `v`, pushing the first
/// bad value as (field, message).
fn check(v: &Value, path: &str, shown: &str, t: T, bad: &mut Vec<(String, String)>) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let (field, each) = match head.strip_suffix("[]") {
        Some(f) => (f, true),
        None => (head, false),
    };
    let child = &v[field];
    if child.is_null() {
        return;
    }
    let shown = if shown.is_empty() {
        field.to_string()
    } else {
        format!("{shown}.{field}")
    };
    if !each {
        match rest {
            None if !ok(child, t) => bad.push((
                shown,
                format!(
                    "Invalid value: {}: must be of type {}",
                    short(child),
                    type_name(t)
                ),
            )),
            None => {}
            Some(r) => check(child, r, &shown, t, bad),
        }
        return;
    }
    for (i, item) in child.as_array().into_iter().flatten().enumerate() {
        let s = format!("{shown}[{i}]");
        match rest {
            None if !ok(item, t) => bad.push((
                s,
                format!(
                    "Invalid value: {}: must be of type {}",
                    short(item),
                    type_name(t)
                ),
            )),
            None => {}
            Some(r) => check(item, r, &s, t, bad),
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Every type error in `obj` of resource `plural`.
pub fn errors(plural: &str, obj: &Value) -> Vec<(String, String)> {
    let mut bad = Vec::new();
    let mut run = |list: &[(&str, T)], prefix: &str| {
        for (p, t) in list {
            let full = if prefix.is_empty() {
                (*p).to_string()
            } else {
                format!("{prefix}.{p}")
            };
            check(obj, &full, "", *t, &mut bad);
        }
    };
    run(META, "");
    match plural {
        "pods" => {
            run(POD_SPEC, "spec");
            run(POD_STATUS, "");
        }
        "sandboxes" | "sandboxtemplates" => {
            run(TEMPLATE, "");
            run(POD_SPEC, "spec.podTemplate.spec");
            run(CRD_STATUS, "");
            run(
                &[
                    ("spec.operatingMode", T::Str),
                    ("spec.shutdownTime", T::Str),
                    ("spec.shutdownPolicy", T::Str),
                ],
                "",
            );
        }
        "sandboxclaims" => run(CLAIM, ""),
        "sandboxwarmpools" => run(
            &[
                ("spec.sandboxTemplateRef", T::Obj),
                ("spec.sandboxTemplateRef.name", T::Str),
                ("spec.replicas", T::Int),
            ],
            "",
        ),
        _ => {}
    }
    bad
}
