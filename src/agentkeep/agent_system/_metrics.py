"""The system's state as Prometheus metrics, computed when scraped (no background thread).

:class:`SystemCollector` joins the system's :class:`~agentkeep.metrics.RuntimeMetrics`
registry. Each scrape reads the store once (one snapshot, in the scraping thread) and the
actors' registry and the writer's counters in memory:

- ``agentkeep_agents{state}``: agents with an actor now (``live``) and those stored without
  one (``passivated``: neither deleted nor archived);
- ``agentkeep_turns{status}``: turns in each status (every status, 0 included);
- ``agentkeep_queued_messages{queue}``: messages accepted and not yet consumed, per queue;
- ``agentkeep_store_commits_total``, ``agentkeep_store_commit_errors_total``,
  ``agentkeep_store_transactions_total``, ``agentkeep_store_failed_transactions_total``:
  the writer's counters;
- ``agentkeep_store_commit_seconds`` and ``agentkeep_store_group_size``: histograms of each
  committed group's latency (BEGIN to COMMIT returned) and size (work items).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agentkeep.actors.agent_tier import AgentTier
from agentkeep.persistence.histogram import HistogramSnapshot
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.types.turns import LIVE_STATUSES, TERMINAL_STATUSES

_QUEUES = ("send", "steering")
_STORED_AGENTS = (
    "SELECT COUNT(*) FROM agents a LEFT JOIN sessions s ON s.agent_id = a.id "
    "WHERE a.deleted_at_ms IS NULL AND s.archived_at_ms IS NULL"
)
_TURNS = "SELECT status, COUNT(*) FROM turns GROUP BY status"
_QUEUED = "SELECT queue, COUNT(*) FROM queue GROUP BY queue"


def _counts(tx: Transaction) -> tuple[int, dict[str, int], dict[str, int]]:
    """(stored active agents, turns by status, queued messages by queue), one snapshot."""
    sql = tx.sql
    agents = int(sql.query(_STORED_AGENTS, ())[0][0])
    turns = {str(s): int(n) for s, n in sql.query(_TURNS, ())}
    queued = {str(q): int(n) for q, n in sql.query(_QUEUED, ())}
    return agents, turns, queued


def histogram(name: str, documentation: str, snapshot: HistogramSnapshot) -> Metric:
    """A Prometheus histogram family from a writer's :class:`HistogramSnapshot`."""
    buckets: list[tuple[str, float]] = [
        (repr(float(bound)), float(count))
        for bound, count in zip(snapshot.bounds, snapshot.cumulative, strict=False)
    ]
    buckets.append(("+Inf", float(snapshot.count)))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=snapshot.total)


class SystemCollector(Collector):
    """Computes the system's state gauges and the writer's metrics at scrape time."""

    def __init__(self, store: Store, agents: AgentTier) -> None:
        self._store = store
        self._agents = agents

    def collect(self) -> Iterator[Metric]:
        """The families of one scrape (see the module docstring)."""
        stored, turns, queued = self._store.read(_counts)
        live = len(self._agents.live())
        agents = GaugeMetricFamily(
            "agentkeep_agents",
            "Agents with an actor now (live) and stored without one (passivated).",
            labels=("state",),
        )
        agents.add_metric(("live",), live)
        agents.add_metric(("passivated",), max(0, stored - live))
        yield agents
        by_status = GaugeMetricFamily(
            "agentkeep_turns", "Turns in each status.", labels=("status",)
        )
        for status in (*LIVE_STATUSES, *TERMINAL_STATUSES):
            by_status.add_metric((status,), turns.get(status, 0))
        yield by_status
        depth = GaugeMetricFamily(
            "agentkeep_queued_messages",
            "Messages accepted and not yet consumed, per queue.",
            labels=("queue",),
        )
        for queue in _QUEUES:
            depth.add_metric((queue,), queued.get(queue, 0))
        yield depth
        yield from self._writer()

    def _writer(self) -> Iterator[Metric]:
        stats = self._store.statistics()
        counters: tuple[tuple[str, str, Any], ...] = (
            ("agentkeep_store_commits", "COMMITs the store writer completed.", stats.commits),
            (
                "agentkeep_store_commit_errors",
                "COMMITs that failed (their outcome unknown to their callers).",
                stats.commit_errors,
            ),
            (
                "agentkeep_store_transactions",
                "Work items committed (each caller's transaction).",
                stats.transactions,
            ),
            (
                "agentkeep_store_failed_transactions",
                "Work items answered with an error.",
                stats.failed_transactions,
            ),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(name, documentation, value=value)
        latency, sizes = self._store.commit_histograms()
        yield histogram(
            "agentkeep_store_commit_seconds",
            "Seconds from a writer group's BEGIN to its COMMIT returning (fsync included).",
            latency,
        )
        yield histogram(
            "agentkeep_store_group_size",
            "Work items in each committed writer group (group commit).",
            sizes,
        )
