"""Every error agentkeep raises on purpose derives from :class:`AgentkeepError`.

Each subclass names what happened. ``code`` is a stable string that survives serialization
(logs, JSON output of the CLI), so callers can branch on it without matching messages.
"""

from __future__ import annotations

from agentkeep.types.ids import ID_RULE, is_valid_id


class AgentkeepError(Exception):
    """Base class of every error the library raises on purpose."""

    code = "agentkeep_error"


class StoreError(AgentkeepError):
    """The durable store could not do what was asked."""

    code = "store_error"


class StoreLockedError(StoreError):
    """Another owner holds the store's exclusive lock."""

    code = "store_locked"

    def __init__(self, path: str, holder_pid: int | None, *, holder: str | None = None) -> None:
        who = f"process {holder_pid}" if holder_pid is not None else "another owner"
        if holder is not None:
            who = f"{who} ({holder})"
        super().__init__(
            f"The store at {path} is held by {who}; only one AgentSystem may own a store. "
            "Stop that owner (or wait for it to exit) and try again."
        )
        self.path = path
        self.holder_pid = holder_pid
        #: How the server describes the holder (PostgreSQL: backend, client, application).
        self.holder = holder


class StoreClosedError(StoreError):
    """The store (or its writer) has been closed."""

    code = "store_closed"


class StoreUnavailableError(StoreError):
    """The store writer failed and its supervisor has not restarted it yet.

    The work did not run (a known outcome): retry it once the writer is back. Work that was
    already in the writer when it failed got :class:`CommitOutcomeUnknownError` instead.
    """

    code = "store_unavailable"


class SchemaTooNewError(StoreError):
    """The database was written by a newer agentkeep than this one."""

    code = "schema_too_new"


class SchemaTooOldError(StoreError):
    """A read-only opening found a database not yet migrated to this agentkeep's schema.

    Read-only openings never migrate; opening the store for writing (``Store.open``,
    ``AgentSystem.open``) applies the missing migrations.
    """

    code = "schema_too_old"


class StoreDamagedError(StoreError):
    """The database file is damaged: SQLite's own consistency check failed on it.

    Nothing is written into a damaged file; ``agentkeep db check`` reports what SQLite found.
    ``path`` is the database file, ``findings`` what the check reported (at most 20 lines).
    """

    code = "store_damaged"

    def __init__(self, path: str, findings: list[str]) -> None:
        detail = "; ".join(findings[:3]) if findings else "unreadable"
        more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
        super().__init__(f"The database {path} is damaged: {detail}{more}.")
        self.path = path
        self.findings = findings[:20]


class StoreDirectoryError(StoreError):
    """The state directory cannot be used: it is a file, or not readable or writable."""

    code = "store_directory"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"The state directory {path} cannot be used: {reason}.")
        self.path = path
        self.reason = reason


class CommitOutcomeUnknownError(StoreError):
    """COMMIT reported an error, but the transaction may have committed anyway.

    SQLite can fail a COMMIT after the data is durable (for example an I/O error in a
    checkpoint). The caller must re-read by identity instead of assuming either outcome.
    """

    code = "commit_outcome_unknown"


class StoreNotWritableError(StoreUnavailableError):
    """The file system under the store refused a write: it is full, or read-only.

    The work did not run or was rolled back (a known outcome). Nothing has to restart: once
    space is back (or the file system writable again) the next write succeeds. ``reason``
    says which (``disk_full``, ``read_only``).
    """

    code = "store_not_writable"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class CommitNotWritableError(CommitOutcomeUnknownError):
    """COMMIT failed because the file system refused the write (full, or read-only).

    As for any failed COMMIT the outcome is formally unknown: re-read by identity (or retry
    with the same idempotency key) once writes succeed again. ``reason`` as for
    :class:`StoreNotWritableError`.
    """

    code = "store_not_writable"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class StoreReplacedError(StoreUnavailableError):
    """The database file was deleted or replaced under the running store.

    Writes into the open (unlinked or superseded) file would vanish at the next start, so the
    store stops acknowledging: the group that noticed is rolled back (not written) and every
    later write is refused. Restart the owner once the file is back where it belongs.
    """

    code = "store_replaced"


class StoreConstraintError(StoreError):
    """The store refused a write that breaks one of its rules: a constraint (a foreign key,
    a uniqueness, NOT NULL, CHECK) or one of its immutability rules (a session event is
    never changed or deleted, a terminal turn status never changes, a definition revision
    is never rewritten...). The message is the rule's own words.

    The work was rolled back: nothing of it was written. The same refusal on every backend
    (the database driver's error, SQLite's or PostgreSQL's, is its ``__cause__``).
    """

    code = "store_constraint"


class TransactionScopeError(StoreError):
    """A command that may not run inside a store transaction was called from inside one.

    A transaction's work runs in the store writer's thread, and the whole store waits for it:
    a command that needs a transaction of its own, waits for an agent or for the system, or
    has a live effect the transaction could not roll back (creating, resolving, deleting or
    relabelling an agent, abort, compact, close, shutdown, the waits) would wait for itself
    or escape the rollback, so it is refused at once. ``command`` names what was refused.
    """

    code = "transaction_scope"

    def __init__(self, command: str, hint: str = "") -> None:
        detail = f" {hint}" if hint else ""
        super().__init__(
            f"{command} is refused inside a transaction: the transaction holds the store's "
            f"only writer, which {command} would wait for or act behind.{detail}"
        )
        self.command = command


class StoreOwnershipLostError(StoreUnavailableError):
    """The store's owner lost its exclusive lock and someone else owns the store now.

    On PostgreSQL the lock lives on the writer's connection: when that connection dropped,
    the writer tried to take the lock again before its next write and found another owner.
    Writing on would break the single-owner rule, so the store stops acknowledging writes for
    good; restart this process once the other owner is gone.
    """

    code = "store_ownership_lost"


class PartitionNotOwnedError(AgentkeepError):
    """A write for an agent (or the registry) of a partition this system does not own.

    A store on PostgreSQL may be divided into partitions, each run by one system
    (``AgentSystem.open(..., partition=Partition(index, count))``); only the owner of an
    agent's partition writes for it, and only partition 0's owner writes the registry.
    Nothing was written: send the request to that partition's owner.
    """

    code = "not_owner"

    def __init__(self, agent_id: str | None, partition: int, *, owned: int, count: int) -> None:
        what = "the registry (definitions)" if agent_id is None else f'agent "{agent_id}"'
        super().__init__(
            f"{what[0].upper()}{what[1:]} belongs to partition {partition} of {count}; this "
            f"system owns partition {owned}. Nothing was written: send it to the owner of "
            f"partition {partition}."
        )
        #: The agent written for (None: the registry).
        self.agent_id = agent_id
        #: The partition it belongs to, and the one this system owns (of ``count``).
        self.partition = partition
        self.owned = owned
        self.count = count


class ExpiredScopeError(AgentkeepError):
    """A store handle lent to a transaction or a call was used after its scope ended."""

    code = "expired_scope"


class UnknownAgentError(AgentkeepError):
    """No agent with this id has been created (or it was deleted)."""

    code = "unknown_agent"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f'Agent "{agent_id}" has not been created.')
        self.agent_id = agent_id


class AgentExistsError(AgentkeepError):
    """An agent with this id already exists."""

    code = "agent_exists"

    def __init__(self, agent_id: str) -> None:
        super().__init__(f'Agent "{agent_id}" already exists.')
        self.agent_id = agent_id


class AgentClosedError(AgentkeepError):
    """The agent (or its system) has been closed and admits nothing new."""

    code = "agent_closed"


class AwaitFromOwnLoopError(AgentkeepError):
    """``wait=True`` was asked from inside the loop of the agent it would wait for."""

    code = "await_from_own_loop"


class InvalidConfigError(AgentkeepError):
    """A configuration value (agent config, message options, settings) is invalid."""

    code = "invalid_config"


class InvalidMessageError(AgentkeepError):
    """A message offered for delivery is malformed (empty, wrong role, bad tool request)."""

    code = "invalid_message"


class InvalidIdError(InvalidConfigError, InvalidMessageError):
    """A client-given id (an agent, session or message id) breaks the id rule
    (:func:`agentkeep.types.ids.check_id`): 1-128 lowercase letters, digits, dots, underscores
    or hyphens, and not ``.`` or ``..``. ``what`` says which id (``"session id"``), ``field``
    names the field that held it (``sessionId``). Nothing was written.

    It is an :class:`InvalidConfigError` (as a bad agent id always was) and an
    :class:`InvalidMessageError` (as a bad message id always was)."""

    code = "invalid_id"

    def __init__(self, what: str, value: object, field: str, rule: str) -> None:
        super().__init__(f"{what} {value!r} is invalid: use {rule}")
        self.what = what
        self.value = value
        self.field = field


def check_id(value: object, *, what: str, field: str) -> str:
    """``value`` if it is a valid client-given id (:func:`agentkeep.types.ids.is_valid_id`).

    Args:
        value: The id a caller gave.
        what: Which id it is, for the message: ``"session id"``, ``"message id"``.
        field: The field that held it, on the wire (``sessionId``, ``messageId``).

    Raises:
        InvalidIdError: saying which id, what is wrong with it, and naming ``field``.
    """
    if not is_valid_id(value):
        raise InvalidIdError(what, value, field, ID_RULE)
    assert isinstance(value, str)
    return value


class EventTooLargeError(InvalidMessageError):
    """A fact's ledger event would exceed the store's ``max_event_bytes``: it was refused
    before anything was written (an accepted message, a metadata change)."""

    code = "event_too_large"

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} would make a ledger event of {size} bytes, over max_event_bytes "
            f"({limit}); nothing was written. Send less, or open the system with a larger "
            "max_event_bytes."
        )
        self.size = size
        self.limit = limit


class InputTooLargeError(InvalidMessageError):
    """A message is larger than the system's ``max_input_bytes`` (the wire's
    ``maxInputBytes``): it was refused before anything was written."""

    code = "input_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"The message is {size} bytes, over max_input_bytes ({limit}); nothing was "
            "written. Send less, or open the system with a larger max_input_bytes."
        )
        self.size = size
        self.limit = limit


class IdempotencyConflictError(InvalidMessageError):
    """An idempotency key was sent again with a different input. A key names one input of a
    session forever (it is never released); nothing was written."""

    code = "idempotency_conflict"

    def __init__(self, agent_id: str, key: str) -> None:
        super().__init__(
            f'Idempotency key "{key}" of session "{agent_id}" was already used for a '
            "different input; nothing was written. Use a new key for a new input."
        )
        self.agent_id = agent_id
        self.key = key


class SessionArchivedError(AgentkeepError):
    """The session was archived: it takes no new messages (it stays readable)."""

    code = "session_archived"

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f'Session "{session_id}" is archived: it takes no new messages (it stays readable).'
        )
        self.session_id = session_id


class TurnStateError(AgentkeepError):
    """A turn cannot make the asked move (it does not exist, or its status does not allow
    it: a terminal status never changes)."""

    code = "turn_state"


class ProviderError(AgentkeepError):
    """A provider catalog or model session operation failed."""

    code = "provider_error"


class UnknownProviderError(ProviderError):
    """No provider is registered under this id."""

    code = "unknown_provider"

    def __init__(self, provider_id: str) -> None:
        super().__init__(f'Provider "{provider_id}" is not registered.')
        self.provider_id = provider_id


class ProviderUnavailableError(ProviderError):
    """A registered provider cannot be used now: its adapter could not be built (its API key
    is unset, its SDK is not installed, its factory failed). ``reason`` says what is missing;
    ``field``, when the error answers a definition (a session start), names its field
    (``model.id``). It is a configuration problem of the system, never a crash: a session
    start or a message naming the provider is refused with it, and a turn already running
    fails saying so."""

    code = "provider_unavailable"

    def __init__(self, provider_id: str, reason: str, *, field: str | None = None) -> None:
        super().__init__(f'Provider "{provider_id}" cannot be used: {reason}')
        self.provider_id = provider_id
        self.reason = reason
        if field is not None:
            self.field = field


class ModelNotServedError(InvalidConfigError, ProviderError):
    """A message (or a system default) names a model its provider does not serve.

    Raised before anything is written, so a typo in a model name never reaches the agent.
    """

    code = "model_not_served"

    def __init__(self, provider_id: str, model: str, served: str) -> None:
        super().__init__(
            f'Provider "{provider_id}" does not serve model "{model}"; it serves: {served}.'
        )
        self.provider_id = provider_id
        self.model = model
        self.served = served


class DuplicateProviderError(ProviderError):
    """A provider id was registered twice."""

    code = "duplicate_provider"

    def __init__(self, provider_id: str) -> None:
        super().__init__(f'Provider "{provider_id}" is already registered.')
        self.provider_id = provider_id


class ModelSessionBusyError(ProviderError):
    """A model session was asked for a second operation while one was still running.

    A model session (:class:`~agentkeep.providers.protocol.ModelSession`) runs one operation at
    a time (a stream lasts until its iterator is drained or closed); the caller must finish or
    close the previous one first. The ``code`` keeps its name: codes are the wire contract.
    """

    code = "provider_session_busy"


class ModelSessionClosedError(ProviderError):
    """A model session was used (or closed again) after it was closed.

    The ``code`` keeps its name: codes are the wire contract.
    """

    code = "provider_session_closed"


class MissingExtraError(ProviderError):
    """An optional vendor SDK is not installed."""

    code = "missing_extra"

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"The {package!r} package is not installed. Install it with "
            f"`pip install agentkeep[{extra}]`."
        )
        self.package = package
        self.extra = extra


class CompactionFailedError(AgentkeepError):
    """A compaction the caller waited for failed; the history is untouched."""

    code = "compaction_failed"


class ToolDefinitionError(AgentkeepError):
    """A tool was defined wrongly (bad name, duplicate name, unsupported types)."""

    code = "tool_definition"


class ToolCommitError(AgentkeepError):
    """A tool's ``ctx.commit(result)`` was refused: the result does not match the tool's
    result type or cannot be rendered, or the call it names is no longer live."""

    code = "tool_commit"


class FeatureDefinitionError(AgentkeepError):
    """A feature was defined wrongly (a method whose name is a misspelled hook)."""

    code = "feature_definition"


class ModuleMigrationError(AgentkeepError):
    """A module's migration failed at ``open``: nothing of it was recorded (the keys before
    it stay applied), and ``open`` was aborted. ``module`` and ``key`` name it; the
    migration's own error is the ``__cause__``."""

    code = "module_migration_failed"

    def __init__(self, module: str, key: str, error: BaseException) -> None:
        super().__init__(f'Migration "{key}" of module "{module}" failed: {error!r}')
        self.module = module
        self.key = key


class ModuleStartError(AgentkeepError):
    """A module's ``before_start`` or ``after_start`` failed, aborting ``open`` (the system
    was closed). ``module`` and ``hook`` name it; the hook's own error is the
    ``__cause__``."""

    code = "module_start_failed"

    def __init__(self, module: str, hook: str, error: BaseException) -> None:
        super().__init__(f'The {hook} of module "{module}" failed: {error!r}')
        self.module = module
        self.hook = hook


# -- definitions reaching the native loop, and the accessors ----------------------
class CredentialUnavailableError(ProviderError):
    """A session's ``authRef`` could not be resolved: no credential resolver was registered
    (``AgentSystem.open(credentials=...)``), the resolver knows no such credential (it returned
    None), or it raised. ``auth_ref`` names the reference (never the secret). The session's
    turn fails saying so; nothing is sent to the provider."""

    code = "credential_unavailable"

    def __init__(self, auth_ref: str, reason: str) -> None:
        super().__init__(f'The credential of authRef "{auth_ref}" could not be resolved: {reason}')
        self.auth_ref = auth_ref
        self.reason = reason


class UnknownFeatureError(AgentkeepError, LookupError):
    """``feature(name)`` names no feature of the system; ``known`` lists the ones it has."""

    code = "unknown_feature"

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(
            f'The system has no feature "{name}" (its features: {", ".join(known) or "none"}).'
        )
        self.name = name
        self.known = known
