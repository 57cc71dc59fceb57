"""What the file system under the store refused: a full disk, a read-only mount, a lost file.

These are not the writer's own failures: a refused write answers its callers with an error
that says why (:class:`~agentkeep.errors.StoreNotWritableError`), and the writer stays up, so
writes resume by themselves once the file system takes them again.
"""

from __future__ import annotations

import errno
import os

import apsw

from agentkeep.errors import StoreNotWritableError

__all__ = ["REFUSALS", "disk_refusal", "file_identity", "refused_by_disk"]

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_refusal(connection: apsw.Connection, error: BaseException) -> str | None:
    """``disk_full`` / ``read_only`` if ``error`` is the file system refusing a write."""
    if isinstance(error, apsw.FullError):
        return "disk_full"
    if isinstance(error, apsw.ReadOnlyError):
        return "read_only"
    if isinstance(error, apsw.IOError):
        try:
            code = connection.system_errno
        except apsw.Error:
            return None
        if code in _FULL_ERRNOS:
            return "disk_full"
        if code == errno.EROFS:
            return "read_only"
    return None


REFUSALS = {
    "disk_full": "the disk holding the store is full",
    "read_only": "the file system holding the store is read-only",
}


def refused_by_disk(connection: apsw.Connection, error: BaseException) -> BaseException:
    """``error`` as :class:`StoreNotWritableError` when the file system refused the write."""
    reason = disk_refusal(connection, error)
    if reason is None:
        return error
    refused = StoreNotWritableError(
        f"The write was not made: {REFUSALS[reason]} ({error}). Writes resume by "
        "themselves once it accepts writes again; retry then.",
        reason=reason,
    )
    refused.__cause__ = error
    return refused


def file_identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``, None if it does not exist."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)
