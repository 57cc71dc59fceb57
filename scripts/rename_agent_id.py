"""Apply issue 30's "one word per concept" renames of the conversation's id and of the
provider-owned tools (idempotent).

Inside the library the durable conversation is an *agent* and its id is ``agent_id``;
``session_id`` lives only where seed 002's names are the contract (``server/``, ``mcp/``,
``client/``, ``sessions/``, ``drivers/``, the CLI's ``session`` commands, and the seed-002
record fields ``SessionEvent.session_id`` / ``TurnRecord.session_id``: see
``tests/unit/test_naming.py``). A tool the provider runs itself is a *provider tool*
(``ak.ProviderTool``), so its option, policy and the loop's bookkeeping say so.

This script rewrites the old identifiers with word-boundary regular expressions, so it can be
run again on any file that still has the old names (a branch merged after the rename) and
changes nothing the second time.

Usage::

    python scripts/rename_agent_id.py            # src tests bench scripts docs (and git mv)
    python scripts/rename_agent_id.py FILE...    # only these files (or directories)
    python scripts/rename_agent_id.py --check    # exit 1 if a file would change or move

Then ``ruff check --fix src tests && ruff format src tests`` (a renamed import may need
re-sorting).

The mapping is in one place below: ``MOVED_FILES`` (``git mv``-ed when the old one exists and
the new one does not), ``RENAMES`` (safe anywhere) and ``SCOPED`` (only in files a predicate
picks, where ``session_id`` is seed 002's word elsewhere).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("src", "tests", "bench", "scripts", "docs")
SUFFIXES = (".py", ".md")
# Never rewritten: this script, the test that pins it (both spell the old names on purpose)
# and the transaction-call migration (its keys are the old flat names; its values are new).
SKIP = (
    Path(__file__).resolve(),
    ROOT / "tests" / "unit" / "test_naming.py",
    ROOT / "scripts" / "migrate_tx_calls.py",
)

# Files that moved (old path → new path, relative to the repository): `git mv`-ed by main().
MOVED_FILES = {
    "src/agentkeep/loop/server_calls.py": "src/agentkeep/loop/provider_calls.py",
    "tests/unit/loop/test_server_tool_visibility.py": (
        "tests/unit/loop/test_provider_tool_visibility.py"
    ),
    # "registry" is the definitions' (agentkeep.registry); the providers by id are a catalog
    "src/agentkeep/providers/registry.py": "src/agentkeep/providers/catalog.py",
    "tests/unit/providers/test_registry.py": "tests/unit/providers/test_catalog.py",
}

# Old → new, each matched on word boundaries; no new name contains its old one as a word, so
# the old pattern never matches the new text (idempotent).
RENAMES: dict[str, str] = {
    # provider-owned tools: AgentSystem.open(provider_tools=...), the loop's policy and calls
    "server_tools": "provider_tools",
    "ServerToolPolicy": "ProviderToolPolicy",
    "NO_SERVER_TOOLS": "NO_PROVIDER_TOOLS",
    "ServerCalls": "ProviderCalls",
    "agentkeep.loop.server_calls": "agentkeep.loop.provider_calls",
    "server_calls": "provider_calls",
    "test_server_tool_visibility": "test_provider_tool_visibility",
    # the ledger's "was this agent ever created" (it reads the agents table)
    "session_known": "agent_known",
    # the providers by id (agentkeep.registry is the definitions' registry)
    "agentkeep.providers.registry": "agentkeep.providers.catalog",
    "providers/registry.py": "providers/catalog.py",
    "provider registry": "provider catalog",
}


def _is(*parts: str) -> Callable[[Path, str], bool]:
    def predicate(path: Path, _text: str) -> bool:
        return path.as_posix().endswith(parts)

    return predicate


# ``session_id`` as an identifier, but not a keyword argument (``session_id=x``: the field of
# seed 002's SessionEvent / TurnRecord, or a structured log key, which stay).
_SESSION_ID = r"\bsession_id\b(?!=)"

# The library's own modules whose ``session_id`` is the agent's id (all of it is renamed).
_AGENT_ID_MODULES = (
    "src/agentkeep/persistence/ledger/hub.py",
    "src/agentkeep/persistence/ledger/subscription.py",
    "src/agentkeep/agent_system/_reads.py",
    "src/agentkeep/agent_system/_facade.py",
    "src/agentkeep/agent_system/compaction.py",
    "src/agentkeep/agent_system/surfaces.py",
    "src/agentkeep/chaos/ledger_subscriber.py",
    "src/agentkeep/chaos/_mutants/runtime.py",
)


def _in_class(name: str, pattern: str, replacement: str) -> Callable[[str], str]:
    """A rewrite of ``pattern`` only inside ``class name``'s body (up to the next top-level
    statement)."""

    def rewrite(text: str) -> str:
        match = re.search(rf"^class {name}\b.*?(?=^\S|\Z)", text, re.S | re.M)
        if match is None:
            return text
        body = re.sub(pattern, replacement, match.group(0))
        return text[: match.start()] + body + text[match.end() :]

    return rewrite


# (predicate on (path, text), rewrite of the text): applied only where the predicate holds.
Scoped = tuple[Callable[[Path, str], bool], Callable[[str], str]]


def _sub(pattern: str, replacement: str) -> Callable[[str], str]:
    return lambda text: re.sub(pattern, replacement, text)


SCOPED: list[Scoped] = [
    (_is(*_AGENT_ID_MODULES), _sub(_SESSION_ID, "agent_id")),
    # (sessions/turning.py has its own _require_session, for seed 002's session: it stays)
    (_is("src/agentkeep/agent_system/_reads.py"), _sub(r"\b_require_session\b", "_require_agent")),
    # the chaos subscriber's agent
    (
        _is("src/agentkeep/chaos/ledger_subscriber.py"),
        _sub(r"\bself\._session\b", "self._agent_id"),
    ),
    # a library error about the library's agent (SessionArchivedError is seed 002's: it stays)
    (
        _is("src/agentkeep/errors.py"),
        _in_class("IdempotencyConflictError", _SESSION_ID, "agent_id"),
    ),
    # accepting a message is one act: Acceptance.send (a send/steer of any surface, options
    # checked) and Acceptance.accept; "offer" is the loop's (ConsumeOffer), "deliver" was a
    # third word for the plumbing's accept
    (lambda _p, _t: True, _sub(r"\b(_?acceptance)\.offer\(", r"\1.send(")),
    (
        _is("src/agentkeep/agent_system/_acceptance.py", "src/agentkeep/refs.py"),
        _sub(r"\bdef offer\(", "def send("),
    ),
    (lambda _p, _t: True, _sub(r"\binternals\.deliver\b", "internals.accept")),
    (_is("src/agentkeep/agent_system/_internals.py"), _sub(r"\bdef deliver\(", "def accept(")),
    # the providers' catalog, and needs_reset's lookup parameter, say "catalog"
    (
        _is(
            "src/agentkeep/providers/catalog.py",
            "src/agentkeep/providers/compatibility.py",
            "src/agentkeep/providers/__init__.py",
            "tests/unit/providers/test_catalog.py",
        ),
        _sub(r"\bregistry\b", "catalog"),
    ),
    # the daemon reads the library Subscription's attribute (its own names stay seed 002's)
    (_is("src/agentkeep/server/sse.py"), _sub(r"\b_sub\.session_id\b", "_sub.agent_id")),
    # the library's docs: AgentSystem.events / subscribe take the agent's id
    (
        _is("docs/ledger.md", "docs/drivers.md"),
        _sub(r"\b(events|subscribe)\(session_id\b", r"\1(agent_id"),
    ),
]

_GLOBAL = [(re.compile(r"\b" + re.escape(old) + r"(?!\w)"), new) for old, new in RENAMES.items()]


def rename(path: Path, text: str) -> str:
    """``text`` with every rename applied (the global ones first, then the scoped ones)."""
    for pattern, new in _GLOBAL:
        text = pattern.sub(new, text)
    for predicate, rewrite in SCOPED:
        if predicate(path, text):
            text = rewrite(text)
    return text


def _files(arguments: list[str]) -> list[Path]:
    roots = [Path(a) for a in arguments] or [ROOT / p for p in DEFAULT_PATHS]
    files: list[Path] = []
    for root in roots:
        if root.is_dir():
            files += sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        elif root.is_file():
            files.append(root)
    return [f for f in files if f.resolve() not in SKIP and ".venv" not in f.parts]


def _moves(check: bool) -> list[str]:
    """``git mv`` each moved file still at its old path (or, with ``check``, name it)."""
    moved = []
    for old, new in MOVED_FILES.items():
        if (ROOT / old).exists() and not (ROOT / new).exists():
            moved.append(f"{old} -> {new}")
            if not check:
                subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    return moved


def main(argv: list[str]) -> int:
    """Move and rewrite the files (or, with ``--check``, report the ones that would change)."""
    check = "--check" in argv
    arguments = [a for a in argv if a != "--check"]
    moved = [] if arguments else _moves(check)
    changed = []
    for path in _files(arguments):
        text = path.read_text(encoding="utf-8")
        new = rename(path.resolve(), text)
        if new != text:
            changed.append(str(path))
            if not check:
                path.write_text(new, encoding="utf-8")
    for line in moved + changed:
        print(("would change " if check else "changed ") + line)
    return 1 if check and (moved or changed) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
