"""``GET /metrics`` on a real daemon: behind the token, Prometheus' text format (OpenMetrics
when asked), and every metric moving with what the runtime does — steps, commits and their
histograms, turns by status, queued messages, live and passivated agents, SSE subscribers,
provider errors and retries — from one registry per system."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from httpx_sse import connect_sse
from prometheus_client import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.server import RunningServer, ServeOptions

from .conftest import TIMEOUT, TOKEN, Served

MESSAGES = "/v1/sessions/{}/messages"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class EchoArgs(msgspec.Struct):
    text: str = ""


@ak.tool
def echo(ctx: ak.ToolContext, args: EchoArgs) -> str:
    """Echo the text back."""
    return f"echo {args.text}"


def _open(home: Path, model: ak.ScriptedModel, **options: Any) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[echo], **options
    )


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    model = ak.ScriptedModel()
    system = _open(tmp_path / "state", model)
    try:
        options = ServeOptions(port=0, token=TOKEN, heartbeat_seconds=0.2)
        server = RunningServer(system, options).start()
    except BaseException:
        system.close()
        raise
    running = Served(system=system, server=server, model=model)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(daemon: Served) -> Iterator[httpx.Client]:
    with daemon.client() as opened:
        yield opened


def parse(text: str) -> Samples:
    """Every sample of a text-format scrape, by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client: httpx.Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _session(client: httpx.Client, session_id: str) -> None:
    assert client.post("/v1/agents", json={"id": "helper"}).status_code in (201, 409)
    started = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": session_id})
    assert started.status_code in (200, 201), started.text


def test_metrics_are_refused_without_the_token_like_every_api_route(daemon: Served) -> None:
    with daemon.client(auth=False) as anonymous:
        for headers in ({}, {"Authorization": "Bearer not-the-token-0123456789"}):
            refused = anonymous.get("/metrics", headers=headers)
            api = anonymous.get("/v1/sessions", headers=headers)
            assert refused.status_code == api.status_code == 401
            assert refused.json() == api.json()
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "agentkeep_" not in refused.text
        with_header = anonymous.get("/metrics", headers={"x-amalgm-runtime-token": TOKEN})
        assert with_header.status_code == 200


def test_a_scrape_is_prometheus_text_or_openmetrics_when_asked(client: httpx.Client) -> None:
    plain = client.get("/metrics")
    assert plain.status_code == 200
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = {family.name for family in text_string_to_metric_families(plain.text)}
    for name in (
        "agentkeep_loop_steps",
        "agentkeep_store_commits",
        "agentkeep_store_commit_seconds",
        "agentkeep_store_group_size",
        "agentkeep_agents",
        "agentkeep_turns",
        "agentkeep_queued_messages",
        "agentkeep_sse_subscribers",
        "agentkeep_provider_errors",
        "agentkeep_provider_retries",
    ):
        assert name in names, name

    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    openmetrics = client.get("/metrics", headers=accept)
    assert openmetrics.status_code == 200
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")
    assert "agentkeep_turns" in {f.name for f in openmetrics_families(openmetrics.text)}

    # A version the negotiation cannot read is the default format, not an error.
    odd = client.get("/metrics", headers={"Accept": "text/plain; version=x.y"})
    assert odd.status_code == 200
    assert odd.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_a_turn_with_a_tool_call_moves_steps_commits_histograms_and_turns(
    daemon: Served, client: httpx.Client
) -> None:
    _session(client, "m1")
    before = scrape(client)
    daemon.model.add(script.tool_call("echo", {"text": "hi"}), script.text("Echoed."))
    sent = client.post(MESSAGES.format("m1"), json={"message": "Echo hi."})
    assert sent.json()["turn"]["status"] == "completed", sent.text
    events = client.get("/v1/sessions/m1/events").json()["events"]
    assert any(e["type"] == "tool.result" and "echo hi" in str(e["data"]) for e in events)
    assert daemon.system.wait_for_idle("m1", timeout_seconds=TIMEOUT)
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # Consumption, the tool call, its result, the answer: several committed steps.
    assert moved("agentkeep_loop_steps_total") >= 3
    assert moved("agentkeep_store_commits_total") >= 3
    assert moved("agentkeep_store_transactions_total") >= moved("agentkeep_store_commits_total")
    assert moved("agentkeep_turns", status="completed") == 1
    assert value(after, "agentkeep_turns", status="running") == 0
    for histogram in ("agentkeep_store_commit_seconds", "agentkeep_store_group_size"):
        count = moved(f"{histogram}_count")
        assert count == moved("agentkeep_store_commits_total"), histogram
        assert value(after, f"{histogram}_bucket", le="+Inf") == value(after, f"{histogram}_count")
        assert moved(f"{histogram}_sum") > 0
    # Every group holds at least one item: nothing is counted below the bucket of 1.
    assert value(after, "agentkeep_store_group_size_sum") >= value(
        after, "agentkeep_store_group_size_count"
    )
    assert value(after, "agentkeep_provider_errors_total", provider="local", kind="rate_limit") == 0


def test_queued_messages_turns_and_sse_subscribers_reflect_a_held_state(
    daemon: Served, client: httpx.Client
) -> None:
    _session(client, "m2")
    daemon.model.add(script.hang(), script.text("Second."))
    first = client.post(MESSAGES.format("m2"), json={"message": "Hang.", "wait": False})
    assert first.status_code == 202, first.text
    assert daemon.model.wait_for_requests(1, timeout_seconds=TIMEOUT)  # the model holds it
    second = client.post(MESSAGES.format("m2"), json={"message": "Next.", "wait": False})
    assert second.json()["turn"]["status"] == "queued", second.text
    try:
        held = scrape(client)
        assert value(held, "agentkeep_queued_messages", queue="send") == 1
        assert value(held, "agentkeep_queued_messages", queue="steering") == 0
        assert value(held, "agentkeep_turns", status="running") == 1
        assert value(held, "agentkeep_turns", status="queued") == 1
        assert value(held, "agentkeep_agents", state="live") == 1
        assert value(held, "agentkeep_sse_subscribers") == 0

        with (
            daemon.client() as streaming,
            connect_sse(streaming, "GET", "/v1/sessions/m2/events/stream") as source,
        ):
            assert source.response.status_code == 200  # registered before its headers
            streamed = scrape(client)
            assert value(streamed, "agentkeep_sse_subscribers") == 1
    finally:
        cancelled = client.post("/v1/sessions/m2/cancel")
        assert cancelled.json()["status"] == "cancelled", cancelled.text
    done = client.post(MESSAGES.format("m2"), json={"message": "Last.", "wait": True})
    assert done.status_code == 200, done.text  # the queued turn ran first, then this one
    assert daemon.system.wait_for_idle("m2", timeout_seconds=TIMEOUT)
    settled = scrape(client)
    assert value(settled, "agentkeep_queued_messages", queue="send") == 0
    assert value(settled, "agentkeep_turns", status="cancelled") == 1


def test_provider_errors_and_retries_are_counted_by_provider_and_kind(
    daemon: Served, client: httpx.Client
) -> None:
    _session(client, "m3")
    failing = script.retry_then(
        script.error("server_overloaded"), attempts=2, error_type="server_overloaded"
    )
    daemon.model.add(failing, script.error("internal_error", "the vendor broke"))
    for _ in range(2):
        sent = client.post(MESSAGES.format("m3"), json={"message": "Go."})
        assert sent.json()["turn"]["status"] == "failed", sent.text
        assert client.post("/v1/sessions/m3/settle", json={}).status_code == 200
    samples = scrape(client)
    labels = {"provider": "local"}
    assert (
        value(samples, "agentkeep_provider_retries_total", **labels, kind="server_overloaded") == 2
    )
    assert (
        value(samples, "agentkeep_provider_errors_total", **labels, kind="server_overloaded") == 1
    )
    assert value(samples, "agentkeep_provider_errors_total", **labels, kind="internal_error") == 1
    assert value(samples, "agentkeep_turns", status="failed") == 2


def test_each_system_has_its_own_registry_and_passivated_agents_are_counted(
    tmp_path: Path,
) -> None:
    """Two systems in one process never share a counter (no global registry); an agent whose
    actor passivated counts as passivated, not live."""
    model = ak.ScriptedModel()
    one = _open(tmp_path / "one", model, idle_grace_seconds=0.0)
    two = _open(tmp_path / "two", ak.ScriptedModel())
    try:
        one.create(id="p1")
        model.add(script.text("Hi."))
        one.send("p1", ak.user("Hello."))
        assert one.wait_for_idle("p1", timeout_seconds=TIMEOUT)
        assert one.internals.wait_for_passivation("p1", timeout_seconds=TIMEOUT)
        first = parse(generate_latest(one.internals.metrics.registry).decode())
        second = parse(generate_latest(two.internals.metrics.registry).decode())
        assert value(first, "agentkeep_loop_steps_total") >= 1
        assert value(second, "agentkeep_loop_steps_total") == 0
        assert value(first, "agentkeep_agents", state="live") == 0
        assert value(first, "agentkeep_agents", state="passivated") == 1
        assert value(second, "agentkeep_agents", state="passivated") == 0
        assert one.internals.metrics.registry is not two.internals.metrics.registry
    finally:
        one.close()
        two.close()
