"""The coordinator: which partitions of a PostgreSQL store this worker runs.

One :class:`Coordinator` per worker process. Its thread ticks every ``tick_ms`` (sooner
when woken); each tick, on the coordinator's own session:

1. heartbeat (every ``heartbeat_ms``, and whenever what it runs changed): stamp its row of
   ``agentkeep_workers`` with the server's clock. A row gone means another worker found this
   one dead (its lease ran out while it was stopped, or its session was cut) and ended its
   sessions: every partition it ran is given up and it joins again under a new token;
2. forget partitions whose handle reports them lost (each still shut down);
3. reap dead members (:func:`~agentkeep.cluster.membership.reap`): a row whose session the
   server no longer runs or whose lease ran out is deleted and every session of that
   process terminated, which frees its partition locks;
4. compute its share (:mod:`~agentkeep.cluster.spread`) over the live members; give up the
   partitions beyond it (``handle.shutdown()`` on a thread of its own: the graceful
   hand-off) and open free partitions (no lock holder) up to it (``runner.open`` on a thread
   of its own, so a slow drain or restore never delays the heartbeat).

It never holds a partition lock itself: the partition's system does, and the lock decides
a race (``StoreLockedError`` from ``open``: someone else got there first). Every
acquisition, hand-off, loss and reaping is a structured log line (``cluster_…``).

Invariant: the coordinator's state changes only under ``_lock``; the database is touched only
from its thread (and at ``start``/``stop``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg

from agentkeep.cluster import membership
from agentkeep.cluster.health import CoordinatorHealth
from agentkeep.cluster.protocol import PartitionHandle, PartitionRunner
from agentkeep.cluster.settings import CoordinatorSettings
from agentkeep.cluster.spread import plan
from agentkeep.errors import StoreLockedError, StoreUnavailableError
from agentkeep.logs import get_logger, install_default_logging
from agentkeep.persistence.postgres.connection import PostgresTarget, parse_url

__all__ = ["Coordinator"]

log = get_logger(__name__)


class _Held(msgspec.Struct, kw_only=True):
    handle: Any
    since_ms: int


class Coordinator:
    """Decides and applies this worker's partitions (see the module)."""

    def __init__(
        self, database: str, runner: PartitionRunner, settings: CoordinatorSettings
    ) -> None:
        self.target: PostgresTarget = parse_url(database)
        self.runner = runner
        self.settings = settings
        self.host = socket.gethostname()[:30]
        self.token = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._connection: psycopg.Connection[Any] | None = None
        self._name = ""
        self._joined = False
        self._generation = 0
        self._held: dict[int, _Held] = {}
        self._opening: set[int] = set()
        self._releasing: set[int] = set()
        self._helpers: list[threading.Thread] = []
        self._last_heartbeat: float | None = None
        self._heartbeat_partitions: dict[int, int] | None = None
        self._share = 0
        self._live = 0
        self.ticks = 0
        self._version = 0  # grows at every notification of _changed
        self._connected_at = float("-inf")
        #: What the last tick failed with (None: it did not).
        self.last_error: Exception | None = None

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> Coordinator:
        """Join (on the caller's thread, so a bad URL fails here) and start ticking.

        Raises:
            StoreUnavailableError: the server could not be reached (or refused the join).
        """
        install_default_logging()
        self._tick_once()
        if not self._joined:
            raise StoreUnavailableError(
                f"Could not join the workers of {self.target.display}: {self.last_error}"
            ) from self.last_error
        self._thread = threading.Thread(target=self._run, name="agentkeep-coordinator")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Leave gracefully: stop ticking, delete this worker's row (so the others count
        without it at once), then shut every partition down (each released as its drain
        ends) and wait for in-flight opens and shutdowns. A second call does nothing."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        connection = self._connection
        if connection is not None and self._joined:
            try:
                membership.leave(connection, self.token)
            except psycopg.Error as exc:
                log.warning("cluster_leave_failed", worker=self.token, error=repr(exc))
        with self._lock:
            held, self._held = self._held, {}
            for index in held:
                self._releasing.add(index)
        for index, entry in sorted(held.items()):
            self._spawn(self._release, index, entry, "stop")
        for helper in list(self._helpers):
            helper.join()
        if connection is not None:
            connection.close()
        self._connection = None
        log.info("cluster_left", worker=self.token, store=self.target.display)

    def wake(self) -> None:
        """Tick now (a runner that learned of a loss calls it)."""
        self._wake.set()

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it runs -------------------------------------------------------------------------

    def owned(self) -> dict[int, int]:
        """Partition index -> since when (ms since the epoch), of those running here."""
        with self._lock:
            return {index: entry.since_ms for index, entry in self._held.items()}

    def handle(self, index: int) -> PartitionHandle | None:
        """The handle of partition ``index`` while it runs here (None otherwise)."""
        with self._lock:
            entry = self._held.get(index)
            return None if entry is None else entry.handle

    def wait_until(self, condition: Callable[[Coordinator], bool], timeout: float) -> bool:
        """Block until ``condition(self)`` holds, checked after every tick and every
        finished open or shutdown; False at ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                seen = self._version
            if condition(self):
                return True
            with self._changed:
                while self._version == seen:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._changed.wait(left)

    def health(self) -> CoordinatorHealth:
        """This worker's part in the store now (for ``/healthz``)."""
        with self._lock:
            age = (
                None
                if self._last_heartbeat is None
                else int((time.monotonic() - self._last_heartbeat) * 1000)
            )
            connected = self._connection is not None and not self._connection.broken
            return CoordinatorHealth(
                healthy=self._joined
                and connected
                and age is not None
                and age < self.settings.lease_ms,
                token=self.token,
                connected=connected,
                heartbeat_age_ms=age,
                lease_ms=self.settings.lease_ms,
                count=self.settings.count,
                share=self._share,
                live_workers=self._live,
                partitions={index: entry.since_ms for index, entry in self._held.items()},
                opening=sorted(self._opening),
                releasing=sorted(self._releasing),
            )

    # -- the tick -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.settings.tick_ms / 1000)
            self._wake.clear()
            with self._lock:
                if self._stopping:
                    return
            self._tick_once()

    def _tick_once(self) -> None:
        try:
            self._tick()
            self.last_error = None
        except _RejoinError:
            pass
        except psycopg.Error as exc:
            self.last_error = exc
            log.warning("cluster_database_unreachable", worker=self.token, error=repr(exc))
            self._disconnect()
        except Exception as exc:  # one bad tick must not end the coordinator
            self.last_error = exc
            log.error("cluster_tick_failed", worker=self.token, error=repr(exc))
        with self._changed:
            self.ticks += 1
            self._version += 1
            self._changed.notify_all()

    def _tick(self) -> None:
        connection = self._connect()
        self._forget_lost()
        self._heartbeat(connection)
        workers = membership.read_workers(connection)
        # Right after this worker's own (re)connection, a member whose session is gone may be
        # one reconnecting after the same server restart: only a lease gone by counts then.
        settled = time.monotonic() - self._connected_at >= self.settings.heartbeat_every_ms / 1000
        reaped = False
        for worker in workers:
            if worker.token == self.token or worker.live:
                continue
            if settled or not worker.fresh:
                reaped |= self._reap(connection, worker)
        live = [w.token for w in workers if w.live or w.token == self.token]
        holders = membership.partition_holders(connection)
        with self._lock:
            if self._stopping:
                return
            step = plan(
                self.settings.count,
                live,
                self.token,
                held=self._held,
                opening=self._opening,
                releasing=self._releasing,
                locked=holders,
            )
            self._share, self._live = step.share, len(live)
            for index in step.release:
                entry = self._held.pop(index)
                self._releasing.add(index)
                self._spawn(self._release, index, entry, "hand_off")
            for index in step.open:
                self._opening.add(index)
                self._spawn(self._open, index, self._generation)
        if reaped:
            self._wake.set()  # the freed partitions, at once

    def _connect(self) -> psycopg.Connection[Any]:
        connection = self._connection
        if connection is not None and not connection.broken:
            return connection
        self._disconnect()
        name = f"agentkeep pid={os.getpid()} host={self.host} c={self.token}"[:63]
        connection = membership.connect(self.target, name, lease_ms=self.settings.lease_ms)
        self._connection = connection
        self._connected_at = time.monotonic() if self._joined else float("-inf")
        self._name = name
        self._heartbeat_partitions = None  # a new session: the row must name it at once
        membership.create_table(connection, self.target.schema)
        if not self._joined:
            membership.join(
                connection,
                (
                    self.token,
                    os.getpid(),
                    self.host,
                    name,
                    self.settings.address,
                    self.settings.lease_ms,
                ),
            )
            self._joined = True
            self._heartbeat_partitions = {}
            self._last_heartbeat = time.monotonic()
            log.info(
                "cluster_joined",
                worker=self.token,
                store=self.target.display,
                count=self.settings.count,
                lease_ms=self.settings.lease_ms,
            )
        return connection

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _heartbeat(self, connection: psycopg.Connection[Any]) -> None:
        partitions = self.owned()
        due = (
            self._last_heartbeat is None
            or (time.monotonic() - self._last_heartbeat) * 1000 >= self.settings.heartbeat_every_ms
        )
        if not due and partitions == self._heartbeat_partitions:
            return
        name = self._name
        stamp = json.dumps({str(index): since for index, since in sorted(partitions.items())})
        if not membership.heartbeat(connection, self.token, name, stamp):
            self._expelled()
            raise _RejoinError
        with self._lock:
            self._last_heartbeat = time.monotonic()
        self._heartbeat_partitions = partitions

    def _expelled(self) -> None:
        """Our row is gone: another worker found us dead and ended our sessions."""
        with self._lock:
            held, self._held = self._held, {}
            self._releasing.update(held)
            self._generation += 1
            old, self.token = self.token, uuid.uuid4().hex[:12]
            self._joined = False
        log.warning("cluster_expelled", worker=old, new_worker=self.token, partitions=sorted(held))
        for index, entry in sorted(held.items()):
            self._spawn(self._release, index, entry, "expelled")
        self._disconnect()

    def _forget_lost(self) -> None:
        # ``lost`` is the runner's code: asked outside the lock.
        with self._lock:
            held = dict(self._held)
        reasons = {index: entry.handle.lost for index, entry in held.items()}
        lost: dict[int, _Held] = {}
        with self._lock:
            for index, reason in reasons.items():
                if reason is not None and self._held.get(index) is held[index]:
                    lost[index] = self._held.pop(index)
                    self._releasing.add(index)
        for index, entry in sorted(lost.items()):
            log.warning(
                "cluster_partition_lost", worker=self.token, partition=index, reason=reasons[index]
            )
            self._spawn(self._release, index, entry, "lost")

    def _reap(self, connection: psycopg.Connection[Any], worker: membership.WorkerRow) -> bool:
        why = "session_gone" if not worker.connected else "lease_expired"
        ended = membership.reap(connection, worker.token, wait_ms=self.settings.terminate_wait_ms)
        if ended is None:
            return False
        log.warning(
            "cluster_worker_reaped",
            worker=self.token,
            dead=worker.token,
            pid=worker.pid,
            host=worker.host,
            reason=why,
            partitions=sorted(worker.partitions),
            terminated_backends=ended,
            heartbeat_age_ms=worker.now_ms - worker.heartbeat_ms,
        )
        return True

    # -- opening and shutting, on helper threads ---------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        helper = threading.Thread(target=target, args=args, name="agentkeep-coordinator-op")
        helper.daemon = True
        self._helpers = [h for h in self._helpers if h.is_alive()]
        self._helpers.append(helper)
        helper.start()

    def _open(self, index: int, generation: int) -> None:
        started = time.monotonic()
        handle: PartitionHandle | None = None
        try:
            handle = self.runner.open(index, self.settings.count)
        except StoreLockedError as exc:
            log.info(
                "cluster_partition_busy", worker=self.token, partition=index, holder=exc.holder
            )
        except Exception as exc:
            log.warning(
                "cluster_partition_open_failed", worker=self.token, partition=index, error=repr(exc)
            )
        keep = False
        with self._changed:
            self._opening.discard(index)
            if handle is not None and not self._stopping and generation == self._generation:
                self._held[index] = _Held(handle=handle, since_ms=int(time.time() * 1000))
                keep = True
            self._version += 1
            self._changed.notify_all()
        if handle is not None and keep:
            log.info(
                "cluster_partition_acquired",
                worker=self.token,
                partition=index,
                took_ms=int((time.monotonic() - started) * 1000),
            )
            self._wake.set()
        elif handle is not None:
            with self._lock:
                self._releasing.add(index)
            self._release(index, _Held(handle=handle, since_ms=0), "stop")

    def _release(self, index: int, entry: _Held, reason: str) -> None:
        started = time.monotonic()
        try:
            entry.handle.shutdown()
        except Exception as exc:
            log.warning(
                "cluster_partition_shutdown_failed",
                worker=self.token,
                partition=index,
                error=repr(exc),
            )
        with self._changed:
            self._releasing.discard(index)
            self._version += 1
            self._changed.notify_all()
        log.info(
            "cluster_partition_released",
            worker=self.token,
            partition=index,
            reason=reason,
            took_ms=int((time.monotonic() - started) * 1000),
        )
        self._wake.set()


class _RejoinError(Exception):
    """Raised out of a tick after being expelled: the next tick joins again."""
