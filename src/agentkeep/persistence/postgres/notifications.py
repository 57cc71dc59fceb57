"""Ledger wake-ups between processes: ``NOTIFY`` from a partition's writer, ``LISTEN`` in
every process that serves the store.

A partition's writer (:mod:`.writer`) sends, inside each work item that appended ledger
events, ``pg_notify(channel, "<sequence> <session>")`` once per session it appended to; the
channel is the store's (:func:`ledger_channel`: one per schema, named by its oid). PostgreSQL
delivers a notification only once its transaction committed, so a wake-up never precedes the
durable event it announces; a rolled-back transaction (or savepoint) sends none.

:class:`LedgerListener` is the other end: one ``LISTEN`` session per process and store,
shared by every partition's store opened there (:func:`listen`), on a thread of its own. Each
notification moves the session's mark in every attached ledger hub
(:meth:`~agentkeep.persistence.ledger.LedgerHub.committed_elsewhere`), which runs that
session's watchers: a system that does not own a session's partition wakes its streams when
the owner, in another process, commits. Invariants:

- the hub carries no payload: a woken reader reads the events from the store, so a lost,
  late or duplicate notification costs at most a wait, never an event (the ledger is the
  truth; the readers' poll bounds the wait);
- when the listening session drops (the server restarted, the backend was terminated) the
  thread reconnects by itself (backing off up to :data:`_MAX_RETRY_SECONDS`), listens again,
  and then wakes every watcher of every attached hub once, since notifications sent while it
  was away are lost;
- nothing of it blocks its callers: notifications are read on its thread, and a watcher's
  callback must not block (it is the hub's rule).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from agentkeep.logs import get_logger
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.postgres.connection import PostgresTarget, application_name, connect

__all__ = [
    "LedgerListener",
    "ledger_channel",
    "listen",
    "listener_of",
    "notify_payload",
    "parse_payload",
]

log = get_logger(__name__)

#: How long one wait for notifications lasts before the thread checks whether to stop.
_IDLE_SECONDS = 0.2
_FIRST_RETRY_SECONDS = 0.05
_MAX_RETRY_SECONDS = 2.0
_STOP_JOIN_SECONDS = 5.0


def ledger_channel(schema_oid: int) -> str:
    """The ``NOTIFY`` channel of the store in the schema whose oid is ``schema_oid``."""
    return f"agentkeep_ledger_{schema_oid}"


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

    def __init__(self, target: PostgresTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._hubs: dict[int, LedgerHub] = {}
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set while the listening session is connected and listening.
        self.listening = threading.Event()
        #: Notifications received (every one, whoever watches its session).
        self.received = 0
        #: Times the session was (re)established after the first.
        self.reconnects = 0
        #: The server process of the listening session (0 while there is none).
        self.backend_pid = 0

    def health(self) -> dict[str, object]:
        """``listening`` (connected now), ``received`` notifications, ``reconnects``."""
        return {
            "listening": self.listening.is_set(),
            "received": self.received,
            "reconnects": self.reconnects,
        }

    def attach(self, hub: LedgerHub) -> Callable[[], None]:
        """Dispatch notifications to ``hub`` from now on; returns the function that stops."""
        with self._lock:
            self._next += 1
            key = self._next
            self._hubs[key] = hub

        def detach() -> None:
            with self._lock:
                self._hubs.pop(key, None)

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
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_JOIN_SECONDS)

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
                    self._listen(connection, woken=connected_before)
                    retry = _FIRST_RETRY_SECONDS
                    connected_before = True
                    self._receive(connection)
            except psycopg.Error as error:
                log.warning("ledger_listener_dropped", error=repr(error))
                self._stop.wait(retry)
                retry = min(retry * 2, _MAX_RETRY_SECONDS)
            finally:
                self.listening.clear()
                self.backend_pid = 0

    def _listen(self, connection: psycopg.Connection[Any], *, woken: bool) -> None:
        """LISTEN on the store's channel; after a reconnect, wake every watcher once."""
        oid = _schema_oid(connection, self.target.schema)
        if oid is None:  # no store yet: nothing can be committed to it
            raise psycopg.OperationalError(f"schema {self.target.schema!r} does not exist")
        connection.execute(f"LISTEN {ledger_channel(oid)}")
        self.backend_pid = connection.info.backend_pid
        self.listening.set()
        if woken:
            self.reconnects += 1
            log.info("ledger_listener_reconnected", backend_pid=self.backend_pid)
            for hub in self._hubs_now():
                hub.wake_watchers()

    def _receive(self, connection: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            for notification in connection.notifies(timeout=_IDLE_SECONDS):
                self.received += 1
                parsed = parse_payload(notification.payload)
                if parsed is None:
                    continue
                agent_id, sequence = parsed
                for hub in self._hubs_now():
                    hub.committed_elsewhere(agent_id, sequence)
                if self._stop.is_set():
                    return


_shared_lock = threading.Lock()
_shared: dict[tuple[str, str], tuple[LedgerListener, int]] = {}


def listen(target: PostgresTarget, hub: LedgerHub) -> Callable[[], None]:
    """Attach ``hub`` to this process's listener on ``target``'s store (started with its
    first hub, stopped after its last leaves); returns the function that detaches it."""
    key = (target.conninfo, target.schema)
    with _shared_lock:
        listener, users = _shared.get(key, (None, 0))
        if listener is None:
            listener = LedgerListener(target).start()
        _shared[key] = (listener, users + 1)
    detach_hub = listener.attach(hub)
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
