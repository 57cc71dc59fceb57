"""The ``Providers`` catalog: provider ids → provider instances (or factories) and kinds.

An agent stores only a provider *id*; the catalog maps it to something that opens model sessions.
The kind (``claude``, ``codex``, ``grok``, ``bedrock``, ``gym``) decides which histories can
move between providers (see :mod:`agentkeep.providers.compatibility`).

Thread-safe: agents resolve providers from their own actor threads while the embedder may
add or remove entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeAlias, TypeVar

import msgspec

from agentkeep.errors import (
    DuplicateProviderError,
    InvalidConfigError,
    ModelNotServedError,
    ProviderUnavailableError,
    UnknownProviderError,
)
from agentkeep.providers import compatibility
from agentkeep.providers.compatibility import PROVIDER_KINDS, ProviderKind
from agentkeep.providers.protocol import Provider, ServesModels

T = TypeVar("T")

ProviderFactory: TypeAlias = Callable[[str, str | None], Provider]
"""Builds a provider for ``(provider_id, model)``; called on every :meth:`Providers.resolve`."""


class _Entry(msgspec.Struct, frozen=True):
    source: Provider | ProviderFactory
    kind: ProviderKind
    region: str | None


def _built(provider_id: str, make: Callable[[], T], model: str | None) -> T:
    """``make()``, whose failure means the provider cannot be used: a
    :class:`ProviderUnavailableError` passes as is, any other failure becomes one (a
    configuration problem of the system, never a crash of the caller)."""
    try:
        return make()
    except ProviderUnavailableError:
        raise
    except Exception as error:
        raise ProviderUnavailableError(
            provider_id, f"its factory failed for model {model!r}: {error}"
        ) from error


class Providers:
    """A catalog of providers by id.

    Example:
        >>> providers = Providers()
        >>> providers.add("local", RespondingModel(), kind="gym")  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._removal_listeners: list[Callable[[str], None]] = []

    def add(
        self,
        provider_id: str,
        provider: Provider | ProviderFactory,
        kind: ProviderKind,
        *,
        region: str | None = None,
    ) -> None:
        """Register ``provider`` under ``provider_id``.

        Args:
            provider_id: A non-empty id, unique in this catalog.
            provider: A provider instance, or a factory ``(provider_id, model) -> Provider``.
            kind: One of ``claude``, ``codex``, ``grok``, ``bedrock``, ``gym``.
            region: The vendor region (bedrock); defaults to the provider's ``region``
                attribute when it has a string one.

        Raises:
            DuplicateProviderError: ``provider_id`` is already registered.
            InvalidConfigError: The id is empty, the kind unknown, or ``provider`` is neither
                a provider nor a callable.
        """
        if not isinstance(provider_id, str) or not provider_id:
            raise InvalidConfigError("A provider id must be a non-empty string.")
        if kind not in PROVIDER_KINDS:
            raise InvalidConfigError(
                f'Provider kind "{kind}" is not one of {", ".join(PROVIDER_KINDS)}.'
            )
        if not isinstance(provider, Provider) and not callable(provider):
            raise InvalidConfigError(
                f'Provider "{provider_id}" must be a provider (with open_model_session) or a '
                "factory."
            )
        if region is None:
            attribute = getattr(provider, "region", None)
            region = attribute if isinstance(attribute, str) else None
        with self._lock:
            if provider_id in self._entries:
                raise DuplicateProviderError(provider_id)
            self._entries[provider_id] = _Entry(provider, kind, region)

    def remove(self, provider_id: str) -> bool:
        """Unregister ``provider_id``; returns whether it was registered.

        Removing a provider disables it ("provider disablement"): an agent's next
        request to it fails with :class:`~agentkeep.errors.UnknownProviderError`, and a
        ``retry_forever`` run waiting to retry against it stops retrying at once and gives
        up as a run without ``retry_forever`` would (``docs/decisions.md``). Adding it back
        lets the next start or message try again.
        """
        with self._lock:
            removed = self._entries.pop(provider_id, None) is not None
            listeners = list(self._removal_listeners)
        if removed:
            for listener in listeners:  # outside the lock: a listener may read the catalog
                listener(provider_id)
        return removed

    def on_remove(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(provider_id)`` after each :meth:`remove` that unregistered one.

        ``AgentSystem`` uses it to tell its agents at once; a listener must be quick and must
        not raise (it runs in the remover's thread).

        Returns:
            A function that unsubscribes ``listener`` (idempotent).
        """
        with self._lock:
            self._removal_listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._removal_listeners:
                    self._removal_listeners.remove(listener)

        return unsubscribe

    def get(self, provider_id: str) -> Provider | ProviderFactory | None:
        """What was registered under ``provider_id`` (instance or factory), or None."""
        with self._lock:
            entry = self._entries.get(provider_id)
        return None if entry is None else entry.source

    def resolve(self, provider_id: str, model: str | None) -> Provider:
        """The provider instance to use for ``model`` (calling the factory if one was added).

        Raises:
            UnknownProviderError: Nothing is registered under ``provider_id``.
            ProviderUnavailableError: The factory failed (a missing API key, a missing SDK)
                or returned something that is not a provider.
        """
        with self._lock:
            entry = self._entries.get(provider_id)
        if entry is None:
            raise UnknownProviderError(provider_id)
        source = entry.source
        if isinstance(source, Provider):
            return source
        built = _built(provider_id, lambda: source(provider_id, model), model)
        if not isinstance(built, Provider):
            raise ProviderUnavailableError(
                provider_id, f"its factory returned {type(built).__name__}, not a provider."
            )
        return built

    def check_model(self, provider_id: str, model: str) -> None:
        """Refuse ``model`` unless ``provider_id``'s provider serves it.

        What was registered decides, through :class:`~agentkeep.providers.protocol.
        ServesModels` (a provider, or a factory that declares it); one that declares nothing
        is taken to serve every model.

        Raises:
            UnknownProviderError: Nothing is registered under ``provider_id``.
            ProviderUnavailableError: Asking it failed: a factory that builds its provider
                to answer could not (a missing API key, a missing SDK).
            ModelNotServedError: The provider declares its models and ``model`` is not one.
        """
        with self._lock:
            entry = self._entries.get(provider_id)
        if entry is None:
            raise UnknownProviderError(provider_id)
        declared: object = entry.source  # a provider or a factory; either may declare
        if isinstance(declared, ServesModels):
            checked = declared  # (narrowed for the closure)
            if not _built(provider_id, lambda: checked.serves(model), model):
                raise ModelNotServedError(provider_id, model, declared.served_models)

    def kind_of(self, provider_id: str) -> ProviderKind | None:
        """The kind ``provider_id`` was registered with, or None if it is not registered."""
        with self._lock:
            entry = self._entries.get(provider_id)
        return None if entry is None else entry.kind

    def region_of(self, provider_id: str) -> str | None:
        """The region ``provider_id`` was registered with (bedrock), or None."""
        with self._lock:
            entry = self._entries.get(provider_id)
        return None if entry is None else entry.region

    def compatibility_key(self, provider_id: str, model: str | None) -> str | None:
        """The context compatibility key of ``(provider_id, model)``; None if unregistered.

        See :func:`agentkeep.providers.compatibility.compatibility_key`.
        """
        with self._lock:
            entry = self._entries.get(provider_id)
        if entry is None:
            return None
        return compatibility.compatibility_key(provider_id, entry.kind, model, entry.region)

    def ids(self) -> tuple[str, ...]:
        """Every registered id, in registration order."""
        with self._lock:
            return tuple(self._entries)

    def __contains__(self, provider_id: object) -> bool:
        with self._lock:
            return provider_id in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
