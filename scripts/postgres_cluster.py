"""A throwaway PostgreSQL cluster for the tests and the demo (the standard library only).

    scripts/postgres-cluster start DIR    initdb into DIR/data (once), start, print the URL
    scripts/postgres-cluster stop DIR     stop it: fast, then immediate, then SIGKILL (bounded);
                                          --mode immediate starts with immediate (a crash)
    scripts/postgres-cluster status DIR   print "running URL" (exit 0), "stopped" (3), or
                                          "no cluster" (4)
    scripts/postgres-cluster install      find the server binaries, installing the package
                                          when missing; print their directory

What ``start`` guarantees:

- The server binaries come from ``AGENTKEEP_PG_BINDIR`` when set (that directory or an error,
  never an install), else ``pg_config --bindir``, ``/usr/lib/postgresql/<newest>/bin``, then
  ``PATH``. When none has them, the Debian package ``postgresql`` is installed with apt-get
  (``apt-get update`` first) when running as root, unless ``--no-install``; otherwise it fails
  with a message naming the package.
- The cluster belongs to an unprivileged user: ``postgres`` when running as root (the server
  refuses to run as root; DIR is chowned to it and must be reachable by it), the current user
  otherwise. Its superuser is ``postgres``, with trust authentication: it listens only on
  127.0.0.1 (a free port) and on a Unix socket in DIR, and is meant to be thrown away.
- ``fsync`` and ``synchronous_commit`` stay on: the tests exercise the same durability the
  store promises.
- It returns only once the server accepts connections (``pg_ctl -w``, then ``pg_isready``,
  both bounded), prints ``postgresql://postgres@127.0.0.1:PORT/postgres`` and writes it to
  DIR/url. Starting a running cluster prints its URL again; a failed start leaves no server
  running (the server log, DIR/server.log, is kept and its tail quoted in the error).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

PACKAGE = "postgresql"
BINARIES = ("initdb", "pg_ctl", "postgres", "pg_isready")
BINDIR_VARIABLE = "AGENTKEEP_PG_BINDIR"
SUPERUSER = "postgres"
SERVICE_USER = "postgres"
CONF = "agentkeep.conf"
# The longest Unix socket path the kernel takes is 107 bytes; ".s.PGSQL.65535" is 14 of them.
SOCKET_DIR_LIMIT = 107 - len("/.s.PGSQL.65535")
START_ATTEMPTS = 4


class ClusterError(Exception):
    """A cluster could not be found, installed, started or stopped; the message says why."""


# -- finding (and installing) the server ------------------------------------------------------


def has_binaries(directory: Path) -> bool:
    """Whether ``directory`` holds every server binary this script runs."""
    return all(os.access(directory / name, os.X_OK) for name in BINARIES)


def candidate_bindirs(
    env: Mapping[str, str], roots: tuple[str, ...] = ("/usr/lib/postgresql",)
) -> Iterator[Path]:
    """Where the server binaries may be, in the order they are tried (explicit setting aside)."""
    pg_config = shutil.which("pg_config", path=env.get("PATH", ""))
    if pg_config is not None:
        done = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode == 0 and done.stdout.strip():
            yield Path(done.stdout.strip())
    for root in roots:
        versions = glob.glob(os.path.join(root, "*", "bin"))
        yield from sorted((Path(found) for found in versions), key=_version_key, reverse=True)
    initdb = shutil.which("initdb", path=env.get("PATH", ""))
    if initdb is not None:
        yield Path(initdb).resolve().parent


def _version_key(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name)) or (0,)


def find_bindir(
    env: Mapping[str, str] | None = None, roots: tuple[str, ...] = ("/usr/lib/postgresql",)
) -> Path | None:
    """The first directory holding the server binaries, or None when there is none.

    ``AGENTKEEP_PG_BINDIR`` (in ``env``), when set, is the only place looked at: a wrong
    setting is an error to report, not a reason to look elsewhere or install anything.
    """
    env = os.environ if env is None else env
    explicit = env.get(BINDIR_VARIABLE)
    if explicit:
        path = Path(explicit)
        if not has_binaries(path):
            missing = [name for name in BINARIES if not os.access(path / name, os.X_OK)]
            raise ClusterError(
                f"{BINDIR_VARIABLE}={explicit} does not hold the PostgreSQL server binaries "
                f"(missing: {', '.join(missing)})"
            )
        return path
    for candidate in candidate_bindirs(env, roots):
        if has_binaries(candidate):
            return candidate
    return None


def install_server_package(
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> None:
    """Install the Debian package ``postgresql`` (``apt-get update`` first); root only."""
    if os.geteuid() != 0:
        raise ClusterError(
            f"the PostgreSQL server is not installed and only root can install it: run "
            f"`sudo apt-get install {PACKAGE}` (or set {BINDIR_VARIABLE} to a directory "
            f"holding {', '.join(BINARIES)})"
        )
    if shutil.which("apt-get") is None:
        raise ClusterError(
            f"the PostgreSQL server is not installed and there is no apt-get to install the "
            f"Debian package `{PACKAGE}`: install PostgreSQL and put its bin directory on PATH "
            f"(or set {BINDIR_VARIABLE})"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE],
    ):
        print(f"postgres-cluster: {' '.join(command)}", file=sys.stderr)
        done = run(command, env=env, text=True, check=False)
        if done.returncode != 0:
            raise ClusterError(f"`{' '.join(command)}` failed (exit {done.returncode})")


def ensure_bindir(
    find: Callable[[], Path | None] = find_bindir,
    install: Callable[[], None] = install_server_package,
    allow_install: bool = True,
) -> Path:
    """The server's bin directory; installs the package first when it is missing."""
    found = find()
    if found is not None:
        return found
    if not allow_install:
        raise ClusterError(
            f"the PostgreSQL server binaries ({', '.join(BINARIES)}) were found neither by "
            f"`pg_config --bindir`, nor in /usr/lib/postgresql/*/bin, nor on PATH; install the "
            f"Debian package `{PACKAGE}` or set {BINDIR_VARIABLE}"
        )
    install()
    found = find()
    if found is None:
        raise ClusterError(
            f"the package `{PACKAGE}` was installed but its server binaries are still not found"
        )
    return found


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    """One cluster: DIR/data (PGDATA), DIR/server.log, DIR/url, the socket in DIR."""

    def __init__(self, directory: Path, bindir: Path | None = None) -> None:
        self.directory = directory.resolve()
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.url_file = self.directory / "url"
        self._bindir = bindir
        self.user = _owner()

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = ensure_bindir(allow_install=False)
        return self._bindir

    # -- running things as the cluster's owner

    def _run(
        self, binary: str, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a server binary as the cluster's owner, in DIR, with its output captured."""
        return self._as_owner([str(self.bindir / binary), *args], timeout=timeout)

    def _as_owner(
        self, argv: list[str], timeout: float = 120, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the cluster's owner (``postgres`` when we are root)."""
        assert self.user is not None
        root = os.geteuid() == 0
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            "HOME": self.user.pw_dir,
        }
        try:
            return subprocess.run(
                argv,
                cwd=self.directory if cwd is None else cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                user=self.user.pw_uid if root else None,
                group=self.user.pw_gid if root else None,
                extra_groups=[] if root else None,
            )
        except subprocess.TimeoutExpired as expired:
            name = Path(argv[0]).name
            raise ClusterError(f"`{name}` did not finish within {timeout:.0f} s") from expired

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0 and self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    # -- state

    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").is_file()

    def running(self) -> bool:
        if not self.initialized():
            return False
        return self._run("pg_ctl", "status", "-D", str(self.data), timeout=30).returncode == 0

    def port(self) -> int | None:
        conf = self.data / CONF
        if not conf.is_file():
            return None
        match = re.search(r"^port = (\d+)$", conf.read_text(), re.MULTILINE)
        return int(match.group(1)) if match else None

    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port()}/postgres"

    # -- start

    def start(self, timeout: float = 60) -> str:
        """Initialize (once) and start the cluster; its URL once it accepts connections."""
        if self.user is None:
            raise ClusterError(
                f"running as root needs the unprivileged user `{SERVICE_USER}` to own the "
                f"cluster (the Debian package `{PACKAGE}` creates it): "
                f"useradd --system --user-group {SERVICE_USER}"
            )
        if len(str(self.directory)) > SOCKET_DIR_LIMIT:
            raise ClusterError(
                f"{self.directory} is too long for a Unix socket path "
                f"(at most {SOCKET_DIR_LIMIT} characters): choose a shorter directory"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self._own(self.directory)
        self._check_reachable()
        if self.running():
            return self._publish()
        if not self.initialized():
            self._initdb()
        last = ""
        previous = self.port()  # a restart keeps its URL unless another process took the port
        for attempt in range(START_ATTEMPTS):
            self._configure(previous if attempt == 0 and previous else _free_port())
            try:
                self._start_server(timeout)
                return self._publish()
            except ClusterError as error:
                self._stop_quietly()
                last = str(error)
                if "Address already in use" not in self._log_tail():
                    raise
        raise ClusterError(last)

    def _check_reachable(self) -> None:
        if os.geteuid() != 0:
            return
        probe = self._as_owner(["test", "-w", str(self.directory)], timeout=30, cwd=Path("/"))
        if probe.returncode != 0:
            raise ClusterError(
                f"{self.directory} is not writable by the user `{SERVICE_USER}` that runs the "
                f"server (is a parent directory not searchable by others?): choose a directory "
                f"under /tmp, such as one `mktemp -d` makes"
            )

    def _initdb(self) -> None:
        done = self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        )
        if done.returncode != 0:
            raise ClusterError(f"initdb failed (exit {done.returncode}):\n{done.stderr.strip()}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\n# the settings of scripts/postgres-cluster\ninclude '{CONF}'\n")

    def _configure(self, port: int) -> None:
        conf = self.data / CONF
        conf.write_text(
            "listen_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{self.directory}'\n"
            "fsync = on\n"
            "synchronous_commit = on\n"
            "max_connections = 200\n"
        )
        self._own(conf)

    def _start_server(self, timeout: float) -> None:
        done = self._run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(int(timeout)),
            timeout=timeout + 30,
        )
        if done.returncode != 0:
            raise ClusterError(
                f"the server did not start (pg_ctl exit {done.returncode}): "
                f"{done.stdout.strip()} {done.stderr.strip()}\n{self._log_tail()}"
            )
        deadline = time.monotonic() + timeout
        while True:
            ready = self._run(
                "pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port()), "-t", "5"
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the server started but refused connections for {timeout:.0f} s\n"
                    f"{self._log_tail()}"
                )
            time.sleep(0.1)  # polling an external process's readiness, bounded above

    def _publish(self) -> str:
        url = self.url()
        self.url_file.write_text(url + "\n")
        return url

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "server log (last lines):\n" + "\n".join(text.splitlines()[-lines:])

    # -- stop

    def stop(self, timeout: float = 30, mode: str = "fast") -> bool:
        """Stop the cluster if it runs: ``mode`` (fast, else immediate: a crash the server
        recovers from at its next start), then immediate, then SIGKILL. Whether it ran."""
        if self.user is None or not self.running():
            return False
        for each in dict.fromkeys((mode, "immediate")):
            self._run(
                "pg_ctl", "stop", "-D", str(self.data), "-m", each, "-w", "-t",
                str(int(timeout)), timeout=timeout + 30,
            )  # fmt: skip
            if not self.running():
                return True
        pid = self._postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # waiting for a killed process to go away, bounded above
        if self.running() or (pid is not None and _alive(pid)):
            raise ClusterError(f"the server of {self.directory} could not be stopped")
        return True

    def _stop_quietly(self) -> None:
        with contextlib.suppress(ClusterError, OSError):
            self.stop()

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None


def _owner() -> pwd.struct_passwd | None:
    """Who runs the server: ``postgres`` when we are root (None if there is no such user),
    else the current user."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the command line -------------------------------------------------------------------------


def start(directory: Path, *, allow_install: bool = True, timeout: float = 60) -> str:
    """Start (initializing first) the cluster in ``directory``; its URL."""
    cluster = Cluster(directory, ensure_bindir(allow_install=allow_install))
    return cluster.start(timeout=timeout)


def stop(directory: Path, *, timeout: float = 30, mode: str = "fast") -> bool:
    """Stop the cluster in ``directory`` if one runs; whether one ran."""
    cluster = Cluster(directory)
    if not cluster.initialized():
        return False
    return cluster.stop(timeout=timeout, mode=mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="postgres-cluster", description="A throwaway PostgreSQL cluster in a directory."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    started = commands.add_parser("start", help="initdb (once), start, print the URL")
    started.add_argument("directory", type=Path)
    started.add_argument(
        "--no-install", action="store_true", help="fail instead of installing the package"
    )
    started.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (60)")
    stopped = commands.add_parser("stop", help="stop it (fast, then immediate)")
    stopped.add_argument("directory", type=Path)
    stopped.add_argument(
        "--mode",
        choices=("fast", "immediate"),
        default="fast",
        help="immediate: stop like a crash (the next start recovers from the WAL)",
    )
    stopped.add_argument("--timeout", type=float, default=30.0, help="seconds per mode (30)")
    status = commands.add_parser("status", help="running URL (0), stopped (3), no cluster (4)")
    status.add_argument("directory", type=Path)
    commands.add_parser("install", help="install the server package if missing; print its bindir")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            print(ensure_bindir())
            return 0
        if args.command == "start":
            print(start(args.directory, allow_install=not args.no_install, timeout=args.timeout))
            return 0
        if args.command == "stop":
            ran = stop(args.directory, timeout=args.timeout, mode=args.mode)
            print("stopped" if ran else "not running", file=sys.stderr)
            return 0
        cluster = Cluster(args.directory)
        if not cluster.initialized():
            print("no cluster")
            return 4
        if cluster.running():
            print(f"running {cluster.url()}")
            return 0
        print("stopped")
        return 3
    except ClusterError as error:
        print(f"postgres-cluster: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
