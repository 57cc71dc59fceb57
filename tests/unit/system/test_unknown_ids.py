"""An id never created is an error everywhere, reads are refused once close begins, and
``wait_for_shutdown`` works without signal handlers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak

TIMEOUT = 30.0
UNKNOWN = "neverseen"


SYSTEM_CALLS: dict[str, Callable[[ak.AgentSystem, str], Any]] = {
    "transcript": lambda s, i: s.transcript(i),
    "state": lambda s, i: s.state(i),
    "settings": lambda s, i: s.settings(i),
    "context_tokens": lambda s, i: s.context_tokens(i),
    "wait_for_idle": lambda s, i: s.wait_for_idle(i, timeout_seconds=1),
    "abort": lambda s, i: s.abort(i),
    "abort(wait=True)": lambda s, i: s.abort(i, wait=True, timeout_seconds=1),
    "children_of": lambda s, i: s.children_of(i),
    "metadata": lambda s, i: s.metadata(i),
    "parent_of": lambda s, i: s.parent_of(i),
    "resolve": lambda s, i: s.resolve(i),
    "start": lambda s, i: s.start(i),
}


@pytest.mark.parametrize("call", list(SYSTEM_CALLS), ids=list(SYSTEM_CALLS))
def test_the_system_refuses_an_id_never_created(system: ak.AgentSystem, call: str) -> None:
    with pytest.raises(ak.UnknownAgentError, match=UNKNOWN):
        SYSTEM_CALLS[call](system, UNKNOWN)


AGENT_CALLS: dict[str, Callable[[ak.Agent], Any]] = {
    "state": lambda a: a.state,
    "settings": lambda a: a.settings,
    "context_tokens": lambda a: a.context_tokens,
    "transcript": lambda a: a.transcript(),
    "wait_for_idle": lambda a: a.wait_for_idle(timeout_seconds=1),
    "abort": lambda a: a.abort(),
}


@pytest.mark.parametrize("call", list(AGENT_CALLS), ids=list(AGENT_CALLS))
def test_a_handle_on_a_deleted_agent_refuses_reads(system: ak.AgentSystem, call: str) -> None:
    agent = system.create()
    system.delete(agent.id)
    with pytest.raises(ak.UnknownAgentError):
        AGENT_CALLS[call](agent)


def test_a_deleted_agents_conversation_stays_readable(tmp_path: Path) -> None:
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel([ak.script.text("hello")]), kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    ) as system:
        agent = system.create()
        agent.send(ak.user("hi"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        system.delete(agent.id)
        assert len(system.transcript(agent.id)) == 2  # delete keeps what it wrote


class RefProbe(ak.Feature):
    """Tries the references' operations on an unknown id from inside a hook."""

    name = "probe"

    def __init__(self) -> None:
        self.outcomes: dict[str, BaseException | None] = {}
        self.done = threading.Event()

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        me = ctx.system.resolve(ctx.agent_id)
        probes: dict[str, Callable[[], Any]] = {
            "system.abort": lambda: ctx.system.abort(UNKNOWN),
            "system.compact": lambda: ctx.system.compact(UNKNOWN),
            "system.resolve": lambda: ctx.system.resolve(UNKNOWN),
            "system.send": lambda: ctx.system.send(UNKNOWN, ak.user("x")),
            "system.children_of": lambda: ctx.system.children_of(UNKNOWN),
            "ref.abort": me.abort,
        }
        for name, probe in probes.items():
            try:
                probe()
                self.outcomes[name] = None
            except BaseException as error:
                self.outcomes[name] = error
        self.done.set()


def test_references_refuse_an_id_never_created(tmp_path: Path) -> None:
    probe = RefProbe()
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel([ak.script.text("ok")]), kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1", features=[probe]
    ) as system:
        agent = system.create()
        agent.send(ak.user("go"))
        assert probe.done.wait(TIMEOUT)
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert probe.outcomes.pop("ref.abort") is None  # its own agent exists
    for name, outcome in probe.outcomes.items():
        assert isinstance(outcome, ak.UnknownAgentError), name


class GateArgs(msgspec.Struct):
    pass


def test_state_is_refused_once_close_begins(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    @ak.tool
    def hold(ctx: ak.ToolContext, args: GateArgs) -> str:
        """Hold the turn until the test releases it."""
        entered.set()
        assert release.wait(TIMEOUT)
        return "held"

    model = ak.ScriptedModel([ak.script.tool_call("hold", {}), ak.script.text("done")])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1", tools=[hold]
    )
    closer: threading.Thread | None = None
    try:
        agent = system.create()
        agent.send(ak.user("hold on"))
        assert entered.wait(TIMEOUT)
        assert agent.state == "running"
        closer = threading.Thread(target=system.close)
        closer.start()
        # close waits for the running turn; wait (bounded) until it stopped admitting.
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                system.agents()
            except ak.AgentClosedError:
                break
            assert time.monotonic() < deadline, "close never began"
            release.wait(0.001)
        with pytest.raises(ak.AgentClosedError):
            agent.state  # noqa: B018  (the property read is the operation under test)
        with pytest.raises(ak.AgentClosedError):
            system.state(agent.id)
    finally:
        release.set()
        if closer is not None:
            closer.join(TIMEOUT)
        system.close()
    assert system.wait_for_shutdown(timeout_seconds=0)


def test_wait_for_shutdown_works_without_signal_handlers(tmp_path: Path) -> None:
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    system = ak.AgentSystem.open(tmp_path / "state", providers=providers)
    assert system.wait_for_shutdown(timeout_seconds=0) is False
    closer = threading.Thread(target=system.shutdown)
    closer.start()
    assert system.wait_for_shutdown(timeout_seconds=TIMEOUT) is True
    closer.join(TIMEOUT)
    # The store is released: another owner can open it now.
    ak.AgentSystem.open(tmp_path / "state", providers=providers).close()
