"""What every model session shares: the one-operation rules and a guarded stream.

The rules of a model session (invariant I12), enforced loudly so the loop's bugs surface in tests:

* one operation at a time: a second ``stream``/``compact`` while one runs raises
  :class:`ModelSessionBusyError` (a stream runs until its iterator yields ``Done``, is
  exhausted, or is closed);
* nothing after ``close``, and ``close`` exactly once: :class:`ModelSessionClosedError`.

:class:`GuardedStream` turns a model's raw event generator into a protocol-abiding stream:
the cancel token is checked before every event, so a cancelled stream stops within one event
and ends with exactly one ``Done(state="cancelled")``; the first ``Done`` ends the stream; a
generator that ends without one gets a ``Done(state="error")``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from agentkeep.errors import ModelSessionBusyError, ModelSessionClosedError
from agentkeep.providers.protocol import CancelToken
from agentkeep.types import DONE_CANCELLED, Done, StreamEvent, done_error


class EndWithoutDone:
    """Yielded by a raw generator to end the stream *without* a ``Done`` (a broken provider).

    Only scripted misbehaviour uses it, to test that the loop survives a provider that
    violates the one-terminal-event rule.
    """


END_WITHOUT_DONE = EndWithoutDone()

RawEvent = StreamEvent | EndWithoutDone


class ModelSessionRules:
    """The one-operation-at-a-time and closed-once rules of one model session (opened for the
    agent ``agent_id``, which its errors name)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._lock = threading.Lock()
        self._running: str | None = None
        self._closed = False

    def begin(self, operation: str) -> None:
        """Claim the session for ``operation`` or raise if it is closed or busy."""
        with self._lock:
            if self._closed:
                raise ModelSessionClosedError(
                    f'The model session of agent "{self.agent_id}" is closed; cannot {operation}.'
                )
            if self._running is not None:
                raise ModelSessionBusyError(
                    f'The model session of agent "{self.agent_id}" is still running a '
                    f"{self._running}; cannot {operation} until it finishes or is closed."
                )
            self._running = operation

    def end(self) -> None:
        """Release the session after an operation (idempotent)."""
        with self._lock:
            self._running = None

    def close(self) -> None:
        """Mark the session closed; raises if it is already closed or an operation runs."""
        with self._lock:
            if self._closed:
                raise ModelSessionClosedError(
                    f'The model session of agent "{self.agent_id}" was closed twice.'
                )
            if self._running is not None:
                raise ModelSessionBusyError(
                    f'The model session of agent "{self.agent_id}" was closed while a '
                    f"{self._running} was running; finish or close the stream first."
                )
            self._closed = True

    @property
    def closed(self) -> bool:
        """Whether the session was closed (a closed session refuses every operation)."""
        with self._lock:
            return self._closed


def _is_cancelled(cancel: CancelToken) -> bool:
    # A call, not the property inline: the token flips from another thread between checks.
    return cancel.cancelled


class GuardedStream(Iterator[StreamEvent]):
    """A stream that keeps the protocol whatever its raw generator does.

    Invariants: at most one ``Done`` is ever returned and nothing after it; the cancel token
    is checked before each event; ``on_finish`` runs exactly once, when the stream ends
    (terminal event, exhaustion, ``close()`` or an exception from the generator).
    """

    def __init__(
        self,
        raw: Iterator[RawEvent],
        cancel: CancelToken,
        on_finish: Callable[[], None],
    ) -> None:
        self._raw = raw
        self._cancel = cancel
        self._on_finish: Callable[[], None] | None = on_finish
        self._lock = threading.Lock()

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._on_finish is None:
            raise StopIteration
        if _is_cancelled(self._cancel):
            return self._terminate(DONE_CANCELLED)
        try:
            event = next(self._raw)
        except StopIteration:
            return self._terminate(done_error("The stream ended without a done event."))
        except BaseException:
            self._finish()
            raise
        if isinstance(event, EndWithoutDone):
            self._finish()
            raise StopIteration
        if isinstance(event, Done):
            return self._terminate(event)
        if _is_cancelled(self._cancel):  # cancelled while the generator produced this event
            return self._terminate(DONE_CANCELLED)
        return event

    def close(self) -> None:
        """Stop early (the consumer's ``return()``): releases the session."""
        self._finish()

    def _terminate(self, done: Done) -> Done:
        self._finish()
        return done

    def _finish(self) -> None:
        with self._lock:
            on_finish, self._on_finish = self._on_finish, None
        if on_finish is not None:
            close_raw = getattr(self._raw, "close", None)
            if callable(close_raw):
                close_raw()
            on_finish()
