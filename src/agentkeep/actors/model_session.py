"""One agent's model session (what its provider opened for it): created lazily, recreated when
what the provider was told changes, closed exactly once (invariant I12)."""

from __future__ import annotations

import threading

import msgspec

from agentkeep.errors import ProviderError, UnknownProviderError
from agentkeep.logs import get_logger
from agentkeep.providers import credentials
from agentkeep.providers.catalog import Providers
from agentkeep.providers.credentials import CredentialResolver
from agentkeep.providers.protocol import ModelSession
from agentkeep.types import ModelSessionOptions, Settings, ToolDescriptor

log = get_logger(__name__)


class ModelSessionSlot:
    """Holds the model session of one agent. Only the agent's actor thread opens them; the
    lock makes ``close`` safe from a stopping actor."""

    def __init__(
        self,
        agent_id: str,
        providers: Providers,
        *,
        auth_ref: str | None = None,
        credentials: CredentialResolver | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._providers = providers
        self._auth_ref = auth_ref  # the session's authRef: its requests are sent under it
        self._credentials = credentials
        self._lock = threading.Lock()
        self._session: ModelSession | None = None
        self._key: bytes | None = None

    def model_session_for(
        self, settings: Settings, instructions: str, tools: tuple[ToolDescriptor, ...]
    ) -> ModelSession:
        """The model session for this configuration; a changed provider, model, prompt or tool
        descriptor recreates it, so the model always sees the tools the agent would run. A
        changed profile recreates it too: a new profile starts a fresh model session (the
        profile is part of the key only, never of what the provider is told).

        A session with an ``authRef`` has it resolved here, for every request (a rotated
        secret opens a new model session, told apart by a one-way fingerprint held in
        memory), and the model session is opened under it
        (:class:`~agentkeep.providers.credentials.UsesCredentials`).

        Raises:
            ProviderError: no provider is selected, the provider is unknown (removed), or it
                cannot send a credential the session needs.
            CredentialUnavailableError: the session's ``authRef`` could not be resolved.
        """
        if settings.provider is None:
            raise ProviderError("No provider is selected: pass provider= when opening the system.")
        credential = None
        if self._auth_ref is not None:
            credential = credentials.resolve(self._credentials, self._auth_ref)
        options = ModelSessionOptions(instructions=instructions, tools=tools)
        fingerprint = None if credential is None else credential.fingerprint
        key = msgspec.json.encode(
            (settings.provider, settings.model, settings.profile, options, fingerprint)
        )
        with self._lock:
            if settings.provider not in self._providers:
                # Removed (disabled): its open model session is not used again.
                self._close_locked()
                raise UnknownProviderError(settings.provider)
            if self._session is not None and key == self._key:
                return self._session
            self._close_locked()
            provider = self._providers.resolve(settings.provider, settings.model)
            if credential is None:
                self._session = provider.open_model_session(self._agent_id, options)
            elif isinstance(provider, credentials.UsesCredentials):
                self._session = provider.open_model_session_as(self._agent_id, options, credential)
            else:
                raise ProviderError(
                    f'Provider "{settings.provider}" cannot send a credential, so the session\'s '
                    f'authRef "{credential.ref}" cannot be used with it.'
                )
            self._key = key
            return self._session

    def close(self) -> None:
        """Close the open model session, if any (a failing close is logged, never raised); the
        next request opens a new one."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        session, self._session, self._key = self._session, None, None
        if session is not None:
            try:
                session.close()
            except Exception as error:  # a failing close must not keep the agent from going on
                log.warning(
                    "model_session_close_failed", agent_id=self._agent_id, error=repr(error)
                )
