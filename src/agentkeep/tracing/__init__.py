"""OpenTelemetry traces of agentkeep's work (docs/observability.md, "Traces").

Spans come from OpenTelemetry's API (``opentelemetry-api``): with no tracer provider
configured nothing is emitted and nothing is built. Configure one (the SDK: ``pip install
agentkeep[otel]``) globally with ``opentelemetry.trace.set_tracer_provider`` or for
agentkeep alone with :func:`set_tracer_provider`.
"""

from agentkeep.tracing import names
from agentkeep.tracing.tracer import (
    current,
    current_span,
    current_traceparent,
    parent_context,
    remote_parent,
    set_tracer_provider,
    tracer,
)

__all__ = [
    "current",
    "current_span",
    "current_traceparent",
    "names",
    "parent_context",
    "remote_parent",
    "set_tracer_provider",
    "tracer",
]
