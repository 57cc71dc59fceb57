"""The chaos suites as functions ``(seed) -> CampaignResult``, and their runner.

Every suite builds a :class:`~agentkeep.chaos.world.ChaosWorld` in a temporary directory,
plays a seeded sequence of simulated processes (crashing, flaky, aborted, concurrent), checks
the disk after each one and, after a final healthy process, checks that everything was
answered and nothing is owed. Same seed, same plan. Store fault points are drawn over the
suite's measured healthy run (:mod:`agentkeep.chaos.calibration`), not a fixed bound.

``CHAOS_SEEDS=N`` runs seeds ``0..N-1`` (default 15); ``CHAOS_SEED=S`` runs only seed ``S``.
A failure names the seed, the violated invariant and the command that replays it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Literal

import msgspec

from agentkeep.chaos.batches import BatchingModel
from agentkeep.chaos.campaign_result import (
    DEFAULT_SEEDS,
    SEED_ENV,
    SEEDS_ENV,
    CampaignResult,
    replay_command,
    seeds_from_env,
)
from agentkeep.chaos.checker import SwitchExpectation, Violation
from agentkeep.chaos.extensions import extensions
from agentkeep.chaos.frame import Campaign, chunky_providers, play, queue_modes
from agentkeep.chaos.lifecycle import lifecycle_races
from agentkeep.chaos.retry_modes import permission_modes, retry_forever
from agentkeep.chaos.tools import ledger_tools
from agentkeep.chaos.world import Offer, ProcessHandle
from agentkeep.persistence.faults import FaultPlan
from agentkeep.providers.catalog import Providers


def _messages(prefix: str, count: int, queue: Literal["send", "steering"] = "send") -> list[Offer]:
    return [
        Offer(id=f"{prefix}{i}", text=f"{prefix} message {i}", queue=queue) for i in range(count)
    ]


# -- the suites ----------------------------------------------------------------------------------


def _reasoning(seed: int) -> Providers:
    providers = Providers()
    providers.add("local", BatchingModel(seed=seed, reasoning=True), kind="gym")
    return providers


def crash_recovery(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """3 sends; the process dies at a seeded store operation 1–5 times (the first drawn over
    a whole healthy run, about 320 operations; each later one over the first third, where
    the restart resumes: see ``agentkeep.chaos.calibration``), then a healthy process
    finishes: each message once, in order, every call settled once, the
    fragile tool never re-run, nothing owed, ``answer-3``. Every response starts with a
    reasoning block, so a crash may cut one after its first block: it must be continued,
    never settled over (C2), and no request may end with the model's message (C1)."""

    def body(c: Campaign) -> None:
        c.world.offer(*_messages("m", 3))
        for _ in range(c.rng.randint(1, 5)):
            c.process(faults=c.crash(shared=True))
        c.process(final=True, start=True)

    return play("crash_recovery", seed, body, world_options={"providers": _reasoning}, home=home)


def queues(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """5 messages, mixed steering and send, each offered just before a crash; both queues in
    a seeded mode: all once, each queue in acceptance order, nothing owed, ``answer-5``."""

    def body(c: Campaign) -> None:
        offers = [Offer(id=f"q{i}", text=f"queued {i}", queue=c.queue()) for i in range(5)]
        while offers:
            take = c.rng.randint(1, 2)
            batch, offers = offers[:take], offers[take:]
            c.process(messages=batch, faults=c.crash())
        for _ in range(c.rng.randint(0, 2)):
            c.process(faults=c.crash())
        c.process(final=True, start=True)

    return play("queues", seed, body, world_options=queue_modes(seed), home=home)


def interruption(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """2 messages, then 1–4 processes each bringing one more; in each a turn is aborted after
    1–8 stream events, sometimes while crashing too; then a healthy process with one more
    message: all once, every call settled (aborted ones by error results), the fragile tool
    never twice, nothing owed, the last answer numbering every message.

    Each process brings a message of its own: the turns queued behind an aborted one run
    right after it, so a process would otherwise finish the whole workload and
    leave its successors, and their faults, nothing to interrupt."""

    def body(c: Campaign) -> None:
        c.world.offer(*_messages("i", 2))
        for n in range(c.rng.randint(1, 4)):
            faults = c.crash() if c.rng.random() < 0.5 else None
            c.process(
                faults=faults,
                abort_after_events=c.rng.randint(1, 8),
                messages=_messages(f"a{n}-", 1),
            )
        # An aborted turn may settle leaving its message unanswered; a last
        # message makes the agent answer the whole conversation.
        c.process(final=True, start=True, messages=_messages("last", 1))

    return play(
        "interruption", seed, body, world_options={"providers": chunky_providers}, home=home
    )


def flaky_store(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """3 sends while single store operations fail and the process keeps running: after every
    process the history is well-formed; after a healthy restart exactly the accepted
    messages are answered in order, all calls settled, nothing owed."""

    def body(c: Campaign) -> None:
        offers = _messages("f", 3)
        for _ in range(c.rng.randint(1, 4)):
            fresh = [offers.pop(0)] if offers and c.rng.random() < 0.7 else []
            c.process(messages=fresh, faults=FaultPlan(at=c.fault_point(), mode="flaky"))
        c.world.offer(*offers)
        c.process(final=True, start=True)

    return play("flaky_store", seed, body, home=home)


def writer_failures(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """3 sends over 1–4 processes, each losing its store writer once at a seeded operation
    (mode ``writer``: inside a group, at BEGIN or COMMIT, right after COMMIT, at a
    checkpoint). The system supervisor restarts the writer, then the agent tier after it,
    within the process: so each process must still end settled, everything it accepted
    answered, nothing owed, queued or pending (invariant I7) — not only after the next open."""

    def body(c: Campaign) -> None:
        offers = _messages("w", 3)
        for _ in range(c.rng.randint(1, 4)):
            fresh = [offers.pop(0)] if offers and c.rng.random() < 0.7 else []
            plan = FaultPlan(at=c.fault_point(), mode="writer")
            report = c.process(messages=fresh, faults=plan)
            state = c.world.durable()
            leftovers = {
                "owed work": state.owed,
                "queued messages": [q.id for q in state.queued],
                "pending calls": [p.call.call_id for p in state.pending],
            }
            for what, left in leftovers.items():
                if left:
                    detail = (
                        f"the process that lost its writer ({plan.mode}@{plan.at}) ended "
                        f"with {what} {left}: the agents were not resumed after the writer"
                    )
                    c.checker.violations.append(
                        Violation(invariant=6, process=report.generation, detail=detail)
                    )
        c.world.offer(*offers)
        c.process(final=True, start=True)

    return play("writer_failures", seed, body, home=home)


def concurrency(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """Nothing crashes: 6 senders and steerers, aborts and starts arrive at once (two waves,
    each released by one barrier, the second while the agent works); then a restart that
    starts the agent by name: all once, unique settled calls, nothing owed, the last answer
    numbering every message answered."""

    def body(c: Campaign) -> None:
        offers = [Offer(id=f"c{i}", text=f"concurrent {i}", queue=c.queue()) for i in range(6)]
        aborts = c.rng.randint(0, 2)
        starts = c.rng.randint(0, 2)
        c.world.order_known = False  # six callers at once have no acceptance order to keep
        c.world.offer(*offers)

        def driver(handle: ProcessHandle) -> None:
            jobs: list[Callable[[], object]] = [partial(handle.offer, o) for o in offers]
            jobs += [handle.abort] * aborts
            jobs += [handle.system.start] * starts
            c.rng.shuffle(jobs)
            # Two waves: the second arrives while the agent works on the first.
            cut = c.rng.randint(1, len(jobs) - 1)
            _all_at_once(jobs[:cut])
            _all_at_once(jobs[cut:])

        def resume(handle: ProcessHandle) -> None:
            # The restart names the agent: a question an abort left unanswered (which the
            # agent may settle over, by design: docs/decisions.md) is answered, as an
            # explicit start answers it; a bare start would not start a settled agent.
            handle.offer_pending()
            handle.system.start(handle.world.agent_id)

        c.process(driver=driver)
        c.process(final=True, driver=resume)

    return play("concurrency", seed, body, home=home)


def compaction(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """Two answered messages, then compactions interrupted by crashes inside their
    transaction: the history is always the whole original or the whole replacement, one
    compaction record at most; a later message is answered on top (``answer-3``)."""

    def body(c: Campaign) -> None:
        c.process(messages=_messages("h", 2))
        for _ in range(c.rng.randint(1, 3)):
            c.process(compact="when_idle", faults=c.crash())
        c.process(final=True, start=True, messages=_messages("later", 1))

    return play("compaction", seed, body, home=home)


def compaction_under_load(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """Compaction requested while messages wait in both queues and calls are in flight,
    under crashes: at most one compaction record, no duplicate message, each queue in order,
    calls settled, nothing owed, no invented answer."""

    def body(c: Campaign) -> None:
        counter = 0
        for _ in range(c.rng.randint(2, 4)):
            fresh: list[Offer] = []
            for _ in range(c.rng.randint(1, 2)):
                queue = c.queue()
                fresh.append(Offer(id=f"l{counter}", text=f"loaded {counter}", queue=queue))
                counter += 1
            faults = c.crash() if c.rng.random() < 0.8 else None
            c.process(messages=fresh, compact="after_offers", faults=faults)
        final_compact = "when_idle" if c.rng.random() < 0.3 else "no"
        c.process(final=True, start=True, compact=final_compact)

    return play("compaction_under_load", seed, body, world_options=queue_modes(seed), home=home)


CODEX_MODEL = "openai/gpt-5"
CLAUDE_MODEL = "anthropic/claude-sonnet-4"


def switch_providers(seed: int) -> Providers:
    """``codex`` (kind codex) and ``claude`` (kind claude): a switch between them resets."""
    providers = Providers()
    providers.add("codex", BatchingModel(seed=seed, models=(CODEX_MODEL,)), kind="codex")
    claude = BatchingModel(
        seed=seed,
        models=(CLAUDE_MODEL,),
        durable_tool="durable_tool_b",
        fragile_tool="fragile_tool_b",
    )
    providers.add("claude", claude, kind="claude")
    return providers


SWITCH = SwitchExpectation(
    old_ids=frozenset({"before"}),
    new_ids=frozenset({"after"}),
    provider="claude",
    model=CLAUDE_MODEL,
)
PROFILE = "reviewer"


def _switch_of(seed: int) -> tuple[SwitchExpectation, Offer]:
    """The seed's switch: to claude (half the seeds) or to claude under a new profile.

    A switch to a new profile alone resets too, but is left to the unit tests: the chaos
    model numbers its calls per conversation, so the reset conversation on the same provider
    would reuse the old one's call ids, which the invariant I17 ledger check keys on (a model switch
    moves to the ``_b`` tools instead)."""
    import random

    profile = PROFILE if random.Random(seed ^ 0x5717C4).random() < 0.5 else None
    expected = msgspec.structs.replace(SWITCH, profile=profile)
    offer = Offer(
        id="after",
        text="after the switch",
        provider="claude",
        model=CLAUDE_MODEL,
        profile=profile,
    )
    return expected, offer


def model_switch(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """A codex conversation, then a message switching to claude (incompatible: the history
    resets), on half the seeds under a new profile too, under crashes: the history is always
    one whole side; finally only ``after``, the settings name the target (with its profile),
    ``answer-1``."""
    expected, switch = _switch_of(seed)

    def body(c: Campaign) -> None:
        c.process(messages=[Offer(id="before", text="before the switch")])
        c.world.offer(switch)
        for _ in range(c.rng.randint(1, 4)):
            c.process(faults=c.crash(shared=True))
        c.process(final=True, start=True)

    options: dict[str, object] = {
        "providers": switch_providers,
        "provider": "codex",
        "model": CODEX_MODEL,
        "tools": (*ledger_tools(), *ledger_tools("durable_tool_b", "fragile_tool_b")),
        "durable_tools": frozenset({"durable_tool", "durable_tool_b"}),
        "fragile_tools": frozenset({"fragile_tool", "fragile_tool_b"}),
    }
    return play("model_switch", seed, body, world_options=options, switch=expected, home=home)


SUITES: dict[str, Callable[[int], CampaignResult]] = {
    "crash_recovery": crash_recovery,
    "queues": queues,
    "interruption": interruption,
    "flaky_store": flaky_store,
    "writer_failures": writer_failures,
    "concurrency": concurrency,
    "compaction": compaction,
    "compaction_under_load": compaction_under_load,
    "model_switch": model_switch,
    "lifecycle_races": lifecycle_races,
    "retry_forever": retry_forever,
    "permission_modes": permission_modes,
    "extensions": extensions,
}


def run_suite(suite: str, seeds: Iterable[int] | None = None) -> list[CampaignResult]:
    """Run ``suite`` over ``seeds`` (default: from the environment)."""
    campaign = SUITES[suite]
    return [campaign(seed) for seed in (seeds if seeds is not None else seeds_from_env())]


def first_caught(
    campaign: Callable[[int], CampaignResult], seeds: Iterable[int], invariants: set[int | str]
) -> CampaignResult | None:
    """The first seed whose run breaks one of ``invariants``, or None. Proves a checker can
    fail: run it against a deliberately broken runtime (a mutant) and expect a catch."""
    for seed in seeds:
        result = campaign(seed)
        if any(v.invariant in invariants for v in result.violations):
            return result
    return None


def _all_at_once(jobs: list[Callable[[], object]]) -> None:
    """Run every job in its own thread, released together by one barrier."""
    barrier = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        barrier.wait()
        try:
            job()
        except Exception as error:  # a job's failure is the checker's business, not ours
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


__all__ = [
    "DEFAULT_SEEDS",
    "SEEDS_ENV",
    "SEED_ENV",
    "SUITES",
    "CampaignResult",
    "compaction",
    "compaction_under_load",
    "concurrency",
    "crash_recovery",
    "extensions",
    "first_caught",
    "flaky_store",
    "interruption",
    "lifecycle_races",
    "model_switch",
    "queues",
    "replay_command",
    "run_suite",
    "seeds_from_env",
    "writer_failures",
]
