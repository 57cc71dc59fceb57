"""What OpenTelemetry tracing costs per agent step: off, the API's no-op tracer, and on.

One *step* (as in ``bench/agent_step.py``): accept a user message durably, run one
zero-latency inference answering with one text block, persist it, settle. A *tool step*
adds a tool call: the model calls ``echo``, then answers (two requests, one call). Each
step is a send and a wait for the agent to be idle, one agent, in a fresh temporary store.
Only the steps are timed: opening, warm-up and teardown are outside every timer.

The modes, measured in the same run, rounds interleaved (each figure the median of its
rounds' process CPU per step, every thread counted):

- ``off``: no tracer provider (OpenTelemetry's default): agentkeep builds no span;
- ``API no-op``: a provider whose tracer is the API's ``NoOpTracer``: every span is built
  and dropped (what a span costs when nothing samples it);
- ``on``: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` over an exporter that
  drops the batch (the cost up to the wire: the spans are built, ended, queued and handed
  to the exporter by the processor's thread).

Run: ``PYTHONPATH=src .venv/bin/python bench/tracing.py [--steps N] [--rounds R]`` (the SDK
is in the dev group, and is the ``otel`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import agentkeep as ak
from agentkeep import tracing
from agentkeep.providers import script


class _Dropped(SpanExporter):
    """Counts the spans it is handed and keeps none."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


class _ApiNoOp(trace.TracerProvider):
    """The API's no-op tracer behind a provider agentkeep takes as configured."""

    def get_tracer(self, *args: object, **kwargs: object) -> trace.Tracer:
        return trace.NoOpTracer()


class _Args(msgspec.Struct):
    text: str


@ak.tool
def echo(ctx: ak.ToolContext, args: _Args) -> str:
    """Echo the text back."""
    return args.text


def _responses(tool: bool, steps: int) -> list[object]:
    if not tool:
        return [script.text("ok") for _ in range(steps)]
    out: list[object] = []
    for n in range(steps):
        out.append(script.tool_calls(script.call("echo", {"text": "x"}, call_id=f"c{n}")))
        out.append(script.text("ok"))
    return out


def cpu_per_step(home: Path, steps: int, *, tool: bool) -> float:
    """Process CPU µs per step of ``steps`` timed steps (after two untimed ones)."""
    model = ak.ScriptedModel(_responses(tool, steps + 2), record=False)  # type: ignore[arg-type]
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[echo]
    ) as system:
        agent = system.create()
        for _ in range(2):  # warm up (untimed): actor, session, statement cache
            agent.send(ak.user("warm up"))
            agent.wait_for_idle(timeout_seconds=30)
        used = time.process_time()
        for n in range(steps):
            agent.send(ak.user(f"step {n}"))
            agent.wait_for_idle(timeout_seconds=30)
        return (time.process_time() - used) / steps * 1e6


def _modes() -> list[tuple[str, Callable[[], Callable[[], int]]]]:
    """``(name, configure)``; configure returns what reads the spans exported so far."""

    def off() -> Callable[[], int]:
        tracing.set_tracer_provider(None)
        return lambda: 0

    def noop() -> Callable[[], int]:
        tracing.set_tracer_provider(_ApiNoOp())
        return lambda: 0

    def on() -> Callable[[], int]:
        exporter = _Dropped()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        tracing.set_tracer_provider(provider)

        def exported() -> int:
            provider.force_flush()
            return exporter.count

        return exported

    return [("off", off), ("API no-op", noop), ("on (SDK, batch)", on)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    steps, rounds = options.steps, options.rounds
    if tracing.tracer() is not None:
        print("a global tracer provider is configured: 'off' cannot be measured")
        return 1
    for tool, label in ((False, "step"), (True, "tool step")):
        figures: dict[str, list[float]] = {}
        spans: dict[str, int] = {}
        for _ in range(rounds):
            for name, configure in _modes():
                exported = configure()
                try:
                    with tempfile.TemporaryDirectory() as directory:
                        used = cpu_per_step(Path(directory), steps, tool=tool)
                    figures.setdefault(name, []).append(used)
                    spans[name] = exported()
                finally:
                    tracing.set_tracer_provider(None)
        print(f"\n{label}: CPU µs per {label}, {steps} steps, median of {rounds} rounds")
        base = statistics.median(figures["off"])
        for name, values in figures.items():
            median = statistics.median(values)
            per_step = spans[name] / (steps + 2)
            print(
                f"  {name:<18} {median:>8.0f} µs   {median / base:5.2f}x off   "
                f"spans/step {per_step:5.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
