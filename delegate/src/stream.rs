//! One CLI's stream on its way in: each line copied to the log, parsed, reduced by the CLI's
//! reader, and what is worth telling sent on as progress.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedSender;

use crate::Reader;
use crate::digest::Digest;

/// A line longer than this is logged but not parsed (a file's content echoed back whole).
const MAX_PARSED_LINE: usize = 16 << 20;
/// At most this many progress messages per delegation.
const MAX_PROGRESS: u32 = 1000;

pub struct Feed<'a> {
    pub reader: &'a mut dyn Reader,
    pub digest: Digest,
    /// The whole stream, as it came (`None`: not kept).
    pub log: Option<tokio::fs::File>,
    pub log_bytes: u64,
    pub progress: Option<UnboundedSender<String>>,
    sent: u32,
}

impl<'a> Feed<'a> {
    pub fn new(
        reader: &'a mut dyn Reader,
        log: Option<tokio::fs::File>,
        progress: Option<UnboundedSender<String>>,
    ) -> Self {
        Self {
            reader,
            digest: Digest::default(),
            log,
            log_bytes: 0,
            progress,
            sent: 0,
        }
    }

    /// One line of the stream (with or without its newline).
    pub async fn line(&mut self, line: &[u8]) {
        append(&mut self.log, line).await;
        self.log_bytes += line.len() as u64;
        if !line.ends_with(b"\n") {
            append(&mut self.log, b"\n").await;
            self.log_bytes += 1;
        }
        if line.len() > MAX_PARSED_LINE {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(event @ Value::Object(_)) => {
                if let Some(note) = self.reader.event(&event, &mut self.digest) {
                    self.tell(note);
                }
            }
            _ => self.digest.stray(text),
        }
    }

    fn tell(&mut self, note: String) {
        if self.sent >= MAX_PROGRESS {
            return;
        }
        if let Some(tx) = &self.progress {
            self.sent += 1;
            let _ = tx.send(note);
        }
    }

    /// The stream ended: the log is flushed.
    pub async fn finish(&mut self) {
        if let Some(f) = &mut self.log {
            let _ = f.flush().await;
        }
    }
}

/// How the CLI ended.
#[derive(Debug, Clone, Default)]
pub struct Ended {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub elapsed: Duration,
    /// The end of its stderr (or, inside an instance, of the lines that were not events).
    pub stderr_tail: String,
}

/// Write `bytes` to the log (a failure to log never stops the run; it is logged once).
pub async fn append(log: &mut Option<tokio::fs::File>, bytes: &[u8]) {
    if let Some(f) = log
        && let Err(e) = f.write_all(bytes).await
    {
        tracing::warn!("delegation log: {e}; the rest is not kept");
        *log = None;
    }
}
