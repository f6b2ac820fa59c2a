//! Wall-clock time as kitbag's records keep it: seconds (or milliseconds) since the Unix
//! epoch — journals, run records, issue rows, token expiries, ids that sort by time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 on a clock set before it).
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
