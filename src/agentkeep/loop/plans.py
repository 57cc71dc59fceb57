"""What the loop asks to commit, as plain data: one plan per store transaction.

The loop never performs I/O. When durable state must change it returns a ``Commit`` effect
carrying one of these plans; the layer above the loop and the store
(:mod:`agentkeep.runtime.commit_plans`) runs the plan whole inside one store transaction and
feeds back ``CommitLanded`` with the plan's result (``Consumed``, ``Appended``, ``Settled``) or
``CommitFailed``. Every atomic unit of the runtime is named here, so a reader can list what can
ever commit without reading the code that commits it. ``Snapshot`` is the one read the loop
decides from.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal, TypeAlias, TypeVar, cast, get_args, get_origin

import msgspec

from agentkeep.types import (
    AssistantBlock,
    Message,
    PermissionMode,
    Settings,
    Tokens,
    ToolResultMessage,
)
from agentkeep.types.records import (
    ConversationRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
)

QueueMode: TypeAlias = Literal["one-at-a-time", "all"]


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Snapshot(_Data, frozen=True):
    """Everything durable the loop decides from, read in one consistent view.

    ``records`` is None when the loader was asked to skip them (the instance vouches for its
    mirror); ``record_count`` is always read, so a mirror that disagrees is caught.
    """

    records: tuple[ConversationRecord, ...] | None = ()
    record_count: int = 0
    queued: tuple[QueuedMessage, ...] = ()
    notices: tuple[QueuedNotice, ...] = ()
    pending: tuple[PendingToolCall, ...] = ()
    settings: Settings | None = None
    owed: OwedWork | None = None
    context_tokens: int | None = None


class LifecycleIds(_Data, frozen=True):
    """The lifecycle ids a hook is told (``docs/lifecycle.md``): the loop (a run,
    settled to settled), the turn, the provider request and the settlement it belongs to;
    None where the hook belongs to none."""

    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    settlement_id: str | None = None


#: The transactional lifecycle hooks a plan may carry (``docs/hooks.md``).
TransactHookName: TypeAlias = Literal[
    "before_agent_loop_transact",
    "before_turn_transact",
    "before_inference_transact",
    "on_event_transact",
    "after_inference_transact",
    "after_turn_transact",
    "after_agent_loop_transact",
    "after_agent_settled_transact",
]


class LifecycleHook(_Data, frozen=True):
    """A transactional lifecycle hook to run inside a plan's transaction, after the plan's own
    writes (``commit_plans.execute``), with what it is told: the lifecycle ids, the turn
    (``context_tokens``, ``aborted``), how the response ended (``state``, ``tokens``,
    ``error``; the run's failure for ``after_agent_settled_transact``). ``on_event_transact``
    runs once per published block the plan appends. A hook that raises rolls the whole plan
    back."""

    hook: TransactHookName
    ids: LifecycleIds = LifecycleIds()
    context_tokens: int | None = None
    aborted: bool = False
    state: str | None = None
    tokens: Tokens | None = None
    error: str | None = None


# -- plan results --------------------------------------------------------------------------


class Consumed(_Data, frozen=True):
    """What a consumption committed. ``reset`` ⇒ ``records`` is the whole new conversation;
    otherwise ``records`` were appended. ``outranked``: consuming send found durable steering
    this instance had not heard of yet (say, a hook's own steer still in the mailbox), so it
    consumed nothing; these are the steering entries to take first. ``permission_change``:
    the (previous, current) permission mode when this consumption changed it."""

    records: tuple[ConversationRecord, ...]
    settings: Settings
    remaining: tuple[QueuedMessage, ...]
    reset: bool = False
    outranked: tuple[QueuedMessage, ...] = ()
    permission_change: tuple[PermissionMode, PermissionMode] | None = None


class Appended(_Data, frozen=True):
    """What an append committed. ``queued``: for a response's end, every message durably
    queued at that moment, so input this instance has not heard of yet (a hook's own steer
    still in the mailbox) joins the same turn instead of waiting for settlement."""

    records: tuple[ConversationRecord, ...]
    settled: bool = False
    queued: tuple[QueuedMessage, ...] = ()


class Settled(_Data, frozen=True):
    settled: bool


#: What a plan's commit returns (``CommitLanded.value``): each plan's own kind, or None.
PlanResult: TypeAlias = Consumed | Appended | Settled | None

#: The result type a plan's commit returns.
ResultT = TypeVar("ResultT", covariant=True)


class _Plan(_Data, Generic[ResultT], frozen=True):
    """A plan whose commit returns a ``ResultT`` (``commit_plans.execute``): a plan class
    names its result once, as its base's parameter (``class Settle(_Plan[Settled])``), and
    :meth:`committed` hands a landed commit's value back as that type — no ``isinstance``
    ladder where a result is used."""

    result_type: ClassVar[type[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is _Plan:
                (cls.result_type,) = get_args(base)

    def committed(self, value: PlanResult) -> ResultT:
        """``value`` (what this plan's commit returned) as this plan's result type. A value of
        another type is a broken shell (it paired the result with the wrong plan)."""
        if not isinstance(value, self.result_type):
            raise TypeError(f"{type(self).__name__} commits to {self.result_type}, not {value!r}")
        return cast(ResultT, value)


# -- plans: one transaction each -----------------------------------------------------------


class StageOwed(_Plan[None], frozen=True):
    """Write the owed fact (the run's ids with it) before a hook is told them. ``hooks``: the
    transactional hooks of the edge this write opens — a loop's or turn's start, a request's
    start — or the settlement it stages, run in the same transaction."""

    owed: OwedWork
    hooks: tuple[LifecycleHook, ...] = ()


class LifecycleEdge(_Plan[None], frozen=True):
    """A lifecycle edge whose fact is durable already (a turn's or loop's end, a cancelled
    response's end): its transactional ``hooks`` run in a transaction of their own, ordered
    with the loop's other commits. Writes nothing else (the owed fact and its ids stand)."""

    hooks: tuple[LifecycleHook, ...]


class ConsumeQueue(_Plan[Consumed], frozen=True):
    """Move queued messages into the conversation: claim (delete) each entry, append its
    user record, apply its settings, owe an inference — all or nothing.

    A message with a tool request ends an all-at-once batch; its user record is followed by
    the runtime's assistant call, whose id is ``call_id`` (unused if there is no request).
    """

    queue: QueueName
    mode: QueueMode
    defaults: Settings
    owed: OwedWork
    call_id: str


class ConsumeOffer(_Data, frozen=True):
    """An idle loop's offer to have the next message consumed inside its own acceptance's
    transaction (``docs/architecture.md``, "Commit boundaries of a step"). It names the plan the
    loop would commit for each queue (``plan``) and the durable state its mirror holds: the
    transaction consumes only if the store, read inside it, is exactly that state with the
    one accepted message queued — what the turn's reload would have read.
    """

    steering: ConsumeQueue
    send: ConsumeQueue
    record_count: int
    settings: Settings
    context_tokens: int | None

    def plan(self, queue: QueueName) -> ConsumeQueue:
        """The consumption of ``queue`` this offer stands for."""
        return self.steering if queue == "steering" else self.send


class ConsumeNotices(_Plan[Appended], frozen=True):
    """The inference stage's opening transaction, right before the request: append the
    queued notices, then the inference boundary's notices (the features'
    ``system_notifications_transact``), and owe the inference (``owed`` names its request).
    ``continue_response``: the conversation ends with the model's own completed blocks, so
    the notice "Continue from where you left off." is appended first, ahead of every other
    notice (a request never ends with the model's own message; docs/lifecycle.md).
    ``owed`` is written marked ``stage_opened_at`` (the conversation's length after it): the
    request is made under its id while nothing else follows; ``owed`` names a fresh id when
    an earlier stage opened (each request has one boundary). ``settings``: what the hooks
    are told. ``hooks``: the request's ``before_inference_transact`` (told ``owed``'s ids),
    run last, after the owed fact is written: this is the request's one opening commit."""

    owed: OwedWork
    continue_response: bool = False
    settings: Settings | None = None
    hooks: tuple[LifecycleHook, ...] = ()


class AppendBlock(_Plan[Appended], frozen=True):
    """A finished block of a response that goes on. ``owed`` (the response's first block
    only): the owed fact marking the request's completed content as not yet finished
    (``OwedWork.response_open``), in the same transaction."""

    block: AssistantBlock
    # Provider call ids of server calls kept out of the published history (their blocks
    # stay in the private model context: ``agentkeep.tools.provider_tools``).
    private_calls: tuple[str, ...] = ()
    owed: OwedWork | None = None
    hooks: tuple[LifecycleHook, ...] = ()  # on_event_transact for the block


class FinishResponse(_Plan[Appended], frozen=True):
    """The end of a response in one transaction: its last finished blocks, its measurement,
    and — when nothing else can follow — the settlement (checked inside the transaction: it
    settles only if nothing is queued or pending). Nothing acts on a finished block before the
    response ends, so committing the last ones with the end keeps every durability promise
    while saving fsyncs."""

    blocks: tuple[AssistantBlock, ...] = ()
    tokens: Tokens | None = None
    settle: bool = False
    # The whole response when it answers (it ended normally without calling a tool): the
    # session's running turns whose input is all consumed complete with it, in this same
    # transaction (docs/turns.md). None for a response that calls tools or was cut short.
    answer: tuple[AssistantBlock, ...] | None = None
    # The whole response as published (a server call kept out of the history left out),
    # when it ended with content (normally, at its length limit or calling tools): its
    # assistant message is reported as a wire ``message`` event in this transaction
    # (docs/ledger.md). None for a response that failed or was cut short.
    message: tuple[AssistantBlock, ...] | None = None
    private_calls: tuple[str, ...] = ()  # as for ``AppendBlock``
    # The owed fact after the response (when it does not settle): its request's id is spent
    # and its content finished (``response_open`` cleared), so a restart never reuses the id.
    owed: OwedWork | None = None
    # on_event_transact (per published block) and after_inference_transact, in its transaction.
    hooks: tuple[LifecycleHook, ...] = ()


class DispatchBatch(_Plan[None], frozen=True):
    """The whole batch durable before any call runs (invariant I13)."""

    calls: tuple[PendingToolCall, ...]
    owed: OwedWork


class CommitToolResult(_Plan[Appended], frozen=True):
    """One result, in batch order: the first claimed result wins; the pending entry goes."""

    pending: PendingToolCall
    result: ToolResultMessage
    owed_after: OwedWork | None = None  # set on the batch's last result


class ClaimToolResults(_Plan[None], frozen=True):
    """A drain left a reloadable call pending: the results that finished behind it cannot
    land in batch order now, so each is claimed for its pending call (first claim wins);
    the next process lands them in order without running their calls again."""

    claims: tuple[tuple[PendingToolCall, ToolResultMessage], ...]


class AnswerCalls(_Plan[Appended], frozen=True):
    """Answer calls that will never run (a response that did not end in ``tool_call``, an
    abort, a failed turn). ``calls[i]`` is the call ``results[i]`` answers, under the durable
    id it gets now, so ``after_tool_call_transact`` runs for it in this transaction."""

    results: tuple[ToolResultMessage, ...]
    calls: tuple[PendingToolCall, ...] = ()


class AppendFailureNote(_Plan[Appended], frozen=True):
    message: str


class Settle(_Plan[Settled], frozen=True):
    """Erase the owed fact — only if nothing is queued or pending (checked in the tx).
    ``hooks``: ``after_agent_settled_transact``, run only if it settles, after the owed fact
    is erased and before the run's store is."""

    hooks: tuple[LifecycleHook, ...] = ()


class ReplaceWithCompaction(_Plan[None], frozen=True):
    """Replace the records before ``through_position`` with a summary.

    ``owes_answer`` is the summary record's flag: the replaced history ended in a question
    nobody answered (or an inference was owed) — what a reload or an explicit start reads
    where the history itself no longer shows it. ``answer_now``: an inference is owed now,
    so ``owed`` is written with the summary. They differ after an abort: its unanswered
    question is not owed, yet an explicit start still answers it (docs/decisions.md).
    """

    through_position: int
    messages: tuple[Message, ...]
    owes_answer: bool
    owed: OwedWork
    answer_now: bool


Plan: TypeAlias = (
    StageOwed
    | LifecycleEdge
    | ConsumeQueue
    | ConsumeNotices
    | AppendBlock
    | FinishResponse
    | DispatchBatch
    | CommitToolResult
    | ClaimToolResults
    | AnswerCalls
    | AppendFailureNote
    | Settle
    | ReplaceWithCompaction
)
