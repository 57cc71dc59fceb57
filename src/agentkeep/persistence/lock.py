"""The single-owner lock: a kernel-held ``flock`` on ``agents.db.lock``.

The kernel drops an ``flock`` when the last descriptor of the open file description
closes, which includes process death by ``SIGKILL``: there is never a stale lock to clean
up. ``flock`` locks belong to open file descriptions, not processes, so a second open of the
same store inside this process conflicts just like one from another process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agentkeep.errors import StoreLockedError


class StoreLock:
    """An exclusive lock on one store, held until :meth:`release` (or process death)."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self._path = path
        self._descriptor: int | None = descriptor

    @classmethod
    def acquire(cls, path: str | Path, *, store_path: str | Path | None = None) -> StoreLock:
        """Take the lock at ``path`` without waiting, and write this process's pid in it.

        Args:
            path: The lock file (created if missing).
            store_path: The path named in the error (defaults to ``path``).

        Raises:
            StoreLockedError: another owner (another process, or another open in this one)
                holds it; ``holder_pid`` is the pid written by that owner, if readable.
        """
        lock_path = Path(path)
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(descriptor)
            os.close(descriptor)
            raise StoreLockedError(str(store_path or lock_path), holder) from None
        except BaseException:
            os.close(descriptor)
            raise
        # Only the holder writes the file, and only while holding the lock, so a refused
        # opener reads either this pid or (in the instant before it is written) nothing.
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        return cls(lock_path, descriptor)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        """Release the lock (idempotent)."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            # Clear the pid while still holding the lock, so no new owner's pid is erased.
            os.ftruncate(descriptor, 0)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
        finally:
            os.close(descriptor)


def _read_pid(descriptor: int) -> int | None:
    try:
        text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
