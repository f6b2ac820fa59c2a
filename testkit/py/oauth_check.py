"""The official Python MCP SDK's OAuth client (mcp 2.3, `OAuthClientProvider`) against a
kitbag server protected by the test's authorization server: an independent client that must
get through discovery (RFC 9728 / 8414), dynamic registration (RFC 7591), the code flow with
PKCE and the resource indicator, then call a tool — so the fixture the host's own OAuth
client is tested against is one a real client accepts.

usage: python oauth_check.py MCP_URL RESOURCE TOOL ARGS_JSON
Prints one JSON line: {"text": the tool's text, "registered": client_id, "scope": granted}.
"""

from __future__ import annotations

import json
import sys
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


class Memory:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


async def main(url: str, resource: str, tool: str, args: dict) -> dict:
    storage = Memory()
    redirected: dict = {}

    async def open_browser(link: str) -> None:
        # The "browser": the authorization server approves and redirects; read the code.
        async with httpx2.AsyncClient() as http:
            r = await http.get(link)
        location = r.headers["location"]
        q = parse_qs(urlparse(location).query)
        redirected["code"] = q["code"][0]
        redirected["state"] = q.get("state", [None])[0]

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"])

    async def resource_ok(server_url: str, prm_resource: str | None) -> None:
        # Reached at 127.0.0.1, the server's canonical resource is another URL.
        if prm_resource != resource:
            raise ValueError(f"metadata names {prm_resource}, expected {resource}")

    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="sdk-oauth-check",
            redirect_uris=["http://127.0.0.1:9/callback"],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=open_browser,
        callback_handler=callback,
        validate_resource_url=resource_ok,
    )
    async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=30) as client:
            result = await client.call_tool(tool, args)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return {
        "text": text,
        "isError": result.is_error,
        "registered": storage.client.client_id if storage.client else None,
        "scope": storage.tokens.scope if storage.tokens else None,
    }


if __name__ == "__main__":
    out = anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    print(json.dumps(out))
