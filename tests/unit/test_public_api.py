"""The public surface is pinned.

``agentkeep.__all__`` is listed here, so adding or removing a public name is a deliberate
change to this file; and every agentkeep type that appears in a public signature (a
parameter, a return, a field of a public class) is itself exported, so a user can name what
they are handed and what they must pass.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import agentkeep as ak
from agentkeep import chaos

PUBLIC = [
    "Agent",
    "AgentClosedError",
    "AgentConfig",
    "AgentEnvironment",
    "AgentExistsError",
    "AgentInfo",
    "AgentMessage",
    "AgentRef",
    "AgentSystem",
    "AgentSystemRef",
    "AgentkeepError",
    "AssistantMessage",
    "Author",
    "AwaitFromOwnLoopError",
    "Backoff",
    "BlockReset",
    "BlockStart",
    "BlockStop",
    "CancelToken",
    "CommitOutcomeUnknownError",
    "CompactAction",
    "CompactionCancelled",
    "CompactionCompleted",
    "CompactionFailed",
    "CompactionFailedError",
    "CompactionMessage",
    "CompactionRequest",
    "Context",
    "DataBlock",
    "DataPart",
    "Definition",
    "DefinitionDeletedError",
    "DefinitionExistsError",
    "DefinitionInput",
    "DefinitionPatch",
    "DefinitionRecord",
    "DefinitionUpdate",
    "Delivery",
    "DemoModel",
    "Done",
    "Driver",
    "DriverCancelledError",
    "DriverContext",
    "DriverContextClosedError",
    "DriverError",
    "DriverPatch",
    "DriverRef",
    "DriverResult",
    "DriverRunRequest",
    "DriverSignal",
    "DuplicateProviderError",
    "EventTooLargeError",
    "ExpiredScopeError",
    "Feature",
    "FeatureDefinitionError",
    "HistoryEpoch",
    "HookContext",
    "IdempotencyConflictError",
    "ImageBlock",
    "InferenceInfo",
    "InjectAction",
    "InputTooLargeError",
    "InvalidConfigError",
    "InvalidDefinitionError",
    "InvalidDriverEventError",
    "InvalidIdError",
    "InvalidMessageError",
    "KeyValueStore",
    "Message",
    "MessageAccepted",
    "MessageOptions",
    "MetadataChange",
    "MissingExtraError",
    "ModelChange",
    "ModelInput",
    "ModelNotServedError",
    "ModelRef",
    "ModelSession",
    "ModelSessionBusyError",
    "ModelSessionClosedError",
    "ModelSessionOptions",
    "OpenedModelSession",
    "PermissionModeChange",
    "Provider",
    "ProviderError",
    "ProviderErrorInfo",
    "ProviderTool",
    "ProviderUnavailableError",
    "Providers",
    "PurgeResult",
    "ReasoningBlock",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "ReferenceBlock",
    "ReferencePart",
    "Registry",
    "RegistryError",
    "Resources",
    "ResourcesPatch",
    "RespondingModel",
    "RestartIntensity",
    "Retrying",
    "Revision",
    "SchemaTooNewError",
    "ScriptedModel",
    "Selection",
    "SendAction",
    "SendOptions",
    "ServerToolResultBlock",
    "ServesModels",
    "SessionArchivedError",
    "SessionBusyError",
    "SessionConfigError",
    "SessionError",
    "SessionEvent",
    "SessionOwes",
    "SessionRecord",
    "Sessions",
    "Settings",
    "SteerAction",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "StoreUnavailableError",
    "StreamEvent",
    "StreamRequest",
    "Subscription",
    "SupervisorGaveUpError",
    "SystemMessage",
    "SystemOptions",
    "TextBlock",
    "TextDelta",
    "TextEnd",
    "TextPart",
    "TextStart",
    "TokenUsage",
    "Tokens",
    "Tool",
    "ToolCallBlock",
    "ToolCallDecision",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallInfo",
    "ToolCallRequestBlock",
    "ToolCallResult",
    "ToolCallStart",
    "ToolCommitError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolDescriptor",
    "ToolResultDelta",
    "ToolResultEnd",
    "ToolResultMessage",
    "ToolResultStart",
    "Toolbox",
    "ToolboxPatch",
    "TurnFailure",
    "TurnHandle",
    "TurnInfo",
    "TurnRecord",
    "TurnStateError",
    "UnknownAgentError",
    "UnknownDefinitionError",
    "UnknownProviderError",
    "UnknownRevisionError",
    "UnknownSessionError",
    "UnknownTurnError",
    "UnsupportedDriverError",
    "Usage",
    "UserMessage",
    "WireMessage",
    "Workspace",
    "WorkspacePatch",
    "current_environment",
    "script",
    "system",
    "tool",
    "tool_request",
    "user",
]

# Public members whose signatures are deliberately not public API, and why.
NOT_PUBLIC_SIGNATURES = {
    "AgentSystem.__init__": "use AgentSystem.open; the constructor takes the runtime's parts",
    "AgentSystem.internals": "the system's parts and plumbing (the raw store, deliver, wake): "
    "an inspection hook for tests and the chaos campaigns",
    "Agent.__init__": "an Agent comes from AgentSystem.create or AgentSystem.resolve",
    "AgentRef.__init__": "references have no public constructor",
    "AgentSystemRef.__init__": "references have no public constructor",
    "Registry.__init__": "reach the registry as AgentSystem.registry",
    "Sessions.__init__": "reach the sessions as AgentSystem.sessions",
    "Subscription.__init__": "use AgentSystem.subscribe; the constructor takes the store's parts",
    "AgentSystemRef.within": "the runtime binds a reference to a hook's transaction",
}


# Parameters that are testing hooks: their types are exported by ``agentkeep.chaos``.
TESTING_HOOKS = {("SystemOptions", "testing")}


def test_all_is_pinned() -> None:
    assert sorted(ak.__all__) == ak.__all__, "keep __all__ sorted"
    assert ak.__all__ == PUBLIC


def test_every_exported_name_exists() -> None:
    for name in ak.__all__:
        assert hasattr(ak, name), name


def _named_types(annotation: Any) -> Iterator[type]:
    """The agentkeep classes an annotation names (through unions, generics, callables)."""
    if isinstance(annotation, list):
        for item in annotation:
            yield from _named_types(item)
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return
    if origin is not None:
        yield from _named_types(origin)
        for argument in typing.get_args(annotation):
            yield from _named_types(argument)
        return
    if isinstance(annotation, type) and annotation.__module__.split(".")[0] == "agentkeep":
        yield annotation


def _signatures(name: str, obj: object) -> Iterator[tuple[str, Callable[..., Any] | type]]:
    """Everything public whose type hints ``obj`` (an exported name) shows users."""
    if isinstance(obj, types.ModuleType):
        for member_name in obj.__all__:
            member = getattr(obj, member_name)
            if inspect.isfunction(member):
                yield f"{name}.{member_name}", member
            elif isinstance(member, type):
                yield from _signatures(f"{name}.{member_name}", member)
        return
    if not isinstance(obj, type):
        if callable(obj):
            yield name, obj
        return
    yield name, obj  # fields
    for member_name in dir(obj):
        if member_name.startswith("_") and member_name != "__init__":
            continue
        raw = inspect.getattr_static(obj, member_name)
        if isinstance(raw, property) and raw.fget is not None:
            yield f"{name}.{member_name}", raw.fget
        elif isinstance(raw, staticmethod | classmethod):
            yield f"{name}.{member_name}", raw.__func__
        elif inspect.isfunction(raw) and raw.__module__.split(".")[0] == "agentkeep":
            yield f"{name}.{member_name}", raw


def _unexported() -> dict[str, list[str]]:
    namespace = {name: getattr(ak, name) for name in ak.__all__}
    # A module agentkeep exports (``ak.script``) exports what its own ``__all__`` lists.
    for module in [m for m in namespace.values() if isinstance(m, types.ModuleType)]:
        for name in module.__all__:
            namespace.setdefault(name, getattr(module, name))
    chaos_namespace = {name: getattr(chaos, name) for name in chaos.__all__}
    missing: dict[str, list[str]] = {}
    for name in ak.__all__:
        for where, item in _signatures(name, getattr(ak, name)):
            if where in NOT_PUBLIC_SIGNATURES:
                continue
            try:
                # Names a module imports only for type checking resolve against the public
                # namespace: one that does not resolve is not exported either.
                hints = typing.get_type_hints(item, localns=namespace)
            except NameError as error:
                missing.setdefault(str(error), []).append(where)
                continue
            for parameter, annotation in hints.items():
                exported = chaos_namespace if (where, parameter) in TESTING_HOOKS else namespace
                for found in _named_types(annotation):
                    if exported.get(found.__name__) is not found:
                        missing.setdefault(f"{found.__module__}.{found.__name__}", []).append(where)
    return missing


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing = _unexported()
    assert missing == {}, "\n".join(f"{t} (in {', '.join(w[:3])})" for t, w in missing.items())


def test_the_pin_is_not_vacuous() -> None:
    """The walk sees through unions, generics and forward references."""
    found = set(_named_types(typing.get_type_hints(ak.SystemOptions)["restart_backoff"]))
    assert found == {ak.Backoff}
    assert set(_named_types(typing.get_type_hints(ak.AgentSystem.open)["options"])) == {
        ak.SystemOptions
    }
    hook_hints = typing.get_type_hints(ak.HookContext, localns=vars(ak))
    assert set(_named_types(hook_hints["call_kv"])) == {ak.KeyValueStore}
    assert set(_named_types(typing.get_type_hints(ak.Agent.send)["message"])) >= {
        ak.UserMessage,
        ak.SystemMessage,
        ak.AgentMessage,
    }


def test_testing_hooks_are_grouped_marked_and_kept_out_of_the_top_level() -> None:
    """Fault injection is one clearly named option of ``open``, not loose parameters, and
    its types live in ``agentkeep.chaos`` only."""
    parameters = typing.get_type_hints(ak.SystemOptions)
    assert "faults" not in parameters
    assert "vfs" not in parameters
    assert "testing" in ak.SystemOptions.__optional_keys__
    assert "testing" in (chaos.FaultInjection.__doc__ or "").lower()
    hints = typing.get_type_hints(chaos.FaultInjection)
    assert set(_named_types(hints["faults"])) == {chaos.FaultPlan}
    assert not hasattr(ak, "FaultInjection")
    assert not hasattr(ak, "FaultPlan")
