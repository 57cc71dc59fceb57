"""The failover campaign's clients (:mod:`agentkeep.chaos.worker_failover`): each sends
keyed messages over REST to random workers, and asks again with the same key — through a
random worker — after any error, timeout or 503, as a client of a cluster must.

What they saw is gathered in :class:`Sent`: the turn each key was first answered with (a
later answer naming another turn is a ``K1`` problem at once), and why sends were asked
again. Invariant: a key is recorded as accepted only from a 200/202 answer naming its turn.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from agentkeep.chaos.failover_workers import HEADERS, WORKERS, Pool

CLIENTS = 3
MESSAGES = 8  # per client at least: they send on until the last fault is over
REQUEST_TIMEOUT = 5.0
SEND_SECONDS = 120.0


# -- clients -----------------------------------------------------------------------------------


@dataclass
class Sent:
    """What the clients saw."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    accepted: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> session, turn
    retries: int = 0
    unavailable: int = 0
    problems: list[str] = field(default_factory=list)
    #: Why sends were asked again: an HTTP status and error code, or the client's exception.
    reasons: Counter[str] = field(default_factory=Counter)


def send_keyed(
    pool: Pool, seed: int, number: int, sessions: list[str], sent: Sent, done: threading.Event
) -> None:
    """Send keyed messages until at least ``MESSAGES`` went and the fault schedule is over."""
    rng = random.Random(seed * 1000 + number)
    for message in itertools.count():
        if message >= MESSAGES and done.is_set():
            break
        session = rng.choice(sessions)
        key = f"s{seed}-c{number}-m{message}"
        body = {"message": f"hello {key}", "idempotencyKey": key, "wait": False}
        deadline = time.monotonic() + SEND_SECONDS
        while True:
            url = pool.url_of(rng.randrange(WORKERS))
            try:
                answer = httpx.post(
                    f"{url}/v1/sessions/{session}/messages",
                    json=body,
                    headers=HEADERS,
                    timeout=REQUEST_TIMEOUT,
                )
            except httpx.HTTPError as error:
                answer = None
                reason = type(error).__name__
            if answer is not None and answer.status_code in (200, 202):
                turn = str(answer.json()["turn"]["id"])
                with sent.lock:
                    first = sent.accepted.setdefault(key, (session, turn))
                    if first[1] != turn:
                        sent.problems.append(f"K1: key {key} answered turn {turn}, then {first}")
                # Once more with the same key through another worker: the same turn.
                if rng.random() < 0.3:
                    continue
                break
            if answer is not None:
                reason = f"{answer.status_code} {_code(answer)}"
            with sent.lock:
                sent.retries += 1
                sent.reasons[reason] += 1
                if answer is not None and answer.status_code == 503:
                    sent.unavailable += 1
            if time.monotonic() > deadline:
                with sent.lock:
                    what = "no answer" if answer is None else f"{answer.status_code} {answer.text}"
                    sent.problems.append(f"key {key} never accepted: {what}")
                break
            time.sleep(0.05)  # a client's back-off before it asks again
        time.sleep(rng.uniform(0.0, 0.4))  # the seed's pace of sends


def _code(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


__all__ = ["CLIENTS", "MESSAGES", "SEND_SECONDS", "Sent", "send_keyed"]
