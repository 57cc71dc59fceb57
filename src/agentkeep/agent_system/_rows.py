"""Creating, listing and relabelling agents: the durable row, checked before its id is
claimed, and its metadata merges.

Invariant: ``create_agent`` claims the id, checks the parent and writes the initial context in
one transaction, so a failed create leaves nothing behind and two creates of one id have
exactly one winner (``AgentExistsError`` for the others).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from agentkeep.agent_system._ownership import Ownership
from agentkeep.config import AgentConfig
from agentkeep.errors import AgentExistsError, InvalidConfigError, UnknownAgentError, check_id
from agentkeep.features import FeatureSet, MetadataChange
from agentkeep.modules import AgentSnapshot
from agentkeep.modules._runtime import ModuleRuntime
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.runtime import base_state
from agentkeep.types import JSONObject, Message, Settings, new_id
from agentkeep.types.ledger import METADATA_CHANGED
from agentkeep.types.records import AgentRow, CompactionRecord

if TYPE_CHECKING:
    from agentkeep.actors.hook_contexts import HookContexts


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One agent as ``AgentSystem.agents()`` lists it."""

    id: str
    parent_id: str | None
    metadata: JSONObject
    owes_work: bool


def new_agent_row(
    config: AgentConfig | None,
    features: FeatureSet,
    agent_id: str | None,
    parent: str | None,
    *,
    what: str = "agent id",
    field: str = "id",
    ownership: Ownership | None = None,
) -> AgentRow:
    """The row to create, after checking the config (environment all-or-nothing, each
    feature's settings by that feature) and the id (``what`` and ``field`` name it in the
    error: a session's is ``"session id"``, ``sessionId``).

    With ``ownership`` (the system's), a fresh id is drawn in the owned partition, and a
    given id (and the parent) must be in it.

    Raises:
        InvalidConfigError: naming what is wrong (``InvalidIdError`` for the id).
        PartitionNotOwnedError: the id or the parent is another partition's.
    """
    checked = (config or AgentConfig()).validated()
    for name, settings in checked.features.items():
        feature = features.get(name)
        if feature is None:
            raise InvalidConfigError(f'config names feature "{name}", which this system lacks')
        feature.validate_settings(settings)
    if agent_id is not None:
        agent_id = check_id(agent_id, what=what, field=field)
    elif ownership is not None:
        agent_id = ownership.new_id()
    else:
        agent_id = new_id()
    if ownership is not None:
        ownership.check(agent_id)
        if parent is not None:
            ownership.check(parent)  # a child lands in its parent's partition: this one
    return AgentRow(
        id=agent_id,
        config=msgspec.to_builtins(checked),
        metadata=dict(checked.metadata),
        parent_id=parent,
        created_at_ms=0,  # stamped by the store's clock when the row is written
    )


def create_agent(
    store: StoreHandle,
    row: AgentRow,
    initial_context: Sequence[Message] | None,
    state: dict[str, object] | None = None,
    *,
    modules: ModuleRuntime | None = None,
    partition: int = 0,
) -> None:
    """Claim ``row.id`` (see the module invariant), with its initial base state overrides
    (``runtime.base_state``) and the modules' ``agent_created_transact`` in the same
    transaction, and ``agent_created`` after it; ``partition`` is stored on its row.

    Raises:
        UnknownAgentError: the parent does not exist.
        AgentExistsError: the id is taken.
        Exception: what an ``agent_created_transact`` hook raised (nothing was created).
    """
    snapshot = AgentSnapshot.of(row.id, row.metadata)

    def work(tx: Transaction) -> None:
        if row.parent_id is not None and tx.agents.get(row.parent_id) is None:
            raise UnknownAgentError(row.parent_id)
        if not tx.agents.create(row, partition=partition):
            raise AgentExistsError(row.id)
        if initial_context:
            tx.records.append(row.id, CompactionRecord(messages=tuple(initial_context)))
        if state:
            base_state.write(tx, row.id, state)
        if modules is not None:
            modules.transact("agent_created", tx, snapshot)

    store.transact(work)
    if modules is not None:
        modules.observe("agent_created", snapshot)


def list_agents(tx: Transaction) -> list[AgentInfo]:
    """Every (not deleted) agent as ``AgentSystem.agents()`` lists it, read in ``tx``."""
    owing = set(tx.facts.agents_owing_work())
    return [
        AgentInfo(id=r.id, parent_id=r.parent_id, metadata=r.metadata, owes_work=r.id in owing)
        for r in tx.agents.live()
    ]


def merge_metadata(
    store: StoreHandle,
    features: FeatureSet,
    contexts_for: Callable[[str], HookContexts],
    defaults: Settings,
    agent_id: str,
    patch: JSONObject,
) -> JSONObject:
    """Shallow-merge ``patch`` into the agent's metadata in one transaction, with the
    features' ``metadata_changed_transact`` inside it and ``metadata_changed`` after it.
    Without such hooks it is a single store write: the agent's hook contexts are not made.

    Raises:
        UnknownAgentError: no such agent.
        Exception: what a ``metadata_changed_transact`` hook raised (the merge rolled back).
    """
    hooked = features.overrides("metadata_changed_transact") or features.overrides(
        "metadata_changed"
    )
    if not hooked:
        return store.transact(lambda tx: _merge(tx, agent_id, patch)[1])
    contexts = contexts_for(agent_id)  # UnknownAgentError for a stranger

    def work(tx: Transaction) -> tuple[MetadataChange, Settings]:
        previous, current = _merge(tx, agent_id, patch)
        change = MetadataChange(previous=previous, current=current, patch=patch)
        settings = tx.facts.read_settings(agent_id) or defaults
        if features.overrides("metadata_changed_transact"):
            features.transact(
                "metadata_changed_transact",
                lambda f: contexts.for_feature(f, settings, tx=tx),
                change,
            )
        return change, settings

    change, settings = store.transact(work)
    features.observe("metadata_changed", lambda f: contexts.for_feature(f, settings), change)
    return change.current


def _merge(tx: Transaction, agent_id: str, patch: JSONObject) -> tuple[JSONObject, JSONObject]:
    row = tx.agents.get(agent_id)
    if row is None:
        raise UnknownAgentError(agent_id)
    # The change and its ledger event commit together; one too big for its event is refused
    # before anything is written.
    event: JSONObject = {"patch": patch, "metadata": {**row.metadata, **patch}}
    tx.ledger.check_event_size(f"The metadata update of agent {agent_id!r}", event)
    merged = tx.agents.update_metadata(agent_id, patch)
    tx.ledger.append(agent_id, METADATA_CHANGED, {"patch": patch, "metadata": merged})
    return dict(row.metadata), merged
