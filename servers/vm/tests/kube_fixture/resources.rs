//! The resources the fixture serves and their discovery documents (`/api`, `/apis`, the
//! group/version resource lists), in the legacy (non-aggregated) JSON form: clients that ask
//! for aggregated discovery (`application/json;g=apidiscovery.k8s.io;v=v2;…`) get
//! `Content-Type: application/json` and fall back, as against an apiserver without it.

use serde_json::{Value, json};

/// One REST resource.
#[derive(Debug)]
pub struct Resource {
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short: &'static [&'static str],
    /// Has a `status` subresource (status is kept apart from spec writes).
    pub status: bool,
    /// Served only with `sandbox_crds` (the agent-sandbox CRDs).
    pub crd: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, or `sandboxes.agents.x-k8s.io`: how a real apiserver names the resource in
    /// error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Pod`, or `Sandbox.agents.x-k8s.io` (the "invalid" messages' spelling).
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
pub const EXT_GROUP: &str = "extensions.agents.x-k8s.io";
pub const NETWORKING_GROUP: &str = "networking.k8s.io";

pub const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    namespaced: true,
    short: &["po"],
    status: true,
    crd: false,
};
pub const NAMESPACES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    namespaced: false,
    short: &["ns"],
    status: true,
    crd: false,
};
pub const SANDBOXES: Resource = Resource {
    group: SANDBOX_GROUP,
    version: "v1beta1",
    plural: "sandboxes",
    singular: "sandbox",
    kind: "Sandbox",
    namespaced: true,
    short: &["sandbox"],
    status: true,
    crd: true,
};
pub const CLAIMS: Resource = Resource {
    group: EXT_GROUP,
    version: "v1beta1",
    plural: "sandboxclaims",
    singular: "sandboxclaim",
    kind: "SandboxClaim",
    namespaced: true,
    short: &["sandboxclaim"],
    status: true,
    crd: true,
};
pub const WARMPOOLS: Resource = Resource {
    group: EXT_GROUP,
    version: "v1beta1",
    plural: "sandboxwarmpools",
    singular: "sandboxwarmpool",
    kind: "SandboxWarmPool",
    namespaced: true,
    short: &["swp"],
    status: true,
    crd: true,
};
pub const TEMPLATES: Resource = Resource {
    group: EXT_GROUP,
    version: "v1beta1",
    plural: "sandboxtemplates",
    singular: "sandboxtemplate",
    kind: "SandboxTemplate",
    namespaced: true,
    short: &["sandboxtemplate"],
    status: false,
    crd: true,
};

/// NetworkPolicies are stored (and collected with their owner) but not enforced: every
/// fixture pod has a network namespace of its own with nothing but loopback anyway.
pub const NETWORK_POLICIES: Resource = Resource {
    group: NETWORKING_GROUP,
    version: "v1",
    plural: "networkpolicies",
    singular: "networkpolicy",
    kind: "NetworkPolicy",
    namespaced: true,
    short: &["netpol"],
    status: false,
    crd: false,
};

pub const ALL: [&Resource; 7] = [
    &PODS,
    &NAMESPACES,
    &NETWORK_POLICIES,
    &SANDBOXES,
    &CLAIMS,
    &WARMPOOLS,
    &TEMPLATES,
];

/// The resource `plural` of `group`/`version`, when served.
pub fn find(group: &str, version: &str, plural: &str, crds: bool) -> Option<&'static Resource> {
    ALL.into_iter().find(|r| {
        r.group == group && r.version == version && r.plural == plural && (crds || !r.crd)
    })
}

/// The resource named `plural` in any group (the fixture's plurals are unique).
pub fn by_plural(plural: &str) -> Option<&'static Resource> {
    ALL.into_iter().find(|r| r.plural == plural)
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "emulationMajor": "1",
        "emulationMinor": "32",
        "gitVersion": "v1.32.0-kitbag-fixture",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]
    })
}

fn groups(crds: bool) -> Vec<&'static str> {
    if crds {
        vec![NETWORKING_GROUP, SANDBOX_GROUP, EXT_GROUP]
    } else {
        vec![NETWORKING_GROUP]
    }
}

fn group_doc(name: &str) -> Value {
    let version = if name == NETWORKING_GROUP {
        "v1"
    } else {
        "v1beta1"
    };
    let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

pub fn group_list(crds: bool) -> Value {
    let groups: Vec<Value> = groups(crds).into_iter().map(group_doc).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, when served.
pub fn group(name: &str, crds: bool) -> Option<Value> {
    groups(crds).contains(&name).then(|| {
        let mut g = group_doc(name);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        g
    })
}

fn entry(r: &Resource) -> Value {
    let mut e = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
    });
    if !r.short.is_empty() {
        e["shortNames"] = json!(r.short);
    }
    if r.crd {
        e["categories"] = json!(["all"]);
        e["storageVersionHash"] = json!("kitbagfx");
    }
    e
}

fn sub(r: &Resource, name: &str, kind: &str, verbs: &[&str]) -> Value {
    json!({
        "name": format!("{}/{name}", r.plural),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": kind,
        "verbs": verbs,
    })
}

/// `/api/v1` or `/apis/<group>/<version>`, when served.
pub fn resource_list(group: &str, version: &str, crds: bool) -> Option<Value> {
    let mut resources = Vec::new();
    for r in ALL
        .into_iter()
        .filter(|r| r.group == group && r.version == version && (crds || !r.crd))
    {
        resources.push(entry(r));
        if r.status {
            resources.push(sub(r, "status", r.kind, &["get", "patch", "update"]));
        }
        if r.plural == "pods" {
            resources.push(sub(r, "exec", "PodExecOptions", &["create", "get"]));
            resources.push(sub(
                r,
                "portforward",
                "PodPortForwardOptions",
                &["create", "get"],
            ));
            resources.push(sub(r, "log", "Pod", &["get"]));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}
