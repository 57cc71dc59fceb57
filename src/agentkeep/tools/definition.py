"""Tool definitions and the argument/result handling of one tool call.

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

Lifetime flags say what may happen to a call that is still running:

- ``durable=True``: after a crash the unfinished call may execute again (else it is answered
  "interrupted by a restart").
- ``transactional=True``: ``execute``, the result's validation and rendering, and the automatic
  result commit run in ONE store transaction, on the store's single writer thread: the call's
  ``ctx.kv`` writes and the sends of ``ctx.system`` commit together with the result, or not at
  all. A raise (or a result that does not validate) rolls every write of the tool back, and
  the call is answered with the usual error result. Because the whole store waits while it
  runs, a transactional tool must be short, bounded and free of effects outside the store
  (no network, no sleeping, no waiting on an agent; ``ctx.system.create`` and other calls
  that need their own transaction are refused with ``TransactionScopeError``, a
  ``StoreError``; ``ctx.system.transaction(work)`` reuses the tool's transaction). A crash
  leaves either its result committed (the call is not run again) or none of its writes;
  whether the interrupted call runs again is still ``durable``'s to say.
- ``reloadable=True``: a graceful drain (``AgentSystem.shutdown``) abandons the live execution
  without writing a result (its ``cancel`` fires and its ``ctx.kv`` expires), leaving the same
  call pending for the next process, which runs it again with the same ``call_id`` and call
  store. The tool declares itself retry-safe, so it also runs again after a crash.
- ``steerable=True``: newly accepted steering interrupts the execution — the call is answered
  at once ("The tool call was interrupted by new steering."), its ``cancel`` fires and its late
  return is ignored, like an abort of that call alone — and a drain answers it as interrupted
  instead of waiting for it. Steering the model had not seen when the call started (accepted
  while the response streamed, or still queued) interrupts it as it starts: steering never
  waits behind a steerable call.
- Ordinary calls finish (and their results commit) before a graceful drain stops the loop.

The flags that apply are those of the tool the call names (a ``before_tool_call`` redirect
does not change them).

``ctx.commit(result)`` saves a call's result durably before ``execute`` returns: the result is
validated and rendered as a return would be, then claimed in one transaction that also erases
the call's ``ctx.kv`` (inside a transactional tool: the tool's own transaction, so the result
commits atomically with the tool's writes, and a later raise rolls it back with them). The
first successful commit wins; later commits return False, and the tool's eventual return or
raise is ignored. A committed result survives a crash — the call is not run again — and still
lands in its batch's order; in a live process the batch takes it when ``execute`` returns.

Nothing a model sends can raise out of here: :func:`validate_arguments` and
:func:`validate_result` return either the validated value or a :class:`ToolError` whose
message the loop hands back to the model as an error result.

This module holds :class:`Tool` and :class:`ToolSet`, and the checks a definition passes when
it is built (a bad definition fails at once with a :class:`~agentkeep.errors.ToolDefinitionError`
naming what is wrong, never later when a model calls the tool). Import every name from
:mod:`agentkeep.tools`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic

import msgspec

from agentkeep.errors import ToolDefinitionError
from agentkeep.tools.context import ToolContext
from agentkeep.tools.outputs import ArgsT, ResultT, default_to_llm, never_error
from agentkeep.tools.schema import parameters_schema
from agentkeep.types import OutputBlock, ToolCallBlock, ToolDescriptor

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what both Anthropic and OpenAI accept


@dataclass(frozen=True, kw_only=True, eq=False)
class Tool(Generic[ArgsT, ResultT]):
    """A tool definition.

    Attributes:
        name: ``[A-Za-z0-9_-]{1,64}``, unique within its namespace in one tool list.
        description: What the model is told the tool does.
        args_type: A msgspec ``Struct`` (a JSON object); its JSON Schema is the descriptor.
        result_type: What ``execute`` returns; results are validated against it.
        execute: ``(ctx, args) -> result``; may raise (the call then answers an error).
        namespace: Optional grouping; the key of a tool is ``(namespace, name)``.
        durable: May re-run after a restart (else it runs at most once).
        transactional: Execute, validation, rendering and the result commit in one store
            transaction on the writer thread (see the module docstring): a raise rolls the
            tool's writes back. The tool must be short and free of external effects.
        reloadable: A graceful drain abandons the execution and leaves the call pending for
            the next process, which runs it again (retry-safe, so a crash re-runs it too).
        steerable: Newly accepted steering, and a drain, interrupt the execution (the call
            is answered as interrupted; its ``cancel`` fires).
        grammar: A Lark grammar: the model's raw input becomes ``{"input": raw}``.
        defer: Tell the provider it may load this tool's definition lazily.
        review_in_auto_mode: Read by permission features only.
        to_llm: Renders a validated result as content blocks.
        is_error: Whether a validated result is an error result.
        visible_to_user: Only a provider-owned :class:`~agentkeep.ProviderTool` may hide;
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
    reloadable: bool = False
    steerable: bool = False
    grammar: str | None = None
    defer: bool = False
    review_in_auto_mode: bool = True
    to_llm: Callable[[ResultT], tuple[OutputBlock, ...]] = default_to_llm
    is_error: Callable[[ResultT], bool] = never_error
    visible_to_user: bool = True
    persist_in_history: bool = True
    _raw_schema: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    _parameters: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        raw, parameters = checked_schemas(self)  # a bad definition fails here, not on a call
        object.__setattr__(self, "_raw_schema", raw)
        object.__setattr__(self, "_parameters", parameters)

    @property
    def key(self) -> tuple[str | None, str]:
        """``(namespace, name)``: what a call resolves against."""
        return (self.namespace, self.name)

    @property
    def id(self) -> str:
        """What a definition's ``toolbox.toolIds`` names it by: ``name``, or
        ``namespace.name`` (names never hold a dot, so the id is unambiguous)."""
        return self.name if self.namespace is None else f"{self.namespace}.{self.name}"

    @property
    def arguments_schema(self) -> dict[str, Any]:
        """The JSON Schema msgspec generates for ``args_type``, as it is (``$ref``s kept):
        what a schema mismatch is explained against."""
        return self._raw_schema

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as providers are shown it."""
        return self._parameters

    def descriptor(self) -> ToolDescriptor:
        """What a provider is told about this tool."""
        return ToolDescriptor(
            name=self.name,
            description=self.description,
            namespace=self.namespace,
            namespace_description=self.namespace_description,
            parameters=None if self.grammar is not None else dict(self._parameters),
            defer=self.defer,
            grammar=self.grammar,
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


# -- the checks a definition passes -------------------------------------------------------


def checked_schemas(tool: Tool[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check ``tool``'s definition; return its arguments' raw and provider JSON Schemas.

    Checked in order: the name and namespace, a ``msgspec.Struct`` arguments type, a callable
    ``execute``, the hiding flags (:func:`refuse_hiding`), types msgspec supports, and
    arguments that encode as a JSON object.

    Raises:
        ToolDefinitionError: the first check that fails, naming the tool.
    """
    if not isinstance(tool.name, str) or not NAME.match(tool.name):
        raise ToolDefinitionError(f"Tool name {tool.name!r} must match {NAME.pattern}.")
    if tool.namespace is not None and not NAME.match(tool.namespace):
        raise ToolDefinitionError(
            f"Namespace {tool.namespace!r} of tool {tool.name!r} must match {NAME.pattern}."
        )
    if not (isinstance(tool.args_type, type) and issubclass(tool.args_type, msgspec.Struct)):
        raise ToolDefinitionError(
            f'The arguments of tool "{tool.name}" must be a msgspec.Struct, not {tool.args_type!r}.'
        )
    if not callable(tool.execute):
        raise ToolDefinitionError(f'Tool "{tool.name}" needs a callable execute.')
    refuse_hiding(tool.name, tool.visible_to_user, tool.persist_in_history)
    try:
        raw = msgspec.json.schema(tool.args_type)
        parameters = parameters_schema(tool.args_type)
        msgspec.json.Decoder(tool.result_type)
    except (TypeError, ValueError) as error:
        raise ToolDefinitionError(
            f'Tool "{tool.name}" uses an unsupported type: {error}'
        ) from error
    if parameters.get("type") != "object":
        raise ToolDefinitionError(
            f'The arguments of tool "{tool.name}" must encode as a JSON object '
            "(array_like structs are not allowed)."
        )
    return raw, parameters


def refuse_hiding(name: str, visible_to_user: object, persist_in_history: object) -> None:
    """An executable tool cannot hide from correctness or security observers:
    only a provider-owned tool may suppress its live events or its history."""
    for flag, value in (
        ("visible_to_user", visible_to_user),
        ("persist_in_history", persist_in_history),
    ):
        if value is not True:
            raise ToolDefinitionError(
                f'Tool "{name}" sets {flag}={value!r}, but an executable tool cannot hide '
                "from correctness or security observers; only a provider-owned tool "
                "(ak.ProviderTool, passed as AgentSystem.open(provider_tools=...)) may set it."
            )
