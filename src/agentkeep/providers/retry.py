"""Provider-owned retries: capped exponential backoff with jitter, abortable.

A vendor adapter runs each *attempt* of a request as a generator of stream events that
returns how the attempt ended. :func:`stream_with_retries` drives the attempts: it opens each
attempt's tentative output with ``BlockStart`` on its first event, commits it with
``BlockStop`` when the attempt finishes, and rewinds it with ``BlockReset`` when the attempt
failed in a way worth retrying, then reports ``Retrying(attempt, reason, delay_seconds)`` and
waits. The wait is abortable: the default sleep waits on the cancel token, so a cancelled
request stops waiting at once and ends with ``Done(cancelled)``.

Invariants kept here for every adapter:

* exactly one terminal ``Done`` per stream, always the last event;
* ``Retrying`` / ``TokenUsage`` / ``Done`` are never inside an open block;
* the attempt count never exceeds ``max_retries + 1``; ``max_retries == 0`` disables retries.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from agentkeep.providers.protocol import CancelToken
from agentkeep.types import (
    DONE_CANCELLED,
    BlockReset,
    BlockStart,
    BlockStop,
    Done,
    ProviderErrorInfo,
    Retrying,
    StreamEvent,
    TokenUsage,
    done_error,
)

DEFAULT_MAX_RETRIES = 10
MAX_RETRIES_CAP = 100
BASE_DELAY_SECONDS = 0.2
MAX_DELAY_SECONDS = 30.0

# Sleeps ``delay_seconds`` unless cancelled first; returns True when the wait was cancelled.
Sleep = Callable[[float, CancelToken], bool]


def sleep_on_cancel(delay_seconds: float, cancel: CancelToken) -> bool:
    """The production sleep: blocks on the cancel token, so a cancel ends the wait at once."""
    return cancel.wait_cancelled(delay_seconds)


def backoff_delay_seconds(attempt: int, rng: random.Random) -> float:
    """The wait before retry ``attempt`` (1-based).

    ``min(30 s, 200 ms·2^(attempt−1))`` × U[0.9, 1.1), the jitter drawn from ``rng``.
    """
    exponent = min(attempt - 1, 32)  # 2**32 · 0.2 s is far past the cap; avoids huge floats
    base = min(MAX_DELAY_SECONDS, BASE_DELAY_SECONDS * (2.0**exponent))
    return base * rng.uniform(0.9, 1.1)


@dataclass(frozen=True)
class RetryPolicy:
    """How a provider retries: how often, how long it waits, and how it waits.

    Attributes:
        max_retries: Retries after the first attempt (0 disables, capped at 100).
        rng: The source of jitter; inject a seeded one for a reproducible trace.
        sleep: Waits between attempts; returns True if cancelled. Tests inject a recorder.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    rng: random.Random = field(default_factory=random.Random)
    sleep: Sleep = sleep_on_cancel

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= MAX_RETRIES_CAP:
            raise ValueError(f"max_retries must be within 0..{MAX_RETRIES_CAP}")


@dataclass(frozen=True)
class RetryableFailure:
    """An attempt failed in a way that may succeed if the request is sent again.

    Attributes:
        reason: Short human text for the ``Retrying`` event and the final error message.
        error: The classification reported if retries run out.
        min_delay_seconds: A server-requested wait (``retry-after``), honoured up to the cap.
    """

    reason: str
    error: ProviderErrorInfo
    min_delay_seconds: float = 0.0


AttemptOutcome = Done | RetryableFailure
# One attempt: yields its content events, returns how it ended. It must not yield Done,
# BlockStart/BlockStop/BlockReset or Retrying: the driver owns those.
Attempt = Generator[StreamEvent, None, AttemptOutcome]


def _is_cancelled(cancel: CancelToken) -> bool:
    # A call, not an attribute read: the token flips from another thread between reads,
    # and a type checker would otherwise narrow the first read for the rest of the loop.
    return cancel.cancelled


def stream_with_retries(
    attempt: Callable[[], Attempt], policy: RetryPolicy, cancel: CancelToken
) -> Iterator[StreamEvent]:
    """Run ``attempt`` until it ends with a ``Done`` or retries run out; yield every event.

    Args:
        attempt: Starts one attempt of the request (a fresh HTTP request each call).
        policy: How many retries, the jitter source and the (abortable) sleep.
        cancel: The request's cancel token; checked before each attempt and after each wait.
    """
    retries = 0
    while True:
        if _is_cancelled(cancel):
            yield DONE_CANCELLED
            return
        block_open = False
        usage: list[StreamEvent] = []  # held back: TokenUsage never sits inside a block
        run = attempt()
        try:
            while True:
                try:
                    event = next(run)
                except StopIteration as stop:
                    outcome: AttemptOutcome = stop.value
                    break
                # TokenUsage stays outside blocks; the rest is tentative output.
                if isinstance(event, TokenUsage):
                    usage.append(event)
                    continue
                if not block_open:
                    yield BlockStart()
                    block_open = True
                yield event
        finally:
            # A consumer that stops reading closes this generator: close the attempt now so
            # its HTTP stream is released at once, not whenever the garbage collector runs.
            run.close()
        if isinstance(outcome, Done):
            if block_open:
                # Finished blocks are kept even when the response then failed: what ended
                # with *_end was whole, and the agent loop persists finished blocks anyway.
                yield BlockStop()
            yield from usage
            yield outcome
            return
        if retries >= policy.max_retries or _is_cancelled(cancel):
            if block_open:
                yield BlockReset()
            yield from usage
            if _is_cancelled(cancel):
                yield DONE_CANCELLED
                return
            diagnostics = {**outcome.error.diagnostics, "attempts": retries + 1}
            error = ProviderErrorInfo(
                type=outcome.error.type,
                reset_at_ms=outcome.error.reset_at_ms,
                diagnostics=diagnostics,
            )
            yield done_error(
                f"{outcome.reason} (after {retries + 1} attempts)", provider_error=error
            )
            return
        retries += 1
        if block_open:
            yield BlockReset()
        yield from usage
        delay = max(
            backoff_delay_seconds(retries, policy.rng),
            min(outcome.min_delay_seconds, MAX_DELAY_SECONDS),
        )
        yield Retrying(
            attempt=retries,
            reason=outcome.reason,
            delay_seconds=delay,
            error_type=outcome.error.type,
        )
        if policy.sleep(delay, cancel) or _is_cancelled(cancel):
            yield DONE_CANCELLED
            return
