"""``scripts/try_as_new_user.sh``: a new user's first session with the daemon, as real
processes (serve in the background, talk twice, events, session cancel from another process,
SIGTERM, the CLI directly again). The script checks each step and names the one that failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "try_as_new_user.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_new_user_script_passes(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(AGENTKEEP=f"{sys.executable} -m agentkeep.cli", PYTHON=sys.executable)
    env.pop("AGENTKEEP_HOME", None)
    env.pop("AGENTKEEP_DAEMON_TOKEN", None)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "state")],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK:" in done.stderr
    assert not (tmp_path / "state" / "daemon.json").exists()
