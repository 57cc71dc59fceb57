"""JSON Schemas of tool arguments: vendor-ready descriptors and readable validation issues.

Two views of the schema ``msgspec.json.schema`` generates for an arguments type:

* :func:`parameters_schema` — what a provider is shown: the root object inlined, every
  non-recursive ``$ref`` inlined, ``$defs`` kept only for recursive types, and the
  OpenAPI-only ``discriminator`` keyword dropped (vendors' strict modes reject it).
* :func:`schema_issues` — why a decoded JSON value does not fit, as (path, message) issues.
  msgspec stops at the first error; this walker reports every issue it can find, and for a
  union picks the closest variant (the tagged one, else one of the value's JSON type with the
  fewest issues), so the model can fix its call in one go (exact paths, ≤ 8).

The walker only explains: msgspec stays the authority on whether arguments are valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import msgspec

_DEFS_PREFIX = "#/$defs/"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DROPPED_KEYWORDS = frozenset({"discriminator"})


class SchemaIssue(NamedTuple):
    """One reason a value does not fit its schema, at a JSONPath-like ``path`` (``$.a[0]``)."""

    path: str
    message: str
    expected: str | None = None  # set for a JSON-type mismatch at ``path``

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# -- descriptors ----------------------------------------------------------------------------


def _flatten_any_of(node: dict[str, Any]) -> dict[str, Any]:
    # A tagged union inside an Optional nests anyOf in anyOf; once the discriminator is
    # dropped the inner one is a bare alternative list, so splice it into the outer one.
    variants = node.get("anyOf")
    if not isinstance(variants, list):
        return node
    flat: list[Any] = []
    for variant in variants:
        if isinstance(variant, dict) and set(variant) == {"anyOf"}:
            flat.extend(variant["anyOf"])
        else:
            flat.append(variant)
    return {**node, "anyOf": flat}


def parameters_schema(args_type: type[Any]) -> dict[str, Any]:
    """The JSON Schema of ``args_type`` as a provider should see it (see the module docs)."""
    raw = msgspec.json.schema(args_type)
    defs: Mapping[str, Any] = raw.get("$defs", {})
    kept: dict[str, Any] = {}

    def inline(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [inline(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        rest = {
            key: inline(value, stack)
            for key, value in node.items()
            if key != "$ref" and key not in _DROPPED_KEYWORDS
        }
        if not (isinstance(ref, str) and ref.startswith(_DEFS_PREFIX)):
            return _flatten_any_of(rest)
        name = ref[len(_DEFS_PREFIX) :]
        if name in stack:  # a recursive type: keep the reference, define it once
            if name not in kept:
                kept[name] = {}  # placeholder, so the recursion below terminates
                kept[name] = inline(defs[name], (name,))
            return {"$ref": ref, **rest}
        return {**inline(defs[name], (*stack, name)), **rest}

    root = {key: value for key, value in raw.items() if key != "$defs"}
    schema: dict[str, Any] = inline(root, ())
    if kept:
        schema["$defs"] = kept
    return schema


# -- validation issues ----------------------------------------------------------------------


def json_type(value: object) -> str:
    """The JSON type name of a decoded JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(name: str, value: object) -> bool:
    actual = json_type(value)
    return actual == name or (name == "number" and actual == "integer")


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{msgspec.json.encode(key).decode()}]"


def _render(value: object) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _same(left: object, right: object) -> bool:
    # JSON equality: 1 and true differ, 1 and 1.0 do not.
    numeric = ("integer", "number")
    if json_type(left) in numeric and json_type(right) in numeric:
        return left == right
    return json_type(left) == json_type(right) and left == right


_BOUNDS = (
    ("minimum", ">="),
    ("maximum", "<="),
    ("exclusiveMinimum", ">"),
    ("exclusiveMaximum", "<"),
)
_BOUND_HOLDS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda value, bound: value >= bound,
    "<=": lambda value, bound: value <= bound,
    ">": lambda value, bound: value > bound,
    "<": lambda value, bound: value < bound,
}


class _Walker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._defs: Mapping[str, Any] = root.get("$defs", {})

    def check(self, schema: Any, value: object, path: str) -> list[SchemaIssue]:
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [SchemaIssue(path, "is not allowed here")]
        if not isinstance(schema, Mapping):
            return []
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
            return self.check(self._defs.get(ref[len(_DEFS_PREFIX) :], {}), value, path)
        variants = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(variants, list):
            return self._union(schema, variants, value, path)
        if "enum" in schema:
            options = schema["enum"]
            if any(_same(value, option) for option in options):
                return []
            listed = ", ".join(_render(option) for option in options)
            return [SchemaIssue(path, f"expected one of {listed}, got {_render(value)}")]
        if "const" in schema and not _same(value, schema["const"]):
            return [SchemaIssue(path, f"expected {_render(schema['const'])}")]
        declared = schema.get("type")
        if declared is not None:
            names = declared if isinstance(declared, list) else [declared]
            if not any(_is_type(name, value) for name in names):
                expected = " or ".join(names)
                message = f"expected {expected}, got {json_type(value)}"
                return [SchemaIssue(path, message, expected)]
        if isinstance(value, str):
            return self._string(schema, value, path)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return self._number(schema, value, path)
        if isinstance(value, list):
            return self._array(schema, value, path)
        if isinstance(value, dict):
            return self._object(schema, value, path)
        return []

    def _union(
        self, schema: Mapping[str, Any], variants: list[Any], value: object, path: str
    ) -> list[SchemaIssue]:
        discriminator = schema.get("discriminator")
        if isinstance(discriminator, Mapping) and isinstance(value, dict):
            return self._tagged(discriminator, value, path)
        results = [self.check(variant, value, path) for variant in variants]
        if any(not issues for issues in results):
            return []

        def wrong_type(issues: list[SchemaIssue]) -> bool:
            return any(issue.path == path and issue.expected for issue in issues)

        closest = [issues for issues in results if not wrong_type(issues)]
        if closest:
            return min(closest, key=len)
        expected: list[str] = []
        for issues in results:
            for issue in issues:
                if issue.expected and issue.expected not in expected:
                    expected.append(issue.expected)
        joined = " or ".join(expected) or "another value"
        return [SchemaIssue(path, f"expected {joined}, got {json_type(value)}", joined)]

    def _tagged(
        self, discriminator: Mapping[str, Any], value: dict[str, object], path: str
    ) -> list[SchemaIssue]:
        field = str(discriminator.get("propertyName", "type"))
        mapping: Mapping[str, str] = discriminator.get("mapping", {})
        tags = ", ".join(_render(tag) for tag in mapping)
        if field not in value:
            return [SchemaIssue(_child(path, field), f"missing required field (one of {tags})")]
        tag = value[field]
        target = mapping.get(tag) if isinstance(tag, str) else None
        if target is None:
            message = f"expected one of {tags}, got {_render(tag)}"
            return [SchemaIssue(_child(path, field), message)]
        return self.check({"$ref": target}, value, path)

    def _string(self, schema: Mapping[str, Any], value: str, path: str) -> list[SchemaIssue]:
        issues: list[SchemaIssue] = []
        if "minLength" in schema and len(value) < schema["minLength"]:
            issues.append(SchemaIssue(path, f"expected at least {schema['minLength']} characters"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            issues.append(SchemaIssue(path, f"expected at most {schema['maxLength']} characters"))
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = True
            if not matched:
                issues.append(SchemaIssue(path, f"expected a string matching {pattern!r}"))
        return issues

    def _number(
        self, schema: Mapping[str, Any], value: int | float, path: str
    ) -> list[SchemaIssue]:
        issues: list[SchemaIssue] = []
        for keyword, symbol in _BOUNDS:
            bound = schema.get(keyword)
            if isinstance(bound, int | float) and not _BOUND_HOLDS[symbol](value, bound):
                issues.append(SchemaIssue(path, f"expected a value {symbol} {bound}"))
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step and (value / step) % 1 != 0:
            issues.append(SchemaIssue(path, f"expected a multiple of {step}"))
        return issues

    def _array(
        self, schema: Mapping[str, Any], value: list[object], path: str
    ) -> list[SchemaIssue]:
        issues: list[SchemaIssue] = []
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low is not None and low == high and len(value) != low:
            issues.append(SchemaIssue(path, f"expected exactly {low} items, got {len(value)}"))
        elif low is not None and len(value) < low:
            issues.append(SchemaIssue(path, f"expected at least {low} items, got {len(value)}"))
        elif high is not None and len(value) > high:
            issues.append(SchemaIssue(path, f"expected at most {high} items, got {len(value)}"))
        prefix = schema.get("prefixItems", [])
        for index, item in enumerate(value):
            item_schema = prefix[index] if index < len(prefix) else schema.get("items", True)
            if item_schema is False:
                continue  # already reported as a length issue
            issues += self.check(item_schema, item, _child(path, index))
        if schema.get("uniqueItems") and len({_render(item) for item in value}) != len(value):
            issues.append(SchemaIssue(path, "expected unique items"))
        return issues

    def _object(
        self, schema: Mapping[str, Any], value: dict[str, object], path: str
    ) -> list[SchemaIssue]:
        issues = [
            SchemaIssue(_child(path, name), "missing required field")
            for name in schema.get("required", [])
            if name not in value
        ]
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                issues += self.check(properties[key], item, _child(path, key))
            elif extra is False:
                issues.append(SchemaIssue(_child(path, key), "unknown field"))
            elif extra is not True:
                issues += self.check(extra, item, _child(path, key))
        return issues


def schema_issues(schema: Mapping[str, Any], value: object) -> list[SchemaIssue]:
    """Every issue found checking the decoded JSON ``value`` against ``schema``.

    ``schema`` is what ``msgspec.json.schema`` produced (``$ref``s into ``$defs``). An empty
    list means the walker found nothing (msgspec may still reject the value: formats such as
    date-time are msgspec's alone).
    """
    try:
        return _Walker(schema).check(schema, value, "$")
    except RecursionError:
        return []


_MSGSPEC_PATH = re.compile(r"^(?P<message>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)


def issue_from_msgspec(error: msgspec.ValidationError) -> SchemaIssue:
    """msgspec's own (first) error as an issue: ``Expected `int`, got `str` - at `$.a```."""
    match = _MSGSPEC_PATH.match(str(error))
    if match is None:  # pragma: no cover - the pattern matches every string
        return SchemaIssue("$", str(error))
    return SchemaIssue(match.group("path") or "$", match.group("message"))
