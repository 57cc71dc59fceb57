"""The registry's operations against a real store: create, update, delete, get, list."""

from __future__ import annotations

import msgspec
import pytest

import agentkeep as ak
from agentkeep.registry import (
    Definition,
    DefinitionDeletedError,
    DefinitionExistsError,
    DefinitionInput,
    DriverRef,
    InvalidDefinitionError,
    ModelRef,
    Registry,
    RegistryError,
    Resources,
    Toolbox,
    UnknownDefinitionError,
    UnknownRevisionError,
    Workspace,
    content_hash,
)

from .conftest import Opener

REVIEWER = {
    "id": "reviewer",
    "name": "Reviewer",
    "description": "Reviews implementation work",
    "instructions": "Find correctness risks before style issues.",
    "driver": {"id": "codex", "config": {"sandbox": "workspace-write"}},
    "model": {"id": "openai/gpt-5.5", "settings": {"effort": "high"}},
    "authRef": "openai-primary",
    "resources": {
        "files": ["AGENTS.md"],
        "skills": ["code-review"],
        "subagents": ["security-reviewer"],
    },
    "toolbox": {"toolIds": ["git"], "actionIds": ["github.pull_request_get"]},
    "workspace": {"cwd": "/projects/product"},
    "metadata": {"icon": "search"},
}


def test_create_makes_the_identity_and_revision_one(registry: Registry) -> None:
    record = registry.create(REVIEWER)
    assert record.current_revision == 1
    assert record.deleted_at_ms is None
    assert record.created_at_ms == record.updated_at_ms
    # Seed 002's DEFINITIONS.md example round-trips field for field under its wire names.
    assert msgspec.to_builtins(record.definition) == REVIEWER
    revision = registry.get_revision(record.current_revision_id)
    assert revision.definition_id == "reviewer"
    assert revision.number == 1
    assert revision.definition == record.definition
    assert revision.hash == record.hash == content_hash(record.definition)
    assert registry.get("reviewer") == record


def test_create_fills_in_the_defaults(registry: Registry) -> None:
    definition = registry.create({"id": "bare"}).definition
    assert definition == Definition(
        id="bare",
        name="bare",
        description="",
        instructions="",
        driver=DriverRef(id="agentkeep", config={}),
        model=None,
        auth_ref=None,
        resources=Resources(files=[], skills=[], subagents=[]),
        toolbox=Toolbox(tool_ids=[], action_ids=[]),
        workspace=Workspace(cwd=None),
        metadata={},
    )


def test_create_accepts_the_struct_and_json_text(registry: Registry) -> None:
    from_struct = registry.create(
        DefinitionInput(id="one", driver="codex", model=ak.registry.ModelInput(id="a/b"))
    )
    assert from_struct.definition.driver == DriverRef(id="codex")
    assert from_struct.definition.model == ModelRef(id="a/b", settings={})
    from_json = registry.create(b'{"id": "two", "toolbox": {"toolIds": ["git", "git"]}}')
    assert from_json.definition.toolbox.tool_ids == ["git"]


def test_a_taken_id_is_refused_and_nothing_changes(registry: Registry) -> None:
    first = registry.create({"id": "taken", "name": "First"})
    with pytest.raises(DefinitionExistsError) as caught:
        registry.create({"id": "taken", "name": "Second"})
    assert caught.value.definition_id == "taken"
    assert not caught.value.deleted
    assert registry.get("taken") == first
    assert [r.number for r in registry.revisions("taken")] == [1]


def test_a_deleted_id_stays_reserved(registry: Registry) -> None:
    registry.create({"id": "gone"})
    registry.delete("gone")
    with pytest.raises(DefinitionExistsError, match="stay reserved") as caught:
        registry.create({"id": "gone"})
    assert caught.value.deleted


def test_an_update_merges_nested_objects_and_appends_a_revision(registry: Registry) -> None:
    created = registry.create(REVIEWER)
    update = registry.update("reviewer", {"resources": {"skills": ["a", "b", "a"]}})
    assert update.changed
    assert update.revision.number == update.record.current_revision == 2
    assert update.record.current_revision_id == update.revision.id != created.current_revision_id
    resources = update.record.definition.resources
    # Only skills changed; files and subagents are kept (the wire's example).
    assert resources == Resources(
        files=["AGENTS.md"], skills=["a", "b"], subagents=["security-reviewer"]
    )
    assert update.record.updated_at_ms >= created.updated_at_ms
    assert update.record.created_at_ms == created.created_at_ms
    assert registry.get("reviewer") == update.record
    # Revision 1 is untouched.
    assert registry.get_revision_number("reviewer", 1).definition == created.definition


def test_an_equal_update_keeps_the_current_revision(registry: Registry) -> None:
    created = registry.create(REVIEWER)
    for patch in ({}, {"name": "Reviewer"}, {"toolbox": {"toolIds": ["git", "git"]}}, REVIEWER):
        update = registry.update("reviewer", patch)
        assert not update.changed, patch
        assert update.record == created
        assert update.revision.id == created.current_revision_id
    assert [r.number for r in registry.revisions("reviewer")] == [1]


def test_returning_to_earlier_content_makes_a_new_number(registry: Registry) -> None:
    first = registry.create({"id": "a", "instructions": "one"})
    registry.update("a", {"instructions": "two"})
    back = registry.update("a", {"instructions": "one"})
    assert back.changed
    assert back.revision.number == 3
    assert back.revision.hash == first.hash
    assert back.revision.id != first.current_revision_id
    assert [r.number for r in registry.revisions("a")] == [1, 2, 3]


def test_null_clears_nullable_fields(registry: Registry) -> None:
    registry.create(REVIEWER)
    update = registry.update(
        "reviewer", {"model": None, "authRef": None, "workspace": {"cwd": None}}
    )
    definition = update.record.definition
    assert (definition.model, definition.auth_ref, definition.workspace.cwd) == (None, None, None)
    assert definition.driver.id == "codex"  # untouched


def test_top_level_fields_replace_whole(registry: Registry) -> None:
    registry.create(REVIEWER)
    update = registry.update(
        "reviewer", {"metadata": {"color": "red"}, "model": {"id": "anthropic/claude"}}
    )
    assert update.record.definition.metadata == {"color": "red"}
    assert update.record.definition.model == ModelRef(id="anthropic/claude", settings={})


def test_driver_merges_by_field_and_a_string_names_a_fresh_driver(registry: Registry) -> None:
    registry.create(REVIEWER)
    merged = registry.update("reviewer", {"driver": {"config": {"sandbox": "read-only"}}})
    assert merged.record.definition.driver == DriverRef(id="codex", config={"sandbox": "read-only"})
    renamed = registry.update("reviewer", {"driver": {"id": "claude_code"}})
    assert renamed.record.definition.driver == DriverRef(
        id="claude_code", config={"sandbox": "read-only"}
    )
    fresh = registry.update("reviewer", {"driver": "agentkeep"})
    assert fresh.record.definition.driver == DriverRef(id="agentkeep", config={})


def test_the_id_cannot_change(registry: Registry) -> None:
    registry.create({"id": "fixed"})
    with pytest.raises(InvalidDefinitionError, match="cannot change") as caught:
        registry.update("fixed", {"id": "other"})
    assert caught.value.field == "id"
    # Repeating the same id (a GET-edit-PATCH round trip) is fine.
    assert not registry.update("fixed", {"id": "fixed"}).changed


def test_update_of_an_unknown_or_deleted_definition_is_refused(registry: Registry) -> None:
    with pytest.raises(UnknownDefinitionError):
        registry.update("nobody", {"name": "x"})
    registry.create({"id": "old"})
    registry.delete("old")
    with pytest.raises(DefinitionDeletedError):
        registry.update("old", {"name": "x"})
    assert [r.number for r in registry.revisions("old")] == [1]


def test_delete_tombstones_and_keeps_revisions_readable(registry: Registry) -> None:
    created = registry.create({"id": "temp"})
    registry.update("temp", {"name": "Temporary"})
    deleted = registry.delete("temp")
    assert deleted.deleted
    assert deleted.deleted_at_ms == deleted.updated_at_ms
    assert deleted.current_revision == 2
    with pytest.raises(DefinitionDeletedError):
        registry.get("temp")
    assert registry.get("temp", include_deleted=True) == deleted
    assert registry.get_revision(created.current_revision_id).definition == created.definition
    assert [r.number for r in registry.revisions("temp")] == [1, 2]
    # A second delete changes nothing (safe to retry).
    assert registry.delete("temp") == deleted
    with pytest.raises(UnknownDefinitionError):
        registry.delete("never")


def test_get_of_an_unknown_id_or_revision_is_refused(registry: Registry) -> None:
    with pytest.raises(UnknownDefinitionError, match='"nobody"'):
        registry.get("nobody")
    with pytest.raises(UnknownRevisionError):
        registry.get_revision("nope")
    registry.create({"id": "one"})
    with pytest.raises(UnknownRevisionError):
        registry.get_revision_number("one", 2)
    with pytest.raises(UnknownDefinitionError):
        registry.revisions("nobody")


def test_list_orders_by_id_pages_and_hides_tombstones(registry: Registry) -> None:
    for name in ("c", "a", "e", "b", "d"):
        registry.create({"id": name})
    registry.delete("b")
    assert [r.id for r in registry.list()] == ["a", "c", "d", "e"]
    assert [r.id for r in registry.list(include_deleted=True)] == ["a", "b", "c", "d", "e"]
    pages: list[list[str]] = []
    after: str | None = None
    while page := registry.list(include_deleted=True, after=after, limit=2):
        pages.append([r.id for r in page])
        after = page[-1].id
    assert pages == [["a", "b"], ["c", "d"], ["e"]]
    assert [r.id for r in registry.list(after="c", limit=1)] == ["d"]
    with pytest.raises(ValueError, match="limit"):
        registry.list(limit=0)


def test_a_cursor_holding_a_nul_pages_as_it_sorts(registry: Registry) -> None:
    # Any string is a cursor (GET /v1/agents?after=), NUL included: PostgreSQL's text cannot
    # hold one (a 500 there once), and the page is the byte order's on both backends.
    for name in ("b", "ba", "bb", "c"):
        registry.create({"id": name})
    assert [r.id for r in registry.list(after="b\x00z")] == ["ba", "bb", "c"]
    assert [r.id for r in registry.list(after="\x00")] == ["b", "ba", "bb", "c"]
    assert [r.id for r in registry.list(after="bb\x00")] == ["c"]


def test_revisions_page_by_number(registry: Registry) -> None:
    registry.create({"id": "r"})
    for text in ("two", "three", "four"):
        registry.update("r", {"instructions": text})
    assert [r.number for r in registry.revisions("r", after=1, limit=2)] == [2, 3]
    assert [r.definition.instructions for r in registry.revisions("r", after=3)] == ["four"]


def test_revisions_survive_a_restart(open_system: Opener) -> None:
    system = open_system()
    registry = system.registry
    registry.create(REVIEWER)
    registry.update("reviewer", {"name": "Second"})
    registry.create({"id": "gone"})
    registry.delete("gone")
    before = (registry.list(include_deleted=True), registry.revisions("reviewer"))
    system.close()

    reopened = open_system().registry
    assert (reopened.list(include_deleted=True), reopened.revisions("reviewer")) == before
    update = reopened.update("reviewer", {"name": "Third"})
    assert update.revision.number == 3
    with pytest.raises(DefinitionExistsError):
        reopened.create({"id": "gone"})


def test_the_registry_refuses_work_once_the_system_is_closed(open_system: Opener) -> None:
    system = open_system()
    registry = system.registry
    registry.create({"id": "a"})
    system.close()
    with pytest.raises(ak.AgentClosedError):
        registry.create({"id": "b"})
    with pytest.raises(ak.AgentClosedError):
        registry.get("a")


def test_the_public_names_are_exported() -> None:
    for name in (
        "Registry",
        "Definition",
        "DefinitionInput",
        "DefinitionPatch",
        "DefinitionRecord",
        "DefinitionUpdate",
        "Revision",
        "DefinitionExistsError",
        "UnknownDefinitionError",
        "DefinitionDeletedError",
        "UnknownRevisionError",
        "InvalidDefinitionError",
    ):
        assert name in ak.registry.__all__
        assert name not in ak.__all__, "seed 002's definitions live in agentkeep.registry"
    assert issubclass(RegistryError, ak.AgentkeepError)
    assert set(ak.registry.__all__) <= set(dir(ak.registry))
