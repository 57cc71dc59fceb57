"""The PATCH rules (docs/registry.md), and a create as a patch over the defaults.

In detail:

- Top-level fields replace their prior values: ``name``, ``description``, ``instructions``,
  ``model`` (a whole ``{id, settings}``; absent ``settings`` means ``{}``), ``authRef``,
  ``metadata`` (replaced whole, not merged).
- The known nested objects ``driver``, ``resources``, ``toolbox`` and ``workspace`` merge by
  field: a patch holding only ``resources.skills`` keeps ``files`` and ``subagents``. A field
  inside them replaces (``driver.config`` is replaced whole).
- Arrays are authoritative (a given array replaces the old one) and de-duplicated.
- ``null`` clears the nullable fields: ``model``, ``authRef``, ``workspace.cwd``. A ``null``
  for any other field is refused.
- ``id`` cannot change (a patch may repeat the same id).

``driver`` given as a string (the wire's ``driver?: string | Partial<AgentDriverRef>``) names
the driver with an empty config: the previous driver's config is for the previous driver and
is not carried over to another one.

A create is the same merge over the defaults (``name`` = the id, driver ``agentkeep``, no
model, empty arrays and objects), so create and update cannot disagree on what a field means.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from agentkeep.registry.canonical import Canonical, canonicalize
from agentkeep.registry.errors import InvalidDefinitionError
from agentkeep.registry.types import (
    Definition,
    DefinitionInput,
    DefinitionPatch,
    DriverPatch,
    DriverRef,
    ModelRef,
)
from agentkeep.registry.validation import check_id

_REPLACED = ("name", "description", "instructions", "auth_ref", "metadata")
_MERGED = ("resources", "toolbox", "workspace")


def new_definition(draft: DefinitionInput) -> Canonical:
    """The complete normalized definition a create makes from ``draft``.

    Raises:
        InvalidDefinitionError: naming the field that breaks a rule.
    """
    check_id(draft.id)
    return apply_patch(Definition(id=draft.id, name=draft.id), draft)


def apply_patch(current: Definition, patch: DefinitionPatch) -> Canonical:
    """``current`` with ``patch`` applied by docs/registry.md's PATCH rules, normalized and hashed.

    ``patch`` must already be type-checked (``validation.checked``); ``current`` is a
    normalized definition.

    Raises:
        InvalidDefinitionError: the patch changes the id, or the result breaks a rule.
    """
    if patch.id is not UNSET and patch.id != current.id:
        raise InvalidDefinitionError(
            "id", f"cannot change (it is {current.id!r}); create a new definition instead"
        )
    changes: dict[str, Any] = {}
    for name in _REPLACED:
        value = getattr(patch, name)
        if value is not UNSET:
            changes[name] = value
    if patch.model is not UNSET:
        model = patch.model
        changes["model"] = (
            None
            if model is None
            else ModelRef(id=model.id, settings={} if model.settings is UNSET else model.settings)
        )
    if isinstance(patch.driver, str):
        changes["driver"] = DriverRef(id=patch.driver)
    elif isinstance(patch.driver, DriverPatch):
        changes["driver"] = _merge(current.driver, patch.driver)
    for name in _MERGED:
        value = getattr(patch, name)
        if value is not UNSET:
            changes[name] = _merge(getattr(current, name), value)
    return canonicalize(msgspec.structs.replace(current, **changes))


def _merge(current: Any, patch: Any) -> Any:
    """``current`` (a struct) with each field ``patch`` sets replaced: merge by field."""
    given = {
        name: getattr(patch, name)
        for name in patch.__struct_fields__
        if getattr(patch, name) is not UNSET
    }
    return msgspec.structs.replace(current, **given)
