"""Deliberately broken turns the checks ``T1``–``T4`` must catch (tests only).

Each patches the store's turn statements (``tx.turns``:
:class:`~agentkeep.persistence.turns.TurnStatements`) or its ledger append (``tx.ledger``)
while active, for every system in the process; they are registered with the ledger
mutants in :data:`agentkeep.chaos._mutants.runtime.LEDGER_MUTANTS`, so a child process installs one
by name.

- :func:`terminal_turn_event_appended_twice` (``T1``): a terminal move appends its
  ``turn.<status>`` event twice: the ledger tells two terminal states.
- :func:`completion_overwrites_earlier_results` (``T2``): completing a turn also writes its
  result into every earlier completed turn of the session (a ``WHERE`` without the id; the
  status trigger does not guard the result).
- :func:`input_event_without_turn_id` (``T3``): an input's ``message.accepted`` event is
  appended without the turn it opened or joined.
- :func:`retried_key_opens_second_turn` (``T4``): the idempotency key lookup finds nothing,
  and a key already taken is replaced by a fresh one: a retry of a key with a new message id
  opens a second turn (and runs the driver again).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentkeep.chaos._mutants.patching import patched
from agentkeep.persistence.ledger import LedgerStatements, encode_event_data
from agentkeep.persistence.turns import TurnStatements
from agentkeep.types.turns import TERMINAL_STATUSES, TurnStatus, turn_event_type


@contextmanager
def terminal_turn_event_appended_twice() -> Iterator[None]:
    """While active, every move to a terminal status appends its event twice (T1)."""
    original = TurnStatements.move

    def move_turn(
        self: TurnStatements, agent_id: str, turn_id: str, status: TurnStatus, **fields: Any
    ) -> Any:
        moved = original(self, agent_id, turn_id, status, **fields)
        if status in TERMINAL_STATUSES:
            data = {"turn_id": turn_id, "status": status}
            self._ledger.append(agent_id, turn_event_type(status), data, turn_id=turn_id)
        return moved

    with patched(TurnStatements, "move", move_turn):
        yield


@contextmanager
def completion_overwrites_earlier_results() -> Iterator[None]:
    """While active, a turn's completion also overwrites the result of every earlier
    completed turn of its session (T2: a terminal turn changed across a reopen)."""
    original = TurnStatements.move

    def move_turn(
        self: TurnStatements, agent_id: str, turn_id: str, status: TurnStatus, **fields: Any
    ) -> Any:
        moved = original(self, agent_id, turn_id, status, **fields)
        result = fields.get("result")
        if status == "completed" and result is not None:
            self._x.statements.execute(
                "UPDATE turns SET result_json = ? WHERE agent_id = ? AND status = 'completed' "
                "AND id != ?",
                (encode_event_data(result), agent_id, turn_id),
            )
        return moved

    with patched(TurnStatements, "move", move_turn):
        yield


@contextmanager
def input_event_without_turn_id() -> Iterator[None]:
    """While active, ``message.accepted`` events are appended without their turn (T3)."""
    original = LedgerStatements.append

    def append_event(
        self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
    ) -> int:
        if type == "message.accepted":
            data = {k: v for k, v in data.items() if k != "turn_id"}
            options.pop("turn_id", None)
        return original(self, agent_id, type, data, **options)

    with patched(LedgerStatements, "append", append_event):
        yield


@contextmanager
def retried_key_opens_second_turn() -> Iterator[None]:
    """While active, looking up an idempotency key finds nothing, and opening a turn with a
    key already taken uses a fresh key instead (T4)."""
    original = TurnStatements.open

    def turn_of_key(self: TurnStatements, *args: Any, **kwargs: Any) -> None:
        return None

    def open_turn(self: TurnStatements, agent_id: str, *, key: str | None, **kwargs: Any) -> Any:
        taken = (
            key is not None
            and self._x.statements.execute(
                "SELECT 1 FROM turn_inputs WHERE agent_id = ? AND idempotency_key = ?",
                (agent_id, key),
            ).fetchall()
        )
        return original(self, agent_id, key=None if taken else key, **kwargs)

    with (
        patched(TurnStatements, "of_key", turn_of_key),
        patched(TurnStatements, "open", open_turn),
    ):
        yield


__all__ = [
    "completion_overwrites_earlier_results",
    "input_event_without_turn_id",
    "retried_key_opens_second_turn",
    "terminal_turn_event_appended_twice",
]
