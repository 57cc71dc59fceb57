"""``GET /metrics``: the system's Prometheus metrics, behind the daemon's token.

The exposition is the system's own registry (:class:`~agentkeep.metrics.RuntimeMetrics`:
the loops' counters, and its collector of agents, turns, queues and the store writer,
computed now) plus the daemon's state: ``agentkeep_sse_subscribers``, the SSE streams open
at this moment. Prometheus' text format 0.0.4 by default; OpenMetrics when the ``Accept``
header asks for ``application/openmetrics-text`` (``prometheus_client``'s negotiation). The
scrape runs in a worker thread: it reads the store.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from agentkeep.server.context import ServerContext, call, context
from agentkeep.server.openapi import Operation, Param
from agentkeep.server.security import METRICS_PATH

#: The media type of the default exposition (Prometheus' text format).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class _Scrape(Collector):
    """One scrape: the system's registry, then the daemon's own gauges."""

    def __init__(self, ctx: ServerContext) -> None:
        self._ctx = ctx

    def collect(self) -> Iterator[Metric]:
        yield from self._ctx.system.internals.metrics.registry.collect()
        yield GaugeMetricFamily(
            "agentkeep_sse_subscribers",
            "Server-sent event streams the daemon serves now.",
            value=len(self._ctx.streams),
        )


def _exposition(ctx: ServerContext, accept: str) -> tuple[bytes, str]:
    try:
        encode, media_type = choose_encoder(accept)
    except (TypeError, ValueError):  # a version it cannot parse: the default format
        encode, media_type = generate_latest, TEXT_FORMAT
    return encode(_Scrape(ctx)), media_type


async def metrics(request: Request) -> Response:
    """GET /metrics: the exposition, in the format ``Accept`` chose."""
    body, media_type = await call(_exposition, context(request), request.headers.get("accept", ""))
    return Response(body, headers={"Content-Type": media_type})


OPERATIONS = (
    Operation(
        method="GET",
        path=METRICS_PATH,
        operation_id="metrics",
        summary="Prometheus metrics (text format 0.0.4; OpenMetrics if Accept asks for it).",
        handler=metrics,
        params=(
            Param(
                name="Accept",
                where="header",
                schema={"type": "string"},
                description="application/openmetrics-text for OpenMetrics.",
            ),
        ),
        responses={200: TEXT_FORMAT},
    ),
)
