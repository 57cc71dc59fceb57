"""Ids: the cuid2 shape and length, from the OS's CSPRNG, cheap enough to make
several per durable step."""

from __future__ import annotations

import os
import threading

import pytest

from agentkeep.types import ids, is_valid_id, new_id


def test_an_id_has_the_shape_and_length_of_the_cuid2_ids_before_it() -> None:
    made = [new_id() for _ in range(2000)]
    assert all(len(i) == 24 and is_valid_id(i) for i in made)
    assert all(i[0].isalpha() and i.islower() for i in made)


def test_ids_are_unique() -> None:
    made = [new_id() for _ in range(100_000)]
    assert len(set(made)) == len(made)


def test_an_id_is_drawn_from_the_operating_systems_random_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each character is one random byte translated: the first byte's low 4 bits pick a
    # letter a-p, every other byte's low 5 bits a base32 character (4 + 23 * 5 = 119 bits).
    pattern = bytes([255, 26, 31, 32 + 27, 224])
    monkeypatch.setattr(os, "urandom", lambda n: (pattern * n)[:n])
    monkeypatch.setattr(ids, "_made", [])
    # 255 -> p; then 26 -> 2, 31 -> 7, 59 -> 3, 224 -> a, 255 -> 7, ...
    assert new_id() == "p" + "273a7" * 4 + "273"


def test_one_read_of_random_bytes_makes_many_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every os.urandom call releases the GIL (a thread switch on a busy process);
    # a step makes a dozen ids, so they are made 64 per read, never one per read.
    reads: list[int] = []
    real = os.urandom

    def urandom(n: int) -> bytes:
        reads.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", urandom)
    monkeypatch.setattr(ids, "_made", [])
    made = [new_id() for _ in range(640)]
    assert reads == [24 * 64] * 10
    assert len(set(made)) == 640


def test_threads_sharing_the_made_ids_never_get_the_same_one() -> None:
    start = threading.Barrier(4)
    made: list[list[str]] = [[] for _ in range(4)]

    def work(mine: list[str]) -> None:
        start.wait()
        mine.extend(new_id() for _ in range(5000))

    threads = [threading.Thread(target=work, args=(m,)) for m in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for mine in made for i in mine]
    assert len(set(every)) == len(every) == 20_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_hands_out_its_parents_next_ids() -> None:
    new_id()  # the parent holds made ids the child would inherit
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(reader)
        os.write(writer, " ".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_id() for _ in range(10)}
    assert len(child) == 10
    assert not child & parent
