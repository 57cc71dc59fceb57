"""The frame every in-process chaos suite plays in: one seed, one
:class:`~agentkeep.chaos.world.ChaosWorld` in a scratch directory, one checker after each
process (:func:`play`), and the options several suites share (:func:`queue_modes`,
:func:`chunky_providers`)."""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentkeep.agent_system import AgentSystem
from agentkeep.chaos import calibration
from agentkeep.chaos.backend import fresh_database
from agentkeep.chaos.batches import BatchingModel
from agentkeep.chaos.campaign_result import CampaignResult
from agentkeep.chaos.checker import Checker, SwitchExpectation, Violation
from agentkeep.chaos.ledger_checks import check_subscription
from agentkeep.chaos.world import ChaosWorld, ProcessReport
from agentkeep.loop.plans import QueueMode
from agentkeep.persistence.faults import FaultPlan
from agentkeep.providers.catalog import Providers
from agentkeep.types.records import QueueName


class Campaign:
    """One seed of one suite as its body plays it: the world, the checker, the seeded
    generator, and the fault plans drawn so far."""

    def __init__(self, suite: str, seed: int, world: ChaosWorld, checker: Checker) -> None:
        self.suite = suite
        self.seed = seed
        self.world = world
        self.checker = checker
        self.rng = world.rng
        self.faulted: set[int] = set()
        self.crashes = 0  # crash plans drawn so far (see crash)
        # Runs between each process and its check: a suite settling, from the disk, what
        # the process left it unsure of (an embedder transaction a crash hid the outcome of).
        self.before_check: Callable[[ProcessReport], None] | None = None

    def process(self, *, final: bool = False, **options: object) -> ProcessReport:
        """Run one simulated process (``ChaosWorld.run_process``'s options) and check the disk
        after it; a ``final`` one also checks that a subscriber resuming mid-ledger gets
        exactly the rest (L4). A fault plan is dropped inside ``calibration.healthy()``."""
        subscribed: list[Violation] = []
        if options.get("faults") is not None:
            self.faulted.add(self.world.generation + 1)  # run_process numbers it next
            if calibration.fault_free():
                options["faults"] = None
        if final:
            # L4: a subscriber reconnecting from a seeded sequence gets exactly the suffix.
            def subscribe(system: AgentSystem) -> None:
                generation = self.world.generation
                subscribed.extend(
                    check_subscription(
                        system, self.world.agent_id, seed=self.seed, process=generation
                    )
                )

            options["before_close"] = subscribe
        report = self.world.run_process(**options)  # type: ignore[arg-type]
        if self.before_check is not None:
            self.before_check(report)
        self.checker.after_process(report, final=final)
        self.checker.violations += subscribed
        return report

    def queue(self) -> QueueName:
        """A seeded queue for the next offer: ``send`` or ``steering``, even odds."""
        return "send" if self.rng.random() < 0.5 else "steering"

    def crash(self, *, shared: bool = False) -> FaultPlan:
        """A ``crash`` plan over the suite's healthy run. ``shared``: the suite's processes
        share one workload offered up front; after the first, a process draws over the
        early part its restart resumes (see :data:`calibration.LATER`)."""
        if shared and self.crashes:
            at = calibration.fault_point(self.rng, self.suite, calibration.later_reach(self.suite))
        else:
            at = self.fault_point()
        self.crashes += 1
        return FaultPlan(at=at, mode="crash")

    def fault_point(self) -> int:
        """A store operation drawn over the suite's measured healthy run (see
        :mod:`agentkeep.chaos.calibration`)."""
        return calibration.fault_point(self.rng, self.suite)


Body = Callable[[Campaign], None]


def play(
    suite: str,
    seed: int,
    body: Body,
    *,
    world_options: dict[str, object] | None = None,
    switch: SwitchExpectation | None = None,
    home: str | Path | None = None,
) -> CampaignResult:
    """Play ``body`` over a fresh world (in ``home``, or a temporary directory) and collect
    what the checker found: the frame of every in-process suite."""
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix=f"chaos-{suite}-{seed}-") as scratch,
        fresh_database() as database,
    ):
        options: dict[str, object] = {"database": database, **(world_options or {})}
        world = ChaosWorld(Path(home or scratch) / "state", seed, **options)  # type: ignore[arg-type]
        checker = Checker(world, switch=switch)
        world.create_agent()
        campaign = Campaign(suite, seed, world, checker)
        body(campaign)
    processes = [r.describe() for r in world.reports]
    if world.completion is not None and world.completion.timeouts:
        # A harness defect, not a broken promise: the seeded finish order was not kept.
        processes.append(f"completion order: holds timed out: {world.completion.timeouts}")
    return CampaignResult(
        suite=suite,
        seed=seed,
        violations=checker.violations,
        processes=processes,
        seconds=time.monotonic() - started,
        reports=list(world.reports),
        faulted=campaign.faulted,
    )


def queue_modes(campaign_seed: int) -> dict[str, object]:
    """The seeded queue modes (``steering_mode``, ``send_mode``) of a suite's world."""

    rng = random.Random(campaign_seed ^ 0x5EED)
    modes: tuple[QueueMode, QueueMode] = ("one-at-a-time", "all")
    return {"steering_mode": rng.choice(modes), "send_mode": rng.choice(modes)}


def chunky_providers(seed: int) -> Providers:
    """A model streaming its answers in small chunks (1-4 per block), as ``local``."""
    providers = Providers()
    providers.add("local", BatchingModel(seed=seed, stream_chunks=(1, 4)), kind="gym")
    return providers
