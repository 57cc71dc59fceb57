"""The writer's background checkpointer: its PASSIVE checkpoints, off its thread.

The writer decides when to checkpoint (its inbox empty, the WAL past the threshold) and counts
the ``checkpoint`` fault point in its own sequence of operations; the checkpoint itself runs
here, on a thread and a connection of its own, so a commit arriving meanwhile does not wait
behind it (a checkpoint of ~1,000 pages took 2–10 ms, and the commit of the step
under way nearly always arrived meanwhile — about one step in 33 waited for it). What such
commits add while it copies, the writer copies itself afterwards (a short tail:
``SqliteWriterBackend.between_groups``), so the WAL still restarts.

Why it is safe to run beside the writer: a PASSIVE checkpoint takes only the checkpoint lock,
which no writer or reader needs; it copies the frames committed when it started and never
waits for anyone. It syncs exactly as the writer's connection would (the same
``synchronous``, the same VFS, no memory-mapped I/O), so the WAL is only ever reused after the
database file holds its frames durably. A failure is logged and counted, never a caller's
error (as before). The writer closes it, waiting for a checkpoint under way, before its final
checkpoint or closing its own connection.
"""

from __future__ import annotations

import threading

import apsw

from agentkeep.logs import get_logger
from agentkeep.persistence.inbox import Counters
from agentkeep.persistence.readers import open_connection

log = get_logger(__name__)

#: Passes of one background checkpoint (each copies what commits added during the last).
MAX_PASSES = 4

#: How long closing waits for a checkpoint under way (a PASSIVE one waits for nobody: only
#: stuck I/O takes longer; the thread is a daemon and is then abandoned).
CLOSE_WAIT_SECONDS = 30.0


class Checkpointer:
    """One writer incarnation's background checkpoints (at most one at a time).

    Locking: one condition, a leaf, guarding ``_wanted`` (a checkpoint asked for and not yet
    finished), ``_closed`` and the thread's existence. The checkpoint runs outside it.

    Args:
        writer: The writer's connection: the database, VFS and ``synchronous`` setting the
            checkpointer's own connection copies (read once, here).
        counters: Where finished checkpoints and failures are counted.
    """

    def __init__(self, writer: apsw.Connection, counters: Counters) -> None:
        self._path = writer.filename
        self._vfs: str | None = writer.open_vfs
        self._synchronous = int(str(writer.execute("PRAGMA synchronous").fetchall()[0][0]))
        self._counters = counters
        self._changed = threading.Condition(threading.Lock())
        self._wanted = False
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """Whether a checkpoint asked for has not finished yet (or the checkpointer closed)."""
        with self._changed:
            return self._wanted or self._closed

    def request(self) -> bool:
        """Ask for a checkpoint; False if one asked for earlier has not finished (or closed)."""
        with self._changed:
            if self._closed or self._wanted:
                return False
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="agentkeep-checkpointer", daemon=True
                )
                self._thread.start()
            else:
                self._changed.notify_all()
            return True

    def close(self) -> None:
        """Stop: a checkpoint under way finishes first (up to ``CLOSE_WAIT_SECONDS``); one
        asked for and not yet started is dropped. Idempotent."""
        with self._changed:
            self._closed = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_SECONDS)
            if thread.is_alive():
                log.error("store_checkpointer_abandoned", seconds=CLOSE_WAIT_SECONDS)

    def _serve(self) -> None:
        connection: apsw.Connection | None = None
        try:
            while self._next():
                failure: Exception | None = None
                try:
                    if connection is None:
                        connection = self._connect()
                    _copy_all(connection)
                except Exception as exc:
                    failure = exc
                finally:
                    # Not busy before it is counted: one who saw it counted may ask again.
                    with self._changed:
                        self._wanted = False
                        self._changed.notify_all()
                if failure is None:
                    self._counters.add(checkpoints=1)
                else:
                    self._counters.add(checkpoint_errors=1)
                    log.warning("store_checkpoint_failed", error=repr(failure))
        finally:
            if connection is not None:
                try:
                    connection.close()
                except apsw.Error as exc:
                    log.error("store_checkpointer_close_failed", error=repr(exc))

    def _next(self) -> bool:
        """Wait for a request; False once closed."""
        with self._changed:
            while not self._wanted and not self._closed:
                self._changed.wait()
            return not self._closed

    def _connect(self) -> apsw.Connection:
        connection = open_connection(self._path, vfs=self._vfs)
        # Synced as the writer's own checkpoint would be; every byte through the VFS.
        connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        connection.execute("PRAGMA mmap_size = 0")
        return connection


def _copy_all(connection: apsw.Connection) -> bool:
    """PASSIVE checkpoints until every frame is copied, at most ``MAX_PASSES``: commits that
    raced one pass leave a shorter tail for the next. True if the last pass copied all."""
    for _pass in range(MAX_PASSES):
        frames, copied = connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        if copied >= frames:
            return True
    return False
