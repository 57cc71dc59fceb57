"""The CLI follows ``daemon.json`` (and sends its token there) only when it and the
home are owned by this user and writable by nobody else, and says why it refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentkeep.client import find_daemon

QUICK = '{"id": "quick", "name": "Quick"}'


def test_a_daemon_file_others_can_rewrite_is_refused_with_the_reason(
    tmp_path: Path, kit: Any
) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    with kit.daemon_on(home):
        assert find_daemon(home).daemon is not None  # owned by us, 0755 home: trusted
        daemon_file = home / "daemon.json"

        home.chmod(0o777)  # anyone may replace daemon.json
        lookup = find_daemon(home)
        assert lookup.daemon is None
        assert lookup.untrusted
        assert "writable by other users" in (lookup.stale or "")
        listed = run("agent", "list")  # no -v: a refusal for safety is always said
        assert "not using the daemon file" in listed.stderr
        assert "writable by other users" in listed.stderr
        home.chmod(0o700)

        daemon_file.chmod(0o666)
        lookup = find_daemon(home)
        assert lookup.daemon is None
        assert lookup.untrusted
        assert str(daemon_file) in (lookup.stale or "")
        daemon_file.chmod(0o600)
        assert find_daemon(home).daemon is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_daemon_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    daemon_file = home / "daemon.json"
    daemon_file.write_text(json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:9"}))
    os.chown(daemon_file, 65534, 65534)
    lookup = find_daemon(home)
    assert lookup.daemon is None
    assert lookup.untrusted
    assert "owned by uid 65534" in (lookup.stale or "")
    os.chown(daemon_file, os.geteuid(), os.getegid())
    os.chown(home, 65534, 65534)
    lookup = find_daemon(home)
    assert lookup.untrusted
    assert str(home) in (lookup.stale or "")
