"""The verdict of ``agentkeep demo --daemon``, and how it shows the events it receives.

The stream check compares what the client received (over two connections, across the
daemon's SIGKILL) with what the ledger holds (read back over REST afterwards): every
sequence exactly once, in order, none missing. It is a pure function of the two lists, so a
broken resume — a gap, a duplicate, a reordering — is caught whatever caused it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentkeep.types.parts import message_text


def _listed(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f", … ({len(numbers)} in all)" if len(numbers) > 10 else "")


def stream_problems(received: Sequence[int], expected: Sequence[int]) -> list[str]:
    """What is wrong with a stream that should have delivered ``expected`` exactly once, in
    order; an empty list when nothing is.

    Args:
        received: The sequences in the order the client received them (every connection).
        expected: The ledger's sequences over the same span, in order.
    """
    problems: list[str] = []
    if list(expected) != list(range(1, len(expected) + 1)):
        problems.append(f"the ledger's sequences are not 1..{len(expected)}: {_listed(expected)}")
    duplicates = sorted(seq for seq, count in Counter(received).items() if count > 1)
    if duplicates:
        problems.append(f"received more than once: {_listed(duplicates)}")
    missing = sorted(set(expected) - set(received))
    if missing:
        problems.append(f"never received: {_listed(missing)}")
    extra = sorted(set(received) - set(expected))
    if extra:
        problems.append(f"received but not in the ledger: {_listed(extra)}")
    backwards = [f"{a} then {b}" for a, b in itertools.pairwise(received) if b < a]
    if backwards:
        problems.append(f"out of order: {', '.join(backwards[:5])}")
    return problems


@dataclass
class Verdict:
    """Named checks, each with the line that shows it (``PASS …`` or ``FAIL …``)."""

    checks: dict[str, bool] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def claim(self, name: str, passed: bool, text: str) -> None:
        self.checks[name] = passed
        self.lines.append(("PASS  " if passed else "FAIL  ") + text)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


@dataclass(kw_only=True)
class Observed:
    """What one run of the demo saw, over HTTP and from the daemon's files.

    Attributes:
        turn_id: The turn the demo sent.
        received: Every sequence the stream delivered, in arrival order (both connections).
        statuses: The turn's ``turn.*`` statuses as the stream delivered them.
        completed_at_ms: When the delivered ``turn.completed`` was committed (0: never).
        before_kill: How many events had arrived when the daemon was SIGKILLed (0: no kill).
        kill_ms: When the SIGKILLed daemon was reaped (epoch ms).
        completed_before_kill: Whether ``turn.completed`` had arrived before the kill.
        ledger: The session's events read back over REST after the run.
        resend: The body answering the same message with the same key sent again.
        turn_count: How many turns the session has.
        stop_status: The restarted daemon's exit status after SIGTERM (None: it hung).
        daemon_file_left: Whether ``daemon.json`` outlived the SIGTERM.
    """

    turn_id: str = ""
    received: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    completed_at_ms: int = 0
    before_kill: int = 0
    kill_ms: int = 0
    completed_before_kill: bool = False
    ledger: list[dict[str, Any]] = field(default_factory=list)
    resend: dict[str, Any] = field(default_factory=dict)
    turn_count: int = 0
    stop_status: int | None = None
    daemon_file_left: bool = True


def judge(seen: Observed) -> Verdict:
    """The demo's claims, each checked against what was observed."""
    verdict = Verdict()
    ends = [
        e["sequence"]
        for e in seen.ledger
        if e.get("turnId") == seen.turn_id and e.get("type") == "turn.completed"
    ]
    # The span the stream had to deliver: the ledger up to the turn's end (the stream is
    # read until then; a `settled` may follow in the ledger).
    expected = [e["sequence"] for e in seen.ledger if not ends or e["sequence"] <= ends[0]]
    problems = stream_problems(seen.received, expected)
    if not ends:
        problems.append("the ledger has no turn.completed for the turn")
    after = len(seen.received) - seen.before_kill
    verdict.claim(
        "stream_exactly_once",
        not problems,
        f"the stream delivered ids 1..{len(expected)} exactly once, in order, no gap "
        f"({seen.before_kill} before the SIGKILL, {after} after the restart), as the ledger "
        "holds them"
        if not problems
        else "the stream is not the ledger: " + "; ".join(problems),
    )
    after_kill = seen.completed_at_ms > seen.kill_ms > 0
    verdict.claim(
        "killed_mid_turn",
        seen.before_kill >= 1 and not seen.completed_before_kill and after_kill,
        f"the SIGKILL came mid-turn: after {seen.before_kill} events, before turn.completed",
    )
    path = " → ".join(seen.statuses) or "(no turn events)"
    verdict.claim(
        "resumed_not_interrupted",
        seen.statuses == ["queued", "running", "completed"] and after_kill,
        f"the turn completed {max(0, seen.completed_at_ms - seen.kill_ms) / 1000:.1f} s after "
        f"the kill, in the restarted daemon, never interrupted: {path}",
    )
    duplicate = seen.resend.get("duplicate") is True
    same = (seen.resend.get("turn") or {}).get("id") == seen.turn_id
    verdict.claim(
        "idempotent_resend",
        duplicate and same and seen.turn_count == 1,
        f"the same Idempotency-Key returned {'the same' if same else 'another'} turn "
        f"(duplicate: {str(duplicate).lower()}); the session has {seen.turn_count} turn"
        + ("" if seen.turn_count == 1 else "s"),
    )
    verdict.claim(
        "clean_stop",
        seen.stop_status == 0 and not seen.daemon_file_left,
        f"SIGTERM: the daemon exited with status {seen.stop_status} and "
        + ("left daemon.json behind" if seen.daemon_file_left else "removed daemon.json"),
    )
    return verdict


def epoch_ms(iso: str) -> int:
    """Milliseconds since the epoch of the API's ISO 8601 UTC timestamps."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _text(message: Any) -> str:
    return message_text(message) or ""


def _short(text: str, width: int = 64) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summarize(event: dict[str, Any]) -> str:
    """One readable line for a ``SessionEvent`` (its type, then what it says)."""
    kind = str(event.get("type", "?"))
    data = event.get("data") or {}
    detail = ""
    if kind.startswith("turn."):
        detail = str(data.get("status", ""))
        result = data.get("result")
        if isinstance(result, dict):
            detail += f": {_short(_text(result.get('message')))}"
    elif kind in ("message", "message.accepted"):
        detail = f"{data.get('role', '?')}: {_short(_text(data.get('message')))}"
    elif kind == "assistant.block":
        block = data.get("block") or {}
        if block.get("type") == "tool_call":
            detail = f"tool call {block.get('name')}({_short(str(block.get('arguments')), 48)})"
        else:
            detail = f"text: {_short(str(block.get('text', '')))}"
    elif kind == "tool.batch":
        detail = f"{len(data.get('calls', []))} calls, durable before any of them runs"
    elif kind == "tool.result":
        detail = f"{data.get('callId')} → {_short(_text(data), 40)}"
    elif kind == "settled":
        detail = "nothing owed"
    return f"{kind:<17}{detail}".rstrip()
