//! Opt-in: `kitbag run` end to end against a real model, when `KITBAG_LIVE_ANTHROPIC_KEY` /
//! `KITBAG_LIVE_OPENAI_KEY` is set (`KITBAG_LIVE_ANTHROPIC_MODEL` / `KITBAG_LIVE_OPENAI_MODEL`
//! pick the model). Never runs on the machines that test this: they reach no model. The wire
//! formats themselves are checked live, with fresh transcripts, by kitbag-llm's `tests/live.rs`.

mod agent_common;

use agent_common::*;

#[test]
fn a_real_model_reads_a_file_through_the_hub_when_a_key_is_given() {
    for (vendor, key_var, model_prefix) in [
        ("ANTHROPIC", "ANTHROPIC_API_KEY", "anthropic"),
        ("OPENAI", "OPENAI_API_KEY", "openai"),
    ] {
        let Some(key) = std::env::var(format!("KITBAG_LIVE_{vendor}_KEY"))
            .ok()
            .filter(|k| !k.trim().is_empty())
        else {
            eprintln!("skipped: KITBAG_LIVE_{vendor}_KEY is not set (opt-in, real API)");
            continue;
        };
        let d = project();
        let mut env = vec![(key_var, key)];
        // Without a model named, the key picks the provider's default model.
        if let Ok(m) = std::env::var(format!("KITBAG_LIVE_{vendor}_MODEL")) {
            env.push(("KITBAG_MODEL", format!("{model_prefix}/{m}")));
        }
        let out = kitbag(
            d.path(),
            &env,
            &[
                "run",
                "--session",
                "live",
                "Use the file_read tool to read a.txt, then reply with its second line only, word for word.",
            ],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{vendor}: {stderr}");
        assert!(stdout.contains("beta"), "{vendor}: {stdout}");
        let records = session(d.path(), "live");
        assert!(
            records
                .iter()
                .any(|r| r["role"] == "tool_result" && r.to_string().contains("alpha")),
            "{vendor}: the file was read through the hub: {records:?}"
        );
        assert!(
            records
                .iter()
                .filter(|r| r["role"] == "usage")
                .all(|r| r["input_tokens"].as_u64() > Some(0)),
            "{vendor}"
        );
    }
}
