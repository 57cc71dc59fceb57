"""Every public class, function, method and hook carries a docstring.

The public surface (``docs/architecture.md``, "Public and internal") is what the documented
packages export — ``agentkeep.__all__`` and the ``__all__`` of :mod:`agentkeep.chaos` and of
the role subpackages (``ROLES`` in ``tests/unit/test_public_api.py``) — and every name not
starting with ``_`` of a public module: a module of ``agentkeep`` itself or of a public package
(``PUBLIC_PACKAGES``) whose own name does not start with ``_``. The internal packages
(``INTERNAL_PACKAGES``) are not walked. For each object the walk checks the object itself and,
for a class, every public member (method, classmethod, staticmethod, property) it defines or
inherits from an agentkeep base class, hooks included (:class:`agentkeep.Feature`'s hook
methods are members like any other). A method that overrides a documented base method
inherits its docstring (:func:`inspect.getdoc`), as ``help()`` shows it.

Constants and type aliases (``SUITES``, ``Message``) cannot carry a docstring of their own and
are skipped.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import pytest

SURFACES = (
    "agentkeep",
    "agentkeep.chaos",
    "agentkeep.cluster",
    "agentkeep.types",
    "agentkeep.providers",
    "agentkeep.sessions",
    "agentkeep.registry",
    "agentkeep.drivers",
    "agentkeep.tools",
    "agentkeep.features",
    "agentkeep.modules",
)

# Packages left out of the walk (none: the loop is covered too).
EXCLUDED_PACKAGES: tuple[str, ...] = ()

# The packages whose modules are public unless ``_``-prefixed, and those internal as a whole.
PUBLIC_PACKAGES = (
    "agentkeep.chaos",
    "agentkeep.cluster",
    "agentkeep.providers",
    "agentkeep.registry",
    "agentkeep.sessions",
    "agentkeep.drivers",
    "agentkeep.agent_system",
    "agentkeep.types",
    "agentkeep.server",
    "agentkeep.mcp",
    "agentkeep.tools",
    "agentkeep.features",
    "agentkeep.modules",
    "agentkeep.tracing",
)
INTERNAL_PACKAGES = (
    "agentkeep.loop",
    "agentkeep.runtime",
    "agentkeep.persistence",
    "agentkeep.actors",
    "agentkeep.cli",
    "agentkeep.client",
)


def public_modules() -> list[str]:
    """``agentkeep``'s own modules and the public packages' modules, ``_``-prefixed ones aside."""
    import agentkeep

    names: list[str] = []
    for info in pkgutil.iter_modules(agentkeep.__path__, "agentkeep."):
        if info.name in INTERNAL_PACKAGES:
            continue
        if info.name in PUBLIC_PACKAGES:
            package = importlib.import_module(info.name)
            names.append(info.name)
            names += [m.name for m in pkgutil.walk_packages(package.__path__, info.name + ".")]
        elif not info.ispkg:
            names.append(info.name)
        else:
            raise AssertionError(f"{info.name} is neither a public nor an internal package")
    return sorted(n for n in names if not any(p.startswith("_") for p in n.split(".")))


def _ours(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    if not (module == "agentkeep" or module.startswith("agentkeep.")):
        return False
    return not any(module == p or module.startswith(p + ".") for p in EXCLUDED_PACKAGES)


def _generated(cls: type, doc: str | None) -> bool:
    """A docstring Python wrote itself: a dataclass's or a NamedTuple's signature line."""
    if doc is None:
        return True
    if dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        return doc.startswith(f"{cls.__name__}(")
    return False


def _class_doc(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    if isinstance(cls, enum.EnumMeta) and doc == "An enumeration.":
        return None
    return None if _generated(cls, doc) else doc


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties ``cls`` defines or inherits from agentkeep bases."""
    seen: set[str] = set()
    # A field whose default is a function (``Tool.is_error``) is data, not a method.
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for base in cls.__mro__:
        if not _ours(base):
            continue
        for name, raw in vars(base).items():
            if name.startswith("_") or name in seen or name in fields:
                continue
            kinds = (types.FunctionType, classmethod, staticmethod, property, cached_property)
            if isinstance(raw, kinds):
                seen.add(name)
                yield f"{base.__qualname__}.{name}", getattr(cls, name, raw)


def _member_doc(cls: type, name: str, value: Any) -> str | None:
    if isinstance(value, property):
        doc = value.__doc__
        if doc is None:  # an overriding property inherits, like a method
            for base in cls.__mro__[1:]:
                inherited = vars(base).get(name.rsplit(".", 1)[-1])
                if isinstance(inherited, property) and inherited.__doc__:
                    return inherited.__doc__
        return doc
    return inspect.getdoc(value)


def public_objects() -> Iterator[tuple[str, str | None]]:
    """``(qualified name, docstring or None)`` for everything the test holds to a docstring."""
    seen: set[str] = set()

    def visit_class(where: str, cls: type) -> Iterator[tuple[str, str | None]]:
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key in seen:
            return
        seen.add(key)
        yield f"{where} (class {key})", _class_doc(cls)
        for qualname, value in _members(cls):
            member_key = f"{cls.__module__}.{cls.__qualname__}:{qualname}"
            if member_key in seen:
                continue
            seen.add(member_key)
            name = qualname.rsplit(".", 1)[-1]
            yield f"{key}.{name}", _member_doc(cls, name, value)

    def visit(where: str, obj: Any) -> Iterator[tuple[str, str | None]]:
        if isinstance(obj, types.ModuleType):
            if obj.__name__ in seen:
                return
            seen.add(obj.__name__)
            yield f"{where} (module)", obj.__doc__
            for name, value in vars(obj).items():
                if not name.startswith("_") and _ours(value) and value.__module__ == obj.__name__:
                    yield from visit(f"{obj.__name__}.{name}", value)
        elif inspect.isclass(obj):
            if _ours(obj):
                yield from visit_class(where, obj)
        elif (inspect.isfunction(obj) or inspect.isbuiltin(obj)) and _ours(obj):
            key = f"{obj.__module__}.{obj.__qualname__}"
            if key not in seen:
                seen.add(key)
                yield key, obj.__doc__

    for surface in SURFACES:
        package = importlib.import_module(surface)
        yield f"{surface} (module)", package.__doc__
        for name in package.__all__:
            yield from visit(f"{surface}.{name}", getattr(package, name))
    for module in public_modules():
        yield from visit(module, importlib.import_module(module))


def missing() -> list[str]:
    return sorted(name for name, doc in public_objects() if not (doc and doc.strip()))


def test_every_public_object_has_a_docstring() -> None:
    absent = missing()
    assert absent == [], f"{len(absent)} public objects lack a docstring:\n" + "\n".join(absent)


def test_the_walk_is_not_vacuous() -> None:
    """The walk reaches classes, their methods, Feature's hooks and exported functions."""
    names = {name for name, _ in public_objects()}
    assert len(names) > 600
    for expected in (
        "agentkeep.features.feature.Feature.before_turn",
        "agentkeep.features.feature.Feature.before_tool_call_transact",
        "agentkeep.agent_system._facade.AgentSystem.create",
        "agentkeep.registry.service.Registry.create",
        "agentkeep.chaos.campaigns.run_suite",
        "agentkeep.providers.protocol.ModelSession.stream",
        "agentkeep.chaos.lifecycle_race.Plan.describe",  # a public module's own name
        "agentkeep.tools.definition.ToolSet.descriptors",
    ):
        assert expected in names, expected


class _Undocumented:
    def method(self) -> None:
        pass

    @property
    def prop(self) -> int:
        return 1


@dataclasses.dataclass
class _PlainData:
    x: int


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (_Undocumented, None),
        (_PlainData, None),
    ],
)
def test_generated_or_absent_class_docstrings_count_as_missing(obj: type, expected: None) -> None:
    assert _class_doc(obj) is expected


def test_an_undocumented_member_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Undocumented, "__module__", "agentkeep.fake")
    members = dict(_members(_Undocumented))
    assert set(members) == {"_Undocumented.method", "_Undocumented.prop"}
    for qualname, value in members.items():
        assert _member_doc(_Undocumented, qualname.rsplit(".", 1)[-1], value) is None


def test_every_package_is_public_or_internal() -> None:
    """A new subpackage must be classified, or the walk would silently skip it."""
    modules = public_modules()
    assert "agentkeep.tools" in modules
    assert "agentkeep.chaos.world" in modules
    assert not any(m.startswith("agentkeep._") or "._" in m for m in modules)
    assert not any(m.startswith(INTERNAL_PACKAGES) for m in modules)
