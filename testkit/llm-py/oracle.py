"""The vendors' own SDKs as the oracle for kitbag-llm's wire fixtures (kitbag-llm/tests/oracle.rs).

  oracle.py parse anthropic|openai FIXTURE.sse...
      Serve each recorded stream on loopback, let the official SDK parse it, print what the SDK
      made of it ({"ok": ...} or {"error": {"class", "message"}}).
  oracle.py request anthropic|openai CONVERSATION.json...
      Let the official SDK send each conversation's vendor-native parameters to a loopback
      server, print the request it sent ({"path", "headers", "body"}).

The output is one JSON object keyed by the file names given (one process for many files:
importing both SDKs takes seconds).

No network: every call goes to 127.0.0.1.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import openai

ANTHROPIC_MINIMAL = (
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_x","type":"message",'
    '"role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,'
    '"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    '"stop_sequence":null},"usage":{"output_tokens":1}}\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
OPENAI_MINIMAL = (
    'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    '[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


def serve(payload: bytes):
    """A loopback server answering every POST with `payload` as an event stream, sent in small
    pieces; returns (server, captured requests)."""
    captured = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            captured.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(body),
                }
            )
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            for i in range(0, len(payload), 37):
                self.wfile.write(payload[i : i + 37])
                self.wfile.flush()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, captured


def anthropic_client(port):
    return anthropic.Anthropic(api_key="test-key", base_url=f"http://127.0.0.1:{port}", max_retries=0)


def openai_client(port):
    return openai.OpenAI(api_key="test-key", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)


def parse(provider, fixture):
    with open(fixture, "rb") as f:
        payload = f.read()
    server, _ = serve(payload)
    port = server.server_address[1]
    try:
        if provider == "anthropic":
            client = anthropic_client(port)
            with client.messages.stream(
                model="m", max_tokens=1024, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                message = stream.get_final_message()
            return {"ok": json.loads(message.model_dump_json(exclude_none=True))}
        client = openai_client(port)
        chunks = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return {"ok": accumulate_openai(chunks)}
    except Exception as e:  # the SDK's verdict on a stream it refuses is the answer
        return {"error": {"class": type(e).__name__, "message": str(e)}}
    finally:
        server.shutdown()


def accumulate_openai(chunks):
    """The SDK's parsed chunk objects, folded the way its own `ChatCompletionStreamState` folds
    them: content concatenated, tool calls merged by index, the last finish_reason and usage."""
    out = {"id": None, "model": None, "content": "", "tool_calls": {}, "finish_reason": None, "usage": None}
    for chunk in chunks:
        out["id"] = chunk.id or out["id"]
        out["model"] = chunk.model or out["model"]
        if chunk.usage is not None:
            out["usage"] = json.loads(chunk.usage.model_dump_json(exclude_none=True))
        for choice in chunk.choices:
            if choice.delta.content:
                out["content"] += choice.delta.content
            for call in choice.delta.tool_calls or []:
                slot = out["tool_calls"].setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] += call.function.name
                if call.function and call.function.arguments:
                    slot["arguments"] += call.function.arguments
            if choice.finish_reason:
                out["finish_reason"] = choice.finish_reason
    out["tool_calls"] = [out["tool_calls"][i] for i in sorted(out["tool_calls"])]
    return out


def request(provider, conversation):
    with open(conversation) as f:
        params = json.load(f)[provider]
    server, captured = serve((ANTHROPIC_MINIMAL if provider == "anthropic" else OPENAI_MINIMAL).encode())
    port = server.server_address[1]
    try:
        if provider == "anthropic":
            for _ in anthropic_client(port).messages.create(**params, stream=True):
                pass
        else:
            for _ in openai_client(port).chat.completions.create(**params, stream=True):
                pass
    finally:
        server.shutdown()
    return captured[0]


def main():
    mode, provider, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    run = parse if mode == "parse" else request
    result = {path: run(provider, path) for path in paths}
    json.dump(result, sys.stdout, ensure_ascii=False, sort_keys=True)


if __name__ == "__main__":
    main()
