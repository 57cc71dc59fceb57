"""Scoped KV: escaping never aliases; a stateful model check against a dict."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentkeep.errors import ExpiredScopeError
from agentkeep.persistence import ScopedKV, Store, Transaction, agent_prefix, escape_segment
from agentkeep.persistence.kv_keys import unescape_segment

# Dots and percent signs on purpose: they are what escaping must keep apart.
names = st.text(alphabet="ab.%2E5", min_size=1, max_size=4)
json_values = st.recursive(
    st.integers(-5, 5) | st.booleans() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=5,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        yield opened


@given(st.text(min_size=1))
def test_escaping_round_trips_and_leaves_no_bare_dot(segment: str) -> None:
    escaped = escape_segment(segment)
    assert "." not in escaped
    assert unescape_segment(escaped) == segment


@given(st.lists(names, min_size=1, max_size=3), st.lists(names, min_size=1, max_size=3))
def test_different_scope_paths_never_alias(left: list[str], right: list[str]) -> None:
    if left != right:
        assert ScopedKV(_NoBackend(), "").scoped(*left).prefix != (
            ScopedKV(_NoBackend(), "").scoped(*right).prefix
        )


class _NoBackend:
    def run(self, op: Any, *, write: bool) -> Any:
        raise AssertionError("not used")


def test_dotted_segment_and_nested_segments_are_distinct_scopes(store: Store) -> None:
    root = store.kv()
    root.scoped("a.b").write("k", 1)
    root.scoped("a", "b").write("k", 2)
    assert root.scoped("a.b").read("k") == 1
    assert root.scoped("a").scoped("b").read("k") == 2
    assert root.scoped("a").list() == []
    assert root.list() == []
    assert agent_prefix("x.y") == "agent.x%2Ey."


def test_clear_removes_nested_scopes_but_not_siblings(store: Store) -> None:
    kv = store.kv("agent", "a")
    kv.write("top", 1)
    kv.scoped("run", "call").write("k", 2)
    store.kv("agent", "ab").write("other", 3)
    assert kv.clear() == 2
    assert store.kv("agent", "ab").read("other") == 3


def test_get_or_create_allocates_once(store: Store) -> None:
    kv = store.kv("s")
    calls = itertools.count()
    assert kv.get_or_create("id", lambda: next(calls)) == 0
    assert kv.get_or_create("id", lambda: next(calls)) == 0
    assert next(calls) == 1


def test_get_or_create_allocates_once_under_two_threads(store: Store) -> None:
    """Both callers start together; the factory runs once and both get its value."""
    kv = store.kv("s")
    calls = itertools.count()
    start = threading.Barrier(2)
    got: list[Any] = []

    def ask() -> None:
        start.wait(timeout=10)
        got.append(kv.get_or_create("id", lambda: f"id-{next(calls)}"))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert got == ["id-0", "id-0"]
    assert next(calls) == 1


def test_get_or_create_joins_a_transaction_and_rolls_back_with_it(store: Store) -> None:
    calls = itertools.count()

    def allocate(tx: Transaction) -> tuple[Any, Any]:
        kv = ScopedKV.in_transaction(tx, "s")
        return kv.get_or_create("id", lambda: next(calls)), kv.read("id")

    def allocate_then_fail(tx: Transaction) -> None:
        allocate(tx)
        raise RuntimeError("roll it back")

    with pytest.raises(RuntimeError):
        store.transact(allocate_then_fail)
    assert store.kv("s").read("id") is None  # rolled back with its transaction
    assert store.transact(allocate) == (1, 1)  # seen inside, before the commit
    assert store.kv("s").get_or_create("id", lambda: next(calls)) == 1
    assert next(calls) == 2


def test_get_or_create_refuses_a_factory_that_returns_none(store: Store) -> None:
    with pytest.raises(ValueError, match="None"):
        store.kv("s").get_or_create("id", lambda: None)
    assert store.kv("s").read("id") is None


def test_a_checked_scope_refuses_use_once_its_check_fails(store: Store) -> None:
    """``checked``: the test runs in each operation's own transaction."""
    store.kv().write("generation", 1)
    kv = store.kv("history").checked(lambda tx: tx.kv.read("generation") == 1)
    kv.write("k", "v")
    assert kv.read("k") == "v"
    store.kv().write("generation", 2)
    with pytest.raises(ExpiredScopeError):
        kv.read("k")
    with pytest.raises(ExpiredScopeError):
        kv.scoped("nested").write("k", "w")
    assert store.kv("history").list() == [("k", "v")]


def test_a_kv_lent_to_a_transaction_refuses_use_after_it_ended(store: Store) -> None:
    kept: list[ScopedKV] = []

    def work(tx: Transaction) -> None:
        kv = ScopedKV.in_transaction(tx, "hook")
        kv.write("k", 1)
        kept.append(kv.scoped("nested"))

    store.transact(work)
    assert store.kv("hook").read("k") == 1
    with pytest.raises(ExpiredScopeError):
        kept[0].read("k")
    with pytest.raises(ExpiredScopeError):
        kept[0].write("k", 2)


def test_until_expires_a_scope_when_its_signal_ends(store: Store) -> None:
    alive = [True]
    kv = store.kv("call").until(lambda: alive[0])
    kv.write("k", 1)
    alive[0] = False
    with pytest.raises(ExpiredScopeError):
        kv.read("k")


def test_empty_names_and_none_values_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        store.kv("")
    with pytest.raises(ValueError, match="non-empty"):
        store.kv().write("", 1)
    with pytest.raises(ValueError, match="absent"):
        store.kv().write("k", None)


class ScopedKVMachine(RuleBasedStateMachine):
    """ScopedKV (through the writer, and inside transactions) against a dict model.

    The model maps (scope path, key) to a value; scopes are tuples of segments.
    """

    store: Store
    runs: Iterator[int]
    scopes = Bundle("scopes")

    def __init__(self) -> None:
        super().__init__()
        # Each run gets a fresh root scope of one shared store: fast, and a test of scoping.
        self.run_segments = ("run", str(next(self.runs)))
        self.root = self.store.kv(*self.run_segments)
        self.model: dict[tuple[tuple[str, ...], str], Any] = {}

    @initialize(target=scopes)
    def root_scope(self) -> tuple[str, ...]:
        return ()

    def _kv(self, scope: tuple[str, ...]) -> ScopedKV:
        return self.root.scoped(*scope) if scope else self.root

    @rule(target=scopes, parent=scopes, segment=names)
    def nest(self, parent: tuple[str, ...], segment: str) -> tuple[str, ...]:
        return (*parent, segment)

    @rule(scope=scopes, key=names, value=json_values)
    def write(self, scope: tuple[str, ...], key: str, value: Any) -> None:
        self._kv(scope).write(key, value)
        self.model[(scope, key)] = value

    @rule(scope=scopes, key=names, value=json_values)
    def write_in_transaction(self, scope: tuple[str, ...], key: str, value: Any) -> None:
        def work(tx: Transaction) -> bool:
            kv = ScopedKV.in_transaction(tx, *self.run_segments, *scope)
            return kv.write_if_absent(key, value)

        wrote = self.store.transact(work)
        assert wrote == ((scope, key) not in self.model)
        self.model.setdefault((scope, key), value)

    @rule(scope=scopes, key=names)
    def read(self, scope: tuple[str, ...], key: str) -> None:
        assert self._kv(scope).read(key) == self.model.get((scope, key))

    @rule(scope=scopes, key=names)
    def delete(self, scope: tuple[str, ...], key: str) -> None:
        assert self._kv(scope).delete(key) == ((scope, key) in self.model)
        self.model.pop((scope, key), None)

    @rule(scope=scopes, prefix=st.sampled_from(["", "a", ".", "%", "a."]))
    def list_scope(self, scope: tuple[str, ...], prefix: str) -> None:
        expected = sorted(
            (key, value)
            for (where, key), value in self.model.items()
            if where == scope and key.startswith(prefix)
        )
        assert self._kv(scope).list(prefix) == expected

    @precondition(lambda self: self.model)
    @rule(scope=scopes)
    def clear(self, scope: tuple[str, ...]) -> None:
        doomed = [entry for entry in self.model if entry[0][: len(scope)] == scope]
        assert self._kv(scope).clear() == len(doomed)
        for entry in doomed:
            del self.model[entry]

    @rule(scope=scopes, key=names, value=json_values)
    def get_or_create(self, scope: tuple[str, ...], key: str, value: Any) -> None:
        got = self._kv(scope).get_or_create(key, lambda: value)
        expected = self.model.setdefault((scope, key), value)
        assert got == expected

    @invariant()
    def whole_scope_matches(self) -> None:
        rows = self.store.read(lambda tx: tx.kv.scan(self.root.prefix))
        assert len(rows) == len(self.model)


def test_scoped_kv_matches_a_dict_model(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        machine = type("Machine", (ScopedKVMachine,), {"store": store, "runs": itertools.count()})
        run_state_machine_as_test(
            machine,  # type: ignore[arg-type]
            settings=settings(max_examples=40, stateful_step_count=25, deadline=None),
        )
