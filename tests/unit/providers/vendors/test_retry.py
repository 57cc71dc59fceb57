"""The retry driver: backoff, rewinds, reported retries, abortable waits."""

from __future__ import annotations

import random

import pytest

from agentkeep.providers._errors import reset_at_ms
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import (
    Attempt,
    RetryableFailure,
    RetryPolicy,
    backoff_delay_seconds,
    sleep_on_cancel,
    stream_with_retries,
)
from agentkeep.types import (
    BlockReset,
    BlockStart,
    BlockStop,
    Done,
    ProviderErrorInfo,
    Retrying,
    TextDelta,
    Tokens,
    TokenUsage,
    Usage,
)

OVERLOADED = RetryableFailure(
    reason="server overloaded", error=ProviderErrorInfo(type="server_overloaded")
)
NORMAL = Done(state="normal", tokens=Tokens(input=1, output=1), end_turn=True)


def test_backoff_doubles_from_200ms_with_jitter_and_is_capped_at_30s():
    rng = random.Random(3)
    delays = [backoff_delay_seconds(attempt, rng) for attempt in range(1, 12)]
    for attempt, delay in enumerate(delays, start=1):
        base = min(30.0, 0.2 * 2 ** (attempt - 1))
        assert base * 0.9 <= delay < base * 1.1
    assert backoff_delay_seconds(400, rng) < 33.0


def test_one_seed_gives_one_trace_of_delays():
    def trace(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [backoff_delay_seconds(a, rng) for a in range(1, 6)]

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


def test_max_retries_outside_0_to_100_is_refused():
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=101)


def attempts(*outcomes):
    """Each attempt streams one delta and a usage, then ends with the next outcome."""
    remaining = list(outcomes)

    def attempt() -> Attempt:
        yield TextDelta(delta="x")
        yield TokenUsage(usage=Usage(input=1, output=1))
        return remaining.pop(0)

    return attempt


def test_a_failed_attempt_is_rewound_reported_and_retried_and_usage_stays_outside_blocks():
    delays: list[float] = []

    def record(delay: float, cancel: CancelToken) -> bool:
        delays.append(delay)
        return False

    policy = RetryPolicy(max_retries=2, rng=random.Random(1), sleep=record)
    events = list(stream_with_retries(attempts(OVERLOADED, NORMAL), policy, CancelToken()))

    usage = TokenUsage(usage=Usage(input=1, output=1))
    assert events == [
        BlockStart(),
        TextDelta(delta="x"),
        BlockReset(),
        usage,
        # classified as the failure was (metrics count retries by it)
        Retrying(
            attempt=1,
            reason="server overloaded",
            delay_seconds=delays[0],
            error_type="server_overloaded",
        ),
        BlockStart(),
        TextDelta(delta="x"),
        BlockStop(),
        usage,
        NORMAL,
    ]


def test_with_retries_disabled_the_first_failure_is_the_error_done():
    policy = RetryPolicy(max_retries=0, sleep=lambda delay, cancel: False)
    events = list(stream_with_retries(attempts(OVERLOADED), policy, CancelToken()))
    done = events[-1]
    assert (done.state, done.provider_error.type) == ("error", "server_overloaded")
    assert done.provider_error.diagnostics == {"attempts": 1}
    assert not any(isinstance(e, Retrying) for e in events)


def test_the_production_sleep_returns_at_once_when_cancelled():
    cancel = CancelToken()
    cancel.cancel()
    assert sleep_on_cancel(3600.0, cancel) is True


def test_a_server_requested_wait_is_honoured_up_to_the_cap():
    waits: list[float] = []
    slow = RetryableFailure(
        reason="rate limited", error=ProviderErrorInfo(type="rate_limit"), min_delay_seconds=90.0
    )
    policy = RetryPolicy(
        max_retries=1, rng=random.Random(1), sleep=lambda d, c: waits.append(d) or False
    )
    list(stream_with_retries(attempts(slow, NORMAL), policy, CancelToken()))
    assert waits == [30.0]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 1_000_000 + 2000),
        ({"retry-after-ms": "250"}, 1_000_000 + 250),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1445412480000),
        ({"anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z"}, 1893456000000),
        (
            {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"},
            1_000_000 + 360_000,
        ),
        ({}, None),
    ],
)
def test_rate_limit_reset_times_are_read_from_every_vendor_header(headers, expected):
    assert reset_at_ms(headers, now_ms=1_000_000) == expected
