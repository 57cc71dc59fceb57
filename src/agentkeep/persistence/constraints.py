"""A write the store's own rules refuse, answered the same way on every backend.

The rules are the schema's: its constraints (foreign keys, uniqueness, NOT NULL, CHECK) and
its immutability triggers (``RAISE(ABORT, …)`` on SQLite, ``agentkeep_refuse…`` PL/pgSQL
functions raising SQLSTATE 23000 on PostgreSQL). Each backend's writer recognises its
driver's error for a broken rule -- ``apsw.ConstraintError``; psycopg's ``IntegrityError``,
the SQLSTATE class 23 -- and answers the work's caller with
:class:`~agentkeep.errors.StoreConstraintError`: the rule's message, the driver's error as
its cause. Inside the work the driver's error is raised as it is (the transaction's code
never sees a rule broken on purpose); only the caller's answer is classified.
"""

from __future__ import annotations

from agentkeep.errors import StoreConstraintError

__all__ = ["constraint_refusal"]


def constraint_refusal(error: BaseException, rule: str) -> StoreConstraintError:
    """``error`` (the driver's, for a broken rule) as the caller hears it: the store refused
    the write, in the rule's own words ``rule``."""
    refused = StoreConstraintError(f"The store refused the write: {rule}")
    refused.__cause__ = error
    return refused
