"""Calls every tool a kitbag server lists through the official Python MCP SDK's `Client`
(mcp 2.3), at least once successfully and once failing, from the case table shared with the
TypeScript sweep (`testkit/sweep/cases.json`).

Every result is held against the tool's own outputSchema by the SDK's validator: the SDK checks
successful results itself; error results (which it lets through unchecked) are checked with
the same `validate_tool_result`, since clients such as the TypeScript SDK check both.

usage: python sweep.py CASES_JSON RUNS_JSON
  CASES_JSON  the case table: {"files": {path: text}, "steps": [step...]}; a step is
              {"tool", "args", "expect": "ok" | error code | [codes], "save"?: name,
               "write"?: {path: text}, "alone"?: code}; an argument string "$name.a.b" is replaced by field a.b
              of the structuredContent saved as `name`; "$v" by the run's variable v
              ("$cwd": the run's directory). `write` holds for that one call. `alone`: what
              the call answers when the server runs by itself (`"alone": true` in the run),
              for a tool that acts only under a host or in an instance.
  RUNS_JSON   a JSON list of runs, each {"name", "mode", "target", "cwd", "vars"?, "alone"?}:
    mode      "legacy" (the initialize handshake) or "2026-07-28"
    target    an "http://.../mcp" URL, or [command, args...] (stdio, started in cwd)
    cwd       an empty directory: the case table's files are written there first

A table may also say "tree": a directory (beside the table) copied into each run's directory
first; "serial": true (one run at a time: its steps use fixed ports); "every_tool": false (do not
require a call of every listed tool). A step may also carry "as": the listed tool a seed's name for
it resolves to (the step runs where that tool is listed, and its result is held against that
tool's outputSchema); "fields": paths ("a.0.b") its structuredContent must have; "equals":
{path: value} that must hold; "repeat": N calls; "start": [command...] started in the run's
directory before the call (stopped when the run ends), with "port": wait until it listens there,
and "log": a file there its output goes to (as a program started in the background logs).
A run may carry "env": variables for the processes it starts.

Prints one JSON line {name: report}; exits 1 on any failed check.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time

import anyio
from mcp import Client, MCPError, StdioServerParameters, types

from answer_form import fill, schema_of


def write_files(root: str, files: dict) -> None:
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def at(value, path: str):
    """The field `path` ("a.0.b") of `value`; KeyError/IndexError/TypeError when absent."""
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def check_fields(step: dict, structured, label: str, report: dict) -> None:
    """The step's `fields` are there and its `equals` hold."""
    for path in step.get("fields", []):
        try:
            at(structured, path)
        except (KeyError, IndexError, TypeError, ValueError):
            report["failures"].append(f"{label}: no field {path} in {json.dumps(structured)[:800]}")
    for path, want in step.get("equals", {}).items():
        try:
            got = at(structured, path)
        except (KeyError, IndexError, TypeError, ValueError):
            got = "<absent>"
        if got != want:
            report["failures"].append(f"{label}: {path} is {json.dumps(got)[:200]}, not {json.dumps(want)}")


def start_process(step: dict, run_vars: dict, started: list) -> str | None:
    """Starts the step's `start` command; None, or why it is not listening on `port`."""
    out = subprocess.DEVNULL
    if step.get("log"):
        out = open(os.path.join(run_vars["cwd"], step["log"]), "w")
    proc = subprocess.Popen(step["start"], cwd=run_vars["cwd"], env=os.environ | run_vars["env"],
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    started.append(proc)
    port = step.get("port")
    deadline = time.monotonic() + 15
    while port and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return None
        except OSError:
            time.sleep(0.05)
    return f"{step['start']} is not listening on port {port}" if port else None


def resolve(value, saved: dict, run_vars: dict):
    """The step's arguments with its references filled in; KeyError when one is missing."""
    if isinstance(value, str) and value.startswith("$") and "." not in value and len(value) > 1:
        return run_vars[value[1:]]
    if isinstance(value, str) and value.startswith("$") and "." in value:
        name, *path = value[1:].split(".")
        out = saved[name]
        for key in path:
            out = out[int(key)] if isinstance(out, list) else out[key]
        return out
    if isinstance(value, dict):
        return {k: resolve(v, saved, run_vars) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, saved, run_vars) for v in value]
    return value


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") or "" for c in result.content)


async def call_step(client: Client, step: dict, saved: dict, run_vars: dict, report: dict) -> None:
    tool = step["tool"]
    tally = report["tools"].setdefault(tool, {"ok": 0, "failed": 0})
    if run_vars.get("alone") and "alone" in step:
        # Run by itself (no host, no instance) the tool has nothing to act on: its documented
        # refusal stands in for the successful call.
        step = {**step, "expect": step["alone"]}
        tally["waived"] = tally.get("waived", 0) + 1
    expect = step.get("expect", "ok")
    codes = expect if isinstance(expect, list) else [expect]
    label = step.get("seed") or f"{tool} {json.dumps(step['args'])[:160]}"
    cwd = run_vars["cwd"]
    # `write` changes files for this call only: the old contents come back after it.
    kept = {}
    for rel, text in (step.get("write") or {}).items():
        path = os.path.join(cwd, rel)
        kept[path] = open(path).read() if os.path.exists(path) else None
        write_files(cwd, {rel: text})
    try:
        if step.get("start"):
            why = start_process(step, run_vars, run_vars["started"])
            if why:
                report["failures"].append(f"{label}: {why}")
                return
        if step.get("seed"):
            report["seed_steps"].append(step["seed"])
        for _ in range(step.get("repeat", 1)):
            await call_checked(client, step, saved, run_vars, report, tally, label, codes)
    finally:
        for path, text in kept.items():
            if text is None:
                os.remove(path)
            else:
                with open(path, "w") as f:
                    f.write(text)


async def call_checked(client, step, saved, run_vars, report, tally, label, codes) -> None:
    tool = step["tool"]
    # A seed's name for a tool is not listed: its result is held against the listed tool's
    # outputSchema, which the SDK cannot find by the seed's name.
    listed_as = step.get("as", tool)
    expect = step.get("expect", "ok")
    try:
        args = resolve(step["args"], saved, run_vars)
    except (KeyError, IndexError, TypeError) as e:
        report["failures"].append(f"{label}: reference {e!r} not saved by an earlier step")
        return
    try:
        result = await client.call_tool(tool, args)
    except MCPError as e:
        report["failures"].append(f"{label}: JSON-RPC error {e.error.code}: {e.error.message}"[:1500])
        return
    except Exception as e:  # noqa: BLE001 - the SDK's own schema check raises RuntimeError
        report["failures"].append(f"{label}: {type(e).__name__}: {e}"[:1500])
        return
    structured = result.structured_content
    if result.is_error or listed_as != tool:
        try:
            await client.session.validate_tool_result(listed_as, result)
        except Exception as e:  # noqa: BLE001
            kind = "error result" if result.is_error else "result"
            report["failures"].append(f"{label}: {kind} fails {listed_as}'s outputSchema: {e}"[:1500])
            return
    if result.is_error:
        code = ((structured or {}).get("error") or {}).get("code")
        if "ok" in codes or code not in codes:
            report["failures"].append(f"{label}: wanted {expect}, got error {code}: {text_of(result)[:600]}")
            return
        if code not in text_of(result):
            report["failures"].append(f"{label}: the text content does not name the code {code}")
        tally["failed"] += 1
    else:
        if "ok" not in codes:
            report["failures"].append(f"{label}: wanted error {expect}, got success: {text_of(result)[:600]}")
            return
        if structured is None:
            report["failures"].append(f"{label}: success without structuredContent")
            return
        if not result.content:
            report["failures"].append(f"{label}: success without text content")
        check_fields(step, structured, label, report)
        tally["ok"] += 1
    if step.get("save"):
        saved[step["save"]] = structured


async def run(spec: dict, cases: dict) -> dict:
    report = {"mode": spec["mode"], "protocol": None, "listed": 0, "calls": 0, "tools": {},
              "seed_steps": [], "failures": []}
    cwd = spec["cwd"]
    if cases.get("tree"):
        shutil.copytree(os.path.join(cases["dir"], cases["tree"]), cwd, dirs_exist_ok=True)
    write_files(cwd, cases.get("files", {}))
    env = spec.get("env", {})
    if isinstance(spec["target"], str):
        target = spec["target"]
    else:
        target = StdioServerParameters(command=spec["target"][0], args=spec["target"][1:], cwd=cwd,
                                       env=env or None)
    started: list = []
    t0 = time.monotonic()
    try:
        # The operator: `ask` and `form` get their forms filled in (MCP elicitation).
        async def on_elicit(context, params: types.ElicitRequestParams):
            return types.ElicitResult(action="accept", content=fill(schema_of(params)))

        async with Client(target, mode=spec["mode"], elicitation_callback=on_elicit,
                          read_timeout_seconds=120, cache=None) as client:
            report["protocol"] = client.protocol_version
            listed = {t.name for t in (await client.list_tools()).tools}
            report["listed"] = len(listed)
            saved: dict = {}
            run_vars = {**spec.get("vars", {}), "cwd": cwd, "alone": spec.get("alone", False),
                        "env": env, "started": started}
            for step in cases["steps"]:
                if step.get("as", step["tool"]) in listed:
                    report["calls"] += step.get("repeat", 1)
                    await call_step(client, step, saved, run_vars, report)
            for tool in sorted(listed) if cases.get("every_tool", True) else []:
                tally = report["tools"].get(tool, {"ok": 0, "failed": 0})
                if tally["ok"] == 0 and not tally.get("waived"):
                    report["failures"].append(f"{tool}: no successful call (add a case to cases.json)")
                if tally["failed"] == 0:
                    report["failures"].append(f"{tool}: no failing call (add a case to cases.json)")
    except Exception as e:  # noqa: BLE001 - report whatever stopped the client
        report["failures"].append(f"client error: {type(e).__name__}: {e!r}"[:2000])
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    report["ms"] = round((time.monotonic() - t0) * 1000)
    return report


async def main(cases: dict, specs: list[dict]) -> dict:
    """The runs, a few at a time: each has its own directory and processes."""
    reports: dict = {}
    limit = anyio.Semaphore(1 if cases.get("serial") else 4)

    async def one(spec: dict) -> None:
        async with limit:
            reports[spec["name"]] = await run(spec, cases)

    async with anyio.create_task_group() as tg:
        for spec in specs:
            tg.start_soon(one, spec)
    return {spec["name"]: reports[spec["name"]] for spec in specs}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        table = json.load(f)
    table["dir"] = os.path.dirname(os.path.abspath(sys.argv[1]))
    # The SDK warns of each call by a name tools/list does not hold: the seed names, on purpose.
    logging.getLogger("client").setLevel(logging.ERROR)
    reports = anyio.run(main, table, json.loads(sys.argv[2]))
    print(json.dumps(reports))
    sys.exit(1 if any(r["failures"] for r in reports.values()) else 0)
