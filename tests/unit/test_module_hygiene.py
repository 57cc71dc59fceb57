"""How ``src/agentkeep``'s modules may use each other, beyond the layering
(``tests/unit/test_layering.py``):

- no module imports another module's underscore names (``from agentkeep.x import _helper``,
  or ``x._helper`` on an imported agentkeep module): a name shared between modules is public
  within its package. Importing a private *module* (``from agentkeep.chaos import _mutants``)
  is fine; what it holds is then named without an underscore;
- the deliberately broken runtimes (``agentkeep.chaos._mutants``) are test-only: neither
  ``import agentkeep`` nor ``import agentkeep.chaos`` loads them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.unit.test_layering import ROOT, SRC, source_modules


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def underscore_imports(source: str, modules: Iterable[str]) -> list[str]:
    """Each place ``source`` takes an underscore name out of another agentkeep module."""
    known = set(modules)
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    imported_modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(ROOT) and alias.asname:
                    imported_modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ROOT):
            assert node.module is not None
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in known:  # a module, private or not: bound as a module name
                    imported_modules[alias.asname or alias.name] = target
                elif _private(alias.name):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported_modules
        ):
            module = imported_modules[node.value.id]
            found.append((node.lineno, f"{module}.{node.attr}"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


# -- the real tree -------------------------------------------------------------------------


def test_no_module_imports_another_modules_underscore_names() -> None:
    modules = source_modules()
    found = {
        module: hits
        for module, path in modules.items()
        if (hits := underscore_imports(path.read_text(encoding="utf-8"), modules))
    }
    assert found == {}


def test_importing_the_public_modules_loads_no_mutant() -> None:
    """``agentkeep``, ``agentkeep.chaos`` and every public module of the chaos package (the
    campaigns that can run under a mutant import it when one is named), in a fresh
    interpreter: this one may have loaded the mutants for another test."""
    probe = (
        "import importlib, pkgutil, sys\n"
        "import agentkeep, agentkeep.chaos\n"
        "for info in pkgutil.iter_modules(agentkeep.chaos.__path__, 'agentkeep.chaos.'):\n"
        "    if not info.name.rsplit('.', 1)[1].startswith('_'):\n"
        "        importlib.import_module(info.name)\n"
        "print(sorted(m for m in sys.modules if 'mutant' in m))\n"
        "print('agentkeep.chaos.campaigns' in sys.modules)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.split() == ["[]", "True"]
    assert (SRC / ROOT / "chaos" / "_mutants" / "__init__.py").is_file()


# -- the checks themselves, on synthetic sources ---------------------------------------------


def test_an_underscore_name_taken_from_another_module_is_reported() -> None:
    source = (
        "from agentkeep.persistence.inbox import _Inbox, Counters\n"
        "from agentkeep.chaos import _mutants\n"
        "from agentkeep.chaos import campaigns\n"
        "import agentkeep.loop.retry as retry\n"
        "campaigns._run()\n"
        "retry._helper\n"
        "_mutants.runtime\n"
    )
    modules = {
        "agentkeep.chaos._mutants",
        "agentkeep.chaos.campaigns",
        "agentkeep.loop.retry",
        "agentkeep.persistence.inbox",
    }
    assert underscore_imports(source, modules) == [
        "line 1: from agentkeep.persistence.inbox import _Inbox",
        "line 5: agentkeep.chaos.campaigns._run",
        "line 6: agentkeep.loop.retry._helper",
    ]


def test_the_real_tree_is_walked() -> None:
    """A module of the package is found and read (the checks are not vacuous)."""
    modules: dict[str, Path] = source_modules()
    assert f"{ROOT}.tools.definition" in modules
    assert f"{ROOT}.features.feature_set" in modules
