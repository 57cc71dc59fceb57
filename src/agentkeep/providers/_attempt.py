"""One attempt of a streamed vendor request, shared by every SDK adapter.

An attempt opens the HTTP stream, attaches it to the request's :class:`ResponseSlot` (so a
cancel shuts its socket down), maps each vendor event through a mapper, and returns how the
attempt ended for :func:`~agentkeep.providers.retry.stream_with_retries`. Invariants:

* the stream is always closed, on the reading thread, before the attempt returns (also when
  the consumer abandons the iterator: ``GeneratorExit`` runs the ``finally``);
* once the token is cancelled the attempt returns ``Done(cancelled)`` whatever the transport
  then reports (a shut-down socket looks like a lost connection, and must not be retried);
* SDK exceptions never escape: the vendor hook turns them into an outcome, anything it does
  not recognise is reported as an ``internal_error`` done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from agentkeep.providers._transport import HttpResponse, ResponseSlot
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import Attempt, AttemptOutcome
from agentkeep.types import DONE_CANCELLED, StreamEvent, done_error

EventT = TypeVar("EventT")
EventT_co = TypeVar("EventT_co", covariant=True)
EventT_contra = TypeVar("EventT_contra", contravariant=True)


class VendorStream(Protocol[EventT_co]):
    """What both SDKs' ``Stream`` objects offer."""

    @property
    def response(self) -> HttpResponse: ...

    def __iter__(self) -> Iterator[EventT_co]: ...

    def close(self) -> None: ...


class Mapper(Protocol[EventT_contra]):
    """Maps one attempt's vendor events; ``finish`` gives the closing events and outcome."""

    def on_event(self, event: EventT_contra) -> list[StreamEvent]: ...

    def finish(self) -> tuple[list[StreamEvent], AttemptOutcome]: ...


# Turns an exception raised by the SDK (or its transport) into an outcome; None = not ours.
ClassifyFailure = Callable[[BaseException], AttemptOutcome | None]


class _Opener(Generic[EventT]):
    """Sends the request on its own thread, so waiting for the headers is abortable.

    Invariant: exactly one side owns the opened stream. If the reader took the result it
    owns the stream; if the reader gave up first (cancelled), the opener closes the stream
    the moment it arrives, so an abandoned request never leaks a connection.
    """

    def __init__(self, open_stream: Callable[[], VendorStream[EventT]]) -> None:
        self._open_stream = open_stream
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._result: VendorStream[EventT] | Exception | None = None
        self._abandoned = False

    def run(self) -> None:
        try:
            result: VendorStream[EventT] | Exception = self._open_stream()
        except Exception as failure:  # handed to the reader, which classifies it
            result = failure
        with self._lock:
            abandoned = self._abandoned
            if not abandoned:
                self._result = result
        if abandoned and not isinstance(result, Exception):
            result.close()
        self.ready.set()

    def take(self) -> VendorStream[EventT] | Exception | None:
        """The opened stream or the failure; None (and abandoned) if not there yet."""
        with self._lock:
            if self._result is None:
                self._abandoned = True
            return self._result


class AttemptRunner(Generic[EventT]):
    """Runs attempts of one request: ``open_stream`` sends it, ``classify`` reads failures."""

    def __init__(
        self,
        open_stream: Callable[[], VendorStream[EventT]],
        new_mapper: Callable[[], Mapper[EventT]],
        classify: ClassifyFailure,
        slot: ResponseSlot,
        cancel: CancelToken,
    ) -> None:
        self._open_stream = open_stream
        self._new_mapper = new_mapper
        self._classify = classify
        self._slot = slot
        self._cancel = cancel

    def _failed(self, failure: Exception) -> AttemptOutcome:
        if self._cancel.cancelled:
            return DONE_CANCELLED
        outcome = self._classify(failure)
        if outcome is None:
            return done_error(f"unexpected provider failure: {type(failure).__name__}: {failure}")
        return outcome

    def __call__(self) -> Attempt:
        """One attempt: a fresh request, its events, then how it ended."""
        opener = _Opener(self._open_stream)
        if not self._slot.watch(opener.ready):
            return DONE_CANCELLED
        threading.Thread(target=opener.run, name="agentkeep-open-stream", daemon=True).start()
        opener.ready.wait()  # set by the opener when it is done, or by a cancel
        opened = opener.take()
        if opened is None:
            return DONE_CANCELLED
        if isinstance(opened, Exception):  # classified (HTTP status, connection) or reported
            return self._failed(opened)
        stream = opened
        if not self._slot.attach(stream.response):
            stream.close()
            return DONE_CANCELLED
        mapper = self._new_mapper()
        try:
            for event in stream:
                if self._cancel.cancelled:
                    return DONE_CANCELLED
                yield from mapper.on_event(event)
        except Exception as failure:  # an error event, a cut connection, a shut-down socket
            return self._failed(failure)
        finally:
            self._slot.detach()
            stream.close()
        if self._cancel.cancelled:
            return DONE_CANCELLED
        events, outcome = mapper.finish()
        yield from events
        return outcome
