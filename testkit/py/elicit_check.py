"""Answers kitbag's `ask` and `form` with the official Python MCP SDK's elicitation callback
(mcp 2.3), as a Python agent's operator would: the SDK receives the form (a server-to-client
`elicitation/create` in the legacy era; an `InputRequiredResult` it answers and retries in
2026-07-28), the callback fills it in from the requested schema, and the tool's typed result
must carry those answers. A second `ask` is declined: a result with `action: "decline"`.

usage: python elicit_check.py RUNS_JSON
  RUNS_JSON  a JSON list of runs, each {"name", "mode", "target", "cwd"}:
    mode     "legacy" (2025-11-25) or "2026-07-28"
    target   an "http://.../mcp" URL, or [command, args...] (stdio, started in cwd)

Prints one JSON line: {name: report}; exits 1 on any failed check.
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import Client, StdioServerParameters, types

from answer_form import fill, schema_of

QUESTIONS = {"questions": [
    {"id": "target", "title": "Deploy where?", "options": ["staging", "production"]},
    {"id": "checks", "title": "Which checks?", "options": ["unit", "e2e"], "multiple": True},
    {"id": "note", "title": "Anything to add?"},
]}
FIELDS = {"message": "Release", "fields": [
    {"name": "version", "label": "Version", "required": True},
    {"name": "replicas", "label": "Replicas", "type": "integer", "required": True},
    {"name": "notify", "label": "Notify?", "type": "boolean"},
]}


async def check(spec: dict, report: dict) -> None:
    seen: list[dict] = []

    async def on_elicit(context, params: types.ElicitRequestParams):
        schema = schema_of(params)
        seen.append({"message": params.message, "schema": schema})
        if params.message == "Decline me":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=fill(schema))

    if isinstance(spec["target"], str):
        target = spec["target"]
    else:
        target = StdioServerParameters(command=spec["target"][0], args=spec["target"][1:], cwd=spec["cwd"])
    async with Client(target, mode=spec["mode"], elicitation_callback=on_elicit,
                      read_timeout_seconds=60, cache=None) as client:
        report["protocol"] = client.protocol_version
        names = {t.name for t in (await client.list_tools()).tools}
        if not {"ask", "form"} <= names:
            report["failures"].append(f"ask/form not listed: {sorted(names)}")
            return
        asked = await client.call_tool("ask", QUESTIONS)
        report["ask"] = asked.structured_content
        want = {"action": "accept", "answers": {"target": "staging", "checks": ["unit", "e2e"],
                                                  "note": "typed note"}}
        if asked.is_error or asked.structured_content != want:
            report["failures"].append(f"ask: {asked.model_dump_json()}")
        formed = await client.call_tool("form", FIELDS)
        report["form"] = formed.structured_content
        want = {"action": "accept", "answers": {"version": "typed version", "replicas": 3, "notify": True}}
        if formed.is_error or formed.structured_content != want:
            report["failures"].append(f"form: {formed.model_dump_json()}")
        declined = await client.call_tool("ask", {"questions": [{"id": "q", "title": "Decline me"}]})
        report["declined"] = declined.structured_content
        if declined.is_error or declined.structured_content != {"action": "decline"}:
            report["failures"].append(f"decline: {declined.model_dump_json()}")
    report["forms_seen"] = len(seen)
    if len(seen) != 3:
        report["failures"].append(f"the callback saw {len(seen)} forms, not 3: {seen}")


async def main(specs: list[dict]) -> dict:
    reports = {}
    for spec in specs:
        report = {"mode": spec["mode"], "failures": []}
        try:
            await check(spec, report)
        except Exception as e:  # noqa: BLE001 - report whatever stopped the client
            report["failures"].append(f"client error: {type(e).__name__}: {e!r}"[:2000])
        reports[spec["name"]] = report
    return reports


if __name__ == "__main__":
    reports = anyio.run(main, json.loads(sys.argv[1]))
    print(json.dumps(reports))
    sys.exit(1 if any(r["failures"] for r in reports.values()) else 0)
