"""Loading injected drivers named by text: the wire's ``--drivers`` / ``AMALGM_AGENT_DRIVERS``
(ours: ``agentkeep --drivers`` / ``AGENTKEEP_DRIVERS``; docs/drivers.md).

A list is comma-separated (empty items are skipped); each item, a **spec**, is one of:

- ``pkg.module:attr`` -- that attribute of an importable module (``attr`` may be dotted);
- ``pkg.module`` -- its ``driver`` attribute, else the module itself if it is a driver (a
  module-level ``id`` string and ``run`` function);
- ``path/to/file.py`` or ``path/to/file.py:attr`` -- a Python file (a spec with a ``/`` or
  ending in ``.py``), loaded as a module under a private name, with the same rules.

The value found is used as the driver if it is one (a non-empty string ``id`` and a callable
``run``); a class, or any other callable, is called with no arguments and must return one.

Invariants:

- Every problem raises :class:`DriverLoadError` naming the spec and what was wrong, in one
  line: a missing file or module, an import that raised, a missing attribute, a value that
  is not a driver, a factory that raised or returned something else, the reserved id
  ``agentkeep``, or an id given twice across the list.
- A module path is imported with the current directory on ``sys.path`` (as ``python -m``
  has it); a file's own directory is appended to ``sys.path`` (so it can import its
  siblings), never put in front of installed packages.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from agentkeep.drivers.types import Driver
from agentkeep.errors import InvalidConfigError
from agentkeep.types.turns import NATIVE_DRIVER

#: The environment variable holding a comma-separated driver list (the wire's
#: ``AMALGM_AGENT_DRIVERS``).
DRIVERS_ENV = "AGENTKEEP_DRIVERS"
#: The attribute a module spec without ``:attr`` is looked up by.
DEFAULT_ATTRIBUTE = "driver"


class DriverLoadError(InvalidConfigError):
    """A driver spec could not be loaded into a driver; ``str()`` is one line naming the
    spec (``spec``) and what was wrong (``problem``)."""

    code = "invalid_driver_spec"

    def __init__(self, spec: str, problem: str) -> None:
        self.spec = spec
        self.problem = _one_line(problem)
        super().__init__(f'"{spec}": {self.problem}')


def split_specs(text: str) -> list[str]:
    """The specs of a comma-separated list (items stripped, empty ones skipped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def load_drivers(specs: str | Iterable[str]) -> list[Driver]:
    """The drivers ``specs`` name (a comma-separated string or the specs themselves), in
    order.

    Raises:
        DriverLoadError: a spec cannot be loaded, a value is not a driver, an id is
            reserved or given twice (see the module docstring).
    """
    items = split_specs(specs) if isinstance(specs, str) else [s.strip() for s in specs]
    drivers: list[Driver] = []
    by_id: dict[str, str] = {}
    for spec in items:
        driver = load_driver(spec)
        if driver.id == NATIVE_DRIVER:
            raise DriverLoadError(
                spec, f'its driver uses the reserved id "{NATIVE_DRIVER}" (the native loop)'
            )
        if driver.id in by_id:
            raise DriverLoadError(
                spec, f'the driver id "{driver.id}" is given twice (also by "{by_id[driver.id]}")'
            )
        by_id[driver.id] = spec
        drivers.append(driver)
    return drivers


def load_driver(spec: str) -> Driver:
    """The one driver ``spec`` names (see the module docstring).

    Raises:
        DriverLoadError: naming the spec and what was wrong.
    """
    if not spec:
        raise DriverLoadError(spec, "an empty driver spec")
    target, attribute = _split_attribute(spec)
    module = _load_file(spec, target) if _is_file(target) else _import(spec, target)
    if attribute is not None:
        value = _attribute(spec, module, attribute)
    elif hasattr(module, DEFAULT_ATTRIBUTE):
        value = getattr(module, DEFAULT_ATTRIBUTE)
    elif _is_driver(module):
        value = module
    else:
        raise DriverLoadError(
            spec,
            f'{_describe(module)} has no "{DEFAULT_ATTRIBUTE}" attribute and is not a driver '
            f'itself (name one with "{spec}:ATTRIBUTE", or define id and run in it)',
        )
    return _as_driver(spec, value)


# -- parsing -------------------------------------------------------------------------------
def _split_attribute(spec: str) -> tuple[str, str | None]:
    """``(module or file, attribute or None)``: the text after the last ``:`` is an
    attribute when it is a dotted identifier (so ``C:\\x.py`` stays a path)."""
    target, colon, attribute = spec.rpartition(":")
    if colon and target and all(part.isidentifier() for part in attribute.split(".")):
        return target, attribute
    return spec, None


def _is_file(target: str) -> bool:
    return "/" in target or os.sep in target or target.endswith(".py")


# -- importing -----------------------------------------------------------------------------
def _load_file(spec: str, target: str) -> ModuleType:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        problem = "is a directory, not a Python file" if path.is_dir() else "no such file"
        raise DriverLoadError(spec, f"{problem} ({path})")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"agentkeep_driver_{_identifier(path.stem)}_{digest}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:  # pragma: no cover - a .py file
        raise DriverLoadError(spec, f"cannot be loaded as a Python module ({path})")
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[name] = module  # before it runs: dataclasses, pickling and typing need it
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise DriverLoadError(spec, f"loading {path} raised {_error(error)}") from None
    return module


def _import(spec: str, target: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name is not None and (target == error.name or target.startswith(error.name + ".")):
            raise DriverLoadError(
                spec,
                f'no module named "{error.name}" (a module path is imported from the current '
                "directory and the installed packages; a file needs a path such as ./name.py)",
            ) from None
        raise DriverLoadError(spec, f'importing "{target}" raised {_error(error)}') from None
    except Exception as error:
        raise DriverLoadError(spec, f'importing "{target}" raised {_error(error)}') from None


def _attribute(spec: str, module: ModuleType, attribute: str) -> object:
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise DriverLoadError(spec, f'{_describe(module)} has no attribute "{attribute}"')
        value = getattr(value, part)
    return value


# -- the value -----------------------------------------------------------------------------
def _is_driver(value: object) -> bool:
    driver_id = getattr(value, "id", None)
    return (
        not isinstance(value, type)
        and isinstance(driver_id, str)
        and bool(driver_id.strip())
        and callable(getattr(value, "run", None))
    )


def _as_driver(spec: str, value: object) -> Driver:
    if _is_driver(value):
        return value  # type: ignore[return-value]  # checked structurally
    if not callable(value):
        raise DriverLoadError(
            spec,
            f"is {_kind(value)}, not a driver (an object with a non-empty string id and a "
            "run(request, context) method), a driver class or a zero-argument factory",
        )
    try:
        made = value()
    except Exception as error:
        raise DriverLoadError(
            spec, f"calling it with no arguments raised {_error(error)}"
        ) from None
    if not _is_driver(made):
        raise DriverLoadError(
            spec,
            f"calling it returned {_kind(made)}, not a driver (an object with a non-empty "
            "string id and a run(request, context) method)",
        )
    return made  # type: ignore[no-any-return]  # checked structurally


def _describe(module: ModuleType) -> str:
    origin = getattr(module, "__file__", None)
    if module.__name__.startswith("agentkeep_driver_") and origin:
        return f"the file {origin}"
    return f'the module "{module.__name__}"'


def _kind(value: object) -> str:
    if isinstance(value, ModuleType):
        return f'the module "{value.__name__}"'
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name} ({_one_line(repr(value))[:80]})"


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text) or "driver"


def _one_line(text: str) -> str:
    return " ".join(text.split())


__all__ = [
    "DEFAULT_ATTRIBUTE",
    "DRIVERS_ENV",
    "DriverLoadError",
    "load_driver",
    "load_drivers",
    "split_specs",
]
