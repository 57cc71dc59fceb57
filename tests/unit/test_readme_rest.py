"""The README's REST conversation runs when pasted into a shell, as written:
it starts ``serve``, waits for its ready file, creates a definition, starts a session, sends a
message and streams its events until the turn ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- rest-conversation -->"


def readme_script() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    after = readme.split(MARKER, 1)[1]
    found = re.match(r"\s*```sh\n(.*?)```", after, flags=re.S)
    assert found is not None, "the README's REST conversation block is missing"
    return found.group(1)


def test_the_readme_rest_conversation_runs_as_written(tmp_path: Path) -> None:
    env = dict(os.environ)
    # `agentkeep` is the console script next to this interpreter (what `make` installed);
    # mktemp's directory lands in this test's own.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["TMPDIR"] = str(tmp_path)
    env.pop("AGENTKEEP_HOME", None)
    done = subprocess.run(
        ["bash", "-e", "-c", readme_script()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *stream, turn_line = [line for line in done.stdout.splitlines() if line.strip()]
    turn = json.loads(turn_line)
    assert turn["status"] == "completed"
    assert turn["result"]["message"]["role"] == "assistant"
    assert "84" in turn["result"]["message"]["parts"][-1]["text"]
    ids = [int(line.removeprefix("id: ")) for line in stream if line.startswith("id: ")]
    data = [json.loads(line.removeprefix("data: ")) for line in stream if line.startswith("data:")]
    # The stream: the turn's events from its acceptance to its end, each once, in order.
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert {data[0]["type"], data[1]["type"]} == {"turn.queued", "message.accepted"}
    assert data[-1]["type"] == "turn.completed"
