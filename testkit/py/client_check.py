"""Drives a kitbag server with the official Python MCP SDK's `Client` (mcp 2.3), as Python
agents do: connect in one protocol era, list the tools, call one successfully, one that fails
(the typed code must survive), an unknown tool (a JSON-RPC error), and listen for changes.

usage: python client_check.py RUNS_JSON
  RUNS_JSON  a JSON list of runs (one Python start-up for all: importing the SDK costs seconds),
             each {"name", "mode", "target", "cwd", "reload"?}:
    mode     "legacy" (the initialize handshake, 2025-11-25) or "2026-07-28" (pinned, no probe)
    target   an "http://.../mcp" URL (Streamable HTTP), or [command, args...] (stdio, started
             in cwd)
    cwd      a directory holding `a.txt` containing "alpha"
    reload   the host's agent.json, whose `files` entry runs `kitbag server files`: listening
             also adds the memory server to it and calls `host_reload`; the tools list_changed
             must arrive (on the `subscriptions/listen` stream in 2026-07-28, as a
             notification in legacy)

Prints one JSON line: {name: report}; exits 1 on any failed check.
"""

from __future__ import annotations

import json
import sys
import time

import anyio
from mcp import Client, MCPError, StdioServerParameters

report: dict = {}


def fail(msg: str) -> None:
    report["failures"].append(msg)


def new_report(mode: str, transport: str) -> None:
    global report
    report = {"mode": mode, "transport": transport, "protocol": None, "tools": 0, "success": None,
              "error": None, "unknown_tool": None, "listen": None, "failures": []}


def method_of(message) -> str | None:
    for obj in (message, getattr(message, "root", None)):
        m = getattr(obj, "method", None)
        if isinstance(m, str):
            return m
    return None


async def run(spec: dict) -> None:
    mode = spec["mode"]
    reload_cfg = spec.get("reload")
    if isinstance(spec["target"], str):
        target = spec["target"]
    else:
        target = StdioServerParameters(command=spec["target"][0], args=spec["target"][1:], cwd=spec["cwd"])
    new_report(mode, "http" if isinstance(target, str) else "stdio")
    t0 = time.monotonic()
    try:
        await check(mode, target, reload_cfg)
    except Exception as e:  # noqa: BLE001 - report whatever stopped the client
        fail(f"client error: {type(e).__name__}: {e!r}"[:2000])
    report["ms"] = round((time.monotonic() - t0) * 1000)


async def check(mode: str, target, reload_cfg: str | None) -> None:

    changed = anyio.Event()

    async def on_message(message) -> None:
        if method_of(message) == "notifications/tools/list_changed":
            changed.set()

    async with Client(target, mode=mode, message_handler=on_message,
                      read_timeout_seconds=60, cache=None) as client:
        report["protocol"] = client.protocol_version
        tools = (await client.list_tools()).tools
        report["tools"] = len(tools)
        names = {t.name for t in tools}
        if "file_read" not in names:
            fail(f"file_read not listed: {sorted(names)}")
            return

        ok = await client.call_tool("file_read", {"path": "a.txt"})
        text = "".join(getattr(c, "text", "") for c in ok.content)
        report["success"] = {"isError": ok.is_error, "hasStructured": ok.structured_content is not None,
                             "sawContent": "alpha" in text}
        if ok.is_error or "alpha" not in text:
            fail(f"file_read a.txt: {ok.model_dump_json()}")

        bad = await client.call_tool("file_read", {"path": "no/such.txt"})
        code = ((bad.structured_content or {}).get("error") or {}).get("code")
        btext = "".join(getattr(c, "text", "") for c in bad.content)
        report["error"] = {"isError": bad.is_error, "code": code, "text": btext}
        if not bad.is_error or code != "file_not_found" or "file_not_found" not in btext:
            fail(f"typed error lost: {bad.model_dump_json()}")

        try:
            r = await client.call_tool("no_such_tool", {})
            report["unknown_tool"] = {"isError": r.is_error}
            fail("an unknown tool did not raise a JSON-RPC error")
        except MCPError as e:
            report["unknown_tool"] = {"code": e.error.code}
            if e.error.code != -32602:
                fail(f"unknown tool: code {e.error.code}, wanted -32602")

        if mode == "legacy":
            await listen_legacy(client, reload_cfg, changed)
        else:
            await listen_modern(client, reload_cfg)


def add_memory(cfg_path: str) -> None:
    with open(cfg_path) as f:
        cfg = json.load(f)
    files = cfg["mcp"]["files"]
    cfg["mcp"]["memory"] = {"command": files["command"], "args": ["server", "memory"]}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)


async def reload_and_wait_tools(client: Client, reload_cfg: str) -> int:
    add_memory(reload_cfg)
    r = await client.call_tool("host_reload", {})
    if r.is_error:
        fail(f"host_reload: {r.model_dump_json()}")
    return 0


async def listen_legacy(client: Client, reload_cfg: str | None, changed: anyio.Event) -> None:
    """Handshake era: list changes arrive as plain notifications."""
    if reload_cfg is None:
        report["listen"] = {"skipped": "a single server's tools never change"}
        return
    t0 = time.monotonic()
    await reload_and_wait_tools(client, reload_cfg)
    with anyio.move_on_after(15):
        await changed.wait()
    seen = changed.is_set()
    tools = (await client.list_tools()).tools
    report["listen"] = {"toolsListChanged": seen, "toolsAfter": len(tools),
                        "memory": any(t.name == "memory_store" for t in tools),
                        "ms": round((time.monotonic() - t0) * 1000)}
    if not seen:
        fail("no notifications/tools/list_changed after host_reload")
    if not report["listen"]["memory"]:
        fail("memory_store not listed after host_reload")


async def listen_modern(client: Client, reload_cfg: str | None) -> None:
    """2026-07-28: `subscriptions/listen`; the ack says what the server honours."""
    async with client.listen(tools_list_changed=True) as sub:
        honored = sub.honored.model_dump(by_alias=True, exclude_none=True)
        report["listen"] = {"honored": honored}
        if reload_cfg is None:
            return
        t0 = time.monotonic()
        await reload_and_wait_tools(client, reload_cfg)
        event = None
        with anyio.move_on_after(15):
            async for ev in sub:
                event = type(ev).__name__
                if event == "ToolsListChanged":
                    break
        tools = (await client.list_tools()).tools
        report["listen"].update({"event": event, "toolsAfter": len(tools),
                                 "memory": any(t.name == "memory_store" for t in tools),
                                 "ms": round((time.monotonic() - t0) * 1000)})
        if event != "ToolsListChanged":
            fail(f"no ToolsListChanged on the listen stream after host_reload (got {event})")
        if not report["listen"]["memory"]:
            fail("memory_store not listed after host_reload")


async def main(specs: list[dict]) -> dict:
    out = {}
    for spec in specs:
        await run(spec)
        out[spec["name"]] = report
    return out


if __name__ == "__main__":
    reports = anyio.run(main, json.loads(sys.argv[1]))
    print(json.dumps(reports))
    sys.exit(1 if any(r["failures"] for r in reports.values()) else 0)
