"""A batch of statements sent without waiting: libpq's pipeline mode, driven directly.

psycopg's own pipeline (``Connection.pipeline()``) runs every statement through its cursor
machinery: query conversion, the prepared-statement manager, the result queue. That costs
about 19 µs of the process's CPU a statement, and a durable step sends about 17 of them on
the writer's thread, under the GIL. This batch keeps what psycopg does best (its adapters
and its error classes) and does the rest itself, at about 5 µs a statement:

- **Statements are prepared once per connection** (``$1`` placeholders, the parameter types
  psycopg's adapters choose), keyed by the statement's text and those types, as psycopg's own
  manager keys them. A statement without parameters goes unnamed (``BEGIN``, ``SAVEPOINT``,
  ``COMMIT``: nothing to gain). A prepare the server refused (a write before it failed, so
  the server skipped it) is forgotten: the next use prepares again. Named prepared
  statements outlive a rollback (they belong to the session, not the transaction), but
  not a ``DEALLOCATE ALL``: psycopg sends one after a ``ROLLBACK`` when it prepared
  statements of its own, so :class:`~.connection.PostgresConnection` turns its preparing
  off; should one still arrive, the statement that finds its name gone fails (its item
  fails alone, as for any refused statement) and every name is prepared again.
- **Waiting is a Sync**: :meth:`Batch.sync` sends one and reads every result up to it
  (waiting on the socket with ``poll`` only when libpq has nothing ready),
  raising the first error among them (``psycopg.errors``' class for its SQLSTATE, as
  psycopg's pipeline raises). The server skips what follows an error up to the Sync, so a
  batch is usable again after one: the transaction is left failed, as a statement that
  failed outside a batch leaves it.
- **An answer wanted before the Sync** (the writer's transaction id, which its COMMIT must
  not be sent without): :meth:`Batch.ask` sends a statement followed by a Flush request, so
  the server sends its result at once; it is handed to the asker by whichever comes first,
  the next wait or :meth:`Batch.answer` (which waits for it, if it has not arrived yet).
- **A dropped connection** raises ``psycopg.OperationalError`` from the wait, and leaves the
  connection ``broken``, as psycopg's pipeline does.
- **A batch torn mid-way** (anything raised between a message put on the wire and the
  batch's note of it, or while its results are read: a Ctrl-C in a reader on the main
  thread, a dropped connection) can no longer line results up with statements. Its
  :meth:`Batch.abandon` closes the connection, so it is replaced rather than misread.

Only one thread uses a connection at a time (the writer's, or one reader's), and nothing
else sends on it while a batch is open.
"""

from __future__ import annotations

import contextlib
import re
import select
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

import psycopg
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ConnStatus, ExecStatus

__all__ = ["Batch", "PreparedStatements", "Result", "numbered"]

_READ: Final = 1
_WRITE: Final = 2
# What poll reports for a socket that can be read, or that the peer closed or broke (reading
# it then says how: libpq turns it into an error).
_READABLE: Final = select.POLLIN | select.POLLERR | select.POLLHUP | select.POLLNVAL


def _ready(socket: int, *, write: bool) -> int:
    """Wait until ``socket`` can be read (or written, if ``write``): which of the two.

    ``poll``, not ``select``: a daemon's sockets and files may take descriptors past
    ``select``'s limit (1024)."""
    poller = select.poll()
    poller.register(socket, select.POLLIN | (select.POLLOUT if write else 0))
    ready = 0
    for _fd, events in poller.poll():
        if events & _READABLE:
            ready |= _READ
        if events & select.POLLOUT:
            ready |= _WRITE
    return ready


_PLACEHOLDER = re.compile(r"%%|%\(p(\d+)\)s|%s")
_FATAL: Final = ExecStatus.FATAL_ERROR
_ABORTED: Final = ExecStatus.PIPELINE_ABORTED
_SYNC: Final = ExecStatus.PIPELINE_SYNC
_TUPLES: Final = ExecStatus.TUPLES_OK
_BAD: Final = ConnStatus.BAD


def numbered(sql: str) -> tuple[bytes, int]:
    """``sql`` with psycopg's placeholders (``%s``, or ``%(pN)s`` as the connection binds
    them) as the server's ``$N``, and how many parameters it takes."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        text = match.group(0)
        if text == "%%":
            return "%"
        if match.group(1) is not None:
            index = int(match.group(1))
            count = max(count, index)
            return f"${index}"
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql).encode(), count


class Result:
    """What one statement returned: its rows (decoded by psycopg's loaders) and its count."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[tuple[Any, ...]] | None, rowcount: int) -> None:
        #: None if the statement returns no rows (a write without ``RETURNING``).
        self.rows = rows
        self.rowcount = rowcount


_NO_RESULT: Final = Result(None, -1)


#: What the server owes a batch for one message: a statement's result (None), a prepare's (the
#: statement's key: forgotten if refused), or an asked statement's (who is handed it).
_Owed: TypeAlias = tuple[str, tuple[int, ...]] | Callable[[Result], None] | None


class PreparedStatements:
    """The statements one connection has prepared (see the module), and the adapters that
    dump their parameters and load their rows; made empty for each new connection, it
    outlives its batches."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.transformer = Transformer(raw)
        self.texts: dict[str, tuple[bytes, list[PyFormat]]] = {}
        self.names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        # Names are never reused: one the server refused to prepare is forgotten (no
        # statement has it), one it prepared keeps its name for the session's life.
        self.made = 0

    def new_name(self) -> bytes:
        self.made += 1
        return f"ak{self.made}".encode()

    def text(self, sql: str) -> tuple[bytes, list[PyFormat]]:
        """``sql`` as the server reads it, and its parameters' formats (one each)."""
        known = self.texts.get(sql)
        if known is None:
            text, count = numbered(sql)
            known = self.texts[sql] = (text, [PyFormat.AUTO] * count)
        return known


class Batch:
    """libpq's pipeline mode on ``raw``'s connection, entered by the constructor and left by
    :meth:`end` or :meth:`abandon` (see the module)."""

    def __init__(self, raw: psycopg.Connection[Any], prepared: PreparedStatements) -> None:
        self._raw = raw
        self._pgconn = raw.pgconn
        self._prepared = prepared
        self._tx = prepared.transformer
        # What the server owes us, in order: a statement (None) or a prepare (its key,
        # forgotten if the server refuses it).
        self._owed: list[_Owed] = []
        # True from a message's send (or a Sync's) until the batch has noted it (or read
        # its results): left True, what was sent and what is owed may differ.
        self._torn = False
        self._pgconn.enter_pipeline_mode()

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Send ``sql`` with ``params`` (psycopg's placeholders); its result is read by the
        next :meth:`sync`."""
        pgconn = self._pgconn
        text, formats = self._prepared.text(sql)
        if len(params) != len(formats):
            raise psycopg.ProgrammingError(
                f"the statement takes {len(formats)} parameters, {len(params)} were given: {sql!r}"
            )
        if not formats:
            self._torn = True
            pgconn.send_query_params(text, None)
            self._owed.append(None)
            self._torn = False
            pgconn.flush()
            return
        tx = self._tx
        values = tx.dump_sequence(params, formats)  # may refuse a value: nothing sent yet
        types = tuple(tx.types or ())
        key = (sql, types)
        self._torn = True
        name = self._prepared.names.get(key)
        if name is None:
            name = self._prepared.names[key] = self._prepared.new_name()
            pgconn.send_prepare(name, text, param_types=types)
            self._owed.append(key)
        pgconn.send_query_prepared(name, values, param_formats=tx.formats)
        self._owed.append(None)
        self._torn = False
        pgconn.flush()  # the server starts on it while the next one is built

    def ask(self, sql: str, answer: Callable[[Result], None]) -> None:
        """Send ``sql`` (without parameters) and ask the server to send its result now (a
        Flush request): ``answer`` is called with it by the next :meth:`sync` or
        :meth:`answer`, whichever reads it first (never if it failed: that raises)."""
        text, formats = self._prepared.text(sql)
        if formats:
            raise psycopg.ProgrammingError(f"an asked statement takes no parameters: {sql!r}")
        pgconn = self._pgconn
        self._torn = True
        pgconn.send_query_params(text, None)
        self._owed.append(answer)
        self._torn = False
        pgconn.send_flush_request()
        pgconn.flush()

    def answer(self) -> None:
        """Hand every asked statement its result, reading up to the last one (waiting
        for it only if it has not arrived yet); the statements sent after it stay owed to
        the next :meth:`sync`.

        Raises:
            psycopg.Error: as :meth:`sync`, for a statement up to the last asked one.
        """
        owed = self._owed
        asked = [index for index, key in enumerate(owed) if callable(key)]
        if not asked:
            return
        count = asked[-1] + 1
        pgconn = self._pgconn
        self._torn = True
        results = [self._next(pgconn) for _ in range(count)]
        read = owed[:count]
        del owed[:count]
        self._torn = False
        self._settle(read, results)

    def sync(self) -> Result:
        """Wait for every statement sent (one round trip) and return the last one's result.

        Raises:
            psycopg.Error: the first statement that failed since the last sync (its
                SQLSTATE's class), or ``OperationalError`` if the connection dropped.
        """
        pgconn = self._pgconn
        self._torn = True
        owed, self._owed = self._owed, []
        pgconn.pipeline_sync()
        results = self._collect(pgconn)
        self._torn = False
        return self._settle(owed, results)

    def _settle(self, owed: list[_Owed], results: list[Any]) -> Result:
        """Match ``results`` to what was ``owed`` (prepares refused are forgotten, asked
        statements' results handed out) and return the last statement's result.

        Raises:
            psycopg.Error: the first statement among them that failed."""
        error: psycopg.Error | None = None
        last = _NO_RESULT
        for key, result in zip(owed, results, strict=True):
            status = result.status
            if status in (_FATAL, _ABORTED):
                if isinstance(key, tuple):
                    self._prepared.names.pop(key, None)
                if error is None:
                    error = self._error(result)
                    if isinstance(error, psycopg.errors.InvalidSqlStatementName):
                        # The session lost its prepared statements (a DEALLOCATE ALL
                        # sent by someone else): prepare each again at its next use.
                        self._prepared.names.clear()
                continue
            if isinstance(key, tuple):  # a prepare's result: nothing to hand out
                continue
            last = self._result(result)
            if key is not None:  # an asked statement's
                key(last)
        if error is not None:
            raise error
        return last

    @staticmethod
    def _next(pgconn: Any) -> Any:
        """The next result (a statement's, or a Sync's), waiting on the socket only when
        libpq has nothing ready; the empty result ending each statement's is skipped.

        Raises:
            psycopg.OperationalError: the connection dropped."""
        socket = pgconn.socket
        while True:
            if pgconn.is_busy():
                _ready(socket, write=False)
                pgconn.consume_input()
                continue
            result = pgconn.get_result()
            if result is not None:
                return result
            if pgconn.status == _BAD:  # libpq has nothing more to give: it is gone
                message = pgconn.error_message.decode(errors="replace").strip()
                raise psycopg.OperationalError(f"the connection was lost: {message}")

    @staticmethod
    def _collect(pgconn: Any) -> list[Any]:
        """Flush what was sent and read every statement's result up to the Sync's (one
        each, in pipeline mode), waiting on the socket only when libpq has nothing ready.

        Raises:
            psycopg.OperationalError: the connection dropped."""
        socket = pgconn.socket
        while pgconn.flush():  # the output buffer is full: wait until it drains
            ready = _ready(socket, write=True)
            if ready & _READ:
                pgconn.consume_input()
        results: list[Any] = []
        while (result := Batch._next(pgconn)).status != _SYNC:
            results.append(result)
        return results

    def end(self) -> Result:
        """Wait for every statement sent, leave pipeline mode, and return the last one's
        result; raises as :meth:`sync` (pipeline mode is left either way)."""
        try:
            return self.sync()
        finally:
            self._leave()

    def abandon(self) -> None:
        """Leave pipeline mode after a failure: what was sent runs (the caller rolls it
        back); its errors, and a dropped connection's, are ignored here. A torn batch (see
        the module) closes the connection instead: its results cannot be lined up."""
        if self._torn:
            self._owed = []
            self._raw.close()
            return
        if self._owed:
            with contextlib.suppress(psycopg.Error):
                self.sync()
        self._owed = []
        self._leave()

    def _leave(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._pgconn.exit_pipeline_mode()

    def _result(self, result: Any) -> Result:
        rowcount = result.command_tuples
        count = -1 if rowcount is None else rowcount
        if result.status != _TUPLES:
            return Result(None, count)
        tx = self._tx
        tx.set_pgresult(result)
        return Result(tx.load_rows(0, result.ntuples, tuple), count)

    def _error(self, result: Any) -> psycopg.Error:
        if result.status == _ABORTED:
            return psycopg.errors.PipelineAborted("pipeline aborted")
        return psycopg.errors.error_from_result(result, encoding=self._raw.info.encoding)
