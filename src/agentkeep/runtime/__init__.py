"""The runtime's execution of the loop's decisions: above the loop and the store, below the actors.

The loop (:mod:`agentkeep.loop`) decides *what* must commit, as plain data (a ``Plan``); this
package carries a plan out inside one store transaction (:mod:`.commit_plans`).

Internal: no part of the public API; its modules may change without notice (see "Public and
internal" in ``docs/architecture.md``).
"""
