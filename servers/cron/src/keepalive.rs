//! Inside a kitbag-vm instance (seed 001), kitbag-cron holds a keepalive lease while it has
//! enabled entries, so the instance is not paused or stopped for idleness between firings —
//! a frozen instance would fire nothing. Entries are looked at every second (the store's
//! cached view); the lease lives 3 minutes and is renewed every 30 s: if this server dies,
//! the lease expires by itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::state::CronState;

const CHECK_EVERY: Duration = Duration::from_secs(1);
const RENEW_EVERY: Duration = Duration::from_secs(30);
const LEASE_SECONDS: u64 = 180;

/// Hold (renew) or release the lease as entries are enabled or not, until the server ends.
pub async fn hold_while_enabled(state: Arc<CronState>, socket: PathBuf) {
    let mut lease: Option<String> = None;
    let mut renewed = std::time::Instant::now();
    loop {
        // On a blocking thread: the PostgreSQL client blocks.
        let st = state.clone();
        let enabled = tokio::task::spawn_blocking(move || {
            st.store
                .load_cached()
                .map(|d| d.entries().filter(|e| e.enabled).count())
                .unwrap_or(0)
        })
        .await
        .unwrap_or(0);
        if enabled > 0 && (lease.is_none() || renewed.elapsed() >= RENEW_EVERY) {
            let mut args = json!({
                "reason": format!("kitbag-cron: {enabled} enabled entries"),
                "ttl_seconds": LEASE_SECONDS,
            });
            if let Some(id) = &lease {
                args["lease_id"] = json!(id);
            }
            // On failure (unknown or expired lease, the parent restarted) a new one next round.
            lease = call(&socket, "keepalive_acquire", args)
                .await
                .and_then(|v| v["lease_id"].as_str().map(str::to_string));
            renewed = std::time::Instant::now();
        } else if enabled == 0
            && let Some(id) = lease.take()
        {
            call(&socket, "keepalive_release", json!({ "lease_id": id })).await;
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

async fn call(
    socket: &std::path::Path,
    tool: &str,
    args: serde_json::Value,
) -> Option<serde_json::Value> {
    let serde_json::Value::Object(args) = args else {
        return None;
    };
    match kitbag_shared::vmlink::call(socket, tool, args).await {
        Ok(r) if r.is_error != Some(true) => r.structured_content,
        Ok(r) => {
            tracing::debug!("{tool}: {:?}", r.structured_content);
            None
        }
        Err(e) => {
            tracing::debug!("{tool}: the kitbag-vm running this instance did not answer: {e}");
            None
        }
    }
}
