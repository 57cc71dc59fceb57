"""The pykka shell: agent actors, tool and child runners, supervision, the agent tier.

Internal: no part of the public API; its modules may change without notice (see
"Public and internal" in ``docs/architecture.md``).
"""
