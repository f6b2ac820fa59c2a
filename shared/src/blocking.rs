//! Filesystem work from async code: it runs on tokio's blocking threads, never on a runtime
//! worker (a slow disk or a hung network mount would stall every task on that worker).

/// Run `work` on a blocking thread and wait for it. A panic in `work` comes back as an error.
pub async fn unblock<T, F>(work: F) -> std::io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Err(std::io::Error::other(format!("blocking work failed: {e}"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_result_comes_back_and_a_panic_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        let written = path.clone();
        unblock(move || std::fs::write(written, b"x"))
            .await
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
        let failed: std::io::Result<()> = unblock(|| panic!("boom")).await;
        assert!(failed.is_err());
    }
}
