"""Tool definitions and the argument/result handling of one tool call (spec §3.6).

A :class:`Tool` is a frozen definition: a name (unique per namespace), a description, a
msgspec ``Struct`` arguments type, a result type and ``execute(ctx, args) -> result``. Build
one directly or with the :func:`tool` decorator from a typed function::

    class AddArgs(msgspec.Struct):
        a: int
        b: int

    @tool(durable=True)
    def add(ctx: ToolContext, args: AddArgs) -> int:
        \"\"\"Add two numbers.\"\"\"
        return args.a + args.b

Nothing a model sends can raise out of here: :func:`validate_arguments` and
:func:`validate_result` return either the validated value or a :class:`ToolError` whose
message the loop hands back to the model as an error result.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

import msgspec

from agentkeep._tool_schema import issue_from_msgspec, parameters_schema, schema_issues
from agentkeep.errors import AgentkeepError, ToolDefinitionError
from agentkeep.key_value import KeyValueStore
from agentkeep.model import (
    ImageBlock,
    OutputBlock,
    PermissionMode,
    TextBlock,
    ToolCallBlock,
    ToolDescriptor,
)
from agentkeep.providers.protocol import CancelToken
from agentkeep.refs import AgentSystemRef

MAX_ISSUES = 8  # spec §3.6: a schema mismatch lists at most 8 issues
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what both Anthropic and OpenAI accept

ArgsT = TypeVar("ArgsT")
ResultT = TypeVar("ResultT")


class ToolContext(Protocol):
    """What a tool's ``execute`` receives. The runtime supplies it; tools never build one.

    Attributes:
        agent_id: The agent running the call.
        call_id: agentkeep's own durable id of the call.
        provider_call_id: The model's id of the call (``ToolCallBlock.call_id``).
        cancel: Fires when the call's lifetime ends (abort, close, or the call itself).
        kv: The call-scoped key-value store; it refuses use once the call returned.
        system: The system as seen from inside the agent (no close, no waits): message,
            create, resolve, compact or abort agents from a tool.
        permission_mode: The permission mode this execution runs under: the agent's mode
            when the call's batch started, or the one a ``before_tool_call`` chose for it.
            The runtime enforces nothing; a tool that touches the world should honour it.
    """

    @property
    def agent_id(self) -> str:
        """The agent running the call."""
        ...

    @property
    def call_id(self) -> str:
        """agentkeep's own durable id of the call (stable across a restart that re-runs it)."""
        ...

    @property
    def provider_call_id(self) -> str:
        """The model's id of the call (``ToolCallBlock.call_id``)."""
        ...

    @property
    def cancel(self) -> CancelToken:
        """Fires when the call's lifetime ends (abort, close, or the call itself); a long tool
        should watch it.
        """
        ...

    @property
    def kv(self) -> KeyValueStore:
        """The call-scoped key-value store; it refuses use once the call returned."""
        ...

    @property
    def system(self) -> AgentSystemRef:
        """The system as seen from inside the agent (no close, no waits)."""
        ...

    @property
    def permission_mode(self) -> PermissionMode:
        """The permission mode this execution runs under (the runtime enforces nothing)."""
        ...


@dataclass(frozen=True, kw_only=True)
class BasicToolContext:
    """A plain :class:`ToolContext`, for tests and for calling a tool outside an agent.

    Outside an agent there may be no store or system: ``kv`` and ``system`` then raise
    :class:`~agentkeep.errors.AgentkeepError` saying so (pass ``kv_store`` /
    ``system_ref`` to give them).
    """

    agent_id: str = "agent"
    call_id: str = "call"
    provider_call_id: str = "call"
    cancel: CancelToken = field(default_factory=CancelToken)
    kv_store: KeyValueStore | None = None
    system_ref: AgentSystemRef | None = None
    permission_mode: PermissionMode = "auto"

    @property
    def kv(self) -> KeyValueStore:
        """The ``kv_store`` this context was given.

        Raises:
            AgentkeepError: it was given none.
        """
        if self.kv_store is None:
            raise AgentkeepError("This tool context has no key-value store (kv_store).")
        return self.kv_store

    @property
    def system(self) -> AgentSystemRef:
        """The ``system_ref`` this context was given.

        Raises:
            AgentkeepError: it was given none.
        """
        if self.system_ref is None:
            raise AgentkeepError("This tool context has no system (system_ref).")
        return self.system_ref


class GrammarInput(msgspec.Struct, frozen=True):
    """The arguments of a grammar tool: the model's raw input (spec §3.6)."""

    input: str


class ToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call answers the model: content blocks and whether it is an error."""

    content: tuple[OutputBlock, ...]
    is_error: bool = False


class ToolError(msgspec.Struct, frozen=True):
    """A refusal or failure of a tool call, answered to the model as an error result."""

    message: str

    def to_output(self) -> ToolOutput:
        """The error result the model is shown: the message, marked as an error."""
        return ToolOutput(content=(TextBlock(text=self.message),), is_error=True)


def default_to_llm(result: object) -> tuple[OutputBlock, ...]:
    """Strings and content blocks as they are; anything else as its JSON text."""
    if isinstance(result, str):
        return (TextBlock(text=result),)
    if isinstance(result, TextBlock | ImageBlock):
        return (result,)
    return (TextBlock(text=msgspec.json.encode(result).decode()),)


def _never_error(result: object) -> bool:
    return False


@dataclass(frozen=True, kw_only=True, eq=False)
class Tool(Generic[ArgsT, ResultT]):
    """A tool definition (spec §3.6 ``AgentTool``).

    Attributes:
        name: ``[A-Za-z0-9_-]{1,64}``, unique within its namespace in one tool list.
        description: What the model is told the tool does.
        args_type: A msgspec ``Struct`` (a JSON object); its JSON Schema is the descriptor.
        result_type: What ``execute`` returns; results are validated against it.
        execute: ``(ctx, args) -> result``; may raise (the call then answers an error).
        namespace: Optional grouping; the key of a tool is ``(namespace, name)``.
        durable: May re-run after a restart (else it runs at most once).
        transactional: Execute, validation and result commit in one store transaction
            (seed 001). Not provided yet: ``True`` is refused (``ToolDefinitionError``).
        grammar: A Lark grammar: the model's raw input becomes ``{"input": raw}``.
        defer: Tell the provider it may load this tool's definition lazily.
        review_in_auto_mode: Read by permission features only.
        to_llm: Renders a validated result as content blocks.
        is_error: Whether a validated result is an error result.
        visible_to_user: Only a provider-owned :class:`~agentkeep.ServerTool` may hide;
            ``False`` is refused here (``ToolDefinitionError``).
        persist_in_history: Likewise: ``False`` is refused for an executable tool.
    """

    name: str
    description: str | None = None
    args_type: type[ArgsT]
    result_type: Any
    execute: Callable[[ToolContext, ArgsT], ResultT]
    namespace: str | None = None
    namespace_description: str | None = None
    durable: bool = False
    transactional: bool = False
    grammar: str | None = None
    defer: bool = False
    review_in_auto_mode: bool = True
    to_llm: Callable[[ResultT], tuple[OutputBlock, ...]] = default_to_llm
    is_error: Callable[[ResultT], bool] = _never_error
    visible_to_user: bool = True
    persist_in_history: bool = True
    _raw_schema: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    _parameters: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ToolDefinitionError(f"Tool name {self.name!r} must match {_NAME.pattern}.")
        if self.namespace is not None and not _NAME.match(self.namespace):
            raise ToolDefinitionError(
                f"Namespace {self.namespace!r} of tool {self.name!r} must match {_NAME.pattern}."
            )
        if not (isinstance(self.args_type, type) and issubclass(self.args_type, msgspec.Struct)):
            raise ToolDefinitionError(
                f'The arguments of tool "{self.name}" must be a msgspec.Struct, '
                f"not {self.args_type!r}."
            )
        if not callable(self.execute):
            raise ToolDefinitionError(f'Tool "{self.name}" needs a callable execute.')
        if self.transactional:
            # Refused, never ignored: a user relying on the flag would get no atomicity.
            raise ToolDefinitionError(
                f'Tool "{self.name}" asks for transactional=True, which agentkeep does not '
                "provide yet (seed 001: execution, validation and the result's commit in one "
                "store transaction); it is refused rather than silently ignored. Drop the flag, "
                "or write what must be atomic through the call's stores."
            )
        _refuse_hiding(self.name, self.visible_to_user, self.persist_in_history)
        try:
            raw = msgspec.json.schema(self.args_type)
            parameters = parameters_schema(self.args_type)
            msgspec.json.Decoder(self.result_type)
        except (TypeError, ValueError) as error:
            raise ToolDefinitionError(
                f'Tool "{self.name}" uses an unsupported type: {error}'
            ) from error
        if parameters.get("type") != "object":
            raise ToolDefinitionError(
                f'The arguments of tool "{self.name}" must encode as a JSON object '
                "(array_like structs are not allowed)."
            )
        object.__setattr__(self, "_raw_schema", raw)
        object.__setattr__(self, "_parameters", parameters)

    @property
    def key(self) -> tuple[str | None, str]:
        """``(namespace, name)``: what a call resolves against."""
        return (self.namespace, self.name)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as providers are shown it."""
        return self._parameters

    def descriptor(self) -> ToolDescriptor:
        """What a provider is told about this tool (spec §1.6)."""
        return ToolDescriptor(
            name=self.name,
            description=self.description,
            namespace=self.namespace,
            namespace_description=self.namespace_description,
            parameters=None if self.grammar is not None else dict(self._parameters),
            defer=self.defer,
            grammar=self.grammar,
        )


def _refuse_hiding(name: str, visible_to_user: object, persist_in_history: object) -> None:
    """An executable tool cannot hide from correctness or security observers (seed 001):
    only a provider-owned server tool may suppress its live events or its history."""
    for flag, value in (
        ("visible_to_user", visible_to_user),
        ("persist_in_history", persist_in_history),
    ):
        if value is not True:
            raise ToolDefinitionError(
                f'Tool "{name}" sets {flag}={value!r}, but an executable tool cannot hide '
                "from correctness or security observers; only a provider-owned server tool "
                "(ak.ServerTool, passed as AgentSystem.open(server_tools=...)) may set it."
            )


class ToolSet:
    """An immutable list of tools keyed by ``(namespace, name)``.

    Raises:
        ToolDefinitionError: Two tools share a ``(namespace, name)``.
    """

    def __init__(self, tools: Iterable[Tool[Any, Any]] = ()) -> None:
        self._tools: dict[tuple[str | None, str], Tool[Any, Any]] = {}
        for each in tools:
            if each.key in self._tools:
                where = f' in namespace "{each.namespace}"' if each.namespace else ""
                raise ToolDefinitionError(f'Tool "{each.name}"{where} is defined twice.')
            self._tools[each.key] = each

    def get(self, name: str, namespace: str | None = None) -> Tool[Any, Any] | None:
        """The tool with exactly this ``(namespace, name)``, or None."""
        return self._tools.get((namespace, name))

    def for_call(self, call: ToolCallBlock) -> Tool[Any, Any] | None:
        """The tool a call resolves to (exact name and namespace), or None."""
        return self.get(call.name, call.namespace)

    def descriptors(self) -> tuple[ToolDescriptor, ...]:
        """What the provider is told about each tool, in the set's order."""
        return tuple(each.descriptor() for each in self._tools.values())

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


# -- one call -------------------------------------------------------------------------------


def _mismatch(name: str, issues: list[str]) -> ToolError:
    lines = [f'The arguments for "{name}" did not match the schema:']
    lines += [f"- {issue}" for issue in issues[:MAX_ISSUES]]
    if len(issues) > MAX_ISSUES:
        lines.append(f"- (and {len(issues) - MAX_ISSUES} more)")
    return ToolError("\n".join(lines))


def validate_arguments(tool: Tool[ArgsT, Any] | None, call: ToolCallBlock) -> ArgsT | ToolError:
    """The validated arguments of ``call`` for ``tool``, or the error the model is told.

    Spec §3.6, in order: a missing tool, an incomplete call, a grammar tool's raw input as
    ``{"input": raw}``, blank arguments as ``{}``, invalid JSON, then a schema mismatch
    listing up to 8 issues with exact paths. Never raises.
    """
    if tool is None:
        return ToolError(f'Tool "{call.name}" is not available.')
    if call.incomplete:
        return ToolError("The tool call was incomplete and was not executed.")
    raw = call.arguments
    try:
        if tool.grammar is not None:
            payload: object = {"input": raw}
        elif raw.strip() == "":
            payload = {}
        else:
            try:
                payload = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return ToolError(f'The arguments for "{call.name}" were not valid JSON.')
        try:
            return msgspec.json.decode(msgspec.json.encode(payload), type=tool.args_type)
        except msgspec.ValidationError as error:
            issues = schema_issues(tool._raw_schema, payload) or [issue_from_msgspec(error)]
            return _mismatch(call.name, [str(issue) for issue in issues])
    except Exception as error:  # the model's input must never crash the loop
        return ToolError(f'The arguments for "{call.name}" could not be read: {error}')


def validate_result(tool: Tool[Any, ResultT], value: object) -> ToolOutput | ToolError:
    """Validate what ``execute`` returned against ``tool.result_type`` and render it.

    Returns the content blocks from ``to_llm`` and ``is_error``, or a :class:`ToolError` if
    the result does not match its type or ``to_llm``/``is_error`` fail. Never raises.
    """
    name = tool.name
    try:
        encoded = msgspec.json.encode(value)
        typed = msgspec.json.decode(encoded, type=tool.result_type)
    except msgspec.ValidationError as error:
        return ToolError(f'The result of "{name}" did not match its declared type: {error}')
    except Exception as error:
        return ToolError(f'The result of "{name}" could not be encoded: {error}')
    # An untyped result keeps the object itself (decoding would turn a Struct into a dict).
    result: Any = value if tool.result_type in (Any, object) else typed
    try:
        blocks = tool.to_llm(result)
        if not isinstance(blocks, tuple | list) or not all(
            isinstance(block, TextBlock | ImageBlock) for block in blocks
        ):
            raise TypeError("to_llm must return a tuple of text and image blocks")
        is_error = tool.is_error(result)
    except Exception as error:
        return ToolError(f'The result of "{name}" could not be rendered: {error}')
    return ToolOutput(content=tuple(blocks), is_error=bool(is_error))


def run_tool(tool: Tool[ArgsT, Any], ctx: ToolContext, args: ArgsT) -> ToolOutput | ToolError:
    """Execute ``tool`` and validate its result; an exception becomes a :class:`ToolError`.

    Only ``Exception`` is caught: cancellation signals deriving from ``BaseException`` pass.
    """
    return execute_tool(tool, ctx, args)[0]


def execute_tool(
    tool: Tool[ArgsT, Any], ctx: ToolContext, args: ArgsT
) -> tuple[ToolOutput | ToolError, Any]:
    """:func:`run_tool`, also returning what ``execute`` returned (None if it raised)."""
    try:
        value = tool.execute(ctx, args)
    except Exception as error:
        return ToolError(f'The tool "{tool.name}" failed: {error}'), None
    return validate_result(tool, value), value


# -- the decorator --------------------------------------------------------------------------

_MISSING: Any = object()


def _build(function: Callable[[ToolContext, Any], Any], options: dict[str, Any]) -> Tool[Any, Any]:
    try:
        hints = typing.get_type_hints(function)
    except Exception as error:
        raise ToolDefinitionError(
            f"Cannot read the type hints of {function.__name__}: {error}"
        ) from error
    parameters = list(inspect.signature(function).parameters)
    if len(parameters) != 2:
        raise ToolDefinitionError(
            f"A tool function takes (ctx, args); {function.__name__} takes {len(parameters)}."
        )
    args_type = options.pop("args_type") or hints.get(parameters[1])
    if args_type is None and options.get("grammar") is not None:
        args_type = GrammarInput
    if args_type is None:
        raise ToolDefinitionError(f"Annotate the arguments of {function.__name__}.")
    result_type = options.pop("result_type")
    if result_type is _MISSING:
        if "return" not in hints:
            raise ToolDefinitionError(f"Annotate the return type of {function.__name__}.")
        result_type = hints["return"]
    if result_type is None:
        result_type = type(None)
    for key in ("to_llm", "is_error"):
        if options[key] is None:
            del options[key]
    description = options.pop("description")
    if description is None:
        description = inspect.getdoc(function)
    return Tool(
        name=options.pop("name") or function.__name__,
        description=description,
        args_type=args_type,
        result_type=result_type,
        execute=function,
        **options,
    )


@overload
def tool(function: Callable[[ToolContext, ArgsT], ResultT], /) -> Tool[ArgsT, ResultT]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    namespace: str | None = None,
    namespace_description: str | None = None,
    durable: bool = False,
    transactional: bool = False,
    grammar: str | None = None,
    defer: bool = False,
    review_in_auto_mode: bool = True,
    to_llm: Callable[[Any], tuple[OutputBlock, ...]] | None = None,
    is_error: Callable[[Any], bool] | None = None,
    args_type: type[Any] | None = None,
    result_type: Any = _MISSING,
    visible_to_user: bool = True,
    persist_in_history: bool = True,
) -> Callable[[Callable[[ToolContext, Any], Any]], Tool[Any, Any]]: ...


def tool(
    function: Callable[[ToolContext, Any], Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    namespace: str | None = None,
    namespace_description: str | None = None,
    durable: bool = False,
    transactional: bool = False,
    grammar: str | None = None,
    defer: bool = False,
    review_in_auto_mode: bool = True,
    to_llm: Callable[[Any], tuple[OutputBlock, ...]] | None = None,
    is_error: Callable[[Any], bool] | None = None,
    args_type: type[Any] | None = None,
    result_type: Any = _MISSING,
    visible_to_user: bool = True,
    persist_in_history: bool = True,
) -> Tool[Any, Any] | Callable[[Callable[[ToolContext, Any], Any]], Tool[Any, Any]]:
    """Build a :class:`Tool` from a typed function ``(ctx, args: SomeStruct) -> Result``.

    Used bare (``@tool``) or with options (``@tool(durable=True)``). The name defaults to
    the function's, the description to its docstring, the arguments and result types to
    its annotations (``args_type`` / ``result_type`` override them).

    Raises:
        ToolDefinitionError: Missing annotations, a bad name, or unsupported types.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "namespace": namespace,
        "namespace_description": namespace_description,
        "durable": durable,
        "transactional": transactional,
        "grammar": grammar,
        "defer": defer,
        "review_in_auto_mode": review_in_auto_mode,
        "to_llm": to_llm,
        "is_error": is_error,
        "args_type": args_type,
        "result_type": result_type,
        "visible_to_user": visible_to_user,
        "persist_in_history": persist_in_history,
    }
    if function is not None:
        return _build(function, options)

    def decorate(inner: Callable[[ToolContext, Any], Any]) -> Tool[Any, Any]:
        return _build(inner, dict(options))

    return decorate
