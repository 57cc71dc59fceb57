"""A process killed (SIGKILL) inside a module migration leaves nothing of it: the key is not
recorded, its writes are gone, and the next open runs it again, whole, exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.modules.conftest import TIMEOUT, World

import agentkeep as ak
from agentkeep.modules import ModuleContext

_CHILD = """
import sys, threading
import agentkeep as ak

def fill(ctx):
    ctx.db.execute("CREATE TABLE crash_items (id INTEGER)")
    ctx.db.execute("INSERT INTO crash_items VALUES (1)")
    ctx.shared_kv.write("filled", True)
    print("inside", flush=True)
    threading.Event().wait()  # killed here, in the middle of the migration's transaction

ak.AgentSystem.open(
    sys.argv[1], providers=ak.Providers(), modules=[ak.Module("crash", migrations=[("v1", fill)])]
)
"""


def test_a_sigkill_inside_a_migration_runs_it_again_whole(world: World) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(world.home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "inside"
    finally:
        child.kill()
        child.wait(timeout=TIMEOUT)
        if child.stdout is not None:
            child.stdout.close()

    runs: list[str] = []

    def fill(ctx: ModuleContext) -> None:
        runs.append("v1")
        ctx.db.execute("CREATE TABLE crash_items (id INTEGER)")
        ctx.db.execute("INSERT INTO crash_items VALUES (1)")
        ctx.shared_kv.write("filled", True)

    system = world.open(modules=[ak.Module("crash", migrations=[("v1", fill)])])
    assert runs == ["v1"]  # nothing of the killed attempt stood in its way
    read = system.internals.store.read
    assert read(lambda tx: tx.sql.query("SELECT id FROM crash_items")) == [(1,)]
    assert read(lambda tx: tx.sql.query("SELECT module, key FROM module_migrations")) == [
        ("crash", "v1")
    ]
    assert read(lambda tx: tx.kv.scan("system.feature.crash.")) == [
        ("system.feature.crash.filled", True)
    ]
