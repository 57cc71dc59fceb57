"""Providers: the protocol the loop talks to models through, the registry, and local models.

Public names are re-exported here; vendor adapters live in their own modules and import their
SDKs lazily (install the ``anthropic`` / ``openai`` extras).
"""

from agentkeep.providers import script
from agentkeep.providers.compatibility import (
    PROVIDER_KINDS,
    ModelFamily,
    ProviderKind,
    compatible,
    model_family,
    needs_reset,
)
from agentkeep.providers.protocol import CancelToken, Provider, Session
from agentkeep.providers.registry import ProviderFactory, Providers
from agentkeep.providers.responding import RespondingModel
from agentkeep.providers.scripted import ScriptedModel

__all__ = [
    "PROVIDER_KINDS",
    "CancelToken",
    "ModelFamily",
    "Provider",
    "ProviderFactory",
    "ProviderKind",
    "Providers",
    "RespondingModel",
    "ScriptedModel",
    "Session",
    "compatible",
    "model_family",
    "needs_reset",
    "script",
]
