"""``AgentSystem`` is a facade composed of owned parts: no mixins, no
public constructor, ``open``'s options and each message's options declared once (a
``TypedDict``), the plumbing behind one documented accessor."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

import agentkeep as ak

#: AgentSystem's public attributes: the embedding API, and one accessor for the plumbing.
PUBLIC_ATTRIBUTES = [
    "abort",
    "agents",
    "base_state",
    "children_of",
    "close",
    "compact",
    "context_tokens",
    "create",
    "delete",
    "events",
    "failure",
    "feature",
    "home",
    "install_signal_handlers",
    "internals",
    "lost",
    "metadata",
    "open",
    "parent_of",
    "partition",
    "registry",
    "resolve",
    "send",
    "sessions",
    "settings",
    "shutdown",
    "start",
    "state",
    "steer",
    "subscribe",
    "transaction",
    "transcript",
    "update_base_state",
    "update_metadata",
    "wait_for_failure",
    "wait_for_idle",
    "wait_for_shutdown",
]


def test_the_facade_has_no_mixins_and_pins_its_public_attributes() -> None:
    assert ak.AgentSystem.__mro__ == (ak.AgentSystem, object)
    public = sorted(name for name in dir(ak.AgentSystem) if not name.startswith("_"))
    assert public == PUBLIC_ATTRIBUTES
    for plumbing in ("store", "deliver", "wake", "live_agents", "wait_for_passivation"):
        assert not hasattr(ak.AgentSystem, plumbing), plumbing


def test_the_constructor_is_private(tmp_path: Path) -> None:
    with (
        ak.AgentSystem.open(tmp_path / "state", providers=ak.Providers()) as system,
        pytest.raises(TypeError, match="no public constructor"),
    ):
        ak.AgentSystem(system.internals)


def test_open_takes_its_options_as_one_declared_value() -> None:
    parameters = inspect.signature(ak.AgentSystem.open).parameters
    assert list(parameters) == ["path", "providers", "options"]
    assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    hints = typing.get_type_hints(ak.SystemOptions)
    # 22 with ``providers``: the 23 keyword parameters open() had; then modules,
    # credentials, database_path, now, database and partition.
    assert len(hints) == 28
    assert ak.SystemOptions.__optional_keys__ == frozenset(hints)
    for key in hints:  # each documented
        assert f"``{key}``" in (ak.SystemOptions.__doc__ or ""), key


def test_an_unknown_option_is_refused_as_an_unknown_keyword_was(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'idle_grace'"):
        ak.AgentSystem.open(tmp_path / "a", providers=ak.Providers(), idle_grace=1.0)  # type: ignore[call-arg]
    assert not (tmp_path / "a").exists()  # refused before the store was touched
    with ak.AgentSystem.open(tmp_path / "b", providers=ak.Providers()) as system:
        agent = system.create(id="a")
        with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
            agent.send(ak.user("hi"), modle="x")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
            system.steer("a", ak.user("hi"), modle="x")  # type: ignore[call-arg]
        assert system.transcript("a") == []
