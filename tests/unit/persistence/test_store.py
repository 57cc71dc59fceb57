"""Opening a state directory; fault plans from the environment."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tests.postgres_server import on_sqlite

from agentkeep.persistence import (
    DATABASE_NAME,
    FAULT_AT_ENV,
    FAULT_MODE_ENV,
    HOME_ENV,
    FaultPlan,
    InjectedFaultError,
    Store,
    resolve_home,
)
from agentkeep.persistence.faults import FaultInjector


def test_home_resolves_argument_then_environment_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOME_ENV, raising=False)
    assert resolve_home(None) == Path(".agentkeep")
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "env"))
    assert resolve_home(None) == tmp_path / "env"
    assert resolve_home(tmp_path / "arg") == tmp_path / "arg"


def test_open_creates_the_directory_and_database_and_survives_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "state"))
    with Store.open() as store:
        assert store.home == tmp_path / "state"
        assert (tmp_path / "state").is_dir()
        if on_sqlite():  # on a server the store is a schema: nothing of it in the directory
            assert store.path == tmp_path / "state" / DATABASE_NAME
        store.transact(lambda tx: tx.kv.write("k", [1, "two"]))
    with Store.open(tmp_path / "state") as store:
        assert store.read(lambda tx: tx.kv.read("k")) == [1, "two"]


def test_readers_see_only_committed_state(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        inside, release = threading.Event(), threading.Event()

        def slow(tx):  # type: ignore[no-untyped-def]
            tx.kv.write("k", 1)
            inside.set()
            assert release.wait(30)

        writer = threading.Thread(target=store.transact, args=(slow,))
        writer.start()
        assert inside.wait(30)
        assert store.read(lambda tx: tx.kv.read("k")) is None
        release.set()
        writer.join(30)
        assert store.read(lambda tx: tx.kv.read("k")) == 1


def test_fault_plan_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert FaultPlan.from_env({}) is None
    assert FaultPlan.from_env({FAULT_AT_ENV: "7"}) == FaultPlan(at=7, mode="crash")
    assert FaultPlan.from_env({FAULT_AT_ENV: "2", FAULT_MODE_ENV: "kill"}) == FaultPlan(
        at=2, mode="kill"
    )
    with pytest.raises(ValueError, match="expected one of"):
        FaultPlan.from_env({FAULT_AT_ENV: "2", FAULT_MODE_ENV: "sometimes"})
    with pytest.raises(ValueError, match=">= 1"):
        FaultPlan(at=0)


def test_environment_fault_plan_applies_when_no_option_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_AT_ENV, "1")
    monkeypatch.setenv(FAULT_MODE_ENV, "flaky")
    with Store.open(tmp_path) as store:
        with pytest.raises(InjectedFaultError):
            store.transact(lambda tx: tx.kv.write("k", 1))
        store.transact(lambda tx: tx.kv.write("k", 2))
        assert store.read(lambda tx: tx.kv.read("k")) == 2


def test_injector_modes() -> None:
    flaky = FaultInjector(FaultPlan(at=2, mode="flaky"))
    flaky.tick("a")
    with pytest.raises(InjectedFaultError, match="operation 2"):
        flaky.tick("b")
    flaky.tick("c")
    assert not flaky.crashed
    crash = FaultInjector(FaultPlan(at=1, mode="crash"))
    for _ in range(3):
        with pytest.raises(InjectedFaultError):
            crash.tick("x")
    assert crash.crashed
    assert crash.operations == 3
    off = FaultInjector(None)
    off.tick("x")
    assert off.operations == 1


def test_concurrent_readers_each_get_a_consistent_snapshot(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.transact(lambda tx: [tx.kv.write(f"k{i}", 0) for i in range(4)])
        start = threading.Barrier(9)
        torn: list[list[int]] = []

        def bump(tx):  # type: ignore[no-untyped-def]
            value = tx.kv.read("k0") + 1
            for i in range(4):
                tx.kv.write(f"k{i}", value)

        def writer() -> None:
            start.wait()
            for _ in range(30):
                store.transact(bump)

        def reader() -> None:
            start.wait()
            for _ in range(30):
                values = [v for _, v in store.read(lambda tx: tx.kv.scan("k"))]
                if len(set(values)) != 1:
                    torn.append(values)

        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=reader) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        # Every snapshot saw all four keys from the same commit.
        assert torn == []
        assert store.read(lambda tx: tx.kv.read("k3")) == 30
