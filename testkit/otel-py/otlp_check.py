"""The judge of kitbag's OTLP/HTTP JSON export (servers/host/tests/otel.rs).

Reads a JSON array of request bodies (strings) on stdin. Each body must be an
ExportTraceServiceRequest in the OTLP JSON encoding: it is parsed with the official
generated protobuf classes (opentelemetry-proto) by google.protobuf.json_format, which
refuses unknown fields and wrong types. OTLP/JSON writes trace and span ids as hex where
the protobuf JSON mapping expects base64 (the OTLP specification's one deviation), so ids
are checked to be lower-case hex of the right length and turned into base64 first, as an
OTLP receiver does.

Prints one JSON line: the spans, flattened — service name, name, kind, ids (hex),
attributes, status, links, times.
"""

import base64
import json
import re
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

HEX = {32: re.compile(r"^[0-9a-f]{32}$"), 16: re.compile(r"^[0-9a-f]{16}$")}


def hex_to_b64(value, length, where):
    if not isinstance(value, str) or not HEX[length].match(value):
        raise ValueError(f"{where}: {value!r} is not {length} lower-case hex digits")
    return base64.b64encode(bytes.fromhex(value)).decode()


def fix_ids(span):
    span["traceId"] = hex_to_b64(span.get("traceId"), 32, "traceId")
    span["spanId"] = hex_to_b64(span.get("spanId"), 16, "spanId")
    if "parentSpanId" in span:
        span["parentSpanId"] = hex_to_b64(span["parentSpanId"], 16, "parentSpanId")
    for link in span.get("links", []):
        link["traceId"] = hex_to_b64(link.get("traceId"), 32, "links.traceId")
        link["spanId"] = hex_to_b64(link.get("spanId"), 16, "links.spanId")


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def main():
    bodies = json.load(sys.stdin)
    spans = []
    for body in bodies:
        doc = json.loads(body)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    fix_ids(span)
        request = ExportTraceServiceRequest()
        json_format.ParseDict(doc, request)  # unknown fields are errors
        for rs in request.resource_spans:
            resource = {kv.key: value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    if len(s.trace_id) != 16 or len(s.span_id) != 8:
                        raise ValueError(f"{s.name}: ids of the wrong length")
                    if s.end_time_unix_nano < s.start_time_unix_nano:
                        raise ValueError(f"{s.name}: ends before it starts")
                    spans.append(
                        {
                            "service": resource.get("service.name"),
                            "resource": resource,
                            "scope": ss.scope.name,
                            "name": s.name,
                            "kind": Span.SpanKind.Name(s.kind),
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "trace_state": s.trace_state,
                            "attributes": {kv.key: value(kv.value) for kv in s.attributes},
                            "status": Status.StatusCode.Name(s.status.code),
                            "status_message": s.status.message,
                            "links": [
                                {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()}
                                for l in s.links
                            ],
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                        }
                    )
    print(json.dumps({"spans": spans}))


if __name__ == "__main__":
    main()
