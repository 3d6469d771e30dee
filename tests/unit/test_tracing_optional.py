"""Tracing is optional: without the ``memstream[otel]`` extra (or with tracing off) every
helper is a no-op, and nothing that publishes or consumes records changes. Checked in a
fresh interpreter where ``opentelemetry`` cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
