"""Tool batches of more than one call, whose calls finish in a seeded order (invariant I14).

Invariant I14 says a batch's results land in *call* order, whatever order the calls finish in.
A campaign can only check that if its batches hold several calls and a later call sometimes
finishes first. Two pieces make that happen, deterministically per seed:

* :class:`BatchingModel` is the :class:`~agentkeep.providers.RespondingModel` answering a
  user message with a batch of 1–3 calls (``call-<k>`` … in order, the tool still chosen by
  the call number's parity) instead of one. The size is a pure function of the seed and the
  conversation, so a restarted process is asked for the same batch. Each call's arguments
  name the whole batch (``{"call": "call-3", "batch": ["call-3", "call-4"]}``).
* :class:`CompletionOrder` holds calls back so that, per seed, chosen calls finish only after
  a later call of their batch. It orders threads with events, never with sleeps: a held call
  waits for the later call's finish event, then for that call's thread to end — the thread
  that tells the agent its result — so the later result reaches the agent's mailbox first.

A call is held only for a later call that is sure to run in the same process: a *durable*
one (it runs whenever its batch runs, fresh or resumed after a restart, whereas a resumed
non-durable call is answered without running, invariant I17) that is still *pending* in the store
(a response cut short by a crash or a failure dispatches only the calls it committed, and a
batch is durable before any call runs, so the pending entries are the batch). A hold also
ends when the held call is cancelled (abort, close); its ``timeout`` is a last resort
against a harness bug and is counted in :attr:`CompletionOrder.timeouts`.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import msgspec

from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.responding import RespondingModel
from agentkeep.types import (
    Context,
    StreamEvent,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)


class HeldCall(Protocol):
    """What a hold reads of a call (a :class:`~agentkeep.tools.ToolContext` has it)."""

    @property
    def agent_id(self) -> str:
        """The agent running the call."""
        ...

    @property
    def provider_call_id(self) -> str:
        """The model's id of the call (``call-<k>`` for the responding model)."""
        ...

    @property
    def cancel(self) -> CancelToken:
        """Fires when the call's lifetime ends; a held call stops waiting then."""
        ...


_CALL = re.compile(r"^call-(\d+)$")
# Batch sizes 1, 2, 3 with these weights: most batches hold several calls.
BATCH_WEIGHTS: tuple[int, int, int] = (1, 2, 2)


def call_number(call_id: str) -> int | None:
    """``k`` of a ``call-<k>`` id, else None."""
    match = _CALL.match(call_id)
    return int(match[1]) if match is not None else None


def _digest(material: str) -> random.Random:
    # sha256, not hash(): str hashing is randomised per process (PYTHONHASHSEED).
    return random.Random(int.from_bytes(hashlib.sha256(material.encode()).digest(), "big"))


class BatchingModel(RespondingModel):
    """A :class:`~agentkeep.providers.RespondingModel` whose tool answers are batches.

    Args:
        max_calls: The largest batch (1 turns batching off).
        **options: As for :class:`~agentkeep.providers.RespondingModel`.
    """

    def __init__(self, *, max_calls: int = 3, **options: Any) -> None:
        super().__init__(**options)
        if max_calls < 1:
            raise ValueError("max_calls must be at least 1.")
        self.max_calls = max_calls

    def batch_size(self, context: Context) -> int:
        """How many calls answer ``context`` (a pure function of the seed and messages)."""
        if self.max_calls == 1:
            return 1
        digest = hashlib.sha256(msgspec.json.encode(context.messages)).hexdigest()
        rng = _digest(f"{self.seed}:batch:{digest}")
        weights = list(BATCH_WEIGHTS[: self.max_calls])
        weights += [weights[-1]] * (self.max_calls - len(weights))
        return rng.choices(range(1, self.max_calls + 1), weights=weights)[0]

    def response(self, context: Context, rng: random.Random) -> list[StreamEvent]:
        events = super().response(context, rng)
        starts = [i for i, e in enumerate(events) if isinstance(e, ToolCallStart)]
        ends = [i for i, e in enumerate(events) if isinstance(e, ToolCallEnd)]
        if len(starts) != 1 or len(ends) != 1:
            return events  # a text answer
        first, last = starts[0], ends[0]
        start = events[first]
        assert isinstance(start, ToolCallStart)
        number = call_number(start.call_id)
        assert number is not None  # the RespondingModel numbers its calls
        chunks = max(1, last - first - 1)  # as many deltas as the model drew for one call
        ids = [f"call-{number + i}" for i in range(self.batch_size(context))]
        calls: list[StreamEvent] = []
        for offset, call_id in enumerate(ids):
            name = self.durable_tool if (number + offset) % 2 == 0 else self.fragile_tool
            arguments = msgspec.json.encode({"call": call_id, "batch": ids}).decode()
            calls.append(ToolCallStart(call_id=call_id, name=name))
            calls += [
                ToolCallDelta(call_id=call_id, delta=part) for part in _split(arguments, chunks)
            ]
            calls.append(ToolCallEnd(call_id=call_id, arguments=arguments))
        return [*events[:first], *calls, *events[last + 1 :]]


def _split(text: str, count: int) -> list[str]:
    size = -(-len(text) // min(count, len(text)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def durable_by_parity(call_id: str) -> bool:
    """The ``RespondingModel``'s rule: even call numbers call the durable tool."""
    number = call_number(call_id)
    return number is not None and number % 2 == 0


class _Finish:
    """One call's finish in one process: whether it came, its thread, who waits for it."""

    def __init__(self) -> None:
        self.done = False
        self.thread: threading.Thread | None = None
        self.waiters: list[threading.Event] = []


class CompletionOrder:
    """Which call of a batch finishes after which, drawn from the campaign's seed.

    For a batch (its call ids in call order), each call but the last is, with probability
    ``hold_rate``, held until one later *durable* call of the batch finished (see the module
    docstring). Holds only point forward in call order, so they never form a cycle. The draw
    is a pure function of the seed and the batch's ids; finishes are tracked per process
    generation and agent, so a call resumed by a later process waits for that process's run.

    Args:
        seed: The campaign's seed.
        hold_rate: Probability that a call is held.
        durable: Whether a call id's call runs in every run of its batch.
        dispatched: ``agent_id ->`` the call ids of the agent's pending (dispatched,
            unanswered) calls, or None if they cannot be read (then nothing is held).
            Default: every call counts as dispatched.
        timeout: Last-resort bound of one hold, in seconds.
    """

    def __init__(
        self,
        seed: int,
        *,
        hold_rate: float = 0.75,
        durable: Callable[[str], bool] = durable_by_parity,
        dispatched: Callable[[str], Collection[str] | None] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.seed = seed
        self.hold_rate = hold_rate
        self.durable = durable
        self.dispatched = dispatched
        self.timeout = timeout
        self.timeouts: list[str] = []
        self._lock = threading.Lock()
        self._finishes: dict[tuple[int, str, str], _Finish] = {}

    def after(self, batch: Sequence[str], call_id: str) -> str | None:
        """The later call of ``batch`` that ``call_id`` finishes after, if any."""
        if call_id not in batch:
            return None
        position = list(batch).index(call_id)
        later = [c for c in batch[position + 1 :] if self.durable(c)]
        rng = _digest(f"{self.seed}:order:{','.join(batch)}:{call_id}")
        if not later or rng.random() >= self.hold_rate:
            return None
        return rng.choice(later)

    def hold(self, generation: int, ctx: HeldCall, batch: Sequence[str]) -> None:
        """Block the call of ``ctx`` until the call it finishes after has told its result."""
        target = self.after(batch, ctx.provider_call_id)
        if target is None:
            return
        if self.dispatched is not None:
            pending = self.dispatched(ctx.agent_id)
            if pending is None or target not in pending:
                return  # not in the batch that runs (cut short), or already answered
        finish = self._finish(generation, ctx.agent_id, target)
        woken = threading.Event()
        ctx.cancel.on_cancel(woken.set)  # a cancelled call stops waiting at once
        with self._lock:
            finish.waiters.append(woken)
            if finish.done:
                woken.set()
        if not woken.wait(self.timeout):
            self.timeouts.append(f"{ctx.provider_call_id} waited for {target}")
            return
        with self._lock:
            thread = finish.thread if finish.done else None  # else: cancelled
        if thread is not None and thread is not threading.current_thread():
            # The thread that ran the later call tells the agent its result, then ends: once
            # it has ended, that result is in the agent's mailbox ahead of this one.
            thread.join(self.timeout)
            if thread.is_alive():
                self.timeouts.append(f"{ctx.provider_call_id}: the thread of {target} ran on")

    def finished(
        self, generation: int, agent_id: str, call_id: str, *, in_call_thread: bool = True
    ) -> None:
        """``agent_id``'s call ``call_id`` in process ``generation`` returned (or refused
        to run or raised). ``in_call_thread=False``: it ran elsewhere (a transactional call,
        on the store's writer), so a held call waits for its return only, not for a thread."""
        finish = self._finish(generation, agent_id, call_id)
        with self._lock:
            finish.thread = threading.current_thread() if in_call_thread else None
            finish.done = True
            waiters = list(finish.waiters)
        for woken in waiters:
            woken.set()

    def _finish(self, generation: int, agent_id: str, call_id: str) -> _Finish:
        with self._lock:
            return self._finishes.setdefault((generation, agent_id, call_id), _Finish())


__all__ = [
    "BATCH_WEIGHTS",
    "BatchingModel",
    "CompletionOrder",
    "HeldCall",
    "call_number",
    "durable_by_parity",
]
