"""An apsw VFS that loses power: every write since a file's last ``xSync`` is volatile.

:class:`PowerLossVFS` wraps SQLite's default VFS. Every file it opens passes its reads and
writes through to the real file (SQLite reads back what it wrote, as from an OS page cache),
and for the files that matter after a crash (the database, its WAL, a rollback journal) a
:class:`PowerGrid` also keeps a model of the platter: the *durable image* (the content as of
the file's last ``xSync``) and the *pending* writes and truncations since. ``xSync`` on any
handle of a file makes all of that file's pending operations durable, as ``fsync`` does.

At a seeded operation (counted over the tracked files' ``xWrite``, ``xSync`` and
``xTruncate``) the power is cut: that operation does not happen, each file's pending
operations survive according to the :data:`CutMode`, and every later read, write, sync,
truncate or delete raises ``apsw.IOError``, so nothing can be acknowledged after the cut.
:meth:`PowerGrid.surviving` is what a reboot finds.

The WAL index (``-shm``) is not modelled: apsw hands shared-memory calls straight to the
default VFS, and after a crash SQLite never trusts the index: the first connection to open
the database rebuilds it from the WAL (checksums and salts decide which frames count). The
image is therefore checked in a fresh directory, without a ``-shm`` file, by a connection on
the default VFS (reopening the original path in this process would share the dead
connections' in-memory index and locks).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import apsw

CutMode: TypeAlias = Literal["keep", "drop", "torn", "subset"]
"""What becomes of unsynced operations: ``keep`` all (a process crash), ``drop`` all,
``torn`` (they reach the platter in order until the power fails inside one, which keeps only
a sector-aligned prefix), ``subset`` (each independently, any of them torn)."""
CUT_MODES: tuple[CutMode, ...] = ("keep", "drop", "torn", "subset")
SECTOR_BYTES = 512
_TRACKED = apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_WAL | apsw.SQLITE_OPEN_MAIN_JOURNAL


@dataclass(frozen=True)
class _Write:
    offset: int
    data: bytes


@dataclass(frozen=True)
class _Truncate:
    size: int


_Operation: TypeAlias = _Write | _Truncate


@dataclass
class FileImage:
    """One file as the platter holds it, and what is still only in the volatile cache."""

    durable: bytearray = field(default_factory=bytearray)
    pending: list[_Operation] = field(default_factory=list)

    def sync(self) -> None:
        """Make every pending operation durable (what ``xSync`` does on a truthful disk)."""
        for operation in self.pending:
            _apply(self.durable, operation)
        self.pending.clear()

    def survive(self, mode: CutMode, rng: random.Random) -> bytes:
        """The content after a cut in ``mode``."""
        image = bytearray(self.durable)
        pending = self.pending
        if mode == "keep":
            for operation in pending:
                _apply(image, operation)
        elif mode == "torn":
            failing = rng.randint(0, len(pending))
            for operation in pending[:failing]:
                _apply(image, operation)
            if failing < len(pending):
                _apply(image, _torn(pending[failing], rng))
        elif mode == "subset":
            for operation in pending:
                if rng.random() < 0.5:
                    _apply(image, _torn(operation, rng) if rng.random() < 0.25 else operation)
        return bytes(image)


def _apply(image: bytearray, operation: _Operation | None) -> None:
    if isinstance(operation, _Truncate):
        del image[operation.size :]
    elif isinstance(operation, _Write):
        end = operation.offset + len(operation.data)
        if len(image) < end:
            image.extend(bytes(end - len(image)))  # a hole reads as zeros
        image[operation.offset : end] = operation.data


def _torn(operation: _Operation, rng: random.Random) -> _Operation | None:
    """The part of ``operation`` that reached the platter before the power failed: a write
    keeps its bytes up to a sector boundary inside it (possibly none); a truncation is
    atomic, so it either happened or not."""
    if isinstance(operation, _Truncate):
        return operation if rng.random() < 0.5 else None
    start, end = operation.offset, operation.offset + len(operation.data)
    first = (start // SECTOR_BYTES + 1) * SECTOR_BYTES  # the first boundary after ``start``
    boundaries = [start, *range(first, end, SECTOR_BYTES)]
    cut = rng.choice(boundaries)
    return _Write(start, operation.data[: cut - start]) if cut > start else None


class PowerOffError(apsw.IOError):
    """The power is off: the file cannot be used any more."""


class PowerGrid:
    """The shared state of every file a :class:`PowerLossVFS` opened: the images, the
    operation counter, and the cut.

    Args:
        seed: Seeds the per-file choices of the cut (same seed, same survivors).
        mode: What happens to unsynced operations at the cut.
        lying_sync: A deliberately broken disk (for the campaign's mutant): ``xSync``
            reports success but makes nothing durable.
    """

    def __init__(self, *, seed: int, mode: CutMode, lying_sync: bool = False) -> None:
        self.seed = seed
        self.mode = mode
        self.lying_sync = lying_sync
        self.cut_at: int | None = None
        self.operations = 0
        self.cut_operation: str | None = None  # what the cut interrupted
        self._lock = threading.RLock()
        self._images: dict[str, FileImage] = {}
        self._surviving: dict[str, bytes] | None = None

    @property
    def dead(self) -> bool:
        """True once the power was cut: every later file operation raises :class:`PowerOffError`."""
        return self._surviving is not None

    def arm(self, cut_at: int) -> None:
        """Cut the power at the ``cut_at``-th operation from now (1-based)."""
        with self._lock:
            self.cut_at = self.operations + cut_at

    def cut(self, interrupted: str = "nothing (cut between operations)") -> None:
        """Cut the power now (idempotent)."""
        with self._lock:
            if self._surviving is not None:
                return
            self.cut_operation = interrupted
            self._surviving = {
                path: image.survive(self.mode, random.Random(f"{self.seed}:{Path(path).name}"))
                for path, image in sorted(self._images.items())
            }

    def surviving(self) -> dict[str, bytes]:
        """Each tracked file's content after the cut (path -> bytes)."""
        with self._lock:
            if self._surviving is None:
                raise RuntimeError("the power was never cut")
            return dict(self._surviving)

    def track(self, path: str) -> None:
        """Start modelling ``path``: its current bytes on disk become its durable image."""
        with self._lock:
            if path not in self._images:
                real = Path(path)
                content = real.read_bytes() if real.exists() else b""
                self._images[path] = FileImage(durable=bytearray(content))

    def check_alive(self) -> None:
        """Refuse to go on once the power is off.

        Raises:
            PowerOffError: the power was cut.
        """
        if self._surviving is not None:
            raise PowerOffError("the power is off")

    def operate(self, path: str | None, operation: _Operation | None, perform: Any) -> Any:
        """Count and model one write (``operation``), sync (None) or untracked call."""
        with self._lock:
            self.check_alive()
            image = self._images.get(path) if path is not None else None
            if image is None:
                return perform()
            self.operations += 1
            if self.operations == self.cut_at:
                kind = "sync" if operation is None else type(operation).__name__.strip("_")
                self.cut(f"{kind.lower()} #{self.operations} of {Path(path or '').name}")
                self.check_alive()
            if operation is not None:
                image.pending.append(operation)
                return perform()
            if self.lying_sync and self.cut_at is not None:
                return None  # the mutant (once armed): acknowledged, not durable
            result = perform()
            image.sync()
            return result

    def forget(self, path: str) -> None:
        """Stop modelling ``path`` (it was deleted).

        Raises:
            PowerOffError: the power was cut.
        """
        with self._lock:
            self.check_alive()
            self._images.pop(path, None)


class PowerLossFile(apsw.VFSFile):
    """A file opened through :class:`PowerLossVFS`: every read, write and sync goes through its
    :class:`PowerGrid`, which counts it, models it and refuses it once the power is off.
    """

    def __init__(self, name: Any, flags: list[int], grid: PowerGrid, path: str | None) -> None:
        super().__init__("", name, flags)
        self._grid = grid
        self._path = path

    def xRead(self, amount: int, offset: int) -> bytes:  # noqa: N802  # apsw's name
        self._grid.check_alive()
        data: bytes = super().xRead(amount, offset)
        return data

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802  # apsw's name
        write = _Write(offset, bytes(data))
        self._grid.operate(
            self._path, write, lambda: super(PowerLossFile, self).xWrite(data, offset)
        )

    def xTruncate(self, newsize: int) -> None:  # noqa: N802  # apsw's name
        truncate = _Truncate(newsize)
        self._grid.operate(
            self._path, truncate, lambda: super(PowerLossFile, self).xTruncate(newsize)
        )

    def xSync(self, flags: int) -> None:  # noqa: N802  # apsw's name
        self._grid.operate(self._path, None, lambda: super(PowerLossFile, self).xSync(flags))


class PowerLossVFS(apsw.VFS):
    """The default VFS with a :class:`PowerGrid` between SQLite and the platter.

    Register it under a unique ``name``, open the store with ``vfs=name``, and
    :meth:`unregister` it once every connection through it is closed.
    """

    def __init__(self, name: str, grid: PowerGrid) -> None:
        self.name = name
        self.grid = grid
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> PowerLossFile:  # noqa: N802  # apsw's name
        self.grid.check_alive()
        path: str | None = None
        if name is not None and flags[0] & _TRACKED:
            path = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
            self.grid.track(path)
        return PowerLossFile(name, flags, self.grid, path)

    def xDelete(self, name: str, syncdir: bool) -> None:  # noqa: N802  # apsw's name
        # A deletion counts as durable at once (SQLite syncs the directory where it must).
        self.grid.forget(name)
        super().xDelete(name, syncdir)


__all__ = [
    "CUT_MODES",
    "SECTOR_BYTES",
    "CutMode",
    "FileImage",
    "PowerGrid",
    "PowerLossFile",
    "PowerLossVFS",
    "PowerOffError",
]
