"""An MCP server (handshake era, stdio) whose one tool answers against its own outputSchema:
`count` must be an integer and it sends a string, in its successful result and in its error
result. The sweep's drivers must report both: this is what keeps their schema checks honest.

usage: python3 misshapen_server.py
"""

import json
import sys

SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "error": {"type": "object", "properties": {"code": {"type": "string"}}},
    },
}


def answer(msg: dict):
    method = msg.get("method")
    if method == "initialize":
        return {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "misshapen", "version": "0"}}
    if method == "tools/list":
        return {"tools": [{"name": "shape", "description": "Answers off its schema.",
                           "inputSchema": {"type": "object", "properties": {"fail": {"type": "boolean"}}},
                           "outputSchema": SCHEMA}]}
    if method == "tools/call":
        if msg["params"].get("arguments", {}).get("fail"):
            return {"isError": True, "content": [{"type": "text", "text": "error [boom]: boom"}],
                    "structuredContent": {"error": {"code": "boom"}, "count": "three"}}
        return {"content": [{"type": "text", "text": "three"}], "structuredContent": {"count": "three"}}
    return {}


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}), flush=True)
