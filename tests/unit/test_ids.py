"""Ids (issue 17): the cuid2 shape and length, from the OS's CSPRNG, cheap enough to make
several per durable step."""

from __future__ import annotations

import pytest

from agentkeep.model import ids, is_valid_id, new_id


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
    # Unique across processes and restarts because every id is fresh OS entropy (no
    # per-process state a fork or a restart could repeat): the same bytes, the same id.
    monkeypatch.setattr(ids.os, "urandom", lambda n: bytes(range(n)))
    assert new_id() == new_id() == "abcdefghijklmnopqrstuvwx"


def test_each_character_is_one_random_byte_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 17: one ``bytes.translate`` per id, no base32 encoder. The first byte gives a
    # letter a-p (its low 4 bits), each other byte a base32 character (its low 5 bits), so
    # every character is uniform: 4 + 23 * 5 = 119 random bits.
    monkeypatch.setattr(ids.os, "urandom", lambda n: bytes([255, 26, 31, 32 + 27, 224] * 5)[:n])
    assert new_id() == "p" + "273a7" * 4 + "273"  # 255->p; 26->2, 31->7, 59->3, 224->a, 255->7
    sizes: list[int] = []
    monkeypatch.setattr(ids.os, "urandom", lambda n: sizes.append(n) or bytes(n))
    assert new_id() == "a" * 24
    assert sizes == [24]
