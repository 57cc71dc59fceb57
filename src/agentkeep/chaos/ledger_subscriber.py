"""A ledger subscriber that survives SIGKILLs, and the ``L4`` check of what it received.

The real-process campaign (:mod:`agentkeep.chaos.process_kills`) runs a
:class:`RecordingSubscriber` on its own thread in every worker process: it subscribes to the
session (``AgentSystem.subscribe``) from the last sequence it *recorded*, appends every event
it receives to a log file (one ``write(2)`` per JSON line, then ``fsync``) before it takes the
next (a SIGKILL can still cut that write short where the line crosses a page: the kernel stops
copying at a fatal signal, so the next generation ends the torn line before it appends, and
:meth:`SubscriberLog.lines` skips it — an event received but not recorded, as a kill before
the write leaves it), and at seeded points closes its subscription and reconnects from that
same sequence.
The worker's SIGKILL kills it wherever it is — between receiving an event and recording it,
inside a read, while reconnecting — and the next worker's subscriber resumes from the log;
at a seeded event it also kills the process itself, right after receiving the event and
before recording it (a ``kill`` line names it).
A worker that finishes drains it: the subscriber catches up with the ledger's last committed
sequence, then one more subscription from there must find nothing (a zero-timeout read).

:func:`judge_subscriber_log` holds the log against the ledger read from disk after the final
process (``L4``): each connection resumes from the last recorded sequence; from there the
events are exactly ``after + 1, after + 2, ...`` (no gap, no duplicate), each identical to the
durable event of that sequence (nothing a crash took back, nothing rewritten since); every
drain reached the ledger's tail and found nothing more.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agentkeep.chaos.invariants import Violation
from agentkeep.chaos.ledger_reads import read_all
from agentkeep.errors import AgentClosedError
from agentkeep.types import SessionEvent

if TYPE_CHECKING:
    from agentkeep.agent_system import AgentSystem

SUBSCRIBER_ENV = "AGENTKEEP_CHAOS_SUBSCRIBER"  # the subscriber's seed; unset: no subscriber
# N: the subscriber SIGKILLs its process on receiving its N-th event, before recording it.
SUBSCRIBER_KILL_ENV = "AGENTKEEP_CHAOS_SUBSCRIBER_KILL_AT"
DRAIN_SECONDS = 20.0
# Events between seeded disconnects (each connection takes 1..this many, then reconnects).
MAX_EVENTS_PER_CONNECTION = 6


class SubscriberLog:
    """The subscriber's durable record: ``connect``, ``event`` and ``drained`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every line written so far, in order (none if the file does not exist).

        A line a SIGKILL cut short is skipped, but only as the last line its process wrote:
        the file's last line, or one the next generation's first line follows. Anywhere else a
        line that does not parse is a broken log and raises.
        """
        if not self.path.exists():
            return
        raw = self.path.read_text().splitlines()
        previous: dict[str, Any] | None = None
        for index, text in enumerate(raw):
            try:
                line: dict[str, Any] = json.loads(text)
            except json.JSONDecodeError:
                if index + 1 < len(raw):
                    after: dict[str, Any] = json.loads(raw[index + 1])
                    if previous is not None and after["generation"] <= previous["generation"]:
                        raise
                continue
            previous = line
            yield line

    def last_sequence(self) -> int:
        """The sequence of the last event recorded (0 before the first): where to resume."""
        last = 0
        for line in self.lines():
            if line["kind"] == "event":
                last = int(line["sequence"])
        return last


def _end_a_torn_line(fd: int) -> None:
    """End the log's last line if a SIGKILL cut its write short, so the next line starts on a
    line of its own and the torn one is skipped whole (:meth:`SubscriberLog.lines`). ``fd``
    is open for reading too."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")


class RecordingSubscriber:
    """A subscriber thread in a worker process (see the module docstring)."""

    def __init__(
        self,
        system: AgentSystem,
        agent_id: str,
        log: Path,
        generation: int,
        seed: int,
        *,
        durable: bool = True,
        kill_at: int = 0,
    ) -> None:
        self._durable = durable  # fsync each line (a SIGKILL may come at any instant)
        self._kill_at = kill_at
        self._received = 0
        self._system = system
        self._agent_id = agent_id
        self._log = SubscriberLog(log)
        self._generation = generation
        self._rng = random.Random(seed)
        self._fd = os.open(log, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        _end_a_torn_line(self._fd)
        self._last = self._log.last_sequence()
        self._changed = threading.Condition()
        self._stopping = False
        self._current: Any = None
        self._thread = threading.Thread(target=self._run, name="ledger-subscriber", daemon=True)
        self.error: BaseException | None = None
        self._listening = threading.Event()  # set once the first subscription is open

    def start(self) -> None:
        """Start the subscriber thread; returns once its first subscription is open (or it
        failed or stopped), so whatever the caller does next happens while it listens."""
        self._thread.start()
        self._listening.wait(DRAIN_SECONDS)

    def _append(self, kind: str, **fields: Any) -> None:
        line = {"kind": kind, "generation": self._generation, **fields}
        # One write(2) per line: a SIGKILL lands before or after it, never inside a line.
        os.write(self._fd, json.dumps(line, sort_keys=True).encode() + b"\n")
        if self._durable:
            os.fsync(self._fd)

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._connection()
        except BaseException as error:  # reported by drain()
            self.error = error
        finally:
            self._listening.set()
            with self._changed:
                self._stopping = True
                self._changed.notify_all()

    def _connection(self) -> None:
        """One connection: resume from the last recorded sequence, take a seeded number of
        events, then disconnect (the caller reconnects)."""
        after = self._last
        self._append("connect", after=after)
        try:
            subscription = self._system.subscribe(self._agent_id, after=after)
        except AgentClosedError:  # the system closed between two connections
            with self._changed:
                self._stopping = True
            return
        with self._changed:
            self._current = subscription
            if self._stopping:
                subscription.close()
        self._listening.set()
        try:
            for _ in range(self._rng.randint(1, MAX_EVENTS_PER_CONNECTION)):
                try:
                    event = subscription.next(timeout_seconds=None)
                except StopIteration:  # closed by drain() or by the system's close
                    with self._changed:
                        self._stopping = True
                    return
                self._received += 1
                if self._received == self._kill_at:
                    # Received and not recorded: the next process must hand it out again.
                    self._append("kill", sequence=event.sequence)
                    os.kill(os.getpid(), signal.SIGKILL)
                self._append("event", **msgspec.to_builtins(event))
                with self._changed:
                    self._last = event.sequence
                    self._changed.notify_all()
        finally:
            subscription.close()

    def drain(self, tail: int) -> None:
        """Wait until the subscriber recorded sequence ``tail`` (the ledger's last committed
        one; nothing else may commit meanwhile), stop it, and record whether a fresh
        subscription from there finds anything more (it must not)."""
        with self._changed:
            self._changed.wait_for(lambda: self._last >= tail or self._stopping, DRAIN_SECONDS)
            reached = self._last
            self._stopping = True
            if self._current is not None:
                self._current.close()
        self._thread.join(DRAIN_SECONDS)
        extra: int | None = None
        probe = self._system.subscribe(self._agent_id, after=reached)
        try:
            with contextlib.suppress(TimeoutError):
                extra = probe.next(timeout_seconds=0).sequence
        finally:
            probe.close()
        error = None if self.error is None else repr(self.error)
        self._append("drained", tail=tail, reached=reached, extra=extra, error=error)

    def join(self, timeout_seconds: float) -> bool:
        """Wait for the thread to end by itself (its system closed); True if it did."""
        self._thread.join(timeout_seconds)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Close the log file."""
        os.close(self._fd)


class SubscriberGroup:
    """One :class:`RecordingSubscriber` per session, each logging to
    ``DIRECTORY/subscriber-SESSION.jsonl``, for campaigns that close and reopen a system
    in-process (``lifecycle_races``): nothing is SIGKILLed there, so lines are not fsynced."""

    def __init__(self, directory: Path, sessions: Sequence[str], seed: int) -> None:
        self.logs = {session: directory / f"subscriber-{session}.jsonl" for session in sessions}
        for log in self.logs.values():  # a campaign's subscribers start with no history
            log.unlink(missing_ok=True)
        self._seed = seed
        self._running: dict[str, RecordingSubscriber] = {}

    def start(self, system: AgentSystem, generation: int) -> None:
        """Start a subscriber per session on ``system`` (each resumes from its own log)."""
        for index, (session, log) in enumerate(self.logs.items()):
            seed = (self._seed * 64 + generation) * 64 + index
            subscriber = RecordingSubscriber(system, session, log, generation, seed, durable=False)
            subscriber.start()
            self._running[session] = subscriber

    def still_running(self, timeout_seconds: float) -> list[str]:
        """After the system closed: the sessions whose subscriber did not end by itself."""
        stuck = [s for s, sub in self._running.items() if not sub.join(timeout_seconds)]
        self.close()
        return stuck

    def drain(self, system: AgentSystem) -> None:
        """Drain every subscriber to its session's committed tail (nothing may commit)."""
        for session, subscriber in self._running.items():
            events = read_all(partial(_page, system, session))
            subscriber.drain(events[-1].sequence if events else 0)
        self.close()

    def close(self) -> None:
        """Close every log file."""
        for subscriber in self._running.values():
            subscriber.close()
        self._running.clear()

    def judge(
        self, session: str, ledger: Sequence[SessionEvent], *, final_generation: int
    ) -> list[Violation]:
        """``L4`` for one session's log against its final durable ledger."""
        lines = list(SubscriberLog(self.logs[session]).lines())
        return judge_subscriber_log(lines, ledger, final_generation=final_generation)


def _page(system: AgentSystem, session: str, after: int) -> list[SessionEvent]:
    return system.events(session, after=after, limit=1000)


def judge_subscriber_log(
    lines: Sequence[dict[str, Any]], ledger: Sequence[SessionEvent], *, final_generation: int
) -> list[Violation]:
    """``L4`` over a whole campaign's subscriber log against the final durable ``ledger``."""
    found: list[Violation] = []

    def bad(generation: int, detail: str) -> None:
        found.append(Violation(invariant="L4", process=generation, detail=detail))

    durable = {event.sequence: msgspec.to_builtins(event) for event in ledger}
    recorded = 0  # the last sequence the log holds
    expected = 1  # the sequence the current connection must hand out next
    drained_final = False
    for line in lines:
        generation = int(line["generation"])
        kind = line["kind"]
        if kind == "connect":
            after = int(line["after"])
            if after != recorded:
                bad(generation, f"reconnected from {after}, its last recorded event was {recorded}")
            expected = after + 1
        elif kind == "event":
            sequence = int(line["sequence"])
            if sequence != expected:
                what = "a gap" if sequence > expected else "a duplicate"
                bad(generation, f"{what}: received sequence {sequence} where {expected} was next")
            event = {k: v for k, v in line.items() if k not in ("kind", "generation")}
            if sequence not in durable:
                bad(generation, f"received sequence {sequence}, which the ledger does not hold")
            elif event != durable[sequence]:
                bad(
                    generation,
                    f"received {event} as sequence {sequence}; the ledger holds "
                    f"{durable[sequence]}",
                )
            recorded = max(recorded, sequence)
            expected = sequence + 1
        elif kind == "drained":
            tail, reached, extra = int(line["tail"]), int(line["reached"]), line["extra"]
            if line.get("error") or reached != tail or extra is not None:
                bad(
                    generation,
                    f"a drain to the committed tail {tail} reached {reached}, then found "
                    f"{extra} more (error {line.get('error')})",
                )
            if generation == final_generation:
                drained_final = True
                if tail != len(ledger):
                    bad(generation, f"the final drain's tail was {tail} of {len(ledger)} events")
    if lines and not drained_final:
        bad(final_generation, "the process left alone never drained its subscriber")
    return found


__all__ = [
    "SUBSCRIBER_ENV",
    "SUBSCRIBER_KILL_ENV",
    "RecordingSubscriber",
    "SubscriberGroup",
    "SubscriberLog",
    "judge_subscriber_log",
]
