"""Bad input is refused with an error naming the field, before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

from agentkeep.registry import DefinitionInput, InvalidDefinitionError, Registry, validation


@pytest.mark.parametrize(
    "identity",
    ["a", "reviewer", "code.review_v2-1", "0", "-", "_", "...", "x" * 128],
)
def test_ids_of_seed_002s_rule_are_accepted(registry: Registry, identity: str) -> None:
    assert registry.create({"id": identity}).id == identity


@pytest.mark.parametrize(
    "identity", ["", "Reviewer", "a b", "a/b", "é", "x" * 129, ".", "..", "a\n"]
)
def test_ids_outside_the_rule_are_refused(registry: Registry, identity: str) -> None:
    with pytest.raises(InvalidDefinitionError) as caught:
        registry.create({"id": identity})
    assert caught.value.field == "id"
    assert registry.list(include_deleted=True) == []


@pytest.mark.parametrize(
    ("draft", "field", "problem"),
    [
        ({}, "id", "is required"),
        ({"id": "a", "colour": "red"}, "colour", "unknown field"),
        ({"id": "a", "toolbox": {"tools": []}}, "toolbox.tools", "unknown field"),
        ({"id": "a", "name": None}, "name", "cannot be null"),
        ({"id": "a", "driver": None}, "driver", "cannot be null"),
        ({"id": "a", "name": ""}, "name", "must not be empty"),
        ({"id": "a", "name": 3}, "name", "Expected `str`"),
        ({"id": "a", "driver": "Codex"}, "driver.id", "not a valid id"),
        ({"id": "a", "model": {"settings": {}}}, "model.id", "is required"),
        ({"id": "a", "model": {"id": ""}}, "model.id", "must not be empty"),
        ({"id": "a", "authRef": ""}, "authRef", "must not be empty"),
        ({"id": "a", "resources": {"files": ["x", ""]}}, "resources.files[1]", "empty"),
        ({"id": "a", "toolbox": {"actionIds": [1]}}, "toolbox.actionIds[0]", "Expected `str`"),
        ({"id": "a", "workspace": {"cwd": ""}}, "workspace.cwd", "must not be empty"),
        ({"id": "a", "metadata": []}, "metadata", "Expected `object`"),
        ({"id": "a", "metadata": {"x": float("nan")}}, "metadata.x", "not a JSON number"),
        ({"id": "a", "metadata": {"x": float("inf")}}, "metadata.x", "not a JSON number"),
        ({"id": "a", "metadata": {"x": 2**64}}, "metadata.x", "64 bits"),
        ({"id": "a", "metadata": {"x": "\ud800"}}, "metadata.x", "lone surrogate"),
        ({"id": "a", "metadata": {"x": object()}}, "", "not JSON"),
        ({"id": "a", "instructions": "\ud800"}, "instructions", "lone surrogate"),
    ],
)
def test_invalid_input_names_the_field(
    registry: Registry, draft: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(InvalidDefinitionError) as caught:
        registry.create(draft)
    assert caught.value.field == field
    assert problem in str(caught.value)
    assert registry.list(include_deleted=True) == []


@pytest.mark.parametrize(
    ("draft", "field"),
    [
        ({"name": "n" * (validation.MAX_NAME_CHARS + 1)}, "name"),
        ({"description": "d" * (validation.MAX_DESCRIPTION_BYTES + 1)}, "description"),
        ({"instructions": "é" * (validation.MAX_INSTRUCTIONS_BYTES // 2 + 1)}, "instructions"),
        ({"authRef": "r" * (validation.MAX_REFERENCE_CHARS + 1)}, "authRef"),
        ({"workspace": {"cwd": "/" * (validation.MAX_CWD_CHARS + 1)}}, "workspace.cwd"),
        (
            {"toolbox": {"toolIds": [f"t{i}" for i in range(validation.MAX_ARRAY_ITEMS + 1)]}},
            "toolbox.toolIds",
        ),
        ({"metadata": {"x": "m" * validation.MAX_JSON_OBJECT_BYTES}}, "metadata"),
        ({"driver": {"config": {"x": "c" * validation.MAX_JSON_OBJECT_BYTES}}}, "driver.config"),
    ],
)
def test_size_limits_are_refused_with_the_field(
    registry: Registry, draft: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidDefinitionError) as caught:
        registry.create({"id": "big", **draft})
    assert caught.value.field == field
    assert "limit" in str(caught.value)


def test_the_whole_definition_has_a_size_limit(registry: Registry) -> None:
    # Each part within its own limit, together too large.
    files = [f"{i:04d}" + "f" * 1000 for i in range(validation.MAX_ARRAY_ITEMS)]
    with pytest.raises(InvalidDefinitionError, match=r"the definition is .* bytes"):
        registry.create({"id": "big", "resources": {"files": files}})


def test_nesting_deeper_than_the_limit_is_refused(registry: Registry) -> None:
    deep: Any = "leaf"
    for _ in range(validation.MAX_JSON_DEPTH + 1):
        deep = {"d": deep}
    with pytest.raises(InvalidDefinitionError, match="nests deeper"):
        registry.create({"id": "deep", "metadata": deep})


def test_duplicates_do_not_count_against_the_array_limit(registry: Registry) -> None:
    files = ["same"] * (validation.MAX_ARRAY_ITEMS + 5)
    record = registry.create({"id": "dup", "resources": {"files": files}})
    assert record.definition.resources.files == ["same"]


def test_a_bad_patch_writes_nothing(registry: Registry) -> None:
    created = registry.create({"id": "a", "name": "A"})
    for patch in (
        {"name": None},
        {"toolbox": {"toolIds": [""]}},
        {"unknown": 1},
        {"metadata": {"x": float("nan")}},
        b"{not json",
    ):
        with pytest.raises(InvalidDefinitionError):
            registry.update("a", patch)
    assert registry.get("a") == created
    assert [r.number for r in registry.revisions("a")] == [1]


def test_malformed_json_text_is_invalid(registry: Registry) -> None:
    with pytest.raises(InvalidDefinitionError, match="not valid JSON"):
        registry.create(b'{"id": ')
    with pytest.raises(InvalidDefinitionError) as caught:
        registry.create(b"[1]")  # valid JSON, but not an object
    assert "not valid JSON" not in str(caught.value)
    assert "Expected `object`, got `array`" in str(caught.value)


def test_a_struct_built_in_python_is_type_checked(registry: Registry) -> None:
    wrong: Any = 7
    with pytest.raises(InvalidDefinitionError) as caught:
        registry.create(DefinitionInput(id="a", name=wrong))
    assert caught.value.field == "name"
