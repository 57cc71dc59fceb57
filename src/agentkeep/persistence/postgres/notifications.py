"""Ledger wake-ups between processes: ``NOTIFY`` from a partition's writer, ``LISTEN`` in
every process that serves the store.

A partition's writer (:mod:`.writer`) sends, inside each work item that appended ledger
events, ``pg_notify(channel, "<sequence> <session>")`` once per session it appended to,
while some process follows the partition (:data:`NOTIFY_IF_FOLLOWED`); the channel is its
partition's (:func:`ledger_channel`: the schema's oid and the partition).
PostgreSQL delivers a notification only once its transaction committed, so a wake-up never
precedes the durable event it announces; a rolled-back transaction (or savepoint) sends none.

:class:`LedgerListener` is the other end: one ``LISTEN`` session per process and store,
shared by every partition's store opened there (:func:`listen`), on a thread of its own. It
listens only to the channels of the partitions some local system *follows*: a hub that
gets its first watcher of a session of a partition it does not own tells it
(``LedgerHub.on_follow``), and the channel is listened to until the last such watcher
leaves. So a worker whose streams all read its own partitions hears nothing, and pays
nothing for the other workers' commits. Each notification moves the session's mark in every
attached ledger hub (:meth:`~agentkeep.persistence.ledger.LedgerHub.committed_elsewhere`),
which runs that session's watchers: a system that does not own a session's partition wakes
its streams when the owner, in another process, commits. Invariants:

- the hub carries no payload: a woken reader reads the events from the store, so a lost,
  late or duplicate notification costs at most a wait, never an event (the ledger is the
  truth; the readers' poll bounds the wait);
- a channel newly listened to wakes the watchers of its partition's sessions once: what
  committed before the ``LISTEN`` took effect is read then;
- when the listening session drops (the server restarted, the backend was terminated) the
  thread reconnects by itself (backing off up to :data:`_MAX_RETRY_SECONDS`) and listens
  again, which wakes those watchers the same way (notifications sent while it was away are
  lost);
- a blocking :class:`~agentkeep.persistence.ledger.Subscription` of another partition's
  session (it waits, it does not watch) is not followed: it re-reads at its poll;
- nothing of it blocks its callers: notifications are read on its thread, and a watcher's
  callback must not block (it is the hub's rule).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

import psycopg

from agentkeep.logs import get_logger
from agentkeep.partitions import Partition, partition_of
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.postgres.connection import PostgresTarget, application_name, connect

__all__ = [
    "FOLLOW_CLASS",
    "NOTIFY_IF_FOLLOWED",
    "LedgerListener",
    "follow_key",
    "ledger_channel",
    "listen",
    "listener_of",
    "notify_payload",
    "parse_payload",
]

log = get_logger(__name__)

#: How long one wait for notifications lasts before the thread checks whether to stop.
_IDLE_SECONDS = 1.0
_FIRST_RETRY_SECONDS = 0.05
_MAX_RETRY_SECONDS = 2.0
_STOP_JOIN_SECONDS = 5.0


def ledger_channel(schema_oid: int, partition: int) -> str:
    """The ``NOTIFY`` channel of one partition of the store in the schema whose oid is
    ``schema_oid``."""
    return f"agentkeep_ledger_{schema_oid}_{partition}"


#: The high 16 bits of a partition's *followed* lock key ("al"; the store's keys are "ak…").
FOLLOW_CLASS: Final = 0x616C

#: What a partition's writer sends per session per work item: the notification, only while
#: some process follows the partition (holds its followed lock shared; the writer's try
#: for it exclusive fails then). A commit nobody follows sends none: PostgreSQL serializes
#: the commits of every transaction that notified (a lock held through COMMIT), so a store
#: pays for that only where a stream needs it.
NOTIFY_IF_FOLLOWED: Final = "SELECT pg_notify(?, ?) WHERE NOT pg_try_advisory_xact_lock(?)"


def follow_key(schema_oid: int, partition: int) -> int:
    """The advisory lock key a process holds shared while it listens to ``partition``'s
    channel (the one-bigint form; apart from the store's and the partitions' keys)."""
    return (FOLLOW_CLASS << 48) | (partition << 32) | schema_oid


def notify_payload(agent_id: str, sequence: int) -> str:
    """A notification's payload: the session's last sequence the transaction appended, and
    its id (the sequence first, so an id may hold any character)."""
    return f"{sequence} {agent_id}"


def parse_payload(payload: str) -> tuple[str, int] | None:
    """(session, sequence) of a payload of :func:`notify_payload`; None if it is not one."""
    sequence, _, agent_id = payload.partition(" ")
    if not agent_id or not sequence.isdigit():
        return None
    return agent_id, int(sequence)


def _schema_oid(connection: psycopg.Connection[Any], schema: str) -> int | None:
    row = connection.execute(
        "SELECT oid::bigint FROM pg_namespace WHERE nspname = %s", (schema,)
    ).fetchone()
    return None if row is None else int(row[0])


class LedgerListener:
    """One process's ``LISTEN`` session on one store (see the module). Use :func:`listen`,
    which shares one per store and process."""

    def __init__(self, target: PostgresTarget, count: int) -> None:
        self.target = target
        self.count = count
        self._lock = threading.Lock()
        self._hubs: dict[int, LedgerHub] = {}
        # Per hub: how many of its followed sessions each partition has.
        self._follows: dict[int, Counter[int]] = {}
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        #: Set while the listening session is connected.
        self.listening = threading.Event()
        #: Notifications received (every one, whoever watches its session).
        self.received = 0
        #: Times the session was (re)established after the first.
        self.reconnects = 0
        #: The server process of the listening session (0 while there is none).
        self.backend_pid = 0
        #: The partitions whose channels it listens to now.
        self.channels: frozenset[int] = frozenset()

    def health(self) -> dict[str, object]:
        """``listening`` (connected now), the ``partitions`` heard, ``received``
        notifications and ``reconnects``."""
        return {
            "listening": self.listening.is_set(),
            "partitions": sorted(self.channels),
            "received": self.received,
            "reconnects": self.reconnects,
        }

    def attach(self, hub: LedgerHub, own: int | None) -> Callable[[], None]:
        """Hear, for ``hub``, the commits to the sessions it follows (those it watches) of
        every partition but ``own`` (its store's, whose commits it announces itself), from
        now on; returns the function that stops."""
        with self._lock:
            self._next += 1
            key = self._next
            self._hubs[key] = hub
            self._follows[key] = Counter()

        def follow(agent_id: str, on: bool) -> None:
            partition = partition_of(agent_id, self.count)
            if partition == own:
                return
            with self._lock:
                counts = self._follows.get(key)
                if counts is None:
                    return
                counts[partition] += 1 if on else -1
            self._poke()

        hub.on_follow = follow

        def detach() -> None:
            hub.on_follow = None
            with self._lock:
                self._hubs.pop(key, None)
                self._follows.pop(key, None)
            self._poke()

        return detach

    @property
    def attached(self) -> int:
        """How many hubs it dispatches to."""
        with self._lock:
            return len(self._hubs)

    def start(self) -> LedgerListener:
        """Start its thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="agentkeep-ledger-listener", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close its session (waits for its thread)."""
        self._stop.set()
        self._poke()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_JOIN_SECONDS)
        if thread is None or not thread.is_alive():
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _poke(self) -> None:
        """Wake the thread (the partitions to hear changed, or it should stop)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"x")

    def _wanted(self) -> set[int]:
        with self._lock:
            return {p for counts in self._follows.values() for p, n in counts.items() if n > 0}

    def _hubs_now(self) -> list[LedgerHub]:
        with self._lock:
            return list(self._hubs.values())

    def _run(self) -> None:
        retry = _FIRST_RETRY_SECONDS
        connected_before = False
        while not self._stop.is_set():
            try:
                connection = connect(self.target, name=application_name("listener"))
            except psycopg.Error as error:
                log.warning("ledger_listener_unreachable", error=repr(error))
                self._stop.wait(retry)
                retry = min(retry * 2, _MAX_RETRY_SECONDS)
                continue
            try:
                with connection:
                    connection.add_notify_handler(self._dispatch)
                    oid = _schema_oid(connection, self.target.schema)
                    if oid is None:  # no store yet: nothing can be committed to it
                        raise psycopg.OperationalError(f"no schema {self.target.schema!r}")
                    self.backend_pid = connection.info.backend_pid
                    self.listening.set()
                    if connected_before:
                        self.reconnects += 1
                        log.info("ledger_listener_reconnected", backend_pid=self.backend_pid)
                    connected_before = True
                    retry = _FIRST_RETRY_SECONDS
                    self._receive(connection, oid)
            except psycopg.Error as error:
                log.warning("ledger_listener_dropped", error=repr(error))
                self._stop.wait(retry)
                retry = min(retry * 2, _MAX_RETRY_SECONDS)
            finally:
                self.listening.clear()
                self.backend_pid = 0
                self.channels = frozenset()

    def _receive(self, connection: psycopg.Connection[Any], oid: int) -> None:
        """Listen to the wanted partitions' channels (each newly heard one wakes its
        watchers: what committed before it was heard is read again), and dispatch."""
        pgconn = connection.pgconn
        socket = pgconn.socket
        # poll, not select: a daemon's descriptors may pass select's limit (1024).
        poller = select.poll()
        poller.register(socket, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while not self._stop.is_set():
            wanted = self._wanted()
            added = wanted - self.channels
            for partition in sorted(added):
                # The lock first: a writer notifies from the first transaction that fails
                # to take it on; one that took it committed before, and is read at the wake.
                key = follow_key(oid, partition)
                connection.execute("SELECT pg_advisory_lock_shared(%s)", (key,))
                connection.execute(f"LISTEN {ledger_channel(oid, partition)}")
            for partition in sorted(self.channels - wanted):
                connection.execute(f"UNLISTEN {ledger_channel(oid, partition)}")
                key = follow_key(oid, partition)
                connection.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))
            self.channels = frozenset(wanted)
            if added:
                self._wake_partitions(frozenset(added))
            ready = {fd for fd, _events in poller.poll(_IDLE_SECONDS * 1000)}
            if self._wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
            if socket in ready:
                pgconn.consume_input()
                while (notification := pgconn.notifies()) is not None:
                    self._deliver(notification.extra.decode())
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the listening session dropped")

    def _wake_partitions(self, partitions: frozenset[int]) -> None:
        """Wake the watchers of these partitions' sessions in every hub (they re-read)."""
        count = self.count
        for hub in self._hubs_now():
            hub.wake_watchers(lambda agent_id: partition_of(agent_id, count) in partitions)

    def _dispatch(self, notification: psycopg.Notify) -> None:
        self._deliver(notification.payload)

    def _deliver(self, payload: str) -> None:
        self.received += 1
        parsed = parse_payload(payload)
        if parsed is None:
            return
        agent_id, sequence = parsed
        for hub in self._hubs_now():
            hub.committed_elsewhere(agent_id, sequence)


_shared_lock = threading.Lock()
_shared: dict[tuple[str, str], tuple[LedgerListener, int]] = {}


def listen(target: PostgresTarget, hub: LedgerHub, partition: Partition) -> Callable[[], None]:
    """Attach ``hub`` (of ``partition``'s store) to this process's listener on ``target``'s
    store (started with its first hub, stopped after its last leaves); returns the function
    that detaches it."""
    key = (target.conninfo, target.schema)
    with _shared_lock:
        listener, users = _shared.get(key, (None, 0))
        if listener is None:
            listener = LedgerListener(target, partition.count).start()
        _shared[key] = (listener, users + 1)
    detach_hub = listener.attach(hub, partition.index)
    done = threading.Event()

    def detach() -> None:
        if done.is_set():
            return
        done.set()
        detach_hub()
        with _shared_lock:
            current, count = _shared.get(key, (None, 0))
            if current is not listener:
                return
            if count > 1:
                _shared[key] = (listener, count - 1)
                return
            del _shared[key]
        listener.stop()

    return detach


def listener_of(target: PostgresTarget) -> LedgerListener | None:
    """This process's listener on ``target``'s store, if one runs (tests, health)."""
    with _shared_lock:
        found = _shared.get((target.conninfo, target.schema))
    return None if found is None else found[0]
