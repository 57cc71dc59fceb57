"""One word per concept: the provider-side session is a *model session*, the live agent actors
are the *agent tier*, and the old names do not come back.

``scripts/rename_model_session.py`` holds the mapping (old → new) in one place; here it must
find nothing left to rename in the library and its documentation. A branch written against
the old names fails this test; running the script fixes it.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import agentkeep as ak
import agentkeep.providers as providers
from agentkeep.agent_system import SystemOptions
from agentkeep.providers import ModelSessionBusyError, ModelSessionClosedError
from agentkeep.providers.protocol import ModelSession

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str = "rename_model_session") -> ModuleType:
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_old_name_is_left_in_the_library_or_its_docs() -> None:
    script = _script()
    files = [
        *sorted((ROOT / "src").rglob("*.py")),
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    assert len(files) > 100  # the walk is not vacuous
    stale = [
        str(path.relative_to(ROOT))
        for path in files
        if script.rename(path, (text := path.read_text(encoding="utf-8"))) != text
    ]
    assert stale == [], "run scripts/rename_model_session.py on these files"


def test_the_rename_is_idempotent_and_keeps_seed_002s_session() -> None:
    rename = _script().rename
    path = ROOT / "src" / "agentkeep" / "example.py"
    old = (
        "from agentkeep.providers.protocol import CancelToken, Session\n"
        "from agentkeep.actors.registry import AgentRegistry\n"
        "def f(p: Provider, s: Session) -> None:\n"
        "    p.open_session(agent, SessionOptions(instructions=''))\n"
        "    raise ProviderSessionBusyError(f'Session \"{x}\" is busy')\n"
    )
    new = rename(path, old)
    assert new == (
        "from agentkeep.providers.protocol import CancelToken, ModelSession\n"
        "from agentkeep.actors.agent_tier import AgentTier\n"
        "def f(p: Provider, s: ModelSession) -> None:\n"
        "    p.open_model_session(agent, ModelSessionOptions(instructions=''))\n"
        "    raise ModelSessionBusyError(f'Session \"{x}\" is busy')\n"
    )
    assert rename(path, new) == new
    # Where the provider's Session is not imported, "Session" is the wire's and stays.
    wire = "class SessionOut: ...\nSession = SessionRecord\nsystem.sessions.start('a')\n"
    assert rename(ROOT / "src" / "agentkeep" / "server" / "x.py", wire) == wire


def test_the_model_session_is_exported_under_its_one_name() -> None:
    assert ak.providers.ModelSession is ModelSession is providers.ModelSession
    for old in ("Session", "SessionOptions", "ProviderSessionBusyError", "OpenedSession"):
        assert not hasattr(ak, old)
        assert not hasattr(providers, old)
    # The wire codes are the contract: they keep their names.
    assert ModelSessionBusyError.code == "provider_session_busy"
    assert ModelSessionClosedError.code == "provider_session_closed"


# -- the conversation's id: agent_id inside the library, session_id only at seed 002's edges --

_LIBRARY = ROOT / "src" / "agentkeep"
# Where seed 002's names are the contract, ``session_id`` is its word (REST.md, MCP.md, the
# client, the sessions service, DRIVERS.md's driver runtime over sessions and turns).
SESSION_ID_PACKAGES = ("server", "mcp", "client", "sessions", "drivers")
# The CLI's ``agentkeep session …`` commands (their SESSION_ID argument, CLI.md), the client
# Backend they talk through (store_reader implements it), and the demo's REST calls.
SESSION_ID_MODULES = (
    "cli/admin.py",
    "cli/conversations.py",
    "cli/demo_daemon_steps.py",
    "cli/messaging.py",
    "cli/store_reader.py",
    "cli/talking.py",
    "cli/turn_waiting.py",
)
# Seed 002's record shapes (on the wire as ``sessionId``) and its sessions error.
SESSION_ID_CLASSES = {
    ("types/ledger.py", "SessionEvent"),
    ("types/turns.py", "TurnRecord"),
    ("errors.py", "SessionArchivedError"),
}
# A keyword ``session_id=`` builds one of those records.
SESSION_ID_RECORDS = {"SessionEvent", "TurnRecord"}
_OLD_IDS = {"session_id", "_session_id"}


def _session_ids_in(relative: str, source: str) -> list[str]:
    """Where ``source`` (the module at ``relative``, under src/agentkeep) uses ``session_id``
    as a name of its own: a variable, a parameter, an attribute it sets or reads on ``self``,
    a field it declares, a keyword it passes, outside the allowed classes. Reading
    ``record.session_id`` is allowed: the field's declaration is what is checked."""
    tree = ast.parse(source)
    allowed_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (relative, node.name) in SESSION_ID_CLASSES:
            allowed_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            found += [
                f"{relative}:{keyword.lineno}: {callee}({keyword.arg}=...)"
                for keyword in node.keywords
                if keyword.arg in _OLD_IDS and callee not in SESSION_ID_RECORDS
            ]
            continue
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.Attribute):
            reads_a_record = isinstance(node.ctx, ast.Load) and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"
            )
            name = "" if reads_a_record else node.attr
        else:
            continue
        if name in _OLD_IDS and node.lineno not in allowed_lines:
            found.append(f"{relative}:{node.lineno}: {name}")
    return sorted(found)


def test_session_id_lives_only_where_seed_002s_names_are_the_contract() -> None:
    files = [
        path
        for path in sorted(_LIBRARY.rglob("*.py"))
        if path.relative_to(_LIBRARY).parts[0] not in SESSION_ID_PACKAGES
        and path.relative_to(_LIBRARY).as_posix() not in SESSION_ID_MODULES
    ]
    assert len(files) > 150  # the walk is not vacuous
    for allowed in (*SESSION_ID_PACKAGES, *SESSION_ID_MODULES):
        assert (_LIBRARY / allowed).exists(), f"{allowed} moved: update the allowed list"
    found = [
        where
        for path in files
        for where in _session_ids_in(
            path.relative_to(_LIBRARY).as_posix(), path.read_text(encoding="utf-8")
        )
    ]
    assert found == [], (
        "inside the library the conversation's id is agent_id "
        "(scripts/rename_agent_id.py renames the known ones)"
    )


def test_the_session_id_check_sees_parameters_attributes_and_keywords() -> None:
    source = (
        "class Hub:\n"
        "    def watch(self, session_id: str) -> None:\n"
        "        self.session_id = session_id\n"
        "        log.info('x', session_id=self.session_id)\n"
        "        SessionEvent(session_id=turn.session_id)\n"
        "class SessionEvent:\n"
        "    session_id: str\n"
    )
    assert _session_ids_in("persistence/hub.py", source) == [
        "persistence/hub.py:2: session_id",
        "persistence/hub.py:3: session_id",
        "persistence/hub.py:3: session_id",
        "persistence/hub.py:4: info(session_id=...)",
        "persistence/hub.py:4: session_id",
        "persistence/hub.py:7: session_id",
    ]
    # The record's own field is seed 002's: declaring it there is allowed.
    assert _session_ids_in("types/ledger.py", source)[-1] == "types/ledger.py:4: session_id"


def test_no_old_word_for_the_agent_or_its_acceptance_is_left() -> None:
    """``scripts/rename_agent_id.py`` (the mapping: session_id → agent_id inside the library,
    server_tools → provider_tools, deliver/offer → accept/send) finds nothing left to do."""
    script = _script("rename_agent_id")
    files = [
        *sorted((ROOT / "src").rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    stale = [
        str(path.relative_to(ROOT))
        for path in files
        if path.resolve() not in script.SKIP
        and script.rename(path, (text := path.read_text(encoding="utf-8"))) != text
    ]
    assert stale == [], "run scripts/rename_agent_id.py on these files"
    assert all(not (ROOT / old).exists() for old in script.MOVED_FILES)


def test_the_agent_id_rename_is_idempotent_and_keeps_seed_002s_names() -> None:
    rename = _script("rename_agent_id").rename
    hub = ROOT / "src" / "agentkeep" / "persistence" / "ledger" / "hub.py"
    old = (
        "def publish(self, session_id: str) -> None:\n"
        "    SessionEvent(session_id=session_id)\n"
        "    system.internals.deliver(a, 'send', m)\n"
        "    self._acceptance.offer(None, a, 'send', m, {}, where='x')\n"
        "    AgentSystem.open(server_tools=[tool])\n"
    )
    new = rename(hub, old)
    assert new == (
        "def publish(self, agent_id: str) -> None:\n"
        "    SessionEvent(session_id=agent_id)\n"
        "    system.internals.accept(a, 'send', m)\n"
        "    self._acceptance.send(None, a, 'send', m, {}, where='x')\n"
        "    AgentSystem.open(provider_tools=[tool])\n"
    )
    assert rename(hub, new) == new
    # Seed 002's packages keep session_id; the loop's consume offer is another act.
    wire = "def get(session_id: str) -> None:\n    offer = self._core.offer()\n"
    assert rename(ROOT / "src" / "agentkeep" / "sessions" / "x.py", wire) == wire


def test_provider_tools_is_the_option_of_provider_owned_tools() -> None:
    assert "provider_tools" in SystemOptions.__annotations__
    assert "server_tools" not in SystemOptions.__annotations__
    assert importlib.util.find_spec("agentkeep.loop.provider_calls") is not None
    assert importlib.util.find_spec("agentkeep.loop.server_calls") is None


def test_registry_is_only_the_definitions() -> None:
    # The providers by id are a catalog; "registry" is agentkeep.registry's definitions.
    assert importlib.util.find_spec("agentkeep.providers.catalog") is not None
    assert importlib.util.find_spec("agentkeep.providers.registry") is None
    assert importlib.util.find_spec("agentkeep.registry") is not None
