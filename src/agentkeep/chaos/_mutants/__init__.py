"""Deliberately broken runtimes: used only by the calibration of the checks (the tests).

A check that cannot fail is no check, so each mutant here breaks one promise on purpose, and
a test runs a campaign (or the property machine) under it and expects the check to catch it:
:mod:`.runtime` (tool batches, continuation, the session event ledger, transactional tools),
:mod:`.turns` (the turn checks ``T1``–``T4``), :mod:`.retry_modes` (retry modes and permission
modes), all swapping an attribute for as long as they are active (:mod:`.patching`).

Never import this package from a public module at import time: ``import agentkeep`` and
``import agentkeep.chaos`` load none of it (``tests/unit/test_module_hygiene.py`` holds them to
that). A campaign that can run under a mutant by name (``power``, ``process_worker``,
``ledger_sweep``) imports it when a mutant is asked for.
"""
