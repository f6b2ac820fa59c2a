//! How an entry is shown to a client (shared by create, list, enable, disable, delete).

use chrono::{DateTime, Utc};
use kitbag_shared::limits::{fit_str, json_len, truncate_str};
use schemars::JsonSchema;
use serde::Serialize;

use crate::model::{CommandAction, Entry, LastRun};
use crate::state::CronState;

/// Characters of a message shown in a listing (the whole message is in the store).
pub const MESSAGE_PREVIEW: usize = 500;

#[derive(Debug, Serialize, JsonSchema)]
pub struct EntryView {
    pub id: String,
    pub schedule: String,
    pub message: String,
    /// The message was cut to 500 bytes in this view.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub message_truncated: bool,
    pub session: String,
    pub enabled: bool,
    /// IANA time zone the schedule is read in.
    pub timezone: String,
    /// false: fires once, then disables itself.
    pub recurring: bool,
    /// A run missed while no server was running is made up once at start-up.
    pub catch_up: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandAction>,
    /// The command was cut in this view to fit 40 KB.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub command_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    /// Next fire time in the entry's zone (RFC 3339); absent when disabled or unschedulable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_fire: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Why a hand-edited entry cannot be scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl EntryView {
    pub fn of(state: &CronState, e: &Entry, now: DateTime<Utc>, preview: bool) -> Self {
        let tz = e.timezone_or(&state.machine_tz).to_string();
        let (message, message_truncated) = if preview {
            let (m, cut) = truncate_str(&e.message, MESSAGE_PREVIEW);
            (m.to_string(), cut)
        } else {
            (e.message.clone(), false)
        };
        let schedule = state.schedule_of(e);
        let next_fire = match &schedule {
            Ok(s) => state.next_fire(e, now).map(|t| s.local(t)),
            Err(_) => None,
        };
        Self {
            id: e.id.clone(),
            schedule: e.schedule.clone(),
            message,
            message_truncated,
            session: e.session().to_string(),
            enabled: e.enabled,
            timezone: tz,
            recurring: e.recurring,
            catch_up: e.catch_up,
            command: e.command.clone(),
            command_truncated: false,
            created_at: e.created_at,
            next_fire,
            last_run: e.last_run.clone(),
            error: schedule.err().map(|e| e.message),
        }
    }

    /// Cut the message, then the command, until the view weighs at most `max` bytes of
    /// JSON (escaping can make a 16 KB message six times that). Whether anything was cut.
    pub fn fit(&mut self, max: usize) -> bool {
        let over = json_len(&*self).saturating_sub(max);
        if over == 0 {
            return false;
        }
        let room = json_len(self.message.as_str()).saturating_sub(over);
        self.message = fit_str(&self.message, room, "").0;
        self.message_truncated = true;
        let over = json_len(&*self).saturating_sub(max);
        if over > 0
            && let Some(c) = &mut self.command
        {
            let room = json_len(c.run.as_str()).saturating_sub(over);
            c.run = fit_str(&c.run, room, "").0;
            self.command_truncated = true;
        }
        true
    }

    /// One compact line for a model.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{} [{}] `{}` {}",
            self.id,
            if self.enabled { "on" } else { "off" },
            self.schedule,
            self.timezone
        );
        if !self.recurring {
            s.push_str(" once");
        }
        match &self.next_fire {
            Some(n) => s.push_str(&format!(" next {n}")),
            None if self.error.is_some() => {}
            None => s.push_str(" next -"),
        }
        if let Some(l) = &self.last_run {
            s.push_str(&format!(
                " last {} {}",
                l.fired_at.to_rfc3339(),
                l.outcome.as_str()
            ));
        }
        s.push_str(&format!(" session={}", self.session));
        if let Some(c) = &self.command {
            let (cmd, cut) = truncate_str(&c.run, 80);
            s.push_str(&format!(
                " cmd=`{}{}` ({}s)",
                cmd,
                if cut { "…" } else { "" },
                c.timeout_secs
            ));
        }
        if let Some(err) = &self.error {
            s.push_str(&format!(" ERROR: {err}"));
        }
        let one_line: String = self.message.replace('\n', " ");
        let (m, cut) = truncate_str(&one_line, 120);
        s.push_str(&format!(" — {}{}", m, if cut { "…" } else { "" }));
        s
    }
}
