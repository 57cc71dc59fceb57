"""``tx.kv``: the sorted ``kv`` table's statements, inside one transaction;
:mod:`agentkeep.persistence.kv` builds its scoped stores on them.

Invariants:

- Values are stored as canonical (sorted-key) JSON, so equal values are equal text and
  :meth:`KvStatements.compare_and_set` can compare them in SQL.
- The conditional writes (``write_if_absent``, ``compare_and_set``,
  ``delete_if_present``) are each one statement whose change count says whether it won,
  atomic even without the enclosing transaction.
- The writer's memo (persistence/memo.py states its invariant: every value it returns equals
  what the database holds at that point of the transaction) remembers no ``kv`` row: every
  read here goes to SQL, so a write has nothing to record or forget.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentkeep.persistence.codec import decode_any, encode, encode_value, prefix_upper_bound
from agentkeep.persistence.executor import TableStatements

__all__ = ["KvStatements"]


class KvStatements(TableStatements):
    """The ``kv`` table over the enclosing transaction (see the module)."""

    def read(self, key: str) -> Any | None:
        """The key's value, or None if absent."""
        raw = self._one("SELECT value_json FROM kv WHERE key = ?", (key,))
        return None if raw is None else decode_any(raw)

    def scan(self, prefix: str) -> list[tuple[str, Any]]:
        """Entries whose key starts with ``prefix``, in key order."""
        return [(key, decode_any(raw)) for key, raw in self._scan(prefix)]

    def _scan(self, prefix: str) -> Iterator[tuple[str, str]]:
        upper = prefix_upper_bound(prefix)
        if upper is None:
            cursor = self._read(
                "SELECT key, value_json FROM kv WHERE key >= ? ORDER BY key", (prefix,)
            )
        else:
            cursor = self._read(
                "SELECT key, value_json FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                (prefix, upper),
            )
        for key, raw in cursor:
            yield str(key), str(raw)

    def write(self, key: str, value: Any) -> None:
        self._send(
            "INSERT INTO kv (key, value_json) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value_json = excluded.value_json",
            (key, encode_value(value)),
        )

    def delete(self, key: str) -> bool:
        return self._write("DELETE FROM kv WHERE key = ?", (key,)) == 1

    def clear(self, prefix: str) -> int:
        """Delete every key starting with ``prefix``; returns how many."""
        upper = prefix_upper_bound(prefix)
        if upper is None:
            return self._write("DELETE FROM kv WHERE key >= ?", (prefix,))
        return self._write("DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, upper))

    def drop(self, prefix: str) -> None:
        """:meth:`clear` without the count: a backend sends it without waiting for it."""
        upper = prefix_upper_bound(prefix)
        if upper is None:
            self._send("DELETE FROM kv WHERE key >= ?", (prefix,))
        else:
            self._send("DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, upper))

    def write_if_absent(self, key: str, value: Any) -> bool:
        return (
            self._write(
                "INSERT OR IGNORE INTO kv (key, value_json) VALUES (?, ?)",
                (key, encode_value(value)),
            )
            == 1
        )

    def compare_and_set(self, key: str, expected: Any | None, value: Any) -> bool:
        if expected is None:
            return self.write_if_absent(key, value)
        # Canonical (sorted-key) JSON on both sides, so equal values compare equal in SQL.
        return (
            self._write(
                "UPDATE kv SET value_json = ? WHERE key = ? AND value_json = ?",
                (encode_value(value), key, encode(expected)),
            )
            == 1
        )

    def delete_if_present(self, key: str) -> bool:
        return self.delete(key)
