"""``db check`` on a damaged file: SQLite's integrity check first, reported, never a crash."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..persistence.damage import flip_bytes, make_store, truncate

pytestmark = pytest.mark.sqlite_only("SQLite's integrity check on a damaged database file")


@pytest.mark.parametrize(
    ("damage", "finding"),
    [(truncate, "malformed"), (lambda db: flip_bytes(db, offset=5), "free space corruption")],
    ids=["truncated", "byte_flipped"],
)
def test_db_check_reports_what_integrity_check_found(
    invoke: Any, home: Path, damage: Callable[[Path], None], finding: str
) -> None:
    database = make_store(home)
    damage(database)

    result = invoke("db", "check", json_mode=True)

    assert result.exit_code == 1
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["integrity"] == "failed"
    assert report["agents"] is None  # invariants are not checked on a damaged file
    assert report["problems"]
    assert all(p["check"] == "integrity_check" for p in report["problems"])
    assert any(finding in p["message"] for p in report["problems"]), report["problems"]
    # The advice is what to do about damage, not "run db check" again.
    assert "backup" in report["advice"]
    assert ".recover" in report["advice"]
    assert "db check" not in report["advice"]

    readable = invoke("db", "check")
    assert readable.exit_code == 1
    assert "integrity  failed" in readable.stdout
    assert "not checked (the file itself is damaged)" in readable.stdout
    assert "db check: FAILED" in readable.stdout


def test_a_decoding_failure_is_reported_for_its_agent(invoke: Any, home: Path) -> None:
    import apsw

    invoke("session", "start", "--id", "alpha")
    invoke("session", "start", "--id", "beta")
    invoke("session", "send", "alpha", "hi", "--wait")
    connection = apsw.Connection(str(home / "agents.db"))
    connection.execute(
        "UPDATE records SET record_json = '{\"kind\": \"no such record\"}' WHERE agent_id = 'alpha'"
    )
    connection.close()

    report = json.loads(invoke("db", "check", json_mode=True).stdout)

    assert report["integrity"] == "ok"  # SQLite's structure is fine; a value is not
    assert report["agents"] == 2
    (problem,) = report["problems"]
    assert problem["agent_id"] == "alpha"
    assert problem["check"] == "decode"
    # Reading it is a damaged-store error naming db check, not a traceback.
    for args in (("session", "transcript", "alpha"), ("session", "show", "alpha")):
        read = invoke(*args, json_mode=True)
        assert read.exit_code == 1, args
        error = json.loads(read.stderr)["error"]
        assert error["code"] == "store_damaged"
        assert "does not decode" in error["message"]
        assert "db check" in error["hint"]
