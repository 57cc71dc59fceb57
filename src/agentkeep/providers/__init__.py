"""Providers: the protocol the loop talks to models through, the catalog, and local models.

Public names are re-exported here, the vendor adapters included: their modules import their
SDKs only when a provider is constructed (install the ``anthropic`` / ``openai`` extras), so
importing this package works without either SDK.
"""

from agentkeep.providers import script
from agentkeep.providers.anthropic import AnthropicProvider
from agentkeep.providers.catalog import ProviderFactory, Providers
from agentkeep.providers.compatibility import (
    PROVIDER_KINDS,
    ModelFamily,
    ProviderKind,
    compatible,
    model_family,
    needs_reset,
)
from agentkeep.providers.demo import DemoModel
from agentkeep.providers.openai_chat import OpenAICompatibleProvider
from agentkeep.providers.openai_responses import OpenAIProvider
from agentkeep.providers.protocol import (
    CancelToken,
    ModelSession,
    NamedModels,
    Provider,
    ServesModels,
)
from agentkeep.providers.responding import RespondingModel
from agentkeep.providers.scripted import ScriptedModel

__all__ = [
    "PROVIDER_KINDS",
    "AnthropicProvider",
    "CancelToken",
    "DemoModel",
    "ModelFamily",
    "ModelSession",
    "NamedModels",
    "OpenAICompatibleProvider",
    "OpenAIProvider",
    "Provider",
    "ProviderFactory",
    "ProviderKind",
    "Providers",
    "RespondingModel",
    "ScriptedModel",
    "ServesModels",
    "compatible",
    "model_family",
    "needs_reset",
    "script",
]
