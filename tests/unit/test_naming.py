"""One word per concept: the provider-side session is a *model session*, the live agent actors
are the *agent tier*, and the old names do not come back.

``scripts/rename_model_session.py`` holds the mapping (old → new) in one place; here it must
find nothing left to rename in the library and its documentation. A branch written against
the old names fails this test; running the script fixes it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import agentkeep as ak
import agentkeep.providers as providers
from agentkeep.providers.protocol import ModelSession

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    path = ROOT / "scripts" / "rename_model_session.py"
    spec = importlib.util.spec_from_file_location("rename_model_session", path)
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
    assert ak.ModelSession is ModelSession is providers.ModelSession
    for old in ("Session", "SessionOptions", "ProviderSessionBusyError", "OpenedSession"):
        assert not hasattr(ak, old)
        assert not hasattr(providers, old)
    # The wire codes are the contract: they keep their names.
    assert ak.ModelSessionBusyError.code == "provider_session_busy"
    assert ak.ModelSessionClosedError.code == "provider_session_closed"
