"""Drives a kitbag server with FastMCP 4.2.3: its `Client` over stdio, then its proxy server
(`fastmcp.server.create_proxy`, 4.x's replacement for `FastMCP.as_proxy`) in front of kitbag,
reached through an in-memory `Client(proxy)`.

Direct: list the tools; every outputSchema through FastMCP's converter
(`json_schema_to_type_adapter`, which builds the type `call_tool` parses structured results
into: a schema it refuses silently leaves `.data` empty); one call (`file_read` of a.txt: its
`.data` holds "alpha"), one that fails (`file_read` of a missing file: a `ToolError` naming
`file_not_found`). Through the proxy: the same tool names, the call works, the error is still a
`ToolError` naming `file_not_found`.

usage: python fastmcp_check.py RUNS_JSON
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

from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy
from fastmcp.utilities.json_schema_type import json_schema_to_type_adapter

report: dict = {}


def fail(msg: str) -> None:
    report["failures"].append(msg)


async def calls(client: Client, where: str) -> dict:
    """`file_read` of a.txt and of a missing file; what came back."""
    out: dict = {}
    ok = await client.call_tool("file_read", {"path": "a.txt"})
    data = ok.data
    content = getattr(data, "content", None) if data is not None else None
    text = "".join(getattr(c, "text", "") for c in ok.content)
    out["success"] = {"isError": ok.is_error, "dataType": type(data).__name__,
                      "sawData": isinstance(content, str) and "alpha" in content,
                      "sawText": "alpha" in text}
    if ok.is_error or not out["success"]["sawData"] or "alpha" not in text:
        fail(f"{where}: file_read a.txt: {ok!r}"[:2000])
    try:
        bad = await client.call_tool("file_read", {"path": "no/such.txt"})
        out["error"] = {"raised": None, "isError": bad.is_error}
        fail(f"{where}: file_read of a missing file raised no ToolError: {bad!r}"[:2000])
    except ToolError as e:
        out["error"] = {"raised": type(e).__name__, "message": str(e)}
        if "file_not_found" not in str(e):
            fail(f"{where}: the ToolError does not name file_not_found: {e}")
    return out


async def check(spec: dict) -> None:
    def transport() -> StdioTransport:
        return StdioTransport(command=spec["target"][0], args=spec["target"][1:], cwd=spec["cwd"],
                              keep_alive=False)

    async with Client(transport(), timeout=60) as client:
        report["protocol"] = getattr(client, "protocol_version", None)
        tools = await client.list_tools()
        report["tools"] = len(tools)
        refused = []
        schemas = [t for t in tools if t.output_schema]
        for tool in schemas:
            try:
                json_schema_to_type_adapter(tool.output_schema)
            except Exception as e:  # noqa: BLE001 - every refused schema is reported
                refused.append(f"{tool.name}: {type(e).__name__}: {e}"[:500])
        report["outputSchemas"] = {"converted": len(schemas) - len(refused), "refused": refused}
        if refused:
            fail(f"json_schema_to_type_adapter refused {len(refused)} outputSchemas: {refused}")
        if "file_read" not in {t.name for t in tools}:
            fail(f"file_read not listed: {sorted(t.name for t in tools)}")
            return
        report["direct"] = await calls(client, "direct")

    proxy = create_proxy(transport(), name="kitbag-proxy")
    async with Client(proxy, timeout=60) as client:
        proxied = await client.list_tools()
        report["proxy"] = {"tools": len(proxied)}
        missing = sorted({t.name for t in tools} ^ {t.name for t in proxied})
        if missing:
            fail(f"the proxy lists other tools: {missing}")
        report["proxy"].update(await calls(client, "proxy"))


async def run(spec: dict) -> dict:
    global report
    report = {"protocol": None, "tools": 0, "outputSchemas": None, "direct": None, "proxy": None,
              "failures": []}
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
