"""The runtime's Prometheus metrics: one registry per system, counters fed where things happen.

Each :class:`~agentkeep.AgentSystem` owns one :class:`RuntimeMetrics` with its own
:class:`prometheus_client.CollectorRegistry` — never the process-wide default registry, so
several systems in one process (and tests) never share or collide. Counters are updated at
the event site and cost one locked integer addition there:

- ``agentkeep_loop_steps_total``: plans the agent loops committed (each a step that made the
  loop's progress durable: a consumption, a response, tool results, a settlement);
- ``agentkeep_provider_errors_total{provider,kind}``: responses that ended in an error;
- ``agentkeep_provider_retries_total{provider,kind}``: attempts a provider retried.

What describes the current state (agents, turns, queues, the writer's histograms, SSE
streams) is not counted here: a collector registered beside these computes it when scraped
(``agent_system._metrics``, ``server.metrics``), so nothing runs in the background.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from agentkeep.types import Done, Retrying

__all__ = ["ProviderMeter", "RuntimeMetrics"]

#: The ``kind`` of a failure a provider did not classify.
UNCLASSIFIED = "unclassified"


class RuntimeMetrics:
    """One system's metrics (see the module docstring); thread-safe.

    Attributes:
        registry: The system's own registry: these counters, and whatever collectors the
            system and its daemon register to compute state at scrape time.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._steps = Counter(
            "agentkeep_loop_steps",
            "Steps the agent loops made durable (plans committed: consumptions, responses, "
            "tool results, settlements).",
            registry=self.registry,
        )
        self._errors = Counter(
            "agentkeep_provider_errors",
            "Model responses that ended in an error, by provider and error kind (the "
            "provider's classification when it gave one, else the response's error kind).",
            ("provider", "kind"),
            registry=self.registry,
        )
        self._retries = Counter(
            "agentkeep_provider_retries",
            "Request attempts a provider retried, by provider and the failure's kind.",
            ("provider", "kind"),
            registry=self.registry,
        )
        #: Count one committed step (the agent's thread, once per committed plan).
        self.step = self._steps.inc

    def provider(self, provider_id: str) -> ProviderMeter:
        """What counts the failures and retries of one response from ``provider_id``."""
        return ProviderMeter(self, provider_id)

    def provider_failed(self, provider_id: str, kind: str) -> None:
        """A response from ``provider_id`` ended in an error of ``kind``."""
        self._errors.labels(provider_id, kind).inc()

    def provider_retried(self, provider_id: str, kind: str) -> None:
        """``provider_id`` retried an attempt that failed with ``kind``."""
        self._retries.labels(provider_id, kind).inc()


class ProviderMeter:
    """Counts one response's retries and its error ending (told every stream event)."""

    __slots__ = ("_metrics", "_provider")

    def __init__(self, metrics: RuntimeMetrics, provider_id: str) -> None:
        self._metrics = metrics
        self._provider = provider_id

    def retried(self, event: Retrying) -> None:
        """The provider reported a retry."""
        self._metrics.provider_retried(self._provider, event.error_type or UNCLASSIFIED)

    def ended(self, done: Done) -> None:
        """The response's terminal event: counted if it is an error."""
        if done.state != "error":
            return
        if done.provider_error is not None:
            kind: str = done.provider_error.type
        else:
            kind = done.kind or UNCLASSIFIED
        self._metrics.provider_failed(self._provider, kind)
