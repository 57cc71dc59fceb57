"""Providers: the protocol the loop talks to models through, the catalog, and local models.

This is the home of what a provider implementer writes against (:class:`Provider`,
:class:`ModelSession`, :class:`CancelToken`, the scripted model's requests, the model-session
errors); the stream events a model session yields and the values it is handed are value types,
exported by :mod:`agentkeep.types`. ``agentkeep`` re-exports only the ready-made models a first
program uses (:class:`Providers`, :class:`DemoModel`, :class:`ScriptedModel`, ``script``).

Public names are re-exported here, the vendor adapters included: their modules import their
SDKs only when a provider is constructed (install the ``anthropic`` / ``openai`` extras), so
importing this package works without either SDK.
"""

from agentkeep.errors import ModelSessionBusyError, ModelSessionClosedError
from agentkeep.providers import script
from agentkeep.providers.anthropic import AnthropicModelSession, AnthropicProvider
from agentkeep.providers.catalog import ProviderFactory, Providers
from agentkeep.providers.compatibility import PROVIDER_KINDS, ProviderKind
from agentkeep.providers.credentials import Credential, CredentialResolver, UsesCredentials
from agentkeep.providers.demo import DemoModel
from agentkeep.providers.openai_chat import OpenAIChatModelSession, OpenAICompatibleProvider
from agentkeep.providers.openai_responses import OpenAIProvider, OpenAIResponsesModelSession
from agentkeep.providers.protocol import (
    CancelToken,
    ModelSession,
    NamedModels,
    Provider,
    ServesModels,
)
from agentkeep.providers.responding import RespondingModel
from agentkeep.providers.retry import RetryPolicy
from agentkeep.providers.scripted import (
    CompactionRequest,
    OpenedModelSession,
    ScriptedModel,
    StreamRequest,
)

__all__ = [
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
]
