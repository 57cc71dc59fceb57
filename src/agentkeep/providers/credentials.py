"""Credentials a session's definition refers to (``authRef``), resolved by the embedder.

A definition never holds a secret: its ``authRef`` names one, and the embedder registers the
function that resolves it (``AgentSystem.open(credentials=resolver)``). The native loop calls
the resolver each time it opens a model session for a session with an ``authRef`` (at
execution time, so a rotated secret is picked up by the next model session), and hands the
:class:`Credential` to the provider (:class:`UsesCredentials`): the vendor adapters send it as
their API key instead of their own.

Invariants: the secret lives only in memory, in the :class:`Credential` and the SDK client
made for it. It is never written to the store or the ledger, never logged, never in a
``repr`` or an error message (errors name the reference). An unresolvable reference fails the
session's turn with :class:`~agentkeep.errors.CredentialUnavailableError` naming it; nothing
is sent to the provider.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

from agentkeep.errors import CredentialUnavailableError, InvalidConfigError
from agentkeep.providers.protocol import ModelSession
from agentkeep.types import ModelSessionOptions

CredentialResolver: TypeAlias = Callable[[str], str | None]
"""Resolves an ``authRef`` to its secret (None: no such credential). Called on an agent's
actor thread; it may block (a secrets manager) but should be quick."""


class Credential:
    """A resolved secret and the reference it was resolved from; its ``repr`` and ``str``
    hide the secret. Two credentials are equal when both reference and secret are."""

    __slots__ = ("_secret", "ref")

    def __init__(self, ref: str, secret: str) -> None:
        self.ref = ref
        self._secret = secret

    @property
    def secret(self) -> str:
        """The secret itself: hand it to the vendor's client, nowhere else."""
        return self._secret

    @property
    def fingerprint(self) -> str:
        """A one-way digest of reference and secret (tells a rotated secret apart; kept in
        memory only)."""
        return hashlib.sha256(f"{self.ref}\0{self._secret}".encode()).hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credential):
            return NotImplemented
        return self.ref == other.ref and hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(self.ref)

    def __repr__(self) -> str:
        return f"Credential(ref={self.ref!r}, secret=<hidden>)"

    __str__ = __repr__

    def __reduce__(self) -> str | tuple[Any, ...]:
        raise TypeError("A Credential is never pickled: its secret stays in memory.")


@runtime_checkable
class UsesCredentials(Protocol):
    """A provider that can run a model session under a session's resolved credential (its
    ``authRef``) instead of its own: the vendor adapters use it as the API key. A provider
    without it cannot serve a session with an ``authRef``: that session's turn fails, saying
    so, rather than run under the provider's own identity."""

    def open_model_session_as(
        self, agent_id: str, options: ModelSessionOptions, credential: Credential
    ) -> ModelSession:
        """:meth:`~agentkeep.providers.protocol.Provider.open_model_session`, every request
        of the model session sent with ``credential``."""
        ...


def check_resolver(resolver: object) -> CredentialResolver | None:
    """``resolver`` as :data:`CredentialResolver`, checked at ``open``.

    Raises:
        InvalidConfigError: it is neither None nor callable.
    """
    if resolver is not None and not callable(resolver):
        raise InvalidConfigError(
            f"credentials must be a function resolving an authRef to its secret, got {resolver!r}"
        )
    return resolver


def resolve(resolver: CredentialResolver | None, auth_ref: str) -> Credential:
    """The credential ``auth_ref`` names, by ``resolver``.

    Raises:
        CredentialUnavailableError: no resolver, it returned None or no string, or it raised
            (its error is chained, its message not repeated: it might quote the secret).
    """
    if resolver is None:
        raise CredentialUnavailableError(
            auth_ref, "no credential resolver is registered (AgentSystem.open(credentials=...))"
        )
    try:
        secret = resolver(auth_ref)
    except Exception as error:
        raise CredentialUnavailableError(
            auth_ref, f"the credential resolver raised {type(error).__name__}"
        ) from error
    if secret is None:
        raise CredentialUnavailableError(
            auth_ref, "the credential resolver knows no such credential"
        )
    if not isinstance(secret, str) or not secret:
        raise CredentialUnavailableError(
            auth_ref,
            f"the credential resolver returned {type(secret).__name__}, not a secret string",
        )
    return Credential(auth_ref, secret)
