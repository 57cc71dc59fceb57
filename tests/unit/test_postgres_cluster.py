"""``scripts/postgres-cluster`` starts a real, throwaway PostgreSQL cluster (as ``postgres``
when run as root, fsync and synchronous_commit on, 127.0.0.1 and a Unix socket), stops it,
restarts it with its data, leaves no server behind a failed start, and says clearly what is
missing when the server binaries are; the suite's backend plugin (``tests/postgres_server.py``)
stops its session cluster even when a test failed, gives each test its own schema and skips
what the selected pass cannot run, with the reason."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from tests.postgres_server import cluster_script, fresh_schema, without_schema

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "postgres-cluster"
script = cluster_script()
ROOT = os.geteuid() == 0


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


@pytest.fixture
def cluster_dir() -> Iterator[Path]:
    """A directory for one cluster under the temporary directory (reachable by ``postgres``,
    unlike pytest's own, which is private to root); the finalizer stops whatever server runs
    there and removes it, whether the test passed or not."""
    directory = Path(tempfile.mkdtemp(prefix="ak-pgtest-"))
    try:
        yield directory
    finally:
        script.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def server_uid(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        # Read while the session is open: its backend exits once the connection closes.
        status = Path(f"/proc/{row[0]}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def test_a_cluster_starts_serves_restarts_with_its_data_and_stops(cluster_dir: Path) -> None:
    """Started twice it is the same server; stopped, it refuses connections; started again
    (after a fast stop, then after an immediate one: a crash) it has the same URL and every
    committed row."""
    started = run("start", str(cluster_dir))
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    assert url.endswith("/postgres")
    assert (cluster_dir / "url").read_text().strip() == url
    with psycopg.connect(url, autocommit=True) as connection:
        settings = {
            name: connection.execute(f"SHOW {name}").fetchone()
            for name in ("fsync", "synchronous_commit", "listen_addresses")
        }
        connection.execute("CREATE TABLE kept (value text)")
        connection.execute("INSERT INTO kept VALUES ('before the restart')")
    assert settings == {
        "fsync": ("on",),
        "synchronous_commit": ("on",),
        "listen_addresses": ("127.0.0.1",),
    }
    owner = pwd.getpwnam("postgres").pw_uid if ROOT else os.geteuid()
    assert server_uid(url) == owner
    port = urlsplit(url).port
    with psycopg.connect(host=str(cluster_dir), port=port, user="postgres", dbname="postgres"):
        pass  # the Unix socket in DIR

    again = run("start", str(cluster_dir))
    assert (again.returncode, again.stdout.strip()) == (0, url)
    status = run("status", str(cluster_dir))
    assert (status.returncode, status.stdout.strip()) == (0, f"running {url}")

    stopped = run("stop", str(cluster_dir))
    assert stopped.returncode == 0, stopped.stderr
    status = run("status", str(cluster_dir))
    assert (status.returncode, status.stdout.strip()) == (3, "stopped")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert run("stop", str(cluster_dir)).returncode == 0

    restarted = run("start", str(cluster_dir))
    assert (restarted.returncode, restarted.stdout.strip()) == (0, url), restarted.stderr
    with psycopg.connect(url, autocommit=True) as connection:
        assert connection.execute("SELECT value FROM kept").fetchall() == [("before the restart",)]
        connection.execute("INSERT INTO kept VALUES ('before the crash')")

    crashed = run("stop", str(cluster_dir), "--mode", "immediate")
    assert crashed.returncode == 0, crashed.stderr
    recovered = run("start", str(cluster_dir))
    assert (recovered.returncode, recovered.stdout.strip()) == (0, url), recovered.stderr
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT value FROM kept ORDER BY value").fetchall() == [
            ("before the crash",),
            ("before the restart",),
        ]


def test_a_start_that_fails_leaves_no_server_and_quotes_the_log(cluster_dir: Path) -> None:
    assert run("start", str(cluster_dir)).returncode == 0
    assert run("stop", str(cluster_dir)).returncode == 0
    conf = cluster_dir / "data" / "postgresql.conf"
    conf.write_text(conf.read_text() + "\nshared_buffers = 'not a size'\n")

    failed = run("start", str(cluster_dir))

    assert failed.returncode == 1
    assert "postgres-cluster: error: the server did not start" in failed.stderr
    assert "shared_buffers" in failed.stderr  # the server log's tail says why
    assert run("status", str(cluster_dir)).returncode == 3
    assert not (cluster_dir / "data" / "postmaster.pid").exists()


def test_status_and_stop_of_a_directory_without_a_cluster(tmp_path: Path) -> None:
    assert (run("status", str(tmp_path)).returncode, run("status", str(tmp_path)).stdout) == (
        4,
        "no cluster\n",
    )
    assert run("stop", str(tmp_path / "never")).returncode == 0


@pytest.mark.skipif(not ROOT, reason="the server runs as postgres only when we are root")
def test_as_root_a_directory_postgres_cannot_reach_is_refused_clearly(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    failed = run("start", str(private / "cluster"))
    assert failed.returncode == 1
    assert "is not writable by the user `postgres`" in failed.stderr
    assert not (private / "cluster" / "data").exists()


# -- missing server binaries ------------------------------------------------------------------


def test_no_binaries_anywhere_is_found_as_none() -> None:
    assert script.find_bindir(env={"PATH": ""}, roots=("/nonexistent/postgresql",)) is None


def test_a_wrong_explicit_bindir_is_an_error_naming_it_never_an_install(
    cluster_dir: Path,
) -> None:
    env = dict(os.environ, AGENTKEEP_PG_BINDIR="/nonexistent/pg/bin")
    failed = run("start", str(cluster_dir / "c"), env=env)
    assert failed.returncode == 1
    assert "AGENTKEEP_PG_BINDIR=/nonexistent/pg/bin does not hold" in failed.stderr
    assert "initdb" in failed.stderr
    assert "apt-get" not in failed.stderr
    assert not (cluster_dir / "c").exists()


def test_missing_binaries_without_install_name_the_package() -> None:
    with pytest.raises(script.ClusterError, match="install the Debian package `postgresql`"):
        script.ensure_bindir(find=lambda: None, install=pytest.fail, allow_install=False)


def test_missing_binaries_are_installed_then_found_again() -> None:
    real = script.find_bindir()
    assert real is not None
    found: list[Path | None] = [None, real]
    installs: list[str] = []
    bindir = script.ensure_bindir(find=lambda: found.pop(0), install=lambda: installs.append("x"))
    assert (bindir, installs, found) == (real, ["x"], [])


def test_an_install_that_does_not_provide_the_binaries_is_an_error() -> None:
    with pytest.raises(script.ClusterError, match="installed but its server binaries"):
        script.ensure_bindir(find=lambda: None, install=lambda: None)


@pytest.mark.skipif(not ROOT, reason="only root installs the package")
def test_the_install_updates_apt_then_installs_postgresql_noninteractively() -> None:
    commands: list[tuple[list[str], str]] = []

    def apt(command: list[str], **options: object) -> subprocess.CompletedProcess[str]:
        env = options["env"]
        assert isinstance(env, dict)
        commands.append((command, env["DEBIAN_FRONTEND"]))
        return subprocess.CompletedProcess(command, 0)

    script.install_server_package(run=apt)
    assert commands == [
        (["apt-get", "update", "-q"], "noninteractive"),
        (
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
            "noninteractive",
        ),
    ]


@pytest.mark.skipif(ROOT, reason="as root the install would be attempted")
def test_without_root_a_missing_server_says_how_to_install_it() -> None:
    with pytest.raises(script.ClusterError, match="sudo apt-get install postgresql"):
        script.install_server_package()


# -- the suite's backend plugin ---------------------------------------------------------------


def test_each_test_gets_its_own_empty_schema_dropped_after(
    postgres_url: str, postgres_server: str
) -> None:
    schema = parse_qs(urlsplit(postgres_url).query)["schema"][0]
    with psycopg.connect(without_schema(postgres_url)) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchone()
    assert tables == (0,)
    with fresh_schema(postgres_server) as other_url:
        other = parse_qs(urlsplit(other_url).query)["schema"][0]
        assert other != schema
        with psycopg.connect(without_schema(other_url), autocommit=True) as connection:
            connection.execute(f"CREATE TABLE {other}.t (x int)")
    with psycopg.connect(without_schema(postgres_url)) as connection:
        left = connection.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (other,)
        ).fetchone()
    assert left == (0,)


INNER = textwrap.dedent(
    """
    import os
    from pathlib import Path

    import psycopg
    import pytest


    def test_a_failing_test_on_postgres(postgres_url):
        server = os.environ["AGENTKEEP_TEST_POSTGRES_URL"]
        with psycopg.connect(server) as connection:
            socket_dir = connection.execute("SHOW unix_socket_directories").fetchone()[0]
        Path(os.environ["OUT"]).write_text(server + "\\n" + socket_dir)
        assert postgres_url.startswith(server + "?schema=t_")
        assert False, "this test fails on purpose"


    def test_the_backend(database_url):
        if os.environ["AGENTKEEP_TEST_DATABASE"] == "sqlite":
            assert database_url is None
        else:
            assert "?schema=t_" in database_url


    @pytest.mark.sqlite_only("the power cut is SQLite's own VFS")
    def test_sqlite_by_nature():
        pass
    """
)


def inner_pytest(tmp_path: Path, database: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(INNER)
    out = tmp_path / "out"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTKEEP_TEST_", "PYTEST_"))
    }
    env.update(OUT=str(out), AGENTKEEP_TEST_DATABASE=database)
    command = [sys.executable, "-m", "pytest", "-p", "tests.postgres_server", str(test_file)]
    done = subprocess.run(
        [*command, "-q", "-ra", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done, out


def test_the_session_cluster_stops_even_when_a_test_failed(tmp_path: Path) -> None:
    done, out = inner_pytest(tmp_path, "postgres")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed, 1 skipped" in done.stdout, done.stdout
    assert "SQLite only: the power cut is SQLite's own VFS" in done.stdout
    url, socket_dir = out.read_text().split("\n")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)
    assert not Path(socket_dir).exists()


def test_the_sqlite_pass_skips_what_needs_postgres_and_starts_no_server(tmp_path: Path) -> None:
    done, out = inner_pytest(tmp_path, "sqlite")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 1 skipped" in done.stdout, done.stdout
    assert "needs a PostgreSQL server: runs on the PostgreSQL pass" in done.stdout
    assert not out.exists()


def test_install_finds_the_installed_server_without_installing_anything() -> None:
    done = run("install")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(script.find_bindir())
    assert "apt-get" not in done.stderr


def test_demo_postgres_runs_the_demo_on_a_throwaway_cluster_or_says_why_it_cannot(
    cluster_dir: Path, tmp_path: Path
) -> None:
    """``make demo-postgres`` (scripts/demo-postgres): with a CLI that takes ``--database`` the
    crash demo passes on a cluster it starts; without one it stops at once with exit 2 and
    says why. Either way no cluster and no directory of it is left behind."""
    agentkeep = [sys.executable, "-m", "agentkeep.cli"]
    helps = [
        subprocess.run(
            [*agentkeep, *where, "--help"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        for where in (["demo"], [])
    ]
    cluster_dir.chmod(0o755)  # the script's mktemp directory goes inside: postgres must reach it
    env = dict(
        os.environ,
        AGENTKEEP=" ".join(agentkeep),
        AGENTKEEP_HOME=str(tmp_path / "home"),
        TMPDIR=str(cluster_dir),  # where it makes the cluster's directory: reachable by postgres
    )
    done = subprocess.run(
        [str(REPO / "scripts" / "demo-postgres")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    if any("--database" in text for text in helps):
        assert done.returncode == 0, done.stdout + done.stderr
        assert "a throwaway PostgreSQL cluster at postgresql://" in done.stderr
        # The demo ran on PostgreSQL, in a schema of its own: its state directory holds the
        # daemon files and the tools' ledgers, no SQLite database.
        assert re.search(r"store: PostgreSQL, postgresql://\S+\?schema=demo_\d", done.stdout)
        homes = list((tmp_path / "home").glob("demo-*"))
        assert len(homes) == 1
        assert (homes[0] / "tool-runs.jsonl").is_file()
        assert not (homes[0] / "agents.db").exists()
    else:
        assert done.returncode == 2, done.stdout + done.stderr
        assert "this agentkeep has no --database option" in done.stderr
    assert list(cluster_dir.iterdir()) == []


def test_sqlite_only_without_a_reason_is_a_usage_error(tmp_path: Path) -> None:
    test_file = tmp_path / "test_reasonless.py"
    test_file.write_text("import pytest\n\n\n@pytest.mark.sqlite_only\ndef test_x():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.postgres_server", str(test_file), "-q"],
        cwd=REPO,
        env={key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "test_x: sqlite_only needs a reason" in done.stderr
