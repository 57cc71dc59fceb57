"""Every protocol value survives msgspec JSON unchanged (opaque payloads byte for byte).

Strategies are derived from msgspec's own view of each type (``msgspec.inspect``), so a field
added to the protocol modules of ``agentkeep.types`` is covered without touching this file.
"""

from __future__ import annotations

import types as pytypes
import typing
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkeep.types import content, selection, stream

# The provider protocol's values live in these modules of the domain layer.
PROTOCOL_MODULES = (content, stream, selection)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
# What an ``object`` field (a JSON Schema, a server tool config) holds once decoded: lists,
# not tuples, so the decoded value compares equal.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | FLOATS | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


def strategy(info: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy for values of a msgspec type description."""
    if isinstance(info, mi.StructType):
        fields = {field.name: strategy(field.type) for field in info.fields if field.required}
        optional = {field.name: strategy(field.type) for field in info.fields if not field.required}
        return st.fixed_dictionaries(fields, optional=optional).map(lambda kw: info.cls(**kw))
    if isinstance(info, mi.UnionType):
        return st.one_of([strategy(member) for member in info.types])
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.StrType):
        return st.text(max_size=20)
    if isinstance(info, mi.IntType):
        return INT64
    if isinstance(info, mi.FloatType):
        return FLOATS
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.VarTupleType):
        return st.lists(strategy(info.item_type), max_size=3).map(tuple)
    if isinstance(info, mi.DictType):
        return st.dictionaries(strategy(info.key_type), strategy(info.value_type), max_size=3)
    if isinstance(info, mi.AnyType) or (isinstance(info, mi.CustomType) and info.cls is object):
        return JSON_VALUES
    raise NotImplementedError(f"no strategy for {info!r}; extend this test")


def _public_structs() -> list[type[msgspec.Struct]]:
    return sorted(
        (
            value
            for module in PROTOCOL_MODULES
            for name, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, msgspec.Struct)
            and not name.startswith("_")
            and value.__module__ == module.__name__
        ),
        key=lambda cls: cls.__name__,
    )


def _unions() -> dict[str, Any]:
    return {
        name: value
        for module in PROTOCOL_MODULES
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, pytypes.UnionType | type(typing.Union[int, str]))  # noqa: UP007
        and all(
            isinstance(member, type) and issubclass(member, msgspec.Struct)
            for member in typing.get_args(value)
        )
    }


STRUCTS = _public_structs()
UNIONS = _unions()


def test_the_inventory_is_complete() -> None:
    names = {cls.__name__ for cls in STRUCTS}
    assert {"Done", "TextBlock", "CompactionCompleted", "Context", "ToolDescriptor"} <= names
    assert {"Message", "StreamEvent", "CompactionOutcome", "AssistantBlock"} <= set(UNIONS)
    assert len(STRUCTS) >= 40


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_every_struct_round_trips_through_json(
    cls: type[msgspec.Struct], data: st.DataObject
) -> None:
    value = data.draw(strategy(mi.type_info(cls)))
    encoded = msgspec.json.encode(value)
    assert msgspec.json.decode(encoded, type=cls) == value
    assert msgspec.json.encode(msgspec.json.decode(encoded, type=cls)) == encoded


@pytest.mark.parametrize("name", sorted(UNIONS))
@given(data=st.data())
def test_every_tagged_union_round_trips_through_json(name: str, data: st.DataObject) -> None:
    union = UNIONS[name]
    value = data.draw(strategy(mi.type_info(union)))
    assert msgspec.json.decode(msgspec.json.encode(value), type=union) == value


@given(payload=st.text())
def test_opaque_payloads_are_kept_byte_for_byte(payload: str) -> None:
    block = content.ReasoningBlock(text=None, reasoning=payload, vendor=payload)
    message = content.AssistantMessage(content=(block,))
    decoded = msgspec.json.decode(msgspec.json.encode(message), type=content.Message)
    assert isinstance(decoded, content.AssistantMessage)
    (kept,) = decoded.content
    assert isinstance(kept, content.ReasoningBlock)
    assert kept.reasoning is not None
    assert kept.reasoning.encode() == payload.encode()
