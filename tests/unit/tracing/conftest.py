"""Spans recorded by the OpenTelemetry SDK's in-memory exporter, for agentkeep alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentkeep import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """agentkeep's spans go to this exporter for the test (never the global provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.set_tracer_provider(None)
        provider.shutdown()


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id
