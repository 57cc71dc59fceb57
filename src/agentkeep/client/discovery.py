"""Does a daemon own this home? ``daemon.json`` plus the store lock's holder.

A daemon writes ``<home>/daemon.json`` (``pid``, ``url``) once it listens and removes it on
exit; a SIGKILLed one leaves it behind. The store lock file holds the pid of the process that
holds the lock (cleared on a clean release, left behind by a SIGKILL, but then that pid is
dead). So a daemon owns the home exactly when the file names a live pid that is also the
lock's holder. The lock itself is never probed with ``flock``: a probe could, for an instant,
make a daemon that is starting fail to take it.

``daemon.json`` tells the CLI where to send its token, so it is trusted only when it and the
home are owned by the current user and writable by nobody else: otherwise another local
user could point the CLI (and its token) at a listener of their own. An untrusted file is
refused with the reason (``DaemonLookup.untrusted``), never silently used.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from agentkeep.agent_system.surfaces import LOCK_FILE
from agentkeep.server import DAEMON_FILE, TOKEN_ENV, TOKEN_FILE


@dataclass(frozen=True, kw_only=True)
class Daemon:
    """The daemon that owns a home: its pid and base URL."""

    pid: int
    url: str


@dataclass(frozen=True, kw_only=True)
class DaemonLookup:
    """What :func:`find_daemon` found: the daemon, or why ``daemon.json`` was not used."""

    daemon: Daemon | None
    stale: str | None = None  # set when daemon.json exists but names no owning daemon
    untrusted: bool = False  # ``stale`` says why daemon.json was refused as unsafe to follow


def _distrust(path: Path) -> str | None:
    """Why ``path`` may not be trusted (owned by another user, writable by others), or None."""
    try:
        found = path.lstat()
    except OSError as error:
        return f"{path} cannot be examined ({error.strerror})"
    if stat.S_ISLNK(found.st_mode):
        return f"{path} is a symbolic link"
    if found.st_uid != os.geteuid():
        return f"{path} is owned by uid {found.st_uid}, not by this user (uid {os.geteuid()})"
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by other users (mode {stat.filemode(found.st_mode)})"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def _lock_holder(home: Path) -> int | None:
    try:
        text = (home / LOCK_FILE).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def find_daemon(home: Path) -> DaemonLookup:
    """The daemon owning ``home``, if one does (module docstring)."""
    path = home / DAEMON_FILE
    if not os.path.lexists(path):
        return DaemonLookup(daemon=None)
    for trusted in (home, path):
        reason = _distrust(trusted)
        if reason is not None:
            return DaemonLookup(
                daemon=None, stale=f"{path} is not trusted: {reason}", untrusted=True
            )
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return DaemonLookup(daemon=None)
    except OSError as error:
        return DaemonLookup(daemon=None, stale=f"{path} cannot be read ({error.strerror})")
    try:
        value = json.loads(raw)
        pid, url = value["pid"], value["url"]
        if not isinstance(pid, int) or not isinstance(url, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return DaemonLookup(daemon=None, stale=f"{path} is not a daemon file (pid, url)")
    if not _alive(pid):
        return DaemonLookup(daemon=None, stale=f"{path} names process {pid}, which is gone")
    holder = _lock_holder(home)
    if holder != pid:
        return DaemonLookup(
            daemon=None,
            stale=f"{path} names process {pid}, which does not hold the store lock",
        )
    return DaemonLookup(daemon=Daemon(pid=pid, url=url.rstrip("/")))


def client_token(home: Path, env: dict[str, str] | None = None) -> str | None:
    """The token a client sends: ``$AGENTKEEP_DAEMON_TOKEN``, else ``<home>/daemon.token``,
    else None (a daemon started with ``--no-auth``). A daemon started with ``--token-file``
    elsewhere is reached by setting the environment variable."""
    environ = os.environ if env is None else env
    if environ.get(TOKEN_ENV):
        return environ[TOKEN_ENV].strip()
    try:
        return (home / TOKEN_FILE).read_text(encoding="ascii").strip() or None
    except OSError:
        return None
