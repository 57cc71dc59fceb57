"""Apply issue 30's "one word per concept" renames of the provider-side session (idempotent).

"Session" on its own is seed 002's session (our agent, a durable conversation). What a
provider opens for one agent inside the runtime is a *model session*; the agent tier that owns
the live actors is the *agent tier*. This script rewrites the old identifiers to the new ones
with word-boundary regular expressions, so it can be run again on any file that still has the
old names (a branch merged after the rename) and changes nothing the second time.

Usage::

    python scripts/rename_model_session.py            # src tests bench scripts docs
    python scripts/rename_model_session.py FILE...    # only these files (or directories)
    python scripts/rename_model_session.py --check    # exit 1 if a file would change

The mapping is in one place below: ``RENAMES`` (safe anywhere) and ``SCOPED`` (only in files
a predicate picks, where the old word is ambiguous elsewhere). Module moves themselves
(``git mv``) are not done here: see ``MOVED_MODULES``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("src", "tests", "bench", "scripts", "docs")
SUFFIXES = (".py", ".md")
# Never rewritten: this script and the test that pins it (both spell the old names on purpose).
SKIP = (Path(__file__).resolve(), ROOT / "tests" / "unit" / "test_naming.py")

# The modules that moved (old path → new path, relative to src/agentkeep): `git mv` them.
MOVED_MODULES = {
    "providers/local_session.py": "providers/local_model_session.py",
    "providers/_vendor_session.py": "providers/_vendor_model_session.py",
    "actors/sessions.py": "actors/model_session.py",
    "actors/registry.py": "actors/agent_tier.py",
}

# Old → new, each matched on word boundaries; every new name differs from the old one so
# that the old pattern never matches it (idempotent).
RENAMES: dict[str, str] = {
    # the protocol and its options (providers.protocol, types.content)
    "agentkeep.providers.protocol.Session": "agentkeep.providers.protocol.ModelSession",
    "agentkeep.providers.Session": "agentkeep.providers.ModelSession",
    "agentkeep.Session": "agentkeep.ModelSession",
    "ak.Session": "ak.ModelSession",
    "SessionOptions": "ModelSessionOptions",
    "open_session": "open_model_session",
    # the implementations
    "OpenedSession": "OpenedModelSession",
    "_ScriptedSession": "_ScriptedModelSession",
    "_RespondingSession": "_RespondingModelSession",
    "AnthropicSession": "AnthropicModelSession",
    "OpenAISession": "OpenAIModelSession",
    "OpenAIChatSession": "OpenAIChatModelSession",
    "OpenAIResponsesSession": "OpenAIResponsesModelSession",
    "VendorSession": "VendorModelSession",
    "SessionRules": "ModelSessionRules",
    "SessionSlot": "ModelSessionSlot",
    "closed_sessions": "closed_model_sessions",  # ScriptedModel's record of closed ones
    # errors (their wire codes stay provider_session_busy / provider_session_closed)
    "ProviderSessionBusyError": "ModelSessionBusyError",
    "ProviderSessionClosedError": "ModelSessionClosedError",
    # prose: what a provider opens inside an agent is a model session
    "provider session": "model session",
    "provider sessions": "model sessions",
    # the agent tier (actors.registry collided with agentkeep.registry's definitions)
    "agent registry": "agent tier",
    "AgentRegistry": "AgentTier",
    # modules
    "agentkeep.providers.local_session": "agentkeep.providers.local_model_session",
    "agentkeep.providers._vendor_session": "agentkeep.providers._vendor_model_session",
    "_vendor_session": "_vendor_model_session",
    "local_session": "local_model_session",
    "agentkeep.actors.sessions": "agentkeep.actors.model_session",
    "agentkeep.actors.registry": "agentkeep.actors.agent_tier",
    "from agentkeep.actors import registry": "from agentkeep.actors import agent_tier",
    **{f"src/agentkeep/{old}": f"src/agentkeep/{new}" for old, new in MOVED_MODULES.items()},
    **MOVED_MODULES,
}


def _imports_provider_session(text: str) -> bool:
    """Whether the file imports the provider protocol's ``Session`` (so a bare ``Session`` in
    it is the model session, not seed 002's)."""
    for match in re.finditer(
        r"from agentkeep(?:\.providers(?:\.protocol)?)? import (\([^)]*\)|[^\n]*)", text
    ):
        names = re.split(r"[\s,()]+", match.group(1))
        if "Session" in names:
            return True
    return False


def _records_scripted_sessions(text: str) -> bool:
    """Whether the file reads a ScriptedModel's records (opened/closed model sessions)."""
    return bool(re.search(r"\bmodel\.(?:model_)?sessions\b|closed_(?:model_)?sessions", text))


def _is(*parts: str) -> Callable[[Path, str], bool]:
    def predicate(path: Path, _text: str) -> bool:
        return path.as_posix().endswith(parts) or any(f"/{p}/" in path.as_posix() for p in parts)

    return predicate


# (predicate on (path, text), pattern, replacement): applied only where the predicate holds.
Scoped = tuple[Callable[[Path, str], bool], str, str]
SCOPED: list[Scoped] = [
    # the protocol class, where it is imported (not the word in a 'Session "x" ...' message)
    (lambda _p, text: _imports_provider_session(text), r'\bSession\b(?! ")', "ModelSession"),
    (_is("providers/protocol.py"), r'\bSession\b(?! ")', "ModelSession"),
    (_is("tests/unit/test_public_api.py"), r'"Session",', '"ModelSession",'),
    # ScriptedModel's records: model.sessions → model.model_sessions
    (lambda _p, _t: True, r"\bmodel\.sessions\b", "model.model_sessions"),
    (_is("providers/scripted.py"), r"\bdef sessions\b", "def model_sessions"),
    (_is("providers/scripted.py"), r"\bself\._sessions\b", "self._model_sessions"),
    (_is("providers/scripted.py"), r":attr:`sessions`", ":attr:`model_sessions`"),
    # inside the providers the "session id" is the agent's id
    (_is("src/agentkeep/providers"), r"\bsession_id\b", "agent_id"),
    # what a ScriptedModel recorded carries the agent's id
    (
        lambda path, text: "tests" in path.parts and _records_scripted_sessions(text),
        r"\b(session|s|request)\.session_id\b",
        r"\1.agent_id",
    ),
    (
        lambda path, text: "tests" in path.parts and _records_scripted_sessions(text),
        r"(\.requests\[-?\d+\])\.session_id\b",
        r"\1.agent_id",
    ),
    (_is("tests/unit/providers/test_scripted.py"), r"\brequest\.session_id\b", "request.agent_id"),
    # the agent actor's model session
    (_is("actors/agent_actor.py"), r"\bself\._sessions\b", "self._model_session"),
    (_is("actors/agent_actor.py"), r"\b_session_for\b", "_model_session_for"),
    (
        _is("actors/agent_actor.py", "actors/model_session.py"),
        r"\.session_for\(",
        ".model_session_for(",
    ),
    (_is("actors/model_session.py"), r"\bdef session_for\b", "def model_session_for"),
]

_GLOBAL = [(re.compile(r"\b" + re.escape(old) + r"(?!\w)"), new) for old, new in RENAMES.items()]


def rename(path: Path, text: str) -> str:
    """``text`` with every rename applied (the global ones first, then the scoped ones)."""
    for pattern, new in _GLOBAL:
        text = pattern.sub(new, text)
    for predicate, scoped_pattern, replacement in SCOPED:
        if predicate(path, text):
            text = re.sub(scoped_pattern, replacement, text)
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


def main(argv: list[str]) -> int:
    """Rewrite the files (or, with ``--check``, report the ones that would change)."""
    check = "--check" in argv
    changed = []
    for path in _files([a for a in argv if a != "--check"]):
        text = path.read_text(encoding="utf-8")
        new = rename(path.resolve(), text)
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(("would change " if check else "changed ") + str(path))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
