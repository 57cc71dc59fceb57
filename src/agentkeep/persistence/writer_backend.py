"""What the store writer's actor asks of the part that differs per database.

:class:`~agentkeep.persistence.writer.StoreWriter` owns one :class:`WriterBackend`
(:class:`~agentkeep.persistence.sqlite_writer.SqliteWriterBackend`,
:class:`~agentkeep.persistence.postgres.writer.PostgresWriterBackend`); a backend raises
:class:`RefusedAtCommitError` or :class:`StopForGood` to tell the actor what a failure means,
and names an unknown COMMIT outcome with :func:`outcome_unknown`.
"""

from __future__ import annotations

from typing import Protocol

from agentkeep.errors import CommitOutcomeUnknownError, StoreError
from agentkeep.persistence.codec import Statements

__all__ = ["RefusedAtCommitError", "StopForGood", "WriterBackend", "outcome_unknown"]


class RefusedAtCommitError(Exception):
    """Raised by a backend's COMMIT when a lone item's own write failed in the round trip
    its COMMIT was sent in (PostgreSQL's batch): the server skipped the COMMIT, so the
    outcome is known (nothing written). The item fails with ``refusal``, as if the write
    had failed before the COMMIT: not a commit error."""

    def __init__(self, refusal: BaseException) -> None:
        super().__init__(f"not committed: {refusal!r}")
        self.refusal = refusal


class StopForGood(Exception):  # noqa: N818 - an instruction to the actor, not an error
    """Raised by a backend's ``begin`` or ``commit`` before anything was committed: the
    store must stop taking writes for good (its file was replaced, another process owns it).
    The actor rolls back, closes the inbox with ``error`` and answers every caller with it."""

    def __init__(self, error: StoreError) -> None:
        super().__init__(str(error))
        self.error = error


class WriterBackend(Protocol):
    """The part of the writer that differs per database; the actor owns one.

    Every method runs on the writer's thread. A method that sends statements counts each
    as a store operation (fault points) through :attr:`statements`.
    """

    @property
    def statements(self) -> Statements:
        """The executor work items run on (a backend may replace it: a new connection)."""
        ...

    def begin(self) -> None:
        """Open the group's transaction. Raises :class:`StopForGood` if the store must stop;
        anything else it raises means nothing ran (the group is refused)."""
        ...

    def begin_item(self, *, alone: bool) -> None:
        """Start a work item: its ``SAVEPOINT``, none for a group's lone item."""
        ...

    def end_item(self, *, alone: bool) -> None:
        """End a work item whose work returned: its ``RELEASE`` (a lone item: what its
        ``RELEASE`` would do). Raises what the item's statements raised."""
        ...

    def commit(self) -> None:
        """COMMIT the group. Returns once it is durable. Raises
        :class:`RefusedAtCommitError` or :class:`StopForGood` (nothing written, a known
        outcome), or what COMMIT raised (outcome unknown: see :meth:`commit_failed`)."""
        ...

    def refused(self, error: BaseException) -> BaseException:
        """``error``, raised before COMMIT, as the caller hears it (nothing was written)."""
        ...

    def commit_failed(self, cause: BaseException) -> StoreError:
        """A new error for one caller whose group's COMMIT raised ``cause`` (its
        ``__cause__`` is set to ``cause`` unless the backend set one)."""
        ...

    def roll_back_item(self) -> bool:
        """Undo the current item's savepoint; False if the outer transaction is gone."""
        ...

    def rollback(self) -> None:
        """Roll back whatever is open; never raises (cleanup after a fault must run)."""
        ...

    def between_groups(self) -> None:
        """The inbox was drained: upkeep outside any transaction (SQLite checkpoints)."""
        ...

    def close(self, *, clean: bool) -> None:
        """Roll back and close the connection; ``clean``: a stop, not a failure."""
        ...


def outcome_unknown(cause: BaseException) -> CommitOutcomeUnknownError:
    """The error a caller gets when COMMIT raised ``cause`` and nobody can tell more."""
    return CommitOutcomeUnknownError(
        f"COMMIT reported {cause!r}; the transaction may or may not be durable. "
        "Re-read by identity before acting on it."
    )
