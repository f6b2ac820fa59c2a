"""Drives OpenAI Codex's `codex app-server` (JSON-RPC over stdio) with kitbag configured as its
MCP server(s), without an API key: initialize, start a thread (which starts the MCP servers),
list each MCP server's tools (`mcpServerStatus/list`), call a tool successfully, one that fails
(the typed code must survive) and an unknown tool (`mcpServer/tool/call`: a direct call, no
model turn).

usage: python3 codex_check.py CODEX_BIN CODEX_HOME PROJECT SERVER_NAME...
  CODEX_HOME holds a config.toml with `[mcp_servers.SERVER_NAME]` for each name; PROJECT (the
  thread's cwd) must hold `a.txt` containing "alpha". Prints one JSON line, {name: report};
  exits 1 on any failed check.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

codex, home, project = sys.argv[1:4]
servers = sys.argv[4:]
reports: dict = {}
report: dict = {"failures": []}


def fail(msg: str) -> None:
    report["failures"].append(msg)


env = {k: v for k, v in os.environ.items()
       if not k.startswith(("OPENAI_", "CODEX_")) and k != "KITBAG_HOST_DEPTH"}
env.update({"CODEX_HOME": home, "HOME": home, "RUST_LOG": "warn"})
proc = subprocess.Popen([codex, "app-server"], cwd=project, env=env, stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
inbox: queue.Queue = queue.Queue()
stderr_tail: list[str] = []


def read_stdout() -> None:
    for line in proc.stdout:
        try:
            inbox.put(json.loads(line))
        except ValueError:
            pass
    inbox.put(None)


def read_stderr() -> None:
    for line in proc.stderr:
        stderr_tail.append(line.rstrip())
        del stderr_tail[:-20]


threading.Thread(target=read_stdout, daemon=True).start()
threading.Thread(target=read_stderr, daemon=True).start()
notifications: list[dict] = []
next_id = 0


def request(method: str, params: dict, timeout: float = 60) -> dict:
    global next_id
    next_id += 1
    rid = next_id
    proc.stdin.write(json.dumps({"id": rid, "method": method, "params": params}) + "\n")
    proc.stdin.flush()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{method}: no answer in {timeout}s")
        msg = inbox.get(timeout=left)
        if msg is None:
            raise RuntimeError(f"{method}: codex app-server exited: {stderr_tail}")
        if msg.get("id") == rid and "method" not in msg:
            return msg
        if "method" in msg and "id" in msg:
            # A server request (approval, elicitation): refuse; none is expected here.
            proc.stdin.write(json.dumps({"id": msg["id"], "error": {"code": -32601, "message": "not handled"}}) + "\n")
            proc.stdin.flush()
        elif "method" in msg:
            notifications.append(msg)


def result(msg: dict, what: str) -> dict:
    if "error" in msg:
        raise RuntimeError(f"{what}: {msg['error']}")
    return msg["result"]


def check_server(thread_id: str, server: str) -> None:
    # The thread starts its MCP servers; wait until ours reports ready (or failed).
    status = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = result(request("mcpServerStatus/list", {"threadId": thread_id, "serverName": server}),
                        "mcpServerStatus/list")
        entry = next((s for s in listed.get("data", []) if s.get("name") == server), None)
        status = entry and entry.get("runtimeStatus")
        if entry and entry.get("tools") and status in (None, "connected"):
            break
        if status in ("failed", "cancelled", "disabled"):
            break
        time.sleep(0.2)
    report["status"] = status
    tools = (entry or {}).get("tools") or {}
    report["tools"] = len(tools)
    report["toolsError"] = (entry or {}).get("toolsError")
    if not tools:
        fail(f"no tools listed for {server}: {json.dumps(entry)[:2000]}")
    elif not any(t.get("name") == "file_read" or k.endswith("file_read") for k, t in tools.items()):
        fail(f"file_read not listed: {sorted(tools)}")
    else:
        def call(tool: str, args: dict) -> dict:
            return request("mcpServer/tool/call", {"threadId": thread_id, "server": server,
                                                   "tool": tool, "arguments": args})

        ok = result(call("file_read", {"path": "a.txt"}), "file_read a.txt")
        text = "".join(c.get("text", "") for c in ok.get("content", []))
        report["success"] = {"isError": ok.get("isError"), "sawContent": "alpha" in text,
                             "hasStructured": ok.get("structuredContent") is not None}
        if ok.get("isError") or "alpha" not in text:
            fail(f"file_read a.txt: {ok}")

        bad = result(call("file_read", {"path": "no/such.txt"}), "file_read no/such.txt")
        code = ((bad.get("structuredContent") or {}).get("error") or {}).get("code")
        report["error"] = {"isError": bad.get("isError"), "code": code}
        if not bad.get("isError") or code != "file_not_found":
            fail(f"typed error lost: {bad}")

        unknown = call("no_such_tool", {})
        report["unknown_tool"] = unknown.get("error") or {"result": unknown.get("result")}
        if "error" not in unknown and not (unknown.get("result") or {}).get("isError"):
            fail(f"an unknown tool succeeded: {unknown}")


try:
    result(request("initialize", {"clientInfo": {"name": "kitbag-codex-check", "version": "1.0.0"}}),
           "initialize")
    proc.stdin.write(json.dumps({"method": "initialized"}) + "\n")
    proc.stdin.flush()
    thread = result(request("thread/start", {"cwd": project, "ephemeral": True,
                                             "approvalPolicy": "never", "sandbox": "read-only"}),
                    "thread/start")
    thread_id = thread["thread"]["id"]

    for server in servers:
        report = reports[server] = {"status": None, "tools": 0, "success": None, "error": None,
                                    "unknown_tool": None, "failures": []}
        try:
            check_server(thread_id, server)
        except Exception as e:  # noqa: BLE001 - report whatever stopped the check
            fail(f"{type(e).__name__}: {e}"[:2000])
            report["stderr"] = list(stderr_tail)
except Exception as e:  # noqa: BLE001 - report whatever stopped the check
    fail(f"{type(e).__name__}: {e}"[:2000])
    report["stderr"] = list(stderr_tail)
    reports.setdefault("codex", report)
finally:
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001
        proc.kill()

print(json.dumps(reports))
sys.exit(1 if any(r["failures"] for r in reports.values()) else 0)
