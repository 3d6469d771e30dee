"""``tracing.otlp_endpoint`` is where spans go: the OTLP/HTTP exporter posts them there (a
real HTTP server stands in for the collector and decodes what it receives)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from memstream.kafka import tracing


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Collector.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def test_spans_are_exported_to_the_configured_endpoint(collector: str) -> None:
    Collector.received.clear()
    settings = tracing.TracingSettings(enabled=True, otlp_endpoint=collector,
                                       service_name="memstream-otlp-test")
    assert tracing.configure(settings, "memstream-worker")
    try:
        with tracing.span("memstream.search.request", {"memstream.cube_id": "alice"}):
            headers = dict(tracing.inject())
        tracing.flush()
    finally:
        tracing.shutdown()
    assert headers["traceparent"].startswith(b"00-")
    assert Collector.received, "nothing was posted to the collector"
    path, content_type, body = Collector.received[0]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    resource = request.resource_spans[0].resource
    service = {a.key: a.value.string_value for a in resource.attributes}["service.name"]
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert service == "memstream-otlp-test"
    assert [s.name for s in spans] == ["memstream.search.request"]
    assert {a.key: a.value.string_value for a in spans[0].attributes} == {
        "memstream.cube_id": "alice"}
