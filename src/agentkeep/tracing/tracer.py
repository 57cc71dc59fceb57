"""The tracer agentkeep's spans come from, and W3C trace context in and out.

Invariant: when no tracer provider is configured (OpenTelemetry's API default: a proxy of
the no-op provider) :func:`tracer` returns None and no caller builds a span, an attribute
or a context — tracing costs one global read and an ``isinstance`` per turn, request, tool
call, compaction and group commit. Spans that cross threads (a turn's tool calls run on the
tools' threads, its requests on the stream workers) are parented explicitly with a
:class:`~opentelemetry.context.Context`, never through a thread's current context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from importlib import metadata

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_NOT_CONFIGURED = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_override: trace.TracerProvider | None = None
_cached: tuple[trace.TracerProvider, trace.Tracer] | None = None


def _version() -> str:
    try:
        return metadata.version("agentkeep")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


_VERSION = _version()


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Make agentkeep's spans come from ``provider`` (None: OpenTelemetry's global provider,
    the default). For an embedder that keeps agentkeep's traces apart from the process's
    global provider, and for tests."""
    global _override, _cached
    _override = provider
    _cached = None


def tracer() -> trace.Tracer | None:
    """``trace.get_tracer("agentkeep", version)`` of the configured provider, or None when
    none is configured (nothing would record: callers skip building their spans)."""
    global _cached
    provider = _override if _override is not None else trace.get_tracer_provider()
    if isinstance(provider, _NOT_CONFIGURED):
        return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    made = provider.get_tracer("agentkeep", _VERSION)
    _cached = (provider, made)
    return made


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the calling thread's current span, or None when tracing is
    off or no span is current (what a turn accepted now is parented to)."""
    if tracer() is None:
        return None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def current_span() -> trace.SpanContext | None:
    """The calling thread's current span's context, or None when tracing is off or no span
    is current (what a store transaction submitted now links its group commit to)."""
    if tracer() is None:
        return None
    span_context = trace.get_current_span().get_span_context()
    return span_context if span_context.is_valid else None


def parent_context(traceparent: str | None) -> otel_context.Context | None:
    """A context whose (remote) span is the one ``traceparent`` names; None for None or a
    malformed value (the span is then a root)."""
    if not traceparent:
        return None
    extracted = _PROPAGATOR.extract({"traceparent": traceparent}, context=otel_context.Context())
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


@contextlib.contextmanager
def current(context: otel_context.Context | None) -> Iterator[None]:
    """Make ``context`` this thread's current context for the block (nothing for None): how
    a span opened on one thread becomes the parent of what runs on another."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def remote_parent(headers: Mapping[str, str]) -> Iterator[None]:
    """Make the span a request's ``traceparent`` (and ``tracestate``) header names current
    for the block (nothing when tracing is off or the header is absent or malformed): work
    accepted inside it is parented to the caller's trace."""
    if tracer() is None or "traceparent" not in headers:
        yield
        return
    carrier = {key: headers[key] for key in ("traceparent", "tracestate") if key in headers}
    extracted = _PROPAGATOR.extract(carrier, context=otel_context.Context())
    token = otel_context.attach(extracted)
    try:
        yield
    finally:
        otel_context.detach(token)
