"""Find a store operation by what it is, not by its number (for fault-point tests).

A test that injects a fault at "the first block's INSERT" must not hard-code that operation's
number: every cut to the durable step renumbers the operations, and a stale number silently
tests some other operation. Instead the test makes a dry run of the same deterministic
workload under :func:`recording_labels`, picks the index of the operation it means from the
labels, and :func:`expect_label` asserts the label there is of the expected kind, so a shift
fails loudly.

The recording wraps :meth:`FaultInjector.tick` for the duration of the ``with`` block only; it
changes nothing the injector does (the original ``tick`` still runs, fault plans still fire).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from agentkeep.persistence.faults import FaultInjector

__all__ = ["LabelRecording", "expect_label", "find_label", "recording_labels"]


@dataclass
class LabelRecording:
    """The labels each fault injector ticked, one list per injector in first-tick order.

    Attributes:
        runs: One list of labels per injector (per store the writer opened), in the order
            the injectors first ticked; label ``i`` is operation ``i + 1`` of that store.
    """

    runs: list[list[str]] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """The labels of the only store that ticked (asserts there was exactly one)."""
        assert len(self.runs) == 1, f"expected one store's operations, got {len(self.runs)}"
        return self.runs[0]


@contextmanager
def recording_labels() -> Iterator[LabelRecording]:
    """Record every store operation's label while the block runs (in-process stores only)."""
    recording = LabelRecording()
    by_injector: dict[int, list[str]] = {}
    lock = threading.Lock()
    original = FaultInjector.tick

    def tick(self: FaultInjector, label: str) -> None:
        with lock:
            labels = by_injector.get(id(self))
            if labels is None:
                labels = by_injector[id(self)] = []
                recording.runs.append(labels)
            labels.append(label)
        original(self, label)

    FaultInjector.tick = tick  # type: ignore[method-assign]
    try:
        yield recording
    finally:
        FaultInjector.tick = original  # type: ignore[method-assign]


def find_label(
    labels: Sequence[str],
    matches: str | Callable[[str], bool],
    *,
    after: int = 0,
    nth: int = 1,
) -> int:
    """The 1-based operation number of the ``nth`` label matching after operation ``after``.

    Args:
        labels: One store's labels, in order (operation ``i + 1`` is ``labels[i]``).
        matches: A label prefix (e.g. ``"INSERT INTO records"``), or a predicate.
        after: Only operations numbered above this count.
        nth: Which match (1 is the first).

    Raises:
        AssertionError: fewer than ``nth`` labels match.
    """
    test = matches if callable(matches) else (lambda label: label.startswith(matches))
    seen = 0
    for index in range(after, len(labels)):
        if test(labels[index]):
            seen += 1
            if seen == nth:
                return index + 1
    raise AssertionError(f"no match #{nth} for {matches!r} after operation {after}: {labels}")


def expect_label(labels: Sequence[str], at: int, prefix: str) -> int:
    """Return ``at`` after asserting operation ``at`` (1-based) is a ``prefix`` operation."""
    assert 1 <= at <= len(labels), f"operation {at} is beyond the {len(labels)} recorded"
    label = labels[at - 1]
    assert label.startswith(prefix), f"operation {at} is {label!r}, not {prefix!r}"
    return at
