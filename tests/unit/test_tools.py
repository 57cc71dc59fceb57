"""Tool definitions, descriptors, and the argument/result handling of one call."""

from __future__ import annotations

import datetime
import threading
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkeep.errors import ToolDefinitionError
from agentkeep.tools import (
    BasicToolContext,
    GrammarInput,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolSet,
    run_tool,
    tool,
    validate_arguments,
)
from agentkeep.tools.results import validate_result
from agentkeep.types import ImageBlock, OutputBlock, TextBlock, ToolCallBlock


class AddArgs(msgspec.Struct):
    a: int
    b: int


class Circle(msgspec.Struct, tag="circle"):
    radius: float


class Square(msgspec.Struct, tag="square"):
    side: float


class Point(msgspec.Struct):
    x: int
    y: int


class Item(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    count: Annotated[int, msgspec.Meta(ge=0)] = 1


class Node(msgspec.Struct):
    label: str
    children: list[Node] = []


class RichArgs(msgspec.Struct):
    mode: Literal["fast", "slow"] = "fast"
    shape: Circle | Square | None = None
    where: int | Point = 0
    items: list[Item] = []
    tags: dict[str, int] = {}
    tree: Node | None = None
    when: datetime.datetime | None = None


class Defaults(msgspec.Struct):
    verbose: bool = False


class Answer(msgspec.Struct):
    total: int


@tool(durable=True, namespace="math")
def add(ctx: ToolContext, args: AddArgs) -> Answer:
    """Add two integers.

    Returns their sum.
    """
    return Answer(total=args.a + args.b)


@tool
def rich(ctx: ToolContext, args: RichArgs) -> str:
    return "ok"


@tool(name="status")
def status_tool(ctx: ToolContext, args: Defaults) -> dict[str, bool]:
    """Report status."""
    return {"verbose": args.verbose}


@tool(grammar='start: "go"')
def shell(ctx: ToolContext, args: GrammarInput) -> str:
    """Run a command."""
    return args.input


def call(name: str, arguments: str, *, namespace: str | None = None, **kw: Any) -> ToolCallBlock:
    return ToolCallBlock(call_id="c1", name=name, arguments=arguments, namespace=namespace, **kw)


def message(result: object) -> str:
    assert isinstance(result, ToolError), result
    return result.message


# -- definitions ----------------------------------------------------------------------------


def test_the_decorator_reads_name_docstring_and_types() -> None:
    assert isinstance(add, Tool)
    assert (add.name, add.namespace, add.durable, add.transactional) == ("add", "math", True, False)
    assert add.description == "Add two integers.\n\nReturns their sum."
    assert (add.args_type, add.result_type) == (AddArgs, Answer)
    assert add.key == ("math", "add")
    assert (status_tool.name, status_tool.transactional) == ("status", False)
    assert rich.description is None


def test_a_transactional_tool_is_accepted_and_keeps_its_flag() -> None:
    # Built now: the flag is kept for the runtime, which runs the call in
    # one transaction (tests/unit/loop/test_tool_lifetime_flags.py).
    @tool(name="atomic", transactional=True)
    def atomic(ctx: ToolContext, args: Defaults) -> str:
        return "done"

    assert atomic.transactional


def test_a_basic_context_keeps_what_a_tool_commits_first_wins() -> None:
    ctx = BasicToolContext()
    assert ctx.commit("first")
    assert not ctx.commit("second")
    assert ctx.committed == ["first"]


def test_the_descriptor_is_a_plain_object_schema() -> None:
    descriptor = add.descriptor()
    assert descriptor.name == "add"
    assert descriptor.namespace == "math"
    assert descriptor.parameters == {
        "title": "AddArgs",
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }


def test_nested_definitions_are_inlined_and_only_recursion_keeps_defs() -> None:
    schema = rich.parameters
    encoded = msgspec.json.encode(schema).decode()
    assert "discriminator" not in encoded
    assert schema["properties"]["items"]["items"]["properties"]["name"]["minLength"] == 1
    shape = schema["properties"]["shape"]["anyOf"]
    assert [variant.get("title") for variant in shape] == ["Circle", "Square", None]
    assert set(schema["$defs"]) == {"Node"}  # the one recursive type
    assert schema["properties"]["tree"]["anyOf"][0]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Node"
    }
    assert schema["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


def test_a_grammar_tool_describes_its_grammar_not_a_schema() -> None:
    descriptor = shell.descriptor()
    assert descriptor.grammar == 'start: "go"'
    assert descriptor.parameters is None


def test_a_grammar_tool_may_leave_its_arguments_unannotated() -> None:
    def run(ctx, args):  # type: ignore[no-untyped-def]
        return args.input

    built = tool(grammar="start: /.+/", result_type=str)(run)
    assert built.args_type is GrammarInput


class ArrayLike(msgspec.Struct, array_like=True):
    a: int


class Unsupported(msgspec.Struct):
    lock: Any = None
    handle: threading.Lock | None = None


def _untyped(ctx, args):  # type: ignore[no-untyped-def]
    return None


def _three(ctx: ToolContext, args: AddArgs, extra: int) -> int:
    return 0


def _no_return(ctx: ToolContext, args: AddArgs):  # type: ignore[no-untyped-def]
    return 0


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: tool(_untyped), "Annotate the arguments"),
        (lambda: tool(_three), "takes \\(ctx, args\\)"),
        (lambda: tool(_no_return), "Annotate the return type"),
        (
            lambda: tool(name="bad name!", args_type=AddArgs, result_type=int)(_untyped),
            "must match",
        ),
        (lambda: tool(namespace="a.b", args_type=AddArgs, result_type=int)(_untyped), "Namespace"),
        (lambda: tool(args_type=dict, result_type=int)(_untyped), "msgspec.Struct"),
        (lambda: tool(args_type=ArrayLike, result_type=int)(_untyped), "JSON object"),
        (lambda: tool(args_type=Unsupported, result_type=int)(_untyped), "unsupported type"),
        (lambda: tool(args_type=AddArgs, result_type=threading.Lock)(_untyped), "unsupported"),
    ],
)
def test_bad_definitions_are_refused(build: Any, match: str) -> None:
    with pytest.raises(ToolDefinitionError, match=match):
        build()


def test_a_tool_list_refuses_duplicate_names_per_namespace() -> None:
    other_add = Tool(name="add", args_type=AddArgs, result_type=int, execute=lambda c, a: 0)
    tools = ToolSet([add, other_add, rich])  # same name, other namespace: fine
    assert tools.for_call(call("add", "{}", namespace="math")) is add
    assert tools.for_call(call("add", "{}")) is other_add
    assert tools.for_call(call("add", "{}", namespace="other")) is None
    assert [d.name for d in tools.descriptors()] == ["add", "add", "rich"]
    assert len(tools) == 3
    with pytest.raises(ToolDefinitionError, match='"add" in namespace "math" is defined twice'):
        ToolSet([add, add])


# -- arguments ------------------------------------------------------------------


def test_a_missing_tool_is_refused() -> None:
    assert message(validate_arguments(None, call("nope", "{}"))) == 'Tool "nope" is not available.'


def test_an_incomplete_call_is_refused_even_with_good_arguments() -> None:
    refused = validate_arguments(add, call("add", '{"a":1,"b":2}', incomplete=True))
    assert message(refused) == "The tool call was incomplete and was not executed."


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_blank_arguments_mean_an_empty_object(blank: str) -> None:
    assert validate_arguments(status_tool, call("status", blank)) == Defaults()
    refused = message(validate_arguments(add, call("add", blank)))
    assert "- $.a: missing required field" in refused


def test_a_grammar_tool_gets_the_raw_input() -> None:
    raw = 'go {"not": json'
    assert validate_arguments(shell, call("shell", raw)) == GrammarInput(input=raw)


@pytest.mark.parametrize("raw", ["{", "{'a': 1}", "nan", '{"a": 1} trailing', "[1,]"])
def test_invalid_json_is_refused(raw: str) -> None:
    refused = message(validate_arguments(add, call("add", raw)))
    assert refused == 'The arguments for "add" were not valid JSON.'


def test_valid_arguments_are_decoded() -> None:
    assert validate_arguments(add, call("add", '{"a": 1, "b": 2}')) == AddArgs(a=1, b=2)
    parsed = validate_arguments(rich, call("rich", '{"shape": {"type": "square", "side": 2}}'))
    assert isinstance(parsed, RichArgs)
    assert parsed.shape == Square(side=2.0)


def test_a_schema_mismatch_lists_every_issue_with_exact_paths() -> None:
    raw = msgspec.json.encode(
        {
            "mode": "medium",
            "shape": {"type": "circle", "radius": "big"},
            "where": {"x": 1},
            "items": [{"name": "a"}, {"name": "", "count": -1}],
            "tags": {"a b": "x"},
            "tree": {"label": "root", "children": [{"label": 3}]},
        }
    ).decode()
    assert message(validate_arguments(rich, call("rich", raw))) == "\n".join(
        [
            'The arguments for "rich" did not match the schema:',
            '- $.mode: expected one of "fast", "slow", got "medium"',
            "- $.shape.radius: expected number, got string",
            "- $.where.y: missing required field",
            "- $.items[1].name: expected at least 1 characters",
            "- $.items[1].count: expected a value >= 0",
            '- $.tags["a b"]: expected integer, got string',
            "- $.tree.children[0].label: expected string, got integer",
        ]
    )


def test_union_errors_name_the_tag_or_every_expected_type() -> None:
    unknown_tag = message(validate_arguments(rich, call("rich", '{"shape": {"type": "hex"}}')))
    assert '- $.shape.type: expected one of "circle", "square", got "hex"' in unknown_tag
    no_tag = message(validate_arguments(rich, call("rich", '{"shape": {"radius": 1}}')))
    assert '- $.shape.type: missing required field (one of "circle", "square")' in no_tag
    wrong_type = message(validate_arguments(rich, call("rich", '{"where": [1, 2]}')))
    assert "- $.where: expected integer or object, got array" in wrong_type
    not_object = message(validate_arguments(add, call("add", "[1, 2]")))
    assert "- $: expected object, got array" in not_object


def test_at_most_eight_issues_are_listed() -> None:
    items = ", ".join('{"name": 1}' for _ in range(11))
    refused = message(validate_arguments(rich, call("rich", f'{{"items": [{items}]}}')))
    lines = refused.splitlines()
    assert len(lines) == 1 + 8 + 1
    assert lines[-1] == "- (and 3 more)"


def test_what_only_msgspec_knows_is_still_reported() -> None:
    refused = message(validate_arguments(rich, call("rich", '{"when": "yesterday"}')))
    assert "- $.when: Invalid RFC3339 encoded datetime" in refused


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["a", "b", "mode", "shape", "type", "where", "items", "tree", "x", "$"])
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)
TOOLS = [add, rich, status_tool, shell]


@given(raw=st.text(), which=st.sampled_from(TOOLS), incomplete=st.booleans())
def test_any_text_yields_arguments_or_an_error_result(
    raw: str, which: Tool[Any, Any], incomplete: bool
) -> None:
    outcome = validate_arguments(which, call(which.name, raw, incomplete=incomplete))
    assert isinstance(outcome, ToolError | which.args_type)


@given(value=JSON, which=st.sampled_from(TOOLS))
def test_any_json_yields_arguments_or_an_error_result(value: object, which: Tool[Any, Any]) -> None:
    try:
        raw = msgspec.json.encode(value).decode()
    except (OverflowError, msgspec.EncodeError):
        raw = repr(value)  # not encodable as JSON: still just text to the tool
    outcome = validate_arguments(which, call(which.name, raw))
    assert isinstance(outcome, ToolError | which.args_type)
    if isinstance(outcome, ToolError):
        assert outcome.message.startswith(f'The arguments for "{which.name}"')
        assert len(outcome.message.splitlines()) <= 10


# -- results --------------------------------------------------------------------------------


def test_a_struct_result_is_rendered_as_json() -> None:
    assert validate_result(add, Answer(total=3)) == ToolOutput(
        content=(TextBlock(text='{"total":3}'),)
    )
    assert validate_result(rich, "plain") == ToolOutput(content=(TextBlock(text="plain"),))


def test_a_result_of_the_wrong_type_is_an_error_result() -> None:
    refused = message(validate_result(add, {"total": "three"}))
    assert refused.startswith('The result of "add" did not match its declared type')
    assert "$.total" in refused
    assert "could not be encoded" in message(validate_result(rich, threading.Lock()))


def test_to_llm_and_is_error_render_the_validated_result() -> None:
    image = ImageBlock(data="aGk=", mime_type="image/png")

    def render(result: Answer) -> tuple[OutputBlock, ...]:
        return (TextBlock(text=f"total={result.total}"), image)

    custom = Tool(
        name="custom",
        args_type=AddArgs,
        result_type=Answer,
        execute=lambda ctx, args: Answer(total=args.a),
        to_llm=render,
        is_error=lambda result: result.total < 0,
    )
    ok = validate_result(custom, {"total": 2})  # validated into an Answer before rendering
    assert ok == ToolOutput(content=(TextBlock(text="total=2"), image))
    failed = validate_result(custom, Answer(total=-1))
    assert isinstance(failed, ToolOutput)
    assert failed.is_error


def fail(ctx: ToolContext, args: Defaults) -> str:
    raise RuntimeError("disk full")


def test_a_failing_renderer_is_an_error_result() -> None:
    def explode(result: str) -> tuple[OutputBlock, ...]:
        raise ValueError("cannot render")

    broken = Tool(
        name="b", args_type=Defaults, result_type=str, execute=lambda c, a: "", to_llm=explode
    )
    wrong = Tool(
        name="w",
        args_type=Defaults,
        result_type=str,
        execute=lambda c, a: "",
        to_llm=lambda r: "text",
    )  # type: ignore[arg-type,return-value]
    assert (
        message(validate_result(broken, "x"))
        == 'The result of "b" could not be rendered: cannot render'
    )
    assert "tuple of text and image blocks" in message(validate_result(wrong, "x"))


def test_run_tool_turns_exceptions_into_error_results() -> None:
    class Stop(BaseException):
        """A shutdown signal user code must not swallow."""

    def stop(ctx: ToolContext, args: Defaults) -> str:
        raise Stop

    ctx = BasicToolContext(agent_id="a1", call_id="k1", provider_call_id="c1")
    failing = Tool(name="fail", args_type=Defaults, result_type=str, execute=fail)
    stopping = Tool(name="stop", args_type=Defaults, result_type=str, execute=stop)
    assert run_tool(failing, ctx, Defaults()) == ToolError('The tool "fail" failed: disk full')
    assert ToolError("x").to_output() == ToolOutput(content=(TextBlock(text="x"),), is_error=True)
    with pytest.raises(Stop):
        run_tool(stopping, ctx, Defaults())
    assert run_tool(add, ctx, AddArgs(a=2, b=3)) == ToolOutput(
        content=(TextBlock(text='{"total":5}'),)
    )


def test_the_context_exposes_the_call_and_its_cancel_token() -> None:
    seen: list[tuple[str, str, str, bool]] = []

    def probe(ctx: ToolContext, args: Defaults) -> None:
        seen.append((ctx.agent_id, ctx.call_id, ctx.provider_call_id, ctx.cancel.cancelled))

    probing = Tool(name="probe", args_type=Defaults, result_type=None, execute=probe)
    ctx = BasicToolContext(agent_id="a1", call_id="k1", provider_call_id="c1")
    ctx.cancel.cancel()
    assert run_tool(probing, ctx, Defaults()) == ToolOutput(content=(TextBlock(text="null"),))
    assert seen == [("a1", "k1", "c1", True)]
