"""Drives a kitbag server with the OpenAI Agents SDK (openai-agents 0.24.0) without a model (no
API key): `MCPServerStdio` connects, `list_tools()`, every tool becomes the SDK's function tool
(`MCPUtil.to_function_tool`, as an Agent's `mcp_servers` do: it must not raise), and one
`call_tool` (`file_read` of a.txt: "alpha" comes back).

Strict schemas, reported, never a failure: OpenAI's strict function calling needs every object
closed, so `agents.strict_schema.ensure_strict_json_schema` refuses a schema holding a map
(`additionalProperties: {...}`) or a free-form object. The report counts the tools it converts
and those it refuses (name, reason, where in the schema), and how many the SDK's own path would
send as strict (`to_function_tool(..., convert_schemas_to_strict=True)`, which falls back to a
non-strict schema on refusal). kitbag's schemas are not reshaped to please it.

usage: python agents_check.py RUNS_JSON
  RUNS_JSON  a JSON list of runs (one Python start-up for all), each {"name", "target", "cwd"}:
    target   [command, args...], started over stdio in cwd
    cwd      the working directory of the server

Prints one JSON line: {name: report}; exits 1 on any failed check.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time

from agents.mcp import MCPServerStdio, MCPUtil
from agents.strict_schema import ensure_strict_json_schema

report: dict = {}


def fail(msg: str) -> None:
    report["failures"].append(msg)


def open_objects(schema, at: str = "") -> list[str]:
    """JSON pointers of the objects that admit undeclared properties (maps)."""
    found = []
    if isinstance(schema, dict):
        if schema.get("additionalProperties", False) is not False:
            found.append(at or "/")
        for key, value in schema.items():
            found += open_objects(value, f"{at}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += open_objects(value, f"{at}/{i}")
    return found


def strictness(tools, server) -> dict:
    converted, refused, sdk_strict = [], [], 0
    for tool in tools:
        try:
            ensure_strict_json_schema(copy.deepcopy(tool.input_schema))
            converted.append(tool.name)
        except Exception as e:  # noqa: BLE001 - a refusal is reported, not a failure
            reason = str(e).split(". ")[0]
            refused.append({"tool": tool.name, "error": type(e).__name__, "reason": reason,
                            "at": open_objects(tool.input_schema)})
        try:
            sdk_strict += bool(MCPUtil.to_function_tool(tool, server, True).strict_json_schema)
        except Exception as e:  # noqa: BLE001
            fail(f"to_function_tool({tool.name}, strict) raised {type(e).__name__}: {e}")
    return {"converted": len(converted), "refused": refused, "sdkStrict": sdk_strict}


async def check(spec: dict) -> None:
    params = {"command": spec["target"][0], "args": spec["target"][1:], "cwd": spec["cwd"]}
    async with MCPServerStdio(params, name="kitbag", client_session_timeout_seconds=60) as server:
        tools = await server.list_tools()
        report["tools"] = len(tools)
        for tool in tools:
            try:
                MCPUtil.to_function_tool(tool, server, False)
            except Exception as e:  # noqa: BLE001
                fail(f"to_function_tool({tool.name}) raised {type(e).__name__}: {e}")
        report["strict"] = strictness(tools, server)

        if "file_read" not in {t.name for t in tools}:
            fail(f"file_read not listed: {sorted(t.name for t in tools)}")
            return
        ok = await server.call_tool("file_read", {"path": "a.txt"})
        text = "".join(getattr(c, "text", "") for c in ok.content)
        report["success"] = {"isError": ok.is_error, "sawContent": "alpha" in text}
        if ok.is_error or "alpha" not in text:
            fail(f"file_read a.txt: {ok!r}"[:2000])


async def run(spec: dict) -> dict:
    global report
    report = {"tools": 0, "strict": None, "success": None, "failures": []}
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
