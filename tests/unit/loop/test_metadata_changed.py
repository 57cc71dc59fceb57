"""``metadata_changed_transact`` / ``metadata_changed``: a metadata merge is
reported inside its transaction (a failure rolls the merge back and reaches the caller) and
after it committed; an agent without such hooks gets no services (no actor, no memory)."""

from __future__ import annotations

import pytest

import agentkeep as ak

from .conftest import World


class Watcher(ak.Feature):
    name = "watcher"

    def __init__(self, *, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.transacted: list[ak.MetadataChange] = []
        self.observed: list[ak.MetadataChange] = []

    def metadata_changed_transact(self, ctx: ak.HookContext, change: ak.MetadataChange) -> None:
        if self.refuse is not None and self.refuse in change.patch:
            raise ak.InvalidConfigError(f"the watcher refuses {self.refuse!r}")
        self.transacted.append(change)
        ctx.kv.write("last_title", change.current.get("title"))  # joins the merge

    def metadata_changed(self, ctx: ak.HookContext, change: ak.MetadataChange) -> None:
        self.observed.append(change)


def test_a_merge_is_reported_in_its_transaction_and_after_it(world: World) -> None:
    watcher = Watcher()
    system = world.open(features=[watcher])
    agent = system.create(ak.AgentConfig(metadata={"title": "old", "keep": 1}))

    merged = system.update_metadata(agent.id, {"title": "new"})

    assert merged == {"title": "new", "keep": 1}
    (change,) = watcher.transacted
    assert change.previous == {"title": "old", "keep": 1}
    assert change.current == merged
    assert change.patch == {"title": "new"}
    assert watcher.observed == [change]
    stored = system.internals.store.read(
        lambda tx: tx.kv.scan(f"agent.{agent.id}.")  # the hook's write landed with the merge
    )
    assert any(value == "new" for _key, value in stored)
    assert system.internals.live_agents() == []  # reporting a merge starts no loop


def test_a_failing_transactional_hook_rolls_the_merge_back(world: World) -> None:
    watcher = Watcher(refuse="secret")
    system = world.open(features=[watcher])
    agent = system.create(ak.AgentConfig(metadata={"title": "kept"}))

    with pytest.raises(ak.InvalidConfigError, match="refuses 'secret'"):
        system.update_metadata(agent.id, {"secret": True, "title": "lost"})

    assert system.metadata(agent.id) == {"title": "kept"}
    assert watcher.observed == []


def test_an_unknown_agent_is_refused_with_or_without_hooks(world: World) -> None:
    plain = world.open()
    with pytest.raises(ak.UnknownAgentError):
        plain.update_metadata("nosuchagent", {"a": 1})
    plain.close()
    hooked = world.open(features=[Watcher()])
    with pytest.raises(ak.UnknownAgentError):
        hooked.update_metadata("nosuchagent", {"a": 1})


def test_an_agent_handle_updates_its_metadata_like_the_system(world: World) -> None:
    watcher = Watcher(refuse="secret")
    system = world.open(features=[watcher])
    agent = system.create(ak.AgentConfig(metadata={"title": "old", "keep": 1}))

    merged = agent.update_metadata({"title": "new"})

    assert merged == {"title": "new", "keep": 1} == system.metadata(agent.id)
    (change,) = watcher.transacted
    assert change.patch == {"title": "new"}
    assert watcher.observed == [change]
    with pytest.raises(ak.InvalidConfigError, match="refuses 'secret'"):
        agent.update_metadata({"secret": True})
    with pytest.raises(ak.InvalidConfigError, match="JSON object"):
        agent.update_metadata(["not", "a", "patch"])  # type: ignore[arg-type]
    assert system.metadata(agent.id) == merged
    assert system.internals.live_agents() == []  # relabelling starts no loop
