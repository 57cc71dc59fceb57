"""Which requests a worker's front sends to their partition's owner, and which any local
system answers (``agentkeep.server.cluster_front``); the end-to-end behaviour over real
worker processes is ``tests/unit/cluster/test_serve_workers.py``."""

from __future__ import annotations

import pytest

from agentkeep.partitions import partition_of
from agentkeep.server.cluster_front import ClusterFront
from agentkeep.server.front_bodies import named_session

COUNT = 8
URL = "postgresql://nobody@127.0.0.1:1/none?schema=s"  # never connected: routing only


@pytest.mark.parametrize(
    ("method", "path", "owner"),
    [
        ("POST", "/v1/sessions/abc/messages", "abc"),
        ("POST", "/v1/sessions/abc/cancel", "abc"),
        ("POST", "/v1/sessions/abc/settle", "abc"),
        ("POST", "/v1/sessions/abc/compact", "abc"),
        ("DELETE", "/v1/sessions/abc", "abc"),
        ("GET", "/v1/sessions/abc/events/stream", "abc"),
        ("HEAD", "/v1/sessions/abc/events/stream", "abc"),
        ("POST", "/v1/agents", 0),
        ("PATCH", "/v1/agents/helper", 0),
        ("DELETE", "/v1/agents/helper", 0),
        ("GET", "/v1/sessions/abc", None),
        ("GET", "/v1/sessions/abc/events", None),
        ("GET", "/v1/sessions/abc/turns", None),
        ("GET", "/v1/sessions/abc/messages", None),
        ("GET", "/v1/sessions", None),
        ("GET", "/v1/agents", None),
        ("GET", "/v1/agents/helper", None),
        ("GET", "/v1/agents/helper/revisions", None),
        ("POST", "/v1/console/links", None),
    ],
)
def test_writes_and_streams_go_to_the_owner_reads_to_any_system(
    method: str, path: str, owner: str | int | None
) -> None:
    front = ClusterFront(URL, COUNT)
    expected = partition_of(owner, COUNT) if isinstance(owner, str) else owner
    assert front._owner_partition(method, path) == expected


def test_a_client_chosen_session_id_is_read_from_the_body() -> None:
    assert named_session(b'{"agentId": "a", "sessionId": "s-1"}') == "s-1"
    assert named_session(b'{"agentId": "a"}') is None
    assert named_session(b"not json") is None
    assert named_session(b'["sessionId"]') is None


def test_a_partition_whose_system_lost_it_is_not_served_here() -> None:
    """A worker resumed after the others took its partitions over still has their systems
    until its coordinator gives them up: a request for one must go to the new owner (or be
    answered partition_unavailable, retry), not to the system that lost it — which once
    answered 503 store_ownership_lost, without Retry-After, and clients gave up."""
    from starlette.applications import Starlette

    front = ClusterFront(URL, COUNT)
    app = Starlette()
    why: list[str | None] = [None]
    front.add(3, app, lambda: 0, lost=lambda: why[0])
    assert front._local_app(3) is app
    why[0] = "ownership_lost"
    assert front._local_app(3) is None
    assert front.local() == [3]  # still here until the coordinator gives it up
