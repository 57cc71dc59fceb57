"""The public surface is pinned at two levels (``docs/architecture.md``,
"The public surface").

``agentkeep.__all__`` is the embedding API: the system and its agents, messages, tools,
features, the ready-made models a first program uses and the errors an embedder catches. Stream
events and value types, provider-implementer types, seed 002's sessions and registry, and
drivers live in their role subpackages (``ROLES``), each ``__all__`` listed here too, so adding,
removing or moving a public name is a deliberate change to this file. A name that left
``agentkeep`` is not left behind there as an alias. Every agentkeep type that appears in a
public signature (a parameter, a return, a field of a public class) is itself exported, from
``agentkeep`` or from one of the role subpackages, so a user can name what they are handed and
what they must pass.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import agentkeep as ak
from agentkeep import chaos

PUBLIC = [
    "Agent",
    "AgentBaseState",
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
    "CommitOutcomeUnknownError",
    "CompactAction",
    "CompactionCancelled",
    "CompactionCompleted",
    "CompactionFailed",
    "CompactionFailedError",
    "CompactionMessage",
    "CredentialUnavailableError",
    "DataBlock",
    "Delivery",
    "DemoModel",
    "DuplicateProviderError",
    "ExpiredScopeError",
    "Feature",
    "FeatureDefinitionError",
    "HistoryEpoch",
    "HookContext",
    "IdempotencyConflictError",
    "ImageBlock",
    "InferenceInfo",
    "InjectAction",
    "InvalidConfigError",
    "InvalidIdError",
    "InvalidMessageError",
    "KeyValueStore",
    "Message",
    "MessageAccepted",
    "MessageOptions",
    "MetadataChange",
    "MissingExtraError",
    "ModelChange",
    "ModelNotServedError",
    "Module",
    "ModuleHooks",
    "ModuleMigrationError",
    "ModuleStartError",
    "Partition",
    "PartitionNotOwnedError",
    "PermissionModeChange",
    "ProviderError",
    "ProviderTool",
    "ProviderUnavailableError",
    "Providers",
    "PurgeResult",
    "ReasoningBlock",
    "ReferenceBlock",
    "RestartIntensity",
    "SchemaTooNewError",
    "ScriptedModel",
    "SendAction",
    "SendOptions",
    "ServerToolResultBlock",
    "SessionArchivedError",
    "Settings",
    "SteerAction",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "StoreUnavailableError",
    "SupervisorGaveUpError",
    "SystemMessage",
    "SystemOptions",
    "SystemTransaction",
    "TextBlock",
    "Tokens",
    "Tool",
    "ToolCallBlock",
    "ToolCallDecision",
    "ToolCallInfo",
    "ToolCallRequestBlock",
    "ToolCallResult",
    "ToolCommitError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolResultMessage",
    "TransactionScopeError",
    "TurnInfo",
    "TurnStateError",
    "UnknownAgentError",
    "UnknownFeatureError",
    "UnknownProviderError",
    "Usage",
    "UserMessage",
    "current_environment",
    "script",
    "system",
    "tool",
    "tool_request",
    "user",
]

# The role subpackages and their ``__all__``: stream events and value types, what a provider
# implementer writes against, seed 002's sessions and registry, drivers, and the tool and
# feature packages ``agentkeep`` re-exports its embedding names from.
ROLES: dict[str, list[str]] = {
    "agentkeep.types": [
        "DONE_CANCELLED",
        "PERMISSION_MODES",
        "REASONING_EFFORTS",
        "AgentContentBlock",
        "AgentEnvironment",
        "AgentMessage",
        "AssistantBlock",
        "AssistantMessage",
        "Author",
        "BlockReset",
        "BlockStart",
        "BlockStop",
        "CompactionCancelled",
        "CompactionCompleted",
        "CompactionFailed",
        "CompactionMessage",
        "CompactionOutcome",
        "Context",
        "DataBlock",
        "Done",
        "DoneState",
        "ErrorKind",
        "ImageBlock",
        "InputBlock",
        "JSONObject",
        "Message",
        "MessageOptions",
        "ModelSessionOptions",
        "OutputBlock",
        "PermissionMode",
        "ProviderErrorInfo",
        "ProviderErrorType",
        "QueueableMessage",
        "ReasoningBlock",
        "ReasoningDelta",
        "ReasoningEffort",
        "ReasoningEnd",
        "ReasoningStart",
        "ReferenceBlock",
        "Retrying",
        "Selection",
        "ServerToolResultBlock",
        "ServiceTier",
        "SessionEvent",
        "Settings",
        "StreamEvent",
        "SystemMessage",
        "TextBlock",
        "TextDelta",
        "TextEnd",
        "TextStart",
        "TokenUsage",
        "Tokens",
        "ToolCallBlock",
        "ToolCallDelta",
        "ToolCallEnd",
        "ToolCallRequestBlock",
        "ToolCallStart",
        "ToolDescriptor",
        "ToolResultDelta",
        "ToolResultEnd",
        "ToolResultMessage",
        "ToolResultStart",
        "Usage",
        "UserBlock",
        "UserMessage",
        "done_error",
        "input_blocks",
        "is_valid_id",
        "new_id",
    ],
    "agentkeep.providers": [
        "PROVIDER_KINDS",
        "AnthropicModelSession",
        "AnthropicProvider",
        "CancelToken",
        "CompactionRequest",
        "Credential",
        "CredentialResolver",
        "DemoModel",
        "ModelSession",
        "ModelSessionBusyError",
        "ModelSessionClosedError",
        "NamedModels",
        "OpenAIChatModelSession",
        "OpenAICompatibleProvider",
        "OpenAIProvider",
        "OpenAIResponsesModelSession",
        "OpenedModelSession",
        "Provider",
        "ProviderFactory",
        "ProviderKind",
        "Providers",
        "RespondingModel",
        "RetryPolicy",
        "ScriptedModel",
        "ServesModels",
        "StreamRequest",
        "UsesCredentials",
        "script",
    ],
    "agentkeep.sessions": [
        "DataPart",
        "EventTooLargeError",
        "InputTooLargeError",
        "ReferencePart",
        "SessionBusyError",
        "SessionConfigError",
        "SessionError",
        "SessionEvent",
        "SessionOwes",
        "SessionRecord",
        "SessionStatus",
        "Sessions",
        "Subscription",
        "TextPart",
        "TurnFailure",
        "TurnHandle",
        "TurnRecord",
        "UnknownSessionError",
        "UnknownTurnError",
        "UnsupportedDriverError",
        "WireMessage",
    ],
    "agentkeep.registry": [
        "DEFAULT_DRIVER_ID",
        "Definition",
        "DefinitionDeletedError",
        "DefinitionExistsError",
        "DefinitionInput",
        "DefinitionPatch",
        "DefinitionRecord",
        "DefinitionUpdate",
        "DriverPatch",
        "DriverRef",
        "InvalidDefinitionError",
        "ModelInput",
        "ModelRef",
        "Registry",
        "RegistryError",
        "Resources",
        "ResourcesPatch",
        "Revision",
        "Toolbox",
        "ToolboxPatch",
        "UnknownDefinitionError",
        "UnknownRevisionError",
        "Workspace",
        "WorkspacePatch",
        "content_hash",
    ],
    "agentkeep.drivers": [
        "DRIVERS_ENV",
        "Driver",
        "DriverCancelledError",
        "DriverContext",
        "DriverContextClosedError",
        "DriverError",
        "DriverLoadError",
        "DriverResult",
        "DriverRunRequest",
        "DriverSignal",
        "InvalidDriverEventError",
        "ProcessDriver",
        "ProcessDriverError",
        "ProcessSettings",
        "load_drivers",
    ],
    "agentkeep.tools": [
        "ArgsT",
        "BasicToolContext",
        "GrammarInput",
        "ProviderTool",
        "ResultT",
        "Tool",
        "ToolCallDecision",
        "ToolCallInfo",
        "ToolCallResult",
        "ToolContext",
        "ToolError",
        "ToolOutput",
        "ToolSet",
        "default_to_llm",
        "run_tool",
        "tool",
        "validate_arguments",
    ],
    "agentkeep.modules": [
        "MODULE_HOOKS",
        "AgentSnapshot",
        "Migration",
        "Module",
        "ModuleContext",
        "ModuleDatabase",
        "ModuleHooks",
    ],
    # OpenTelemetry traces: the span vocabulary and the provider agentkeep's spans come from
    "agentkeep.tracing": [
        "current",
        "current_span",
        "current_traceparent",
        "names",
        "parent_context",
        "remote_parent",
        "set_tracer_provider",
        "tracer",
    ],
    "agentkeep.features": [
        "HOOKS",
        "Feature",
        "FeatureSet",
        "HookContext",
        "InferenceBoundary",
        "InferenceInfo",
        "MessageAccepted",
        "MessageBoundary",
        "MetadataChange",
        "ModelChange",
        "NotificationBoundary",
        "PermissionModeChange",
        "TurnInfo",
    ],
}

# Public members whose signatures are deliberately not public API, and why.
NOT_PUBLIC_SIGNATURES = {
    "AgentSystem.__init__": "use AgentSystem.open; the constructor takes the runtime's parts",
    "AgentSystem.internals": "the system's parts and plumbing (the raw store, deliver, wake): "
    "an inspection hook for tests and the chaos campaigns",
    "Agent.__init__": "an Agent comes from AgentSystem.create or AgentSystem.resolve",
    "AgentRef.__init__": "references have no public constructor",
    "AgentSystemRef.__init__": "references have no public constructor",
    "registry.Registry.__init__": "reach the registry as AgentSystem.registry",
    "sessions.Sessions.__init__": "reach the sessions as AgentSystem.sessions",
    "sessions.Subscription.__init__": "use AgentSystem.subscribe; the constructor takes the "
    "store's parts",
    "providers.AnthropicModelSession.__init__": "a vendor's model session comes from its "
    "provider's open_model_session; the constructor takes the vendor SDK's client",
    "providers.OpenAIChatModelSession.__init__": "as AnthropicModelSession.__init__",
    "providers.OpenAIResponsesModelSession.__init__": "as AnthropicModelSession.__init__",
    "AgentSystemRef.within": "the runtime binds a reference to a hook's transaction",
    "SystemTransaction.__init__": "use AgentSystem.transaction or HookContext.in_tx",
    "modules.ModuleDatabase.__init__": "the runtime binds a module's database to a "
    "transaction or to the store",
}


# Parameters that are testing hooks: their types are exported by ``agentkeep.chaos``.
TESTING_HOOKS = {("SystemOptions", "testing")}


def _ruff_order(names: list[str]) -> list[str]:
    """``__all__`` as ruff sorts it: constants, then classes, then functions and modules."""
    return sorted(names, key=lambda n: (not n.isupper(), n[:1].islower(), n))


def test_all_is_pinned() -> None:
    assert sorted(ak.__all__) == ak.__all__, "keep __all__ sorted"
    assert ak.__all__ == PUBLIC


def test_every_role_subpackage_is_pinned() -> None:
    for package, names in ROLES.items():
        exported = importlib.import_module(package).__all__
        assert exported == _ruff_order(exported), f"keep {package}.__all__ sorted"
        assert exported == names, package


def test_every_exported_name_exists() -> None:
    for name in ak.__all__:
        assert hasattr(ak, name), name
    for package, names in ROLES.items():
        module = importlib.import_module(package)
        for name in names:
            assert hasattr(module, name), f"{package}.{name}"


def test_names_that_left_agentkeep_leave_no_alias() -> None:
    """A role subpackage's name is reachable from ``agentkeep`` only if it is part of the
    embedding API: nothing stays behind as an undeclared alias."""
    for package, names in ROLES.items():
        for name in names:
            assert hasattr(ak, name) == (name in ak.__all__), f"agentkeep.{name} ({package})"
    for name in ("TextDelta", "Provider", "Sessions", "Registry", "Driver", "Subscription"):
        assert name not in ak.__all__, name
    assert "QueuedMessage" not in ROLES["agentkeep.types"], "store records stay unexported"


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
        if inspect.isfunction(obj):  # not a type alias or a constant
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


def _public_names() -> list[tuple[str, object]]:
    """Every exported name with its object: ``agentkeep``'s, then each role subpackage's."""
    names = [(name, getattr(ak, name)) for name in ak.__all__]
    for package in ROLES:
        module = importlib.import_module(package)
        names += [(f"{package}.{name}", getattr(module, name)) for name in module.__all__]
    return names


def _unexported() -> dict[str, list[str]]:
    public = _public_names()
    namespace: dict[str, Any] = {}
    for qualified, obj in public:
        namespace.setdefault(qualified.rsplit(".", 1)[-1], obj)
    exported_objects = {id(obj) for _, obj in public}
    # A module agentkeep exports (``ak.script``) exports what its own ``__all__`` lists.
    for module in [m for m in namespace.values() if isinstance(m, types.ModuleType)]:
        for name in module.__all__:
            namespace.setdefault(name, getattr(module, name))
            exported_objects.add(id(getattr(module, name)))
    chaos_namespace = {name: getattr(chaos, name) for name in chaos.__all__}
    missing: dict[str, list[str]] = {}
    for name, obj in public:
        for where, item in _signatures(name.removeprefix("agentkeep."), obj):
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
                testing = (where, parameter) in TESTING_HOOKS
                for found in _named_types(annotation):
                    if testing:
                        exported = chaos_namespace.get(found.__name__) is found
                    else:
                        exported = id(found) in exported_objects
                    if not exported:
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
