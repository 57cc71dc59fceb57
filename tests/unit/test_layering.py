"""The import layering of ``src/agentkeep``: no module imports a layer above its own.

``LAYERS`` below is the layering, written once (``docs/architecture.md`` draws it). Each row is
one component: a rank and the modules (and their submodules) it holds. A module may import
its own component and any component of a lower rank; a component of the same rank is a peer
it may not import (the loop, the store and the providers know nothing of each other).

Every import counts: module-level, inside functions (a lazy import is still a dependency)
and under ``if TYPE_CHECKING:`` (an annotation naming a class of a higher layer couples the
code to it just the same; a lower layer that needs something from a higher one declares a
``Protocol`` for it, as ``agentkeep.refs.SystemPort`` does for the ``AgentSystem``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "agentkeep"


class Component(NamedTuple):
    rank: int
    name: str
    modules: tuple[str, ...]


# The layering, lowest first. ``agentkeep`` itself (the package's ``__init__``: the public
# re-exports) is matched exactly, never as a prefix of every module.
LAYERS: tuple[Component, ...] = (
    Component(0, "types", ("agentkeep.types",)),
    Component(
        1,
        "base",
        (
            "agentkeep.errors",
            "agentkeep.logs",
            "agentkeep._signals",
            "agentkeep.key_value",
            "agentkeep._tool_schema",
            "agentkeep._admission",
            "agentkeep.config",
        ),
    ),
    Component(2, "loop", ("agentkeep.loop",)),
    Component(2, "persistence", ("agentkeep.persistence", "agentkeep.fault_injection")),
    Component(2, "providers", ("agentkeep.providers",)),
    Component(3, "runtime", ("agentkeep.runtime",)),
    Component(3, "access", ("agentkeep.delivery", "agentkeep.messages", "agentkeep.history")),
    Component(3, "registry", ("agentkeep.registry",)),
    Component(
        4,
        "extension",
        (
            "agentkeep.refs",
            "agentkeep.tools",
            "agentkeep._tool_context",
            "agentkeep._tool_arguments",
            "agentkeep._tool_results",
            "agentkeep._tool_checks",
            "agentkeep._tool_signature",
            "agentkeep.server_tools",
            "agentkeep.features",
            "agentkeep._feature_arguments",
            "agentkeep.tool_hooks",
        ),
    ),
    Component(5, "actors", ("agentkeep.actors",)),
    Component(
        6,
        "system",
        (
            "agentkeep",
            "agentkeep.agent_system",
            "agentkeep.agent",
            "agentkeep._agent_rows",
            "agentkeep._system_delivery",
            "agentkeep._system_opening",
            "agentkeep._system_reads",
            "agentkeep._system_stopping",
            "agentkeep.sessions",
            "agentkeep.drivers",
        ),
    ),
    Component(7, "chaos", ("agentkeep.chaos",)),
    Component(7, "server", ("agentkeep.server",)),
    # The MCP tools show the REST API's very JSON (server/wire.py: one message shape, ISO
    # timestamps), so they sit above the server.
    Component(8, "mcp", ("agentkeep.mcp",)),
    Component(9, "client", ("agentkeep.client",)),
    Component(10, "cli", ("agentkeep.cli",)),
)


def component_of(module: str, layers: Iterable[Component] = LAYERS) -> Component | None:
    """The component holding ``module``: the longest listed name it is or lies under."""
    best: tuple[int, Component] | None = None
    for component in layers:
        for name in component.modules:
            matches = module == name or (name != ROOT and module.startswith(name + "."))
            if matches and (best is None or len(name) > best[0]):
                best = (len(name), component)
    return best[1] if best is not None else None


def imports_of(source: str, module: str, *, is_package: bool, known: set[str]) -> set[str]:
    """Every ``agentkeep`` module ``source`` imports, wherever the import statement sits.

    ``from pkg import name`` counts as ``pkg.name`` when that is a module (``known``), so
    ``from agentkeep.runtime import commit_plans`` depends on the submodule, not just the
    package. Relative imports are resolved against ``module``.
    """
    found: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m == ROOT or m.startswith(ROOT + ".")}


def source_modules(src: Path = SRC) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def dependencies(src: Path = SRC) -> dict[str, set[str]]:
    modules = source_modules(src)
    known = set(modules)
    return {
        module: imports_of(
            path.read_text(encoding="utf-8"),
            module,
            is_package=path.name == "__init__.py",
            known=known,
        )
        for module, path in modules.items()
    }


def violations(
    deps: Mapping[str, Iterable[str]], layers: Iterable[Component] = LAYERS
) -> list[str]:
    """Each import that goes upward or sideways to a peer, and each unplaced module."""
    layers = tuple(layers)
    found: list[str] = []
    for module, targets in sorted(deps.items()):
        own = component_of(module, layers)
        if own is None:
            found.append(f"{module} is in no layer: add it to LAYERS")
            continue
        for target in sorted(targets):
            other = component_of(target, layers)
            if other is None:
                found.append(f"{module} imports {target}, which is in no layer")
            elif other.name == own.name:
                continue
            elif other.rank > own.rank:
                found.append(
                    f"{module} ({own.name}, rank {own.rank}) imports {target} "
                    f"({other.name}, rank {other.rank}): upward"
                )
            elif other.rank == own.rank:
                found.append(
                    f"{module} ({own.name}) imports {target} ({other.name}): peers of rank "
                    f"{own.rank} may not import each other"
                )
    return found


# -- the real tree -------------------------------------------------------------------------


def test_no_module_imports_upward_or_into_a_peer() -> None:
    deps = dependencies()
    assert len(deps) > 100  # the walk found the package
    assert violations(deps) == []


def test_the_domain_layer_imports_nothing_else_of_agentkeep() -> None:
    for module, targets in dependencies().items():
        if module == "agentkeep.types" or module.startswith("agentkeep.types."):
            assert {t for t in targets if not t.startswith("agentkeep.types")} == set(), module


def test_the_loop_imports_neither_the_store_nor_the_actors() -> None:
    for module, targets in dependencies().items():
        if module.startswith("agentkeep.loop"):
            forbidden = {
                t
                for t in targets
                if t.startswith(("agentkeep.persistence", "agentkeep.actors", "agentkeep.runtime"))
            }
            assert forbidden == set(), module


def test_every_listed_module_exists() -> None:
    """A stale row (a module renamed away) would silently stop guarding anything."""
    modules = set(source_modules())
    for component in LAYERS:
        for name in component.modules:
            assert name in modules, f"{component.name} lists {name}, which does not exist"


# -- the check itself, on synthetic trees ----------------------------------------------------


@pytest.mark.parametrize(
    ("module", "target", "why"),
    [
        ("agentkeep.loop.machine", "agentkeep.persistence.store", "peers"),
        ("agentkeep.loop.machine", "agentkeep.actors.agent_tier", "upward"),
        ("agentkeep.types.content", "agentkeep.errors", "upward"),
        ("agentkeep.persistence.codec", "agentkeep.providers.protocol", "peers"),
        ("agentkeep.refs", "agentkeep.agent_system", "upward"),
        ("agentkeep.chaos.world", "agentkeep.cli.output", "upward"),
        ("agentkeep.errors", "agentkeep", "upward"),
    ],
)
def test_a_forbidden_import_is_reported(module: str, target: str, why: str) -> None:
    found = violations({module: [target]})
    assert len(found) == 1
    assert target in found[0]
    assert why in found[0]


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("agentkeep.loop.machine", "agentkeep.types"),
        ("agentkeep.loop.machine", "agentkeep.loop.state"),
        ("agentkeep.runtime.commit_plans", "agentkeep.persistence.interface"),
        ("agentkeep.actors.agent_actor", "agentkeep.runtime.commit_plans"),
        ("agentkeep.cli.chaos", "agentkeep.chaos.campaigns"),
        ("agentkeep", "agentkeep.agent_system"),
    ],
)
def test_a_downward_or_internal_import_passes(module: str, target: str) -> None:
    assert violations({module: [target]}) == []


def test_a_module_in_no_layer_is_reported() -> None:
    assert violations({"agentkeep.newthing": []}) == [
        "agentkeep.newthing is in no layer: add it to LAYERS"
    ]
    assert "in no layer" in violations({"agentkeep.loop.machine": ["agentkeep.newthing"]})[0]


def test_the_root_package_is_not_a_prefix_of_every_module() -> None:
    table = (Component(0, "low", ("agentkeep.low",)), Component(1, "top", (ROOT,)))
    assert component_of("agentkeep.other", table) is None
    assert component_of(ROOT, table) == table[1]


def test_the_parser_sees_type_checking_lazy_and_relative_imports() -> None:
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import json
import agentkeep.errors
from . import state
from .plans import Plan
from agentkeep.runtime import commit_plans

if TYPE_CHECKING:
    from agentkeep.agent_system import AgentSystem

def lazy() -> None:
    from agentkeep.actors import agent_tier
"""
    known = {"agentkeep.loop.state", "agentkeep.runtime.commit_plans"}
    found = imports_of(source, "agentkeep.loop.machine", is_package=False, known=known)
    assert found == {
        "agentkeep.errors",
        "agentkeep.loop.state",  # ``from . import state``, resolved against the module
        "agentkeep.loop.plans",
        "agentkeep.runtime.commit_plans",
        "agentkeep.agent_system",
        "agentkeep.actors",
    }
    # The same upward imports, fed to the check, are caught.
    assert len(violations({"agentkeep.loop.machine": found})) == 3


def test_a_deliberate_upward_import_in_a_real_tree_fails(tmp_path: Path) -> None:
    """Copy two real modules into a scratch tree, add an upward import to one: caught."""
    package = tmp_path / ROOT
    (package / "loop").mkdir(parents=True)
    (package / "actors").mkdir()
    for path in (package / "__init__.py", package / "loop/__init__.py"):
        path.write_text("")
    (package / "actors/__init__.py").write_text("")
    (package / "loop/requests.py").write_text(
        (SRC / ROOT / "loop/requests.py").read_text(encoding="utf-8")
        + "\nfrom agentkeep.actors import agent_tier  # deliberate: the loop reaching up\n"
    )
    (package / "actors/agent_tier.py").write_text("")
    found = violations(dependencies(tmp_path))
    assert found == [
        "agentkeep.loop.requests (loop, rank 2) imports agentkeep.actors.agent_tier "
        "(actors, rank 5): upward"
    ]
