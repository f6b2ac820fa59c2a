//! Waiting for one object to reach a state: list it (for a resourceVersion), then watch from
//! there; a watch that expired (`410 Gone`) or broke lists again, as client-go's informers do.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::api::{Api, q};

/// What a look at the object says.
pub enum Seen {
    Wait,
    Done(Value),
    Fail(WaitError),
}

/// Why waiting for an object ended without it reaching the state.
#[derive(Debug)]
pub enum WaitError {
    /// The deadline passed; the last API error seen on the way, if any.
    TimedOut { last: Option<String> },
    /// The image cannot be pulled or run (the user's `image` argument is at fault).
    Image(String),
    /// The object reached a state it will not come back from.
    Failed(String),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::TimedOut { last: None } => f.write_str("timed out"),
            WaitError::TimedOut { last: Some(e) } => write!(f, "timed out ({e})"),
            WaitError::Image(m) => write!(f, "image: {m}"),
            WaitError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for WaitError {}

fn failed(message: impl Into<String>) -> Seen {
    Seen::Fail(WaitError::Failed(message.into()))
}

/// Watch `name` in `collection` until `check` says done or failed, or `deadline` passes.
/// `check` gets `None` while the object does not exist (or once it is deleted).
pub async fn until(
    api: &Api,
    collection: &str,
    name: &str,
    deadline: Instant,
    mut check: impl FnMut(Option<&Value>) -> Seen,
) -> Result<Value, WaitError> {
    let selector = q(&format!("metadata.name={name}"));
    let mut last_error = None;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitError::TimedOut { last: last_error });
        }
        let list = match api
            .get(&format!("{collection}?fieldSelector={selector}"))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                last_error = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut version = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_string();
        match check(list["items"].as_array().and_then(|i| i.first())) {
            Seen::Done(v) => return Ok(v),
            Seen::Fail(why) => return Err(why),
            Seen::Wait => {}
        }
        let mut outcome = None;
        let watched = api
            .watch(
                collection,
                &format!("fieldSelector={selector}"),
                &version.clone(),
                deadline.saturating_duration_since(Instant::now()),
                |event| {
                    if let Some(v) = event.object["metadata"]["resourceVersion"].as_str() {
                        version = v.to_string();
                    }
                    let seen = match event.kind.as_str() {
                        "BOOKMARK" => Seen::Wait,
                        "DELETED" => check(None),
                        _ => check(Some(&event.object)),
                    };
                    match seen {
                        Seen::Wait => true,
                        other => {
                            outcome = Some(other);
                            false
                        }
                    }
                },
            )
            .await;
        match outcome {
            Some(Seen::Done(v)) => return Ok(v),
            Some(Seen::Fail(why)) => return Err(why),
            _ => {}
        }
        if let Err(e) = watched {
            // 410: the version is too old to watch from; anything else: the line broke.
            // Either way, list again.
            last_error = Some(e.to_string());
            if e.code() != Some(410) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A pod's state for start-up: running, or failed with the reason a user can act on.
pub fn pod_started(pod: Option<&Value>) -> Seen {
    let Some(pod) = pod else {
        return Seen::Wait;
    };
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return failed("the pod is being deleted");
    }
    let status = &pod["status"];
    let container = &status["containerStatuses"][0];
    if let Some(reason) = container["state"]["waiting"]["reason"].as_str()
        && matches!(
            reason,
            "ErrImagePull"
                | "ImagePullBackOff"
                | "InvalidImageName"
                | "CreateContainerConfigError"
                | "CreateContainerError"
        )
    {
        let message = container["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or("");
        return Seen::Fail(WaitError::Image(
            format!("{reason} {message}").trim().to_string(),
        ));
    }
    match status["phase"].as_str() {
        Some("Running") => Seen::Done(pod.clone()),
        Some(phase @ ("Failed" | "Succeeded")) => {
            let term = &container["state"]["terminated"];
            failed(format!(
                "the pod ended ({phase}{}{}) before its agent started: the image needs /bin/sh",
                term["reason"]
                    .as_str()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default(),
                term["exitCode"]
                    .as_i64()
                    .map(|c| format!(", exit code {c}"))
                    .unwrap_or_default(),
            ))
        }
        _ => Seen::Wait,
    }
}

/// A SandboxClaim is bound once it names its Sandbox (status or annotation).
pub fn claim_bound(claim: Option<&Value>) -> Seen {
    match claim {
        Some(c) if claimed_sandbox(c).is_some() => Seen::Done(c.clone()),
        _ => Seen::Wait,
    }
}

pub fn claimed_sandbox(claim: &Value) -> Option<String> {
    [
        &claim["status"]["sandbox"]["name"],
        &claim["metadata"]["annotations"]["agents.x-k8s.io/sandbox-name"],
    ]
    .iter()
    .find_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
}

/// A Sandbox's `Ready` condition is true (and it has pod IPs); a Sandbox that expired or
/// finished failed.
pub fn sandbox_ready(sandbox: Option<&Value>) -> Seen {
    let Some(sb) = sandbox else {
        return Seen::Wait;
    };
    let conditions = sb["status"]["conditions"].as_array();
    let find = |t: &str| conditions.and_then(|c| c.iter().find(|x| x["type"] == t));
    if let Some(ready) = find("Ready") {
        if ready["status"] == "True" {
            return Seen::Done(sb.clone());
        }
        if ready["reason"] == "SandboxExpired" {
            return failed("the Sandbox expired");
        }
    }
    if let Some(done) = find("Finished")
        && done["status"] == "True"
    {
        return failed(format!(
            "the Sandbox's pod finished ({}) before its agent started",
            done["reason"].as_str().unwrap_or("?")
        ));
    }
    Seen::Wait
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_states_read_as_a_user_needs() {
        assert!(matches!(pod_started(None), Seen::Wait));
        assert!(matches!(
            pod_started(Some(&json!({"status": {"phase": "Pending"}}))),
            Seen::Wait
        ));
        assert!(matches!(
            pod_started(Some(&json!({"status": {"phase": "Running"}}))),
            Seen::Done(_)
        ));
        let pull = json!({"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}});
        assert!(
            matches!(pod_started(Some(&pull)), Seen::Fail(WaitError::Image(m)) if m.starts_with("ImagePullBackOff"))
        );
        let ended = json!({"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"reason": "Error", "exitCode": 127}}}]}});
        assert!(
            matches!(pod_started(Some(&ended)), Seen::Fail(WaitError::Failed(m)) if m.contains("exit code 127"))
        );
    }

    #[test]
    fn sandbox_readiness_is_its_ready_condition() {
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}});
        assert!(matches!(sandbox_ready(Some(&ready)), Seen::Done(_)));
        let expired = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SandboxExpired"}]}});
        assert!(matches!(sandbox_ready(Some(&expired)), Seen::Fail(_)));
        assert!(matches!(sandbox_ready(Some(&json!({}))), Seen::Wait));
    }
}
