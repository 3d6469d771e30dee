"""Tracing (memstream/kafka/tracing.py) is optional: without the ``memstream[otel]`` extra (or
with tracing off) every helper is a no-op and nothing that publishes or consumes records
changes, checked in a fresh interpreter where ``opentelemetry`` cannot be imported. When on,
the OTLP/HTTP exporter posts spans to ``tracing.otlp_endpoint`` (a real HTTP server stands in
for the collector and decodes what it receives)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from memstream.kafka import tracing
from memstream.kafka.headers import headers_for
from memstream.topics.events import ExtractedMemory

WITHOUT_OTEL = textwrap.dedent("""
    import importlib.abc, logging, sys

    class NoOtel(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoOtel())
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    from memstream.kafka import tracing
    from memstream.kafka.headers import headers_for
    from memstream.topics.events import ExtractedMemory
    from memstream.streams.runtime.tracing import stage_span, stamp
    import memstream.client.client, memstream.streams.worker  # import without the extra

    assert not tracing.configure(tracing.TracingSettings(enabled=True), "x")
    assert not tracing.enabled()
    with tracing.span("memstream.anything", {"a": 1}) as span:
        span.set_attribute("b", 2)
        assert span is tracing.OFF
    with stage_span("extraction", []) as span:
        assert span is tracing.OFF
    assert tracing.inject() == [] and tracing.extract([("traceparent", b"00-x")]) is None
    assert stamp([]) == []
    item = ExtractedMemory(user_id="a", cube_id="a", memory="m")
    names = {name for name, _ in headers_for(item, b"{}", None)}
    assert not names & {"traceparent", "tracestate", "memstream-sig"}, names
    print("no-op")
""")


def test_without_the_extra_tracing_is_a_no_op_and_says_so() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no-op"
    assert "OpenTelemetry is not installed (pip install 'memstream[otel]')" in done.stderr


def test_off_by_default_even_with_the_extra_installed() -> None:
    assert not tracing.configure(tracing.TracingSettings(), "memstream-test")
    assert not tracing.enabled()
    assert tracing.inject() == []
    item = ExtractedMemory(user_id="a", cube_id="a", memory="m")
    names = {name for name, _ in headers_for(item, b"{}", None)}
    assert not names & {"traceparent", "tracestate", "memstream-sig"}  # no trace, no signature


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
