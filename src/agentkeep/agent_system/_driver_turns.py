"""Accepting a message to a session of an injected driver: a turn of that driver.

Part of the system's acceptance (``_acceptance``); the rule (docs/drivers.md): a turn of a
driver session is accepted in ONE transaction, ``open_turn`` (with its ``turn.queued``) and
the input's ``message.accepted`` event. It never enters the native queue; the session's
runner is woken after the commit.
"""

from __future__ import annotations

import msgspec

from agentkeep.delivery import Delivery, DeliveryKind, check_idempotency_key, check_message_id
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import InvalidMessageError, SessionArchivedError, UnknownAgentError
from agentkeep.messages import validate_message, wire_input
from agentkeep.persistence.interface import Transaction
from agentkeep.sessions.errors import UnsupportedDriverError
from agentkeep.types import JSONObject, MessageOptions, QueueableMessage, ToolCallRequestBlock
from agentkeep.types.ledger import MESSAGE_ACCEPTED
from agentkeep.types.records import QueueName


def prepare_driver_turn(
    host: DriverHost,
    agent_id: str,
    queue: QueueName,
    message: object,
    *,
    message_id: str | None,
    metadata: JSONObject | None,
    options: MessageOptions | None,
    idempotency_key: str | None,
) -> _DriverAcceptance:
    """Check a delivery now (as ``prepare_acceptance`` does); the returned work accepts it
    in a transaction as a turn of the driver it is given."""
    return _DriverAcceptance(
        host,
        agent_id,
        "steer" if queue == "steering" else "send",
        validate_message(message),
        check_message_id(message_id),
        metadata,
        options or MessageOptions(),
        check_idempotency_key(idempotency_key),
    )


class _DriverAcceptance:
    def __init__(
        self,
        host: DriverHost,
        agent_id: str,
        kind: DeliveryKind,
        message: QueueableMessage,
        message_id: str,
        metadata: JSONObject | None,
        options: MessageOptions,
        key: str | None,
    ) -> None:
        self._host = host
        self._agent_id = agent_id
        self._kind = kind
        self._message = message
        self._message_id = message_id
        self._metadata = metadata
        self._options = options
        self._key = key

    def __call__(self, tx: Transaction, driver: str) -> Delivery:
        """Accept the message as a turn of driver ``driver`` (see the module's rules).

        Raises:
            UnsupportedDriverError: the driver is not registered in this system.
            InvalidMessageError: a steer, message options, or a tool request.
            UnknownAgentError / SessionArchivedError / IdempotencyConflictError /
            InputTooLargeError / EventTooLargeError: as for a native turn.
        """
        agent_id = self._agent_id
        if driver not in self._host.drivers:
            raise UnsupportedDriverError(driver, available=self._host.ids)
        if self._kind == "steer":
            raise InvalidMessageError(
                f'session "{agent_id}" runs driver "{driver}": steering is only for the native '
                'driver ("agentkeep"); send a new turn instead'
            )
        chosen = msgspec.to_builtins(self._options)
        if chosen:
            raise InvalidMessageError(
                f'session "{agent_id}" runs driver "{driver}", which takes no message options '
                f"(got {sorted(chosen)}); its revision configures the driver"
            )
        if any(isinstance(b, ToolCallRequestBlock) for b in self._message.content):
            raise InvalidMessageError(
                f'session "{agent_id}" runs driver "{driver}": a tool_call_request block is '
                "only for the native driver"
            )
        if tx.agents.get(agent_id) is None:
            raise UnknownAgentError(agent_id)
        if tx.turns.session_archived(agent_id):
            raise SessionArchivedError(agent_id)
        content = wire_input(self._message)
        tx.ledger.check_input_size(content)
        if self._key is not None:
            repeated = tx.turns.of_key(agent_id, self._key, "send", content)
            if repeated is not None:
                return Delivery(
                    id=self._message_id, delivery="send", created=False, turn_id=repeated.id
                )
        event: JSONObject = {
            "message_id": self._message_id,
            "delivery": "send",
            "role": content["role"],
            "message": content,
            "driver": driver,
        }
        if self._metadata is not None:
            event["metadata"] = self._metadata
        tx.ledger.check_event_size(f"Message {self._message_id!r}", event)
        turn, _ = tx.turns.open(
            agent_id,
            key=self._key,
            driver=driver,
            delivery="send",
            input=content,
            message_id=None,
            key_is_new=True,  # asked above, in this transaction
        )
        event["turn_id"] = turn.id
        tx.ledger.append(agent_id, MESSAGE_ACCEPTED, event, turn_id=turn.id)
        return Delivery(id=self._message_id, delivery="send", created=True, turn_id=turn.id)
