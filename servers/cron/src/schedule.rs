//! Cron expressions and time zones: parsing (with `croner`), validation and next-fire times.
//!
//! Accepted: the standard 5 fields `minute hour day-of-month month day-of-week` with `*`,
//! `*/N`, `N`, `N-M`, `N-M/S`, `N,M`, month and weekday names (`jan`, `mon`, any case),
//! and the aliases `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`,
//! `@annually`. croner's extensions (`L`, `W`, `#`, `?`) are accepted too. Seconds and
//! year fields are refused: a 6- or 7-field expression is an error.
//!
//! Daylight saving (croner's rules, the classic cron ones): a fixed-time entry
//! (`30 2 * * *`) whose wall-clock time is skipped by spring-forward runs once at the first
//! instant after the gap; in a repeated hour it runs once, at the first occurrence.
//! Interval entries (`*/15 * * * *`) follow real elapsed time: skipped wall-clock times do
//! not exist, repeated ones are real instants.

use std::str::FromStr;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use kitbag_shared::{ToolError, ToolResult, args};

/// A run fired later than this after its instant counts as made up (`caught_up`): both the
/// scheduler (what to record) and the next-fire view (whether a run is still owed) go by it.
pub const GRACE: TimeDelta = TimeDelta::seconds(60);

/// A parsed schedule in its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

/// What a schedule field accepts, for error messages.
pub const SCHEDULE_HELP: &str = "a 5-field cron expression `minute hour day-of-month month day-of-week` \
(e.g. `*/5 * * * *`, `0 9 * * mon-fri`, `30 2 1 jan,jul *`) or @hourly/@daily/@weekly/@monthly/@yearly";

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// `@midnight` is a common alias croner does not know; everything else is croner's.
fn normalise(expr: &str) -> String {
    let t = expr.trim();
    if t.eq_ignore_ascii_case("@midnight") {
        "@daily".to_string()
    } else {
        t.to_string()
    }
}

/// Parse and validate a cron expression (field name `schedule`).
pub fn parse_cron(expr: &str) -> ToolResult<Cron> {
    let expr = normalise(expr);
    if expr.is_empty() {
        return Err(ToolError::invalid_field(
            "schedule",
            format!("empty; expected {SCHEDULE_HELP}"),
        ));
    }
    args::max_bytes("schedule", &expr, 256)?;
    if expr.starts_with('@') {
        let known = [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
        ];
        if !known.iter().any(|k| k.eq_ignore_ascii_case(&expr)) {
            return Err(ToolError::invalid_field(
                "schedule",
                format!("unknown alias `{expr}`; expected {SCHEDULE_HELP}"),
            ));
        }
    } else {
        let n = expr.split_whitespace().count();
        if n != 5 {
            return Err(ToolError::invalid_field(
                "schedule",
                format!(
                    "`{expr}` has {n} fields; exactly 5 are accepted (no seconds or year field): {SCHEDULE_HELP}"
                ),
            ));
        }
        if let Some(f) = expr
            .split_whitespace()
            .find(|f| f.split(',').any(str::is_empty))
        {
            return Err(ToolError::invalid_field(
                "schedule",
                format!("`{f}` has an empty list item; expected {SCHEDULE_HELP}"),
            ));
        }
    }
    parser().parse(&expr).map_err(|e| {
        ToolError::invalid_field(
            "schedule",
            format!("`{expr}` is not valid ({e}); expected {SCHEDULE_HELP}"),
        )
    })
}

/// Parse an IANA time zone name (field name `timezone`).
pub fn parse_tz(name: &str) -> ToolResult<Tz> {
    Tz::from_str(name.trim()).map_err(|_| {
        ToolError::invalid_field(
            "timezone",
            format!(
                "`{name}` is not an IANA time zone name; use one like `UTC`, `Europe/Berlin`, `America/New_York`"
            ),
        )
    })
}

/// The machine's time zone as an IANA name (`TZ`, then the system setting, else `UTC`).
pub fn machine_timezone() -> String {
    if let Ok(tz) = std::env::var("TZ") {
        let name = tz.trim_start_matches(':');
        if Tz::from_str(name).is_ok() {
            return name.to_string();
        }
    }
    match iana_time_zone::get_timezone() {
        Ok(name) if Tz::from_str(&name).is_ok() => name,
        _ => "UTC".to_string(),
    }
}

impl Schedule {
    /// Parse an expression in a time zone; also checks that it fires at least once.
    pub fn new(expr: &str, tz: &str) -> ToolResult<Self> {
        let cron = parse_cron(expr)?;
        let tz = parse_tz(tz)?;
        let s = Self { cron, tz };
        if s.next_after(Utc::now()).is_none() {
            return Err(ToolError::invalid_field(
                "schedule",
                format!("`{}` never fires (no such date)", expr.trim()),
            ));
        }
        Ok(s)
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// Whether croner treats this as a fixed-time job (single minute and hour).
    pub fn is_fixed_time(&self) -> bool {
        self.cron.determine_job_type() == croner::JobType::FixedTime
    }

    /// The first fire time strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = self.tz.from_utc_datetime(&t.naive_utc());
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The latest fire time at or before `t`.
    pub fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = self.tz.from_utc_datetime(&t.naive_utc());
        self.cron
            .find_previous_occurrence(&local, true)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The latest fire time in `(after, upto]`, if any: at most one run is ever made up.
    pub fn latest_in(&self, after: DateTime<Utc>, upto: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Cheap test first: the next fire after `after` must lie within the window.
        let first = self.next_after(after)?;
        if first > upto {
            return None;
        }
        match self.latest_at_or_before(upto) {
            Some(p) if p > after => Some(p),
            _ => Some(first),
        }
    }

    /// Format an instant in this schedule's zone (RFC 3339 with offset).
    pub fn local(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.tz).to_rfc3339()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(expr: &str, tz: &str, after: &str) -> String {
        Schedule::new(expr, tz)
            .unwrap()
            .next_after(utc(after))
            .unwrap()
            .to_rfc3339()
    }

    fn nexts(expr: &str, tz: &str, after: &str, n: usize) -> Vec<String> {
        let s = Schedule::new(expr, tz).unwrap();
        let mut t = utc(after);
        let mut out = Vec::new();
        for _ in 0..n {
            t = s.next_after(t).unwrap();
            out.push(s.local(t));
        }
        out
    }

    #[test]
    fn every_supported_form_parses() {
        for ok in [
            "* * * * *",
            "*/5 * * * *",
            "0 9 * * *",
            "0 9-17 * * *",
            "0 9-17/2 * * *",
            "0,30 * * * *",
            "15 10 1,15 * *",
            "0 9 * * mon",
            "0 9 * * MON-FRI",
            "0 9 * * sun",
            "0 9 * * 7",
            "0 0 1 jan *",
            "0 0 1 JAN,jul *",
            "0 0 * feb-apr *",
            "@hourly",
            "@daily",
            "@midnight",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
            "  */10   *  * * *  ",
        ] {
            assert!(parse_cron(ok).is_ok(), "{ok}: {:?}", parse_cron(ok).err());
        }
    }

    #[test]
    fn bad_forms_are_refused_naming_the_field() {
        for bad in [
            "",
            "   ",
            "* * * *",
            "0 * * * * *",
            "0 0 * * * * 2030",
            "*/0 * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * 32 * *",
            "* * * 13 *",
            "* * * * 8",
            "5-1 * * * *",
            "a b c d e",
            "* * * * funday",
            "@sometimes",
            "@every 5m",
            "1,,2 * * * *",
        ] {
            let Err(e) = parse_cron(bad) else {
                panic!("{bad} was accepted")
            };
            assert_eq!(e.code, kitbag_shared::ErrorCode::InvalidParams, "{bad}");
            assert_eq!(e.detail["field"], "schedule", "{bad}");
        }
    }

    #[test]
    fn aliases_mean_what_they_say() {
        assert_eq!(
            next("@hourly", "UTC", "2026-01-01T10:20:00Z"),
            "2026-01-01T11:00:00+00:00"
        );
        assert_eq!(
            next("@daily", "UTC", "2026-01-01T10:20:00Z"),
            "2026-01-02T00:00:00+00:00"
        );
        // 2026-01-01 is a Thursday: @weekly is Sunday midnight.
        assert_eq!(
            next("@weekly", "UTC", "2026-01-01T10:20:00Z"),
            "2026-01-04T00:00:00+00:00"
        );
        assert_eq!(
            next("0 9 * * mon-fri", "UTC", "2026-01-02T10:00:00Z"),
            "2026-01-05T09:00:00+00:00"
        );
    }

    #[test]
    fn unknown_timezone_is_refused() {
        let e = Schedule::new("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(e.detail["field"], "timezone");
        assert!(Schedule::new("* * * * *", "Europe/Berlin").is_ok());
        assert!(!machine_timezone().is_empty());
    }

    #[test]
    fn impossible_dates_are_refused() {
        let e = Schedule::new("0 0 30 2 *", "UTC").unwrap_err();
        assert_eq!(e.detail["field"], "schedule");
        assert!(e.message.contains("never fires"), "{}", e.message);
    }

    #[test]
    fn month_ends() {
        // The 31st skips months without one.
        assert_eq!(
            nexts("0 12 31 * *", "UTC", "2026-01-31T13:00:00Z", 3),
            [
                "2026-03-31T12:00:00+00:00",
                "2026-05-31T12:00:00+00:00",
                "2026-07-31T12:00:00+00:00"
            ]
        );
        // Crossing a month and a year end minute by minute.
        assert_eq!(
            nexts("*/30 * * * *", "UTC", "2026-12-31T23:15:00Z", 2),
            ["2026-12-31T23:30:00+00:00", "2027-01-01T00:00:00+00:00"]
        );
        assert_eq!(
            next("0 0 1 * *", "UTC", "2026-04-30T23:59:00Z"),
            "2026-05-01T00:00:00+00:00"
        );
    }

    #[test]
    fn leap_days() {
        // Feb 29 exists in 2028, not in 2026/2027.
        assert_eq!(
            next("0 8 29 2 *", "UTC", "2026-03-01T00:00:00Z"),
            "2028-02-29T08:00:00+00:00"
        );
        assert_eq!(
            nexts("0 0 28-29 feb *", "UTC", "2027-02-27T00:00:00Z", 3),
            [
                "2027-02-28T00:00:00+00:00",
                "2028-02-28T00:00:00+00:00",
                "2028-02-29T00:00:00+00:00"
            ]
        );
        // The day after Feb 28 in a common year is Mar 1.
        assert_eq!(
            next("0 0 * * *", "UTC", "2027-02-28T00:00:00Z"),
            "2027-03-01T00:00:00+00:00"
        );
    }

    #[test]
    fn spring_forward_gap_runs_once_at_the_next_valid_instant() {
        // America/New_York: 2026-03-08 02:00 EST jumps to 03:00 EDT.
        let s = Schedule::new("30 2 * * *", "America/New_York").unwrap();
        let t = s.next_after(utc("2026-03-08T05:00:00Z")).unwrap(); // 00:00 EST
        assert_eq!(s.local(t), "2026-03-08T03:00:00-04:00");
        // Exactly once that day, then back to 02:30 the next day.
        let t2 = s.next_after(t).unwrap();
        assert_eq!(s.local(t2), "2026-03-09T02:30:00-04:00");
        // An interval entry simply has no 02:xx times that night.
        assert_eq!(
            nexts(
                "*/30 * * * *",
                "America/New_York",
                "2026-03-08T06:15:00Z",
                3
            ),
            [
                "2026-03-08T01:30:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-08T03:30:00-04:00"
            ]
        );
        // Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST.
        assert_eq!(
            nexts("15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 3),
            [
                "2026-03-29T03:00:00+02:00",
                "2026-03-30T02:15:00+02:00",
                "2026-03-31T02:15:00+02:00"
            ]
        );
    }

    #[test]
    fn fall_back_repeated_hour_fires_once() {
        // America/New_York: 2026-11-01 02:00 EDT falls back to 01:00 EST.
        let s = Schedule::new("30 1 * * *", "America/New_York").unwrap();
        let t = s.next_after(utc("2026-11-01T04:00:00Z")).unwrap(); // 00:00 EDT
        assert_eq!(s.local(t), "2026-11-01T01:30:00-04:00");
        let t2 = s.next_after(t).unwrap();
        assert_eq!(
            s.local(t2),
            "2026-11-02T01:30:00-05:00",
            "the repeated 01:30 EST must not fire again"
        );
        assert!(s.is_fixed_time());
        // Interval entries keep real time: both 01:00 instants are an hour apart.
        let h = Schedule::new("0 * * * *", "America/New_York").unwrap();
        assert!(!h.is_fixed_time());
        let mut t = utc("2026-11-01T04:30:00Z");
        let mut got = Vec::new();
        for _ in 0..3 {
            t = h.next_after(t).unwrap();
            got.push(h.local(t));
        }
        assert_eq!(
            got,
            [
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T02:00:00-05:00"
            ]
        );
    }

    #[test]
    fn latest_in_window_makes_up_at_most_one_run() {
        let s = Schedule::new("*/5 * * * *", "UTC").unwrap();
        let after = utc("2026-01-01T10:00:00Z");
        assert_eq!(
            s.latest_in(after, utc("2026-01-01T11:02:00Z")),
            Some(utc("2026-01-01T11:00:00Z"))
        );
        assert_eq!(s.latest_in(after, utc("2026-01-01T10:04:59Z")), None);
        assert_eq!(
            s.latest_in(after, utc("2026-01-01T10:05:00Z")),
            Some(utc("2026-01-01T10:05:00Z"))
        );
        // Across a leap day, in a zone.
        let d = Schedule::new("0 9 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            d.latest_in(utc("2028-02-27T12:00:00Z"), utc("2028-03-01T07:00:00Z")),
            Some(utc("2028-02-29T08:00:00Z"))
        );
    }
}
