"""``agentkeep session export ID``: one self-contained file of a conversation, from a real
store written by the CLI's deterministic local model (a tool call, then a second turn whose
message is a script tag). The page itself is checked in Chromium by
tests/unit/console/test_session_report_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.unit.subprocesses import AGENTKEEP

SESSION = "exported"
ASK = "What is 12 * 7?"
SCRIPT = "<script>alert(1)</script>"
HOSTILE = f'say {SCRIPT} and <img src=x onerror="window.__xss=1"> please'


def run(home: Path, *args: str) -> str:
    done = subprocess.run(
        [*AGENTKEEP, "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_session(home: Path) -> None:
    """A session with two turns: the first calls the calculator, the second is hostile text."""
    run(home, "session", "start", "--id", SESSION, "--title", "export </script> test")
    run(home, "session", "send", SESSION, ASK, "--wait")
    run(home, "session", "send", SESSION, HOSTILE, "--wait")


def embedded(html: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL
    )
    assert match is not None
    value: dict[str, Any] = json.loads(match.group(1))
    return value


def test_export_writes_one_self_contained_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_session(home)
    target = tmp_path / "report.html"
    said = run(home, "session", "export", SESSION, "--html", "-o", str(target))
    assert said.startswith(f"wrote {target}")
    html = target.read_text(encoding="utf-8")

    # Nothing to fetch: no URL, no linked resource, two scripts (data, code) and inline CSS.
    assert re.search(r"https?://", html) is None
    assert re.search(r"<(link|img|iframe|object|embed)\b", html) is None
    assert html.count("<script") == 2
    assert "default-src 'none'" in html
    # The hostile text never appears as markup: only escaped inside the JSON block.
    assert SCRIPT not in html
    assert "</script> test" not in html
    assert "<img src=x" not in html

    data = embedded(html)
    ledger = json.loads(run(home, "--json", "session", "events", SESSION, "--limit", "1000"))
    assert data["events"] == ledger["events"]
    assert [t["number"] for t in data["turns"]] == [1, 2]
    assert data["session"]["metadata"]["title"] == "export </script> test"
    texts = [
        part["text"]
        for event in data["events"]
        if event["type"] == "message"
        for part in event["data"]["message"]["parts"]
    ]
    assert ASK in texts
    assert HOSTILE in texts
    assert "12 * 7 = 84." in texts
    calls = [
        e["data"]["block"]["name"]
        for e in data["events"]
        if e["type"] == "assistant.block" and e["data"]["block"]["type"] == "tool_call"
    ]
    assert calls == ["calculator"]
    assert [e["data"]["parts"] for e in data["events"] if e["type"] == "tool.result"] == [
        [{"type": "text", "text": "84"}]
    ]
    assert data["runtime"]["settings"]["model"] == "demo-1"

    # --json writes the same data; without -o it goes to stdout.
    as_json = json.loads(run(home, "session", "export", SESSION, "--json"))
    assert as_json == data


def test_export_of_an_unknown_session_exits_4(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run(home, "session", "start", "--id", "somebody")
    done = subprocess.run(
        [*AGENTKEEP, "--home", str(home), "session", "export", "nobody", "-o", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert not (tmp_path / "x").exists()


def test_export_shows_the_revision_the_session_is_pinned_to(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = tmp_path / "helper.json"
    first.write_text(json.dumps({"id": "helper", "instructions": "Revision one."}))
    second = tmp_path / "patch.json"
    second.write_text(json.dumps({"instructions": "Revision two."}))
    run(home, "agent", "create", str(first))
    run(home, "session", "start", "helper", "--id", "pinned")
    run(home, "agent", "update", "helper", str(second))
    data = json.loads(run(home, "session", "export", "pinned", "--json"))
    assert data["session"]["agentRevision"] == 1
    assert data["revision"]["number"] == 1
    assert data["revision"]["definition"]["instructions"] == "Revision one."
    assert data["definition"]["currentRevision"] == 2
