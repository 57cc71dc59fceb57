"""Property tests of the PATCH rules of docs/registry.md and of the canonical hash (DEFINITIONS.md).

The pure properties run on ``apply_patch``/``canonicalize``; the last ones drive a real store
through ``Registry.update`` and compare it with a model of the timeline.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from agentkeep.registry import (
    Definition,
    DefinitionInput,
    DefinitionPatch,
    DriverPatch,
    ModelInput,
    Registry,
    ResourcesPatch,
    ToolboxPatch,
    WorkspacePatch,
    content_hash,
)
from agentkeep.registry.canonical import canonical_json, canonicalize, normalize
from agentkeep.registry.patch import apply_patch, new_definition

# -- strategies --------------------------------------------------------------------------------
# A small alphabet of references, so arrays often hold duplicates.
references = st.sampled_from(["a", "b", "c", "git", "AGENTS.md", "x.y"])
arrays = st.lists(references, max_size=6)
ids = st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True).filter(lambda s: s not in (".", ".."))
texts = st.text(max_size=20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Absent (UNSET) or a value."""
    return st.just(UNSET) | strategy


drivers = ids | st.builds(DriverPatch, id=maybe(ids), config=maybe(json_objects))
models = st.none() | st.builds(
    ModelInput, id=st.sampled_from(["openai/gpt", "anthropic/claude"]), settings=maybe(json_objects)
)
patches = st.builds(
    DefinitionPatch,
    name=maybe(st.text(min_size=1, max_size=10)),
    description=maybe(texts),
    instructions=maybe(texts),
    driver=maybe(drivers),
    model=maybe(models),
    auth_ref=maybe(st.none() | references),
    resources=maybe(
        st.builds(
            ResourcesPatch, files=maybe(arrays), skills=maybe(arrays), subagents=maybe(arrays)
        )
    ),
    toolbox=maybe(st.builds(ToolboxPatch, tool_ids=maybe(arrays), action_ids=maybe(arrays))),
    workspace=maybe(st.builds(WorkspacePatch, cwd=maybe(st.none() | references))),
    metadata=maybe(json_objects),
)
definitions = st.builds(
    lambda identity, patch: (
        apply_patch(new_definition(DefinitionInput(id=identity)).definition, patch).definition
    ),
    ids,
    patches,
)


def first_occurrences(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def scrambled(value: Any) -> Any:
    """The same JSON with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {key: scrambled(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [scrambled(item) for item in value]
    return value


# -- pure properties ---------------------------------------------------------------------------
@given(definitions)
def test_normalizing_is_idempotent(definition: Definition) -> None:
    once = normalize(definition)
    assert normalize(once) == once
    assert canonical_json(once) == canonical_json(definition)
    assert msgspec.json.decode(canonical_json(once), type=Definition) == once


@given(definitions, st.data())
def test_the_hash_ignores_key_order_and_duplicate_entries(
    definition: Definition, data: st.DataObject
) -> None:
    raw = msgspec.to_builtins(definition)
    for group, field in (
        ("resources", "files"),
        ("resources", "skills"),
        ("resources", "subagents"),
        ("toolbox", "toolIds"),
        ("toolbox", "actionIds"),
    ):
        entries = raw[group][field]
        if entries:  # repeat some entries after their first occurrence
            raw[group][field] = entries + data.draw(st.lists(st.sampled_from(entries)))
    shaken = msgspec.convert(scrambled(raw), Definition)
    assert content_hash(shaken) == content_hash(definition)
    assert normalize(shaken) == normalize(definition)


@given(definitions)
def test_an_empty_patch_and_a_patch_of_the_current_values_change_nothing(
    definition: Definition,
) -> None:
    current = canonicalize(definition)
    assert apply_patch(current.definition, DefinitionPatch()).hash == current.hash
    restated = msgspec.convert(msgspec.to_builtins(current.definition), DefinitionPatch)
    assert apply_patch(current.definition, restated).hash == current.hash


@given(definitions, patches)
def test_a_patch_applied_twice_changes_nothing_the_second_time(
    definition: Definition, patch: DefinitionPatch
) -> None:
    once = apply_patch(normalize(definition), patch)
    assert apply_patch(once.definition, patch).hash == once.hash


@given(definitions, patches)
def test_merge_keeps_untouched_fields_and_takes_given_ones(
    definition: Definition, patch: DefinitionPatch
) -> None:
    before = normalize(definition)
    after = apply_patch(before, patch).definition
    assert after.id == before.id
    for name in ("name", "description", "instructions", "auth_ref", "metadata"):
        given_value = getattr(patch, name)
        expected = getattr(before, name) if given_value is UNSET else given_value
        assert getattr(after, name) == expected, name
    if patch.model is UNSET:
        assert after.model == before.model
    elif patch.model is None:
        assert after.model is None
    else:
        settings_ = {} if patch.model.settings is UNSET else patch.model.settings
        assert (after.model.id, after.model.settings) == (patch.model.id, settings_)
    for group in ("resources", "toolbox", "workspace"):
        given_group = getattr(patch, group)
        for field in getattr(before, group).__struct_fields__:
            old = getattr(getattr(before, group), field)
            new = getattr(getattr(after, group), field)
            given_value = UNSET if given_group is UNSET else getattr(given_group, field)
            if given_value is UNSET:
                assert new == old, f"{group}.{field} was not in the patch"
            elif isinstance(given_value, list):
                assert new == first_occurrences(given_value), f"{group}.{field}"
            else:
                assert new == given_value, f"{group}.{field}"
    if isinstance(patch.driver, str):
        assert (after.driver.id, after.driver.config) == (patch.driver, {})
    elif isinstance(patch.driver, DriverPatch):
        expect_id = before.driver.id if patch.driver.id is UNSET else patch.driver.id
        expect_config = (
            before.driver.config if patch.driver.config is UNSET else patch.driver.config
        )
        assert (after.driver.id, after.driver.config) == (expect_id, expect_config)
    else:
        assert after.driver == before.driver


@given(definitions)
def test_arrays_are_deduplicated_keeping_first_occurrences(definition: Definition) -> None:
    after = normalize(definition)
    for group, field in (
        ("resources", "files"),
        ("resources", "skills"),
        ("resources", "subagents"),
        ("toolbox", "tool_ids"),
        ("toolbox", "action_ids"),
    ):
        values = getattr(getattr(after, group), field)
        assert len(values) == len(set(values))
        assert values == first_occurrences(getattr(getattr(definition, group), field))


# -- through a real store ----------------------------------------------------------------------
def test_updates_through_the_store_follow_the_timeline_model(registry: Registry) -> None:
    """Every update of a random sequence: a revision is appended exactly when the content
    changes, numbers are dense, and content seen before still gets a new number."""
    names = (f"def-{n}" for n in itertools.count())

    @settings(max_examples=25)
    @given(st.lists(patches, min_size=1, max_size=5))
    def timeline(sequence: list[DefinitionPatch]) -> None:
        identity = next(names)
        record = registry.create({"id": identity})
        hashes = [record.hash]  # the model: the hash of every revision, in number order
        for patch in sequence:
            expected = apply_patch(record.definition, patch).hash
            update = registry.update(identity, patch)
            assert update.changed == (expected != hashes[-1])
            if update.changed:
                hashes.append(expected)
            assert update.record.hash == update.revision.hash == hashes[-1]
            assert update.record.current_revision == update.revision.number == len(hashes)
            record = update.record
        stored = registry.revisions(identity)
        assert [r.number for r in stored] == list(range(1, len(hashes) + 1))
        assert [r.hash for r in stored] == hashes
        assert registry.get(identity) == record

    timeline()


def test_an_equal_patch_never_makes_a_revision_through_the_store(registry: Registry) -> None:
    names = (f"eq-{n}" for n in itertools.count())

    @settings(max_examples=25)
    @given(patches)
    def equal_patch(patch: DefinitionPatch) -> None:
        identity = next(names)
        registry.create({"id": identity})
        first = registry.update(identity, patch)
        again = registry.update(identity, patch)
        assert not again.changed
        assert again.record == first.record
        assert len(registry.revisions(identity)) == first.record.current_revision
        assert first.record.current_revision == (2 if first.changed else 1)

    equal_patch()
