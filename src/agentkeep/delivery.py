"""Accepting messages: a durable queue write, committed without the agent's loop.

Acceptance runs as its own transaction through the writer, never through the agent's actor,
so a tool or hook that messages its own agent never waits for the loop it is running in
(invariant I26). In the same transaction it records that the agent owes work, so the message
is never acknowledged before anything could find the agent that owes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, TypedDict

import msgspec

from agentkeep.errors import (
    InvalidConfigError,
    InvalidMessageError,
    SessionArchivedError,
    UnknownAgentError,
)
from agentkeep.loop.actions import check_message_id as check_action_message_id
from agentkeep.messages import check_tool_requests, validate_message, wire_input
from agentkeep.persistence.clock import now_ms
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.ledger import encode_event_data, encode_event_data_value
from agentkeep.providers.catalog import Providers
from agentkeep.types import (
    AgentMessage,
    JSONObject,
    MessageOptions,
    PermissionMode,
    QueueableMessage,
    ReasoningEffort,
    ServiceTier,
    Settings,
    SystemMessage,
    new_id,
)
from agentkeep.types.ledger import MESSAGE_ACCEPTED
from agentkeep.types.records import OwedWork, QueuedMessage, QueuedNotice, QueueName
from agentkeep.types.selection import apply_options
from agentkeep.types.turns import MAX_IDEMPOTENCY_KEY_LENGTH, NATIVE_DRIVER

DeliveryKind = Literal["send", "steer"]


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to ``send``/``steer``: returned once the message is durably queued."""

    id: str
    delivery: DeliveryKind
    created: bool  # False: this id (or idempotency key) was already durable: a repeat
    turn_id: str | None = None  # the turn it opened or joined (docs/turns.md)


class SendOptions(TypedDict, total=False):
    """The options of one ``send``/``steer``, declared once for every surface that takes them
    (``AgentSystem``, ``Agent``, ``AgentRef``, ``AgentSystemRef``); each may be omitted.

    - ``id``: the message's id; offering the same id again is an idempotent repeat.
    - ``metadata``: stored with the message, shown to ``message_accepted`` hooks.
    - ``provider``: switch to this provider when the message is consumed.
    - ``model``: switch to this model when the message is consumed.
    - ``effort``: reasoning effort from this message on.
    - ``service_tier``: service tier from this message on.
    - ``permission_mode``: permission mode from this message on.
    - ``profile``: the opaque profile this message selects (None when omitted: every
      message selects one; it never persists to the next). It is durable control data,
      never sent to the provider; when the profile in effect changes at consumption the
      private model history resets (archived, still readable) and a fresh model session
      starts, with ``model_changed`` handling the handoff.
    """

    id: str | None
    metadata: JSONObject | None
    provider: str | None
    model: str | None
    effort: ReasoningEffort | None
    service_tier: ServiceTier | None
    permission_mode: PermissionMode | None
    profile: str | None


_SEND_OPTIONS = frozenset(SendOptions.__annotations__)
#: What an idempotency key must not contain: a control character (C0 or DEL).
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def split_send_options(
    options: SendOptions, *, where: str
) -> tuple[str | None, JSONObject | None, MessageOptions]:
    """``options`` as the message's id, its metadata and its :class:`MessageOptions`.

    Raises:
        TypeError: a key that is not an option (as for an unknown keyword argument of
            ``where``).
    """
    unknown = sorted(set(options) - _SEND_OPTIONS)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    return (
        options.get("id"),
        options.get("metadata"),
        MessageOptions(
            provider=options.get("provider"),
            model=options.get("model"),
            effort=options.get("effort"),
            service_tier=options.get("service_tier"),
            permission_mode=options.get("permission_mode"),
            profile=options.get("profile"),
        ),
    )


def check_message_id(message_id: str | None) -> str:
    """The id a queued message gets: ``message_id`` if valid, else a fresh one when it is None.

    Raises:
        InvalidIdError: (an ``InvalidMessageError``) ``message_id`` breaks the id rule.
    """
    if message_id is None:
        return new_id()
    return check_action_message_id(message_id)  # one rule and one error for every message id


def check_idempotency_key(key: object) -> str | None:
    """An idempotency key is any string of 1..255 characters without control characters
    (not limited by the message-id rule); None means a fresh key per message.

    Raises:
        InvalidMessageError: naming what is wrong with ``key``.
    """
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidMessageError(f"an idempotency key must be a string, got {type(key).__name__}")
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidMessageError(
            f"an idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters, "
            f"got {len(key)}"
        )
    if _CONTROL_CHARACTER.search(key) is not None:
        raise InvalidMessageError(
            f"an idempotency key must not contain control characters: {key!r}"
        )
    return key


def accept_message(
    tx: Transaction,
    agent_id: str,
    *,
    queue: QueueName,
    message: QueueableMessage,
    message_id: str,
    options: MessageOptions,
    metadata: JSONObject | None,
    idempotency_key: str | None = None,
    fresh_id: bool = False,
) -> tuple[Delivery, QueuedMessage | None]:
    """Queue one message durably (in ``tx``), opening its turn (or joining the running one,
    for a steer) with the ``turn.queued`` and ``message.accepted`` events; None if its id or
    its idempotency key was already durable (the turn it made is returned, nothing written).
    ``fresh_id``: ``message_id`` was minted for this acceptance and this is its first run,
    so it cannot be durable yet (its claim is sent without waiting).

    Raises:
        UnknownAgentError: no live agent has this id.
        SessionArchivedError: the session was archived.
        IdempotencyConflictError: the key was used by a different input.
        InputTooLargeError / EventTooLargeError: the message is over the system's limits.
    """
    if tx.agents.get(agent_id) is None:
        raise UnknownAgentError(agent_id)
    if tx.turns.session_archived(agent_id):
        raise SessionArchivedError(agent_id)
    check_tool_requests(message)  # hooks' actions too: nothing malformed is ever admitted
    kind: DeliveryKind = "steer" if queue == "steering" else "send"
    content = wire_input(message)
    # The message's stored JSON, encoded once: the size check, the turn's input and its
    # hash use these very bytes (each would encode it identically).
    content_json = encode_event_data(content)
    tx.ledger.check_input_size(content, encoded=content_json)
    if idempotency_key is not None:
        repeated = tx.turns.of_key(agent_id, idempotency_key, kind, content)
        if repeated is not None:
            return Delivery(
                id=repeated.message_id or message_id,
                delivery=kind,
                created=False,
                turn_id=repeated.id,
            ), None
    # The ledger event is sized before anything is written: a message too big for its event
    # is refused whole (EventTooLargeError), never accepted without its event.
    event = _accepted_event(message_id, kind, content, options, metadata)
    if isinstance(message, AgentMessage):  # another agent's: a user message, by it
        event["author"] = msgspec.to_builtins(message.author)
    event_json = encode_event_data(event)
    tx.ledger.check_event_size(f"Message {message_id!r}", event, encoded=event_json)
    if fresh_id:
        tx.queue.claim_fresh_message_id(agent_id, message_id)
    elif not tx.queue.claim_message_id(agent_id, message_id):
        known = tx.turns.of_message(agent_id, message_id)
        turn_id = None if known is None else known.id
        return Delivery(id=message_id, delivery=kind, created=False, turn_id=turn_id), None
    turn, _ = tx.turns.open(
        agent_id,
        key=idempotency_key,
        driver=NATIVE_DRIVER,
        delivery=kind,
        input=content,
        message_id=message_id,
        input_json=content_json,
        key_is_new=True,  # asked above, in this transaction
    )
    event["turn_id"] = turn.id
    event_json = _with_turn_id(event_json, turn.id)
    queued = tx.queue.enqueue(
        agent_id,
        QueuedMessage(
            id=message_id,
            queue=queue,
            message=message,
            options=options,
            metadata=metadata,
            accepted_at_ms=now_ms(),  # the store's clock (this runs on its writer)
        ),
    )
    owe_inference(tx, agent_id)
    tx.ledger.append(agent_id, MESSAGE_ACCEPTED, event, turn_id=turn.id, encoded=event_json)
    return Delivery(id=message_id, delivery=kind, created=True, turn_id=turn.id), queued


def _with_turn_id(event_json: str, turn_id: str) -> str:
    """The ``message.accepted`` event's stored JSON with ``turn_id`` added, from its JSON
    without it: ``turn_id`` sorts after every other key of the event (``author``,
    ``delivery``, ``message``, ``message_id``, ``metadata``, ``options``, ``role``), so in
    the canonical (sorted) encoding it is the last member: the same bytes as encoding the
    whole again."""
    return f'{event_json[:-1]},"turn_id":{encode_event_data_value(turn_id)}}}'


def _accepted_event(
    message_id: str,
    kind: DeliveryKind,
    content: JSONObject,
    options: MessageOptions,
    metadata: JSONObject | None,
) -> JSONObject:
    """The ``message.accepted`` event's data: the message as the turn's input (``content``,
    the wire's ``AgentMessage``), docs/ledger.md."""
    data: JSONObject = {
        "message_id": message_id,
        "delivery": kind,
        "role": content["role"],
        "message": content,
    }
    chosen = msgspec.to_builtins(options)
    if chosen:
        data["options"] = chosen
    if metadata is not None:
        data["metadata"] = metadata
    return data


def prepare_acceptance(
    providers: Providers,
    agent_id: str,
    queue: QueueName,
    message: object,
    *,
    message_id: str | None,
    metadata: JSONObject | None,
    options: MessageOptions | None,
    defaults: Settings | None = None,
    idempotency_key: str | None = None,
) -> Callable[[Transaction], tuple[Delivery, QueuedMessage | None]]:
    """Check a delivery now (a clear error before anything is written: the message, its id,
    its provider); the returned work accepts it in a transaction (:func:`accept_message`),
    first refusing a model the selected provider does not serve (:func:`check_selection`;
    ``defaults`` is the selection of an agent that never had its own)."""
    checked = validate_message(message)
    checked_id = check_message_id(message_id)
    # The id is minted here, so no earlier run can have made it durable: the first run of
    # ``accept`` claims it without asking (a later one, after an unknown outcome, asks).
    first_run_of_a_minted_id = [message_id is None]
    key = check_idempotency_key(idempotency_key)
    opts = options or MessageOptions()
    if opts.profile is not None and not isinstance(opts.profile, str):
        raise InvalidMessageError(
            f"a message's profile must be a string or None, got {type(opts.profile).__name__}"
        )
    if opts.provider is not None and providers.get(opts.provider) is None:
        raise InvalidConfigError(f'Provider "{opts.provider}" is not registered.')

    def accept(tx: Transaction) -> tuple[Delivery, QueuedMessage | None]:
        fresh_id, first_run_of_a_minted_id[0] = first_run_of_a_minted_id[0], False
        check_selection(tx, providers, agent_id, opts, defaults or Settings())
        return accept_message(
            tx,
            agent_id,
            queue=queue,
            message=checked,
            message_id=checked_id,
            options=opts,
            metadata=metadata,
            idempotency_key=key,
            fresh_id=fresh_id,
        )

    return accept


def check_selection(
    tx: Transaction,
    providers: Providers,
    agent_id: str,
    options: MessageOptions,
    defaults: Settings,
) -> None:
    """Refuse a message whose provider/model selection its provider does not serve.

    The one place a message's model is checked. The selection is the one the message will be
    consumed under as far as the store knows now: the agent's settings (or ``defaults``), the
    options of the messages queued before it, then its own. Only a message that changes the
    provider or the model is checked; raising rolls its acceptance back, so nothing is
    written (a typo'd model never reaches, let alone resets, the conversation).

    Raises:
        ModelNotServedError: The selected provider does not serve the selected model.
        UnknownProviderError: The selected provider is not registered.
        UnknownAgentError: ``agent_id`` names no live agent.
    """
    if options.provider is None and options.model is None:
        return
    if tx.agents.get(agent_id) is None:
        raise UnknownAgentError(agent_id)  # the clearer error for a message to nobody
    selection = tx.facts.read_settings(agent_id) or defaults
    for entry in tx.queue.messages(agent_id):
        selection = apply_options(selection, entry.options)
    selection = apply_options(selection, options)
    if selection.provider is not None and selection.model is not None:
        providers.check_model(selection.provider, selection.model)


def accept_notice(tx: Transaction, agent_id: str, message: SystemMessage) -> QueuedNotice:
    """Queue a hook's system notice durably; it owes the agent an inference."""
    notice = tx.queue.inject_notice(agent_id, QueuedNotice(message=message))
    owe_inference(tx, agent_id)
    return notice


def owe_inference(tx: Transaction, agent_id: str) -> None:
    """Record that the agent owes work, with the change that made it due (invariant I7).

    Work owed from nothing starts a loop: its loop and turn ids are allocated here, so the
    run adopts them at its load without another commit before its first hook is told them
    (docs/lifecycle.md)."""
    if tx.facts.claim_owed(
        agent_id, OwedWork(stage="inference", loop_id=new_id(), turn_id=new_id())
    ):
        return
    owed = tx.facts.read_owed(agent_id)
    if owed is not None and owed.stage == "settlement":
        # A settlement in progress must not erase what this message made due. The loop goes
        # on, and so does the settlement that will end it: its staged id is kept.
        again = OwedWork(stage="inference", loop_id=owed.loop_id, settlement_id=owed.settlement_id)
        tx.facts.write_owed(agent_id, again)
