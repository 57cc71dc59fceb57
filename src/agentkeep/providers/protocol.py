"""The provider protocol: how the agent loop talks to a model.

A :class:`Provider` opens one :class:`ModelSession` per agent for fixed instructions and tool
descriptors (a *model session*: the runtime's connection to the model inside one agent, not
a session, which is the agent's durable conversation: docs/architecture.md, "Words").
A model session runs **one operation at a time**: ``stream`` yields the events of one
response synchronously, ``compact`` summarises a context, ``close`` ends it (exactly once).
The caller owns the transcript and passes it whole on every request.

Cancellation is cooperative and prompt: the caller hands a :class:`CancelToken`; a model
session checks it between events and may register a callback that closes its underlying
transport so a blocked read returns. A cancelled stream ends with exactly one
``Done(state="cancelled")``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from agentkeep.types import (
    CompactionOutcome,
    Context,
    ModelSessionOptions,
    Selection,
    StreamEvent,
)


class CancelToken:
    """A one-way latch: once cancelled it stays cancelled.

    Callbacks registered with :meth:`on_cancel` run once, in the cancelling thread (or at
    once, if the token is already cancelled). They must be quick and must not raise; a
    raising callback is ignored so one broken transport cannot stop the others closing.
    """

    __slots__ = ("_callbacks", "_event", "_lock", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` has been called."""
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel: set the latch, note ``reason``, and run the registered callbacks once.

        Idempotent: only the first call records its reason and runs callbacks. Callbacks run in this
        thread; one that raises is skipped.
        """
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a broken callback is ignored (see the class docstring)
                continue

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the token is cancelled, or at once (in this thread) if it already
        is.

        It must be quick; one that raises is ignored (see the class docstring).
        """
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait_cancelled(self, timeout_seconds: float | None = None) -> bool:
        """Block until cancelled (True) or the timeout passes (False)."""
        return self._event.wait(timeout_seconds)


@runtime_checkable
class ModelSession(Protocol):
    """What a provider opens for one agent: stateful, one operation at a time, closed exactly
    once (the owner reopens it when the provider, model, instructions or tools change)."""

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        """Stream one response. The iterator yields exactly one terminal ``Done``.

        Provider failures are reported as ``Done(state="error", ...)``, never raised; retries
        are the provider's own and surface as ``Retrying`` events after a ``BlockReset``.
        """
        ...

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        """Summarise ``context``; a completed outcome carries the replacement messages."""
        ...

    def close(self) -> None:
        """Release the model session. Called exactly once by its owner."""
        ...


@runtime_checkable
class Provider(Protocol):
    """A model vendor (or a local model) that opens model sessions.

    A provider should also declare which models it serves (:class:`ServesModels`): a message
    naming a model its provider does not serve is then refused before it is accepted. One
    that declares nothing is taken to serve every model name (it finds out at request time).
    """

    def open_model_session(self, agent_id: str, options: ModelSessionOptions) -> ModelSession:
        """Open a model session with fixed instructions and tool descriptors.

        Called on the agent's actor thread before its first request and again whenever the
        provider, model, instructions or tool descriptors change (the old model session is
        closed first). ``agent_id`` is the id of the agent it is opened for, so a provider may
        key server-side state (a prompt cache) on it.

        A vendor's request failures are reported by ``stream``, as an error ``Done``.

        Returns:
            A :class:`ModelSession` its caller owns and closes exactly once.
        """
        ...


@runtime_checkable
class ServesModels(Protocol):
    """Which model names a provider (or a provider factory) serves.

    Every provider in agentkeep implements it: local models serve only their own names, vendor
    adapters any name of their family. :meth:`Providers.check_model
    <agentkeep.providers.catalog.Providers.check_model>` asks it when a message or a system
    default names a model, inside the acceptance transaction, so ``serves`` must be pure and
    quick (no network).
    """

    @property
    def served_models(self) -> str:
        """The models it serves, for people: an error refusing a model quotes it."""
        ...

    def serves(self, model: str) -> bool:
        """Whether ``model`` is a name this provider serves."""
        ...


class NamedModels:
    """:class:`ServesModels` for a local model that serves exactly the names it was given.

    Args:
        models: Its model names (at least one; each a non-empty string).

    Raises:
        ValueError: ``models`` is empty or holds something that is not a non-empty string.
    """

    def __init__(self, models: Iterable[str]) -> None:
        names = (models,) if isinstance(models, str) else tuple(models)
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"models must be one or more non-empty names, got {models!r}")
        self.models: tuple[str, ...] = names

    @property
    def served_models(self) -> str:
        """The names it was given, comma-separated (an error refusing a model quotes it)."""
        return ", ".join(self.models)

    def serves(self, model: str) -> bool:
        """Whether ``model`` is one of the names it was given."""
        return model in self.models
