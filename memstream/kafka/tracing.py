"""OpenTelemetry spans across every hop, the trace context carried in Kafka headers.

Off by default: ``tracing.enabled`` (and ``tracing.otlp_endpoint``, an OTLP/HTTP traces
endpoint) turns it on in a process, which then exports its spans to that endpoint. The
OpenTelemetry SDK and OTLP exporter come with the ``memstream[otel]`` extra; without them,
or with tracing off, every helper here is a no-op that costs one test of a module flag.

Between processes the context travels as W3C trace context: each record a client or a
worker publishes carries a ``traceparent`` (and ``tracestate``) header, and the stage that
consumes it starts its span as a child of that context, so one search or one conversation
chunk is one trace from the client call to the last stage it reaches (docs/tracing.md).

One tracer provider per process (the first ``configure`` that turns tracing on wins), of
memstream's own: an application's global OpenTelemetry setup is left alone, while its
current span still becomes the parent of a client call's span.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from memstream.topics.settings import TracingSettings

log = logging.getLogger("memstream.tracing")

Headers = Sequence[tuple[str, bytes]]
Kind = Literal["internal", "producer", "consumer", "client", "server"]
Attributes = Mapping[str, str | int | float | bool | None]
TRACE_HEADERS = ("traceparent", "tracestate")


class _Off:
    """Stands for a span while tracing is off: accepts what a span accepts, records nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        return None

    def record_exception(self, exception: BaseException) -> None:
        return None


OFF = _Off()
_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None


def configure(settings: TracingSettings, service: str, exporter: Any = None) -> bool:
    """Turn tracing on in this process if ``settings`` ask for it; True if it is on.

    ``exporter``: a span exporter to use instead of OTLP (tests pass an in-memory one;
    spans are then exported as each ends). A process configured already stays as it is."""
    global _tracer, _provider
    if _tracer is not None:
        return True
    if not settings.enabled:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        log.warning("tracing.enabled is set, but OpenTelemetry is not installed (pip install "
                    "'memstream[otel]'): tracing stays off")
        return False
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.service_name or service}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
        log.info("tracing on: spans of %s go to %s", service, settings.otlp_endpoint)
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer("memstream")
    return True


def enabled() -> bool:
    return _tracer is not None


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans still buffered (a worker stopping)."""
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))


def shutdown() -> None:
    """Turn tracing off again in this process, exporting what is buffered first."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def _kind(kind: Kind) -> Any:
    from opentelemetry.trace import SpanKind

    return {"internal": SpanKind.INTERNAL, "producer": SpanKind.PRODUCER,
            "consumer": SpanKind.CONSUMER, "client": SpanKind.CLIENT,
            "server": SpanKind.SERVER}[kind]


def _attributes(attributes: Attributes | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if v is not None}


@contextlib.contextmanager
def span(name: str, attributes: Attributes | None = None,
         kind: Kind = "internal") -> Iterator[Any]:
    """A span around the block, a child of the current one (``OFF`` while tracing is off)."""
    if _tracer is None:
        yield OFF
        return
    with _tracer.start_as_current_span(name, kind=_kind(kind),
                                       attributes=_attributes(attributes)) as current:
        yield current


@contextlib.contextmanager
def consumed(name: str, records: Sequence[Headers], attributes: Attributes | None = None,
             ) -> Iterator[Any]:
    """A span handling consumed records: a child of the first record's context, linked to
    the others' (a batch may gather several traces), or a new trace if none carried one."""
    if _tracer is None:
        yield OFF
        return
    from opentelemetry import trace

    contexts = [c for c in (extract(h) for h in records) if c is not None]
    links = []
    for other in contexts[1:]:
        linked = trace.get_current_span(other).get_span_context()
        if linked.is_valid:
            links.append(trace.Link(linked))
    with _tracer.start_as_current_span(
            name, context=contexts[0] if contexts else None, kind=_kind("consumer"),
            attributes=_attributes(attributes), links=links) as current:
        yield current


def inject() -> list[tuple[str, bytes]]:
    """The current trace context as Kafka headers (none while tracing is off)."""
    if _tracer is None:
        return []
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return [(k, v.encode("ascii")) for k, v in carrier.items()]


def extract(headers: Headers) -> Any:
    """The trace context a record's headers carry (None: none, or tracing off)."""
    if _tracer is None:
        return None
    carrier = {k: v.decode("ascii", errors="replace") for k, v in headers
               if k in TRACE_HEADERS}
    if "traceparent" not in carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier)

