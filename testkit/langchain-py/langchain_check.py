"""Drives a kitbag server with LangChain's MCP adapters (langchain-mcp-adapters 0.3.2), as a
LangChain or LangGraph agent does: `MultiServerMCPClient(...).get_tools()` over stdio turns
every MCP tool into a LangChain `StructuredTool` whose `args_schema` is the tool's inputSchema.
Then, over the whole list: `.args` of every tool (it reads `inputSchema["properties"]`: a
schema without `properties` raised KeyError), `render_text_description_and_args(tools)` (the
text prompt of ReAct-style agents), `convert_to_openai_tool` of every tool (what a chat model's
`bind_tools` sends); and one real call (`file_read` of a.txt: "alpha" comes back) and one that
fails (`file_read` of a missing file: an error ToolMessage naming `file_not_found`).

usage: python langchain_check.py RUNS_JSON
  RUNS_JSON  a JSON list of runs (one Python start-up for all), each {"name", "target", "cwd"}:
    target   [command, args...], started over stdio in cwd
    cwd      the working directory of the server

Prints one JSON line: {name: report}; exits 1 on any failed check.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from langchain_core.messages import ToolMessage
from langchain_core.tools import render_text_description_and_args
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient

report: dict = {}


def fail(msg: str) -> None:
    report["failures"].append(msg)


def text_of(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(c if isinstance(c, str) else str(c.get("text", "")) for c in content)


async def call(tool, args: dict, call_id: str) -> ToolMessage:
    """Invoke the tool as an agent's tool node does: with a tool call, getting a ToolMessage."""
    return await tool.ainvoke({"name": tool.name, "args": args, "id": call_id, "type": "tool_call"})


async def check(spec: dict) -> None:
    connection = {"transport": "stdio", "command": spec["target"][0], "args": spec["target"][1:],
                  "cwd": spec["cwd"]}
    client = MultiServerMCPClient({"kitbag": connection})
    tools = await client.get_tools()
    report["tools"] = len(tools)

    args_failed = []
    for tool in tools:
        try:
            tool.args
        except Exception as e:  # noqa: BLE001 - every failing tool is reported
            args_failed.append(f"{tool.name}: {type(e).__name__}: {e}")
    report["args"] = {"ok": len(tools) - len(args_failed), "failed": args_failed}
    if args_failed:
        fail(f"tool.args raised on {len(args_failed)} tools: {args_failed}")

    text = render_text_description_and_args(tools)
    report["rendered_chars"] = len(text)
    missing = [t.name for t in tools if f"{t.name} - " not in text]
    if missing:
        fail(f"render_text_description_and_args left out {missing}")

    openai_failed = []
    for tool in tools:
        try:
            convert_to_openai_tool(tool)
        except Exception as e:  # noqa: BLE001
            openai_failed.append(f"{tool.name}: {type(e).__name__}: {e}")
    report["convert_to_openai_tool"] = {"ok": len(tools) - len(openai_failed),
                                        "failed": openai_failed}
    if openai_failed:
        fail(f"convert_to_openai_tool raised on {len(openai_failed)} tools: {openai_failed}")

    by_name = {t.name: t for t in tools}
    if "file_read" not in by_name:
        fail(f"file_read not listed: {sorted(by_name)}")
        return
    ok = await call(by_name["file_read"], {"path": "a.txt"}, "ok")
    report["success"] = {"status": ok.status, "sawContent": "alpha" in text_of(ok),
                         "hasArtifact": ok.artifact is not None}
    if ok.status != "success" or "alpha" not in text_of(ok):
        fail(f"file_read a.txt: {ok!r}"[:2000])

    bad = await call(by_name["file_read"], {"path": "no/such.txt"}, "bad")
    report["error"] = {"status": bad.status, "text": text_of(bad)}
    if bad.status != "error" or "file_not_found" not in text_of(bad):
        fail(f"file_read of a missing file, not an error naming file_not_found: {bad!r}"[:2000])


async def run(spec: dict) -> dict:
    global report
    report = {"tools": 0, "args": None, "rendered_chars": 0, "convert_to_openai_tool": None,
              "success": None, "error": None, "failures": []}
    t0 = time.monotonic()
    try:
        await check(spec)
    except Exception as e:  # noqa: BLE001 - report whatever stopped the client
        fail(f"client error: {type(e).__name__}: {e!r}"[:2000])
    report["ms"] = round((time.monotonic() - t0) * 1000)
    return report


async def main(specs: list[dict]) -> dict:
    return {spec["name"]: await run(spec) for spec in specs}


if __name__ == "__main__":
    reports = asyncio.run(main(json.loads(sys.argv[1])))
    print(json.dumps(reports))
    sys.exit(1 if any(r["failures"] for r in reports.values()) else 0)
