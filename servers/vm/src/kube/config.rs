//! Where the cluster is and who we are to it: a kubeconfig file (`--kubeconfig`, else
//! `$KUBECONFIG`'s first file, else `~/.kube/config`) or, inside a pod, the service account's
//! mounted token and CA (`KUBERNETES_SERVICE_HOST`).
//!
//! Read: the current (or `--kube-context`) context's cluster `server`,
//! `certificate-authority[-data]`, `insecure-skip-tls-verify`, `tls-server-name`; the user's
//! `token`, `tokenFile`, `client-certificate[-data]` + `client-key[-data]`, `username` +
//! `password`; the context's `namespace`. Not supported, said by name when met: `exec` and
//! `auth-provider` credential plugins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::{VmError, VmResult};

/// Everything the client needs, resolved (files read, base64 decoded).
#[derive(Clone, Default)]
pub struct ClusterConfig {
    /// `https://host:port` (or `http://` for a local test server), without a trailing slash.
    pub server: String,
    pub namespace: String,
    pub ca_pem: Option<Vec<u8>>,
    pub insecure: bool,
    pub tls_server_name: Option<String>,
    pub auth: Auth,
    /// Where it came from, for messages (`kubeconfig /path, context NAME` or `in-cluster`).
    pub source: String,
}

#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(String),
    /// Re-read on every request: projected service-account tokens rotate.
    BearerFile(PathBuf),
    Basic(String, String),
    ClientCert {
        cert_pem: Vec<u8>,
        key_pem: Vec<u8>,
    },
}

impl std::fmt::Debug for ClusterConfig {
    // Never print credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
struct KubeConfigFile {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<serde_norway::Value>,
    auth_provider: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ContextEntry {
    cluster: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
}

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn invalid(field: &'static str, why: impl std::fmt::Display) -> VmError {
    VmError::Invalid {
        field,
        message: why.to_string(),
    }
}

/// The kubeconfig to read: the flag, `$KUBECONFIG`'s first file, `~/.kube/config`; `None`
/// when none exists (then in-cluster, if inside a pod).
pub fn default_path(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        return std::env::split_paths(&list).find(|p| p.is_file());
    }
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".kube/config")).filter(|p| p.is_file())
}

/// Resolve the cluster: from `kubeconfig` when given, else in-cluster.
pub fn load(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    namespace: Option<&str>,
) -> VmResult<ClusterConfig> {
    let mut cfg = match kubeconfig {
        Some(path) => from_file(path, context)?,
        None => in_cluster()?,
    };
    if let Some(ns) = namespace {
        cfg.namespace = ns.to_string();
    }
    check_name("--kube-namespace", &cfg.namespace)?;
    Ok(cfg)
}

/// A DNS-1123 label (namespaces, pod names).
pub fn check_name(field: &'static str, name: &str) -> VmResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{name:?} is not a DNS label (a-z, 0-9, '-', at most 63)"),
        ))
    }
}

fn from_file(path: &Path, context: Option<&str>) -> VmResult<ClusterConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| VmError::io(path.display(), e))?;
    let file: KubeConfigFile = serde_norway::from_str(&text)
        .map_err(|e| invalid("--kubeconfig", format!("{}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let ctx_name = context
        .map(str::to_string)
        .or(file.current_context.clone())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            invalid(
                "--kube-context",
                format!(
                    "{} has no current-context; name one with --kube-context",
                    path.display()
                ),
            )
        })?;
    let ctx = find(&file.contexts, &ctx_name, "context", path)?;
    let cluster_name = ctx.cluster.clone().unwrap_or_default();
    let cluster = find(&file.clusters, &cluster_name, "cluster", path)?;
    let user = match ctx.user.as_deref() {
        Some(u) if !u.is_empty() => Some(find(&file.users, u, "user", path)?),
        _ => None,
    };
    let server = cluster.server.clone().ok_or_else(|| {
        invalid(
            "--kubeconfig",
            format!("cluster {cluster_name:?} has no server"),
        )
    })?;
    Ok(ClusterConfig {
        server: check_server(&server)?,
        namespace: ctx.namespace.clone().unwrap_or_else(|| "default".into()),
        ca_pem: inline_or_file(
            cluster.certificate_authority_data.as_deref(),
            cluster.certificate_authority.as_deref(),
            base,
            "certificate-authority",
        )?,
        insecure: cluster.insecure_skip_tls_verify,
        tls_server_name: cluster.tls_server_name.clone(),
        auth: match user {
            Some(u) => user_auth(u, base)?,
            None => Auth::None,
        },
        source: format!("kubeconfig {}, context {ctx_name}", path.display()),
    })
}

fn find<'a, T>(list: &'a [Named<T>], name: &str, what: &str, path: &Path) -> VmResult<&'a T> {
    list.iter()
        .find(|n| n.name == name)
        .and_then(|n| n.value.as_ref())
        .ok_or_else(|| {
            invalid(
                "--kubeconfig",
                format!("{} has no {what} named {name:?}", path.display()),
            )
        })
}

fn check_server(server: &str) -> VmResult<String> {
    let url = url::Url::parse(server)
        .map_err(|e| invalid("--kubeconfig", format!("server {server:?}: {e}")))?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
        return Err(invalid(
            "--kubeconfig",
            format!("server {server:?} is not an http(s) URL"),
        ));
    }
    Ok(server.trim_end_matches('/').to_string())
}

fn user_auth(u: &UserEntry, base: &Path) -> VmResult<Auth> {
    if u.exec.is_some() || u.auth_provider.is_some() {
        return Err(invalid(
            "--kubeconfig",
            "the user's credentials come from an exec or auth-provider plugin, which kitbag-vm \
             does not run; give it a token (e.g. `kubectl create token NAME`) or a client certificate",
        ));
    }
    if let Some(t) = &u.token {
        return Ok(Auth::Bearer(t.trim().to_string()));
    }
    if let Some(f) = &u.token_file {
        return Ok(Auth::BearerFile(base.join(f)));
    }
    let cert = inline_or_file(
        u.client_certificate_data.as_deref(),
        u.client_certificate.as_deref(),
        base,
        "client-certificate",
    )?;
    let key = inline_or_file(
        u.client_key_data.as_deref(),
        u.client_key.as_deref(),
        base,
        "client-key",
    )?;
    match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => return Ok(Auth::ClientCert { cert_pem, key_pem }),
        (Some(_), None) | (None, Some(_)) => {
            return Err(invalid(
                "--kubeconfig",
                "a client certificate needs both client-certificate and client-key",
            ));
        }
        (None, None) => {}
    }
    if let (Some(n), Some(p)) = (&u.username, &u.password) {
        return Ok(Auth::Basic(n.clone(), p.clone()));
    }
    Ok(Auth::None)
}

fn inline_or_file(
    data: Option<&str>,
    file: Option<&str>,
    base: &Path,
    field: &str,
) -> VmResult<Option<Vec<u8>>> {
    if let Some(d) = data {
        let clean: String = d.chars().filter(|c| !c.is_whitespace()).collect();
        return base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map(Some)
            .map_err(|e| invalid("--kubeconfig", format!("{field}-data is not base64: {e}")));
    }
    match file {
        Some(f) => {
            let path = base.join(f);
            std::fs::read(&path)
                .map(Some)
                .map_err(|e| VmError::io(path.display(), e))
        }
        None => Ok(None),
    }
}

/// Inside a pod: the API server's service address and the mounted service account.
fn in_cluster() -> VmResult<ClusterConfig> {
    let env: BTreeMap<&str, String> = ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k, v)))
        .collect();
    let (Some(host), Some(port)) = (
        env.get("KUBERNETES_SERVICE_HOST"),
        env.get("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Err(VmError::missing(
            "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not inside a pod",
        ));
    };
    let sa = Path::new(SA_DIR);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let namespace = std::fs::read_to_string(sa.join("namespace"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "default".into());
    Ok(ClusterConfig {
        server: format!("https://{host}:{port}"),
        namespace,
        ca_pem: std::fs::read(sa.join("ca.crt")).ok(),
        insecure: false,
        tls_server_name: None,
        auth: Auth::BearerFile(sa.join("token")),
        source: "in-cluster service account".into(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("config");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_the_current_context_with_relative_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), b"CA").unwrap();
        let p = write(
            dir.path(),
            "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443/\n    certificate-authority: ca.pem\ncontexts:\n- name: a\n  context: {cluster: c, user: u, namespace: other}\n- name: b\n  context: {cluster: c, user: u, namespace: agents}\nusers:\n- name: u\n  user:\n    token: abc\n",
        );
        let c = load(Some(&p), None, None).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.namespace, "agents");
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert!(matches!(c.auth, Auth::Bearer(ref t) if t == "abc"));
        let a = load(Some(&p), Some("a"), Some("ns2")).unwrap();
        assert_eq!(a.namespace, "ns2");
    }

    #[test]
    fn data_fields_are_base64_and_plugins_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k:1', certificate-authority-data: Q0E=}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}]\n",
        );
        let c = load(Some(&p), None, None).unwrap();
        assert_eq!(c.namespace, "default");
        assert!(
            matches!(c.auth, Auth::ClientCert { ref cert_pem, ref key_pem } if cert_pem == b"CERT" && key_pem == b"KEY")
        );
        let p = write(
            dir.path(),
            "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k:1'}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n",
        );
        let e = load(Some(&p), None, None).unwrap_err().to_string();
        assert!(e.contains("exec"), "{e}");
        let e = load(Some(&p), Some("nope"), None).unwrap_err().to_string();
        assert!(e.contains("no context named \"nope\""), "{e}");
        let p = write(
            dir.path(),
            "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k:1'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        );
        let e = load(Some(&p), None, Some("Bad_NS"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--kube-namespace"), "{e}");
    }
}
