"""Every command of the wire's tree gives the same output directly and through a daemon.

Reads: one state is built directly, copied, and served by a daemon; each command must print
byte-identical stdout (JSON and text) and exit alike on the original (direct) and the copy
(through the daemon). Writes: the same script runs on two fresh homes, one direct and one
under a daemon; outputs must match once the ids and timestamps only a run can choose (cuid2
ids, clock times) are numbered in order of appearance.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep.cli.output import exit_code_of
from agentkeep.cli.runtime import Home, open_system
from agentkeep.client import HttpBackend, client_token
from agentkeep.errors import AgentkeepError
from agentkeep.types.ledger import DEFAULT_MAX_INPUT_BYTES

QUICK = '{"id": "quick", "name": "Quick", "instructions": "Answer briefly."}'
AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")


def _build(run: Any) -> None:
    """The state the read commands look at (made directly)."""
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    slow = '{"id": "slowpoke", "name": "Slow", "model": {"id": "slow/demo-1"}}'
    assert run("agent", "create", "-", stdin=slow).exit_code == 0
    assert run("agent", "create", "-", stdin='{"id": "gone", "name": "Gone"}').exit_code == 0
    assert run("agent", "delete", "gone").exit_code == 0
    assert run("session", "start", "quick", "--id", "sone").exit_code == 0
    talked = run("talk", "quick", "What is 12 * 7?", "--session", "sone", "--key", "k1")
    assert talked.exit_code == 0, talked.stderr
    assert run("session", "start", "quick", "--id", "stwo").exit_code == 0
    assert run("session", "archive", "stwo").exit_code == 0


# The shared homes are a store and its clone made by copying the state directory.
CLONED_BY_COPYING = pytest.mark.sqlite_only(
    "compares a store with its clone made by copying the state directory's agents.db"
)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory, kit: Any) -> Iterator[tuple[Path, Path]]:
    """(direct home, daemon-owned copy of it)."""
    direct = kit.make_home(tmp_path_factory.mktemp("direct") / "state")
    _build(kit.invoker(direct))
    served = tmp_path_factory.mktemp("served") / "state"
    shutil.copytree(direct, served)
    with kit.daemon_on(served):
        yield direct, served


READS = [
    ("agent", "list"),
    ("agent", "list", "--include-deleted"),
    ("agent", "show", "quick"),
    ("agent", "show", "gone", "--include-deleted"),
    ("agent", "show", "gone"),
    ("agent", "show", "nope"),
    ("session", "list"),
    ("session", "list", "--include-archived"),
    ("session", "list", "--agent", "slowpoke"),
    ("session", "show", "sone"),
    ("session", "show", "nope"),
    ("session", "events", "sone", "--after", "0"),
    ("session", "events", "sone", "--after", "3", "--limit", "2"),
    ("session", "events", "nope"),
]


def _same_error(direct: Any, served: Any, homes: tuple[Path, Path]) -> None:
    if direct.exit_code == 0:
        return
    left = direct.stderr.replace(str(homes[0]), "HOME")
    right = served.stderr.replace(str(homes[1]), "HOME")
    assert left == right


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("args", READS, ids=" ".join)
@CLONED_BY_COPYING
def test_reads_print_the_same_in_both_modes(
    homes: tuple[Path, Path], kit: Any, args: tuple[str, ...], json_mode: bool
) -> None:
    direct = kit.invoker(homes[0])(*args, json_mode=json_mode)
    served = kit.invoker(homes[1])(*args, json_mode=json_mode)
    assert (served.exit_code, served.stdout) == (direct.exit_code, direct.stdout)
    _same_error(direct, served, homes)


@CLONED_BY_COPYING
def test_the_daemon_really_answered(homes: tuple[Path, Path], kit: Any) -> None:
    """The served copy is read through the daemon: a session made only there is listed, and
    the direct home (no daemon) does not see it."""
    run = kit.invoker(homes[1])
    assert run("session", "start", "quick", "--id", "onlyserved").exit_code == 0
    served = [s["id"] for s in kit.stdout_json(run("session", "list"))["sessions"]]
    direct = [
        s["id"] for s in kit.stdout_json(kit.invoker(homes[0])("session", "list"))["sessions"]
    ]
    assert "onlyserved" in served
    assert "onlyserved" not in direct
    assert run("session", "archive", "onlyserved").exit_code == 0


WRITES: list[tuple[tuple[str, ...], str | None]] = [
    (("agent", "create", "-"), QUICK),
    (("agent", "create", "-"), QUICK),  # definition_exists
    (("agent", "create", "-"), "{not json"),
    (("agent", "create", "-"), '{"id": "BAD ID", "name": "x"}'),
    (("agent", "update", "quick", "-"), '{"description": "second"}'),
    (("agent", "update", "quick", "-"), '{"description": "second"}'),  # unchanged
    (("session", "start", "quick", "--id", "s1", "--metadata", "team=a"), None),
    (("session", "start", "quick", "--id", "s1", "--metadata", "team=a"), None),
    (("session", "start", "nope"), None),
    (("session", "send", "s1", "What is 12 * 7?", "--key", "k1", "--wait"), None),
    (("session", "send", "s1", "What is 12 * 7?", "--key", "k1"), None),  # duplicate
    (("session", "send", "s1", "something else", "--key", "k1"), None),  # conflict
    (("session", "cancel", "s1"), None),  # nothing live
    (("talk", "quick", "What is 2 + 3?", "--session", "s1", "--key", "k2"), None),
    (("talk", "slowpoke", "hello", "--session", "s1"), None),  # not its session
    (("session", "send", "s1", "What is 1 + 1?", "--steer", "--key", "k3", "--wait"), None),
    (("session", "archive", "s1"), None),
    (("session", "send", "s1", "late"), None),  # archived
    (("agent", "delete", "quick"), None),
    (("agent", "delete", "quick"), None),
    (("agent", "show", "quick"), None),  # deleted
    (("agent", "list", "--include-deleted"), None),
    (("session", "show", "s1"), None),
    (("session", "events", "s1", "--after", "0", "--limit", "1000"), None),
]

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_ID = re.compile(r"\b[a-z0-9]{24,25}\b")


class _Numbering:
    """Ids a run chose, numbered in order of first appearance (the same order both ways)."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        text = _TIME.sub("<time>", text)
        return _ID.sub(lambda m: self.ids.setdefault(m.group(0), f"<id{len(self.ids)}>"), text)


def _script(kit: Any, home: Path) -> list[tuple[int, str, str]]:
    run = kit.invoker(home)
    number = _Numbering()
    outcomes = []
    for args, stdin in WRITES:
        result = run(*args, stdin=stdin)
        stderr = result.stderr.replace(str(home), "HOME") if result.exit_code else ""
        outcomes.append((result.exit_code, number(result.stdout), number(stderr)))
    return outcomes


def test_writes_print_the_same_in_both_modes(tmp_path: Path, kit: Any) -> None:
    direct = _script(kit, kit.make_home(tmp_path / "direct"))
    served_home = kit.make_home(tmp_path / "served")
    with kit.daemon_on(served_home):
        served = _script(kit, served_home)
    for (args, _), left, right in zip(WRITES, direct, served, strict=True):
        assert right == left, " ".join(args)
    codes = [exit_code for exit_code, _, _ in direct]
    assert codes == [0, 2, 2, 2, 0, 0, 0, 0, 4, 0, 0, 2, 1, 0, 2, 0, 0, 1, 0, 0, 4, 0, 0, 0]
    answer = json.loads(direct[9][1])
    assert answer["answer"] == "12 * 7 = 84."
    assert answer["turn"]["status"] == "completed"


def test_talk_streams_the_same_text_in_both_modes(tmp_path: Path, kit: Any) -> None:
    """``talk DEFINITION MESSAGE`` for people: the answer on stdout, the new session's id on
    stderr, directly and through the daemon."""
    outputs = []
    for name in ("direct", "served"):
        home = kit.make_home(tmp_path / name)
        run = kit.invoker(home)
        assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
        if name == "direct":
            result = run("talk", "quick", "What is 12 * 7?", json_mode=False)
        else:
            with kit.daemon_on(home):
                result = run("talk", "quick", "What is 12 * 7?", json_mode=False)
        assert result.exit_code == 0, result.stderr
        assert re.search(r"^session: [a-z0-9]{24,25}$", result.stderr, re.MULTILINE)
        outputs.append(result.stdout)
    assert outputs == ["12 * 7 = 84.\n", "12 * 7 = 84.\n"]


@CLONED_BY_COPYING
def test_reads_need_no_lock(homes: tuple[Path, Path], kit: Any) -> None:
    """Directly, the read commands read the store without its lock: they work while another
    process (here an open system, no daemon) owns it, and print what they print otherwise."""
    run = kit.invoker(homes[0])
    before = {args: run(*args).stdout for args in READS[:3] + READS[6:10]}
    with open_system(Home(path=homes[0]), resume=False):
        for args, expected in before.items():
            held = run(*args)
            assert held.exit_code == 0, held.stderr
            assert held.stdout == expected
        assert run("session", "start", "quick").exit_code == 3  # a write needs the lock


# The commands that put work into a session or take it out (send, send --steer, cancel,
# compact): one code path over the Backend, so the same script prints the same stdout, stderr
# on failure, and exit codes on a home it opens itself and on one a daemon owns. The sessions
# are made directly first without a definition (`session start` without AGENT_ID needs the
# store itself: it exits 3 under a daemon, see test_daemon_turns).
LEGACY: list[tuple[tuple[str, ...], bool]] = [
    (("session", "send", "plain", "What is 12 * 7?", "--id", "mone", "--wait"), True),
    (("session", "send", "plain", "What is 12 * 7?", "--id", "mone"), True),  # resent: a no-op
    (("session", "send", "plain", "What is 12 * 7?", "--id", "mone"), False),
    (("session", "send", "--steer", "plain", "What is 2 + 3?", "--id", "mtwo", "--wait"), True),
    (("session", "send", "--steer", "plain", "What is 2 + 3?", "--id", "mtwo", "--wait"), False),
    (
        (
            "session",
            "send",
            "plain",
            "What is 1 + 1?",
            "--provider",
            "demo",
            "--model",
            "demo-1",
            "--wait",
        ),
        True,
    ),
    (("session", "send", "plain", "hi", "--id", "Not Valid"), True),  # a malformed message id
    (
        ("session", "send", "plain", "hi", "--provider", "nope"),
        True,
    ),  # checked before anything is sent
    (("session", "send", "plain", "hi", "--provider", "demo", "--model", "demo-9", "--wait"), True),
    (("session", "send", "nobody", "hi"), True),
    (("session", "send", "--steer", "nobody", "hi", "--wait"), True),
    (("session", "cancel", "plain"), True),  # nothing in progress
    (("session", "cancel", "plain"), False),
    (("session", "cancel", "nobody"), True),
    (("session", "compact", "plain"), True),
    (("session", "compact", "plain"), False),
    (("session", "compact", "nobody"), True),
    # A slow turn: directly it waits, queued, for `resume`; a daemon runs it. Either way
    # cancel cancels it (the same text), and a second cancel finds nothing.
    (
        (
            "session",
            "send",
            "slowplain",
            "What is 12 * 7?",
            "--provider",
            "slow",
            "--model",
            "demo-1",
        ),
        True,
    ),
    (("session", "cancel", "slowplain"), False),
    (("session", "cancel", "slowplain"), True),
    (("session", "transcript", "plain"), True),
]


def _legacy(kit: Any, home: Path) -> list[tuple[int, str, str]]:
    run = kit.invoker(home)
    number = _Numbering()  # message ids the command chose (--id not given)
    outcomes = []
    for args, json_mode in LEGACY:
        result = run(*args, json_mode=json_mode)
        stderr = result.stderr.replace(str(home), "HOME") if result.exit_code else ""
        outcomes.append((result.exit_code, number(result.stdout), number(stderr)))
    return outcomes


def test_todays_agent_commands_print_the_same_in_both_modes(tmp_path: Path, kit: Any) -> None:
    homes = []
    for name in ("direct", "served"):
        home = kit.make_home(tmp_path / name)
        run = kit.invoker(home)
        assert run("session", "start", "--id", "plain").exit_code == 0
        assert run("session", "start", "--id", "slowplain").exit_code == 0
        homes.append(home)
    direct = _legacy(kit, homes[0])
    with kit.daemon_on(homes[1]) as daemon:
        served = _legacy(kit, homes[1])
        slow = daemon.system.sessions.turns("slowplain")
    for (args, _), left, right in zip(LEGACY, direct, served, strict=True):
        assert right == left, " ".join(args)
    codes = [exit_code for exit_code, _, _ in direct]
    assert codes == [0, 0, 0, 0, 0, 0, 2, 2, 2, 4, 4, 1, 1, 4, 0, 0, 4, 0, 0, 1, 0]
    assert json.loads(direct[0][1])["answer"] == "12 * 7 = 84."
    assert json.loads(direct[1][1])["duplicate"] is True
    assert direct[2][1].endswith(" of session plain: completed (already accepted)\n")
    assert json.loads(direct[3][1])["answer"] == "2 + 3 = 5."
    assert direct[4][1] == "2 + 3 = 5.\n"
    assert re.fullmatch(r"turn <id\d+>: cancelled\n", direct[18][1])
    assert json.loads(direct[19][2])["error"]["code"] == "turn_state"  # nothing left to cancel
    # Through the daemon the slow turn ran (it was cancelled while running, not queued).
    assert [t.status for t in slow] == ["cancelled"]
    assert slow[0].started_at_ms is not None


# `talk AGENT MESSAGE --key K` without --session: the key names the session
# (MCP's talk_to_agent rule), so a retry returns the same session and turn without running the
# model again, and the same key with another message is refused.
KEYED_TALKS: list[tuple[tuple[str, ...], bool]] = [
    (("talk", "quick", "What is 6 * 7?", "--key", "tk1"), True),
    (("talk", "quick", "What is 6 * 7?", "--key", "tk1"), True),  # a retry
    (("talk", "quick", "What is 6 * 7?", "--key", "tk1"), False),
    (("talk", "quick", "What is 5 + 5?", "--key", "tk1"), True),  # another message
    (("talk", "quick", "What is 6 * 7?", "--key", "tk2"), True),  # another key
]


def _keyed(kit: Any, home: Path) -> list[tuple[int, str, str]]:
    run = kit.invoker(home)
    number = _Numbering()  # the turn ids and times a run chose
    outcomes = []
    for args, json_mode in KEYED_TALKS:
        result = run(*args, json_mode=json_mode)
        stderr = result.stderr.replace(str(home), "HOME")
        outcomes.append((result.exit_code, number(result.stdout), number(stderr)))
    return outcomes


def test_keyed_talk_is_idempotent_without_a_session_in_both_modes(tmp_path: Path, kit: Any) -> None:
    results = []
    for name in ("direct", "served"):
        home = kit.make_home(tmp_path / name)
        assert kit.invoker(home)("agent", "create", "-", stdin=QUICK).exit_code == 0
        if name == "direct":
            results.append(_keyed(kit, home))
        else:
            with kit.daemon_on(home) as daemon:
                results.append(_keyed(kit, home))
                turns = {
                    session.id: len(daemon.system.sessions.turns(session.id))
                    for session in daemon.system.sessions.list(definition_id="quick")
                }
    direct, served = results
    assert served == direct
    assert [code for code, _, _ in direct] == [0, 0, 0, 2, 0]
    first, again = json.loads(direct[0][1]), json.loads(direct[1][1])
    assert first["answer"] == "6 * 7 = 42."
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["turn"] == first["turn"]  # the same session and turn, not run again
    assert direct[2][1] == "6 * 7 = 42.\n"
    assert json.loads(direct[3][2])["error"]["code"] == "idempotency_conflict"
    other = json.loads(direct[4][1])
    assert other["turn"]["sessionId"] != first["turn"]["sessionId"]
    # Through the daemon: one session per key, each with one turn (the retry ran nothing).
    assert turns == {first["turn"]["sessionId"]: 1, other["turn"]["sessionId"]: 1}


# The edges: an oversized message and undecodable input are bad input
# (exit 2, the same lines on stderr, no traceback) directly and through the daemon alike, and
# nothing is written: an oversized talk starts no session.
NOT_UTF8 = b'{"id": "quick", "name": "Qu\xffick"}'
OVERSIZED = "x" * (600 * 1024)
EDGES: list[tuple[tuple[str, ...], str | bytes | None]] = [
    (("agent", "create", "-"), NOT_UTF8),
    (("agent", "update", "quick", "-"), b'{"description": "\xff"}'),
    (("talk", "quick", "-"), OVERSIZED),
    (("talk", "quick", "-", "--key", "big"), OVERSIZED),
    (("session", "send", "s1", "-"), OVERSIZED),
    (("session", "send", "s1", "-", "--wait"), OVERSIZED),
    (("session", "send", "--steer", "s1", "-"), OVERSIZED),
    (("session", "send", "s1", "-"), "x" * (DEFAULT_MAX_INPUT_BYTES - 60)),  # just fits
    (("session", "list"), None),
]


def _edges(kit: Any, home: Path, json_mode: bool) -> list[tuple[int, str, str]]:
    run = kit.invoker(home)
    number = _Numbering()
    outcomes = []
    for args, stdin in EDGES:
        result = run(*args, stdin=stdin, json_mode=json_mode)
        assert "Traceback" not in result.stderr, result.stderr
        stderr = result.stderr.replace(str(home), "HOME")
        # Directly, an unwaited send says on stderr that `resume` runs it (a daemon runs it
        # at once): the one line the modes differ by, and on purpose.
        stderr = stderr.replace(_RESUME_NOTE, "")
        outcomes.append((result.exit_code, number(result.stdout), number(stderr)))
    return outcomes


_RESUME_NOTE = "note: nothing runs it until `agentkeep resume` (or send with --wait)\n"


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "text"])
def test_edges_exit_alike_in_both_modes(tmp_path: Path, kit: Any, json_mode: bool) -> None:
    results = []
    for name in ("direct", "served"):
        home = kit.make_home(tmp_path / name)
        run = kit.invoker(home)
        assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
        assert run("session", "start", "quick", "--id", "s1").exit_code == 0
        if name == "direct":
            results.append(_edges(kit, home, json_mode))
        else:
            with kit.daemon_on(home):
                results.append(_edges(kit, home, json_mode))
    direct, served = results
    for (args, _), left, right in zip(EDGES, direct, served, strict=True):
        assert right == left, " ".join(args)
    assert [code for code, _, _ in direct] == [2, 2, 2, 2, 2, 2, 2, 0, 0]
    for _, _, stderr in direct[:7]:
        lines = stderr.splitlines()
        assert len(lines) == (1 if json_mode else 2), stderr  # the error (and its hint)
    if json_mode:
        codes = [json.loads(stderr)["error"]["code"] for _, _, stderr in direct[:7]]
        assert codes == ["invalid_json"] * 2 + ["input_too_large"] * 5
        sessions = json.loads(direct[8][1])["sessions"]
        assert [s["id"] for s in sessions] == ["s1"]  # the oversized talks started nothing


@pytest.mark.parametrize("args", [("agent", "create", "-"), ("agent", "update", "quick", "-")])
def test_undecodable_stdin_is_bad_input_in_both_modes_as_a_process(
    tmp_path: Path, kit: Any, args: tuple[str, ...]
) -> None:
    """A real process reads stdin in Python's UTF-8 mode, where undecodable bytes arrive as
    lone surrogates: refused as not UTF-8 (exit 2, one line), never a traceback."""
    outcomes = []
    for name in ("direct", "served"):
        home = kit.make_home(tmp_path / name)
        assert kit.invoker(home)("agent", "create", "-", stdin=QUICK).exit_code == 0
        command = [AGENTKEEP, "--home", str(home), "--json", *args]
        with kit.daemon_on(home) if name == "served" else contextlib.nullcontext():
            done = subprocess.run(
                command,
                input=b'{"id": "quick", "name": "Qu\xffick", "description": "\xfe"}',
                capture_output=True,
                timeout=60,
                env={**os.environ, "LANG": "C.UTF-8"},
            )
        outcomes.append((done.returncode, done.stdout, done.stderr))
    assert outcomes[0] == outcomes[1]
    code, stdout, stderr = outcomes[0]
    assert (code, stdout) == (2, b"")
    assert json.loads(stderr)["error"]["code"] == "invalid_json"


def test_the_client_refuses_text_that_cannot_travel(tmp_path: Path, kit: Any) -> None:
    """Whatever lets a lone surrogate through, the daemon's client refuses it as bad input
    (exit 2 in the CLI), never a traceback."""
    home = kit.make_home(tmp_path / "state")
    assert kit.invoker(home)("agent", "create", "-", stdin=QUICK).exit_code == 0
    with kit.daemon_on(home) as daemon:
        backend = HttpBackend(daemon.server.url, client_token(home))
        try:
            with pytest.raises(AgentkeepError) as refused:
                backend.update_definition("quick", {"description": "\udcff"})
        finally:
            backend.close()
    assert refused.value.code == "invalid_request"
    assert exit_code_of(refused.value.code) == 2
