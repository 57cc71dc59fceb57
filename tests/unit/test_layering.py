"""The import layering of ``src/agentkeep``: no module imports a layer above its own.

``LAYERS`` below is the layering, written once (``docs/architecture.md`` draws it). Each row is
one component: a rank and the modules (and their submodules) it holds. A module may import
its own component and any component of a lower rank; a component of the same rank is a peer
it may not import (the loop, the store and the providers know nothing of each other).

Every import counts: module-level, inside functions (a lazy import is still a dependency)
and under ``if TYPE_CHECKING:`` (an annotation naming a class of a higher layer couples the
code to it just the same; a lower layer that needs something from a higher one declares a
``Protocol`` for it, as ``agentkeep.refs.SystemPort`` does for the ``AgentSystem``).

Inside a component too, every dependency has one direction: no module reaches itself through
its imports (``ALLOWED_CYCLES`` would list a cycle kept on purpose; it is empty).
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
            "agentkeep.key_value",
            # Low, not in the system package: the registry (rank 3) admits its writes
            # through it, and the CLI's store reader uses the registry without a system.
            "agentkeep._admission",
            "agentkeep.config",
            # The per-system Prometheus registry and its counters, fed by actors and read
            # by the system and the daemon.
            "agentkeep.metrics",
            # OpenTelemetry's tracer and the span vocabulary: the writer (rank 2) emits spans.
            "agentkeep.tracing",
            # Partition(index, count) and partition_of: the store, the registry's owner
            # check and the system use them; nothing of PostgreSQL.
            "agentkeep.partitions",
        ),
    ),
    Component(2, "loop", ("agentkeep.loop",)),
    Component(2, "persistence", ("agentkeep.persistence", "agentkeep.fault_injection")),
    Component(2, "providers", ("agentkeep.providers",)),
    Component(3, "runtime", ("agentkeep.runtime",)),
    # ``delivery``: the acceptance transaction (``accept_message``), which the system's
    # acceptance object and the actors' hook actions both run.
    Component(3, "access", ("agentkeep.delivery", "agentkeep.messages", "agentkeep.history")),
    Component(3, "registry", ("agentkeep.registry",)),
    # Which partitions of a PostgreSQL store a worker runs; it opens them through its own
    # protocol (``cluster.protocol``), never through the system.
    Component(3, "cluster", ("agentkeep.cluster",)),
    Component(
        4,
        "extension",
        (
            "agentkeep.system_transaction",
            "agentkeep.refs",
            "agentkeep.tools",
            "agentkeep.features",
            # A module's hooks are a feature; the actors and the system run them.
            "agentkeep.modules",
        ),
    ),
    Component(5, "actors", ("agentkeep.actors",)),
    # A session's durable records: what the drivers and the system's parts read and write.
    Component(
        6,
        "session records",
        (
            "agentkeep.sessions.errors",
            "agentkeep.sessions.types",
            "agentkeep.sessions.tables",
            "agentkeep.sessions.setup",
            "agentkeep.sessions.owing",
            "agentkeep.sessions.recovery",
        ),
    ),
    Component(7, "drivers", ("agentkeep.drivers",)),
    # The parts the facade is composed of (reads, delivery, stopping, opening, ...).
    Component(
        8,
        "system parts",
        (
            "agentkeep.agent_system._acceptance",
            "agentkeep.agent_system._driver_turns",
            "agentkeep.agent_system._internals",
            "agentkeep.agent_system._metrics",
            "agentkeep.agent_system._opening",
            "agentkeep.agent_system._ownership",
            "agentkeep.agent_system._reads",
            "agentkeep.agent_system._requests",
            "agentkeep.agent_system._rows",
            "agentkeep.agent_system._signals",
            "agentkeep.agent_system._stopping",
            "agentkeep.agent_system._transactions",
            "agentkeep.agent_system.surfaces",
        ),
    ),
    # The sessions service runs on the system's parts (its acceptance, its reads); the
    # facade hands it out.
    Component(9, "sessions", ("agentkeep.sessions",)),
    Component(
        10,
        "facade",
        (
            "agentkeep",
            # The package, its facade (``_facade``, ``_agent``) and ``compaction``.
            "agentkeep.agent_system",
        ),
    ),
    Component(11, "chaos", ("agentkeep.chaos",)),
    Component(11, "server", ("agentkeep.server",)),
    # The MCP tools show the REST API's very JSON (server/wire.py: one message shape, ISO
    # timestamps), so they sit above the server.
    Component(12, "mcp", ("agentkeep.mcp",)),
    Component(13, "client", ("agentkeep.client",)),
    Component(14, "cli", ("agentkeep.cli",)),
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


def test_the_surfaces_reach_the_store_only_through_the_system() -> None:
    """The daemon, the MCP server and the client read the store through the facade or its
    one documented reader (``agentkeep.agent_system.surfaces``), never ``persistence``."""
    surfaces = ("agentkeep.server", "agentkeep.mcp", "agentkeep.client")
    for module, targets in dependencies().items():
        if module.startswith(surfaces):
            assert {t for t in targets if t.startswith("agentkeep.persistence")} == set(), module


def test_one_acceptance_path_and_no_protocol_back_up_from_the_sessions() -> None:
    """``Sessions.send`` reaches the system's acceptance object directly (it sits below the
    sessions service): no Protocol in ``sessions`` for the system to implement, and the
    system's parts never import the sessions service."""
    for module, path in source_modules().items():
        if module.startswith("agentkeep.sessions"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            protocols = [
                node.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef)
                and any(getattr(base, "id", None) == "Protocol" for base in node.bases)
            ]
            assert protocols == [], module
    deps = dependencies()
    for part in next(c for c in LAYERS if c.name == "system parts").modules:
        assert not any(t.startswith("agentkeep.sessions.service") for t in deps[part]), part


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


# -- inside the loop: a tree, driven from ``transitions`` --------------------------------------

LOOP = "agentkeep.loop"
TRANSITIONS = "agentkeep.loop.transitions"
# The facade: ``AgentLoop.handle`` hands each event to ``transitions.handle``. It is the root of
# the loop's tree, above ``transitions``; nothing else may reach ``transitions``.
LOOP_ROOT = "agentkeep.loop.machine"


def loop_dependencies(deps: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The imports among the loop's own modules."""

    def inside(module: str) -> bool:
        return module == LOOP or module.startswith(LOOP + ".")

    return {m: {t for t in ts if inside(t)} for m, ts in deps.items() if inside(m)}


def import_cycles(deps: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a cycle), and
    each module importing itself."""
    graph = {m: set(ts) for m, ts in deps.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in graph.get(module, ()):
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_only_the_loop_facade_imports_transitions() -> None:
    """The step modules report what happened (``loop.outcomes.Outcome``) and ``transitions``
    acts on it: no step calls back into it."""
    loop = loop_dependencies(dependencies())
    assert TRANSITIONS in loop  # the walk found the loop
    assert len(loop) > 15
    importers = sorted(m for m, targets in loop.items() if TRANSITIONS in targets)
    assert importers == [LOOP_ROOT]


# Import cycles kept on purpose, each a sorted list of its modules; each member's docstring
# says why in one sentence. Empty: every dependency inside ``src/agentkeep`` has one direction.
ALLOWED_CYCLES: list[list[str]] = []


def test_no_import_cycle_but_the_allowed() -> None:
    """No module reaches itself through its imports (lazy and ``TYPE_CHECKING`` ones count):
    a shared piece lives below both users, and a part that needs its owner's type declares a
    ``Protocol`` for it (``drivers.runner.RunnerHost``, ``chaos.process.ProcessWorld``)."""
    deps = dependencies()
    assert len(deps) > 250  # the walk found the package
    unexpected = [c for c in import_cycles(deps) if c not in ALLOWED_CYCLES]
    assert unexpected == []


def test_the_cycle_check_finds_a_ring_and_a_step_calling_back() -> None:
    """The checks above catch what they are for: a step importing ``transitions`` (a ring)."""
    deps = {
        LOOP_ROOT: {TRANSITIONS},
        TRANSITIONS: {"agentkeep.loop.landing", "agentkeep.loop.tools"},
        "agentkeep.loop.landing": {"agentkeep.loop.tools", TRANSITIONS},
        "agentkeep.loop.tools": set(),
    }
    assert import_cycles(loop_dependencies(deps)) == [["agentkeep.loop.landing", TRANSITIONS]]
    assert import_cycles({"a": {"a"}}) == [["a"]]
    deps["agentkeep.loop.landing"].discard(TRANSITIONS)
    assert import_cycles(loop_dependencies(deps)) == []
