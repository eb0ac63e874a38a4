"""In-flight leases: two processes on one store never pay for the same call twice.

Before a live call, the executor takes a lease on the call's key: a row naming this process
(host, pid and a random token), committed at once so every other process sees it. Another
process that wants the same key finds the lease, waits, and reads the answer from the store once
it lands. The lease is deleted in the same transaction that stores the call's outcome (under
write-behind, the same flush), so no process can see neither the lease nor the answer. A lease
whose holder died (same host, its pid gone) or whose time ran out is taken over; leases left by
an interrupted process are deleted when it closes the store.
"""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import nullcontext
from typing import Literal

from grandrounds.store.commits import transaction
from grandrounds.store.connection import StoreBase

#: A key's state after :meth:`LeaseTables.acquire_leases`.
LeaseState = Literal["ours", "held", "stored"]

#: Keys per statement (three parameters each, well under SQLite's limit of 32,766).
_CHUNK = 300

#: Seconds after which a lease is taken over even when its holder cannot be checked (another host).
LEASE_TTL = 3600.0

#: Owners of the store handles open in this process: a lease of this process whose handle was
#: closed (its release failed, e.g. on a full disk) is a dead holder's.
_LIVE_OWNERS: set[str] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _take_leases(
    db: sqlite3.Connection, keys: list[str], owner: str, ttl: float
) -> dict[str, LeaseState]:
    """The leases on ``keys`` for ``owner``, in the transaction open on ``db`` or one of its own
    (see :meth:`LeaseTables.acquire_leases`)."""
    t = time.time()
    states: dict[str, LeaseState] = {}
    with nullcontext() if db.in_transaction else transaction(db):
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            for (key,) in db.execute(
                f"SELECT key FROM calls WHERE key IN ({marks}) AND error IS NULL", chunk
            ):
                states[key] = "stored"
            todo = [k for k in chunk if k not in states]
            if not todo:
                continue
            rows = ",".join("(?,?,?)" for _ in todo)
            params = [v for k in todo for v in (k, owner, t + ttl)]
            q = f"INSERT INTO leases (key, owner, expires_at) VALUES {rows} ON CONFLICT(key) DO NOTHING RETURNING key"
            for (key,) in db.execute(q, params).fetchall():
                states[key] = "ours"
            for key in todo:
                if key not in states:
                    states[key] = _held_or_taken(db, key, owner, t, ttl)
    return states


def _held_or_taken(
    db: sqlite3.Connection, key: str, owner: str, t: float, ttl: float
) -> LeaseState:
    """A lease row already there: this handle's own, a live holder's, or taken over from a
    holder that died or ran out of time (only if nobody else took it meanwhile)."""
    row = db.execute("SELECT owner, expires_at FROM leases WHERE key = ?", (key,)).fetchone()
    if (
        row is None
    ):  # released since the insert was tried (not within one transaction; kept for safety)
        db.execute(
            "INSERT INTO leases (key, owner, expires_at) VALUES (?, ?, ?)", (key, owner, t + ttl)
        )
        return "ours"
    if row[0] == owner:
        return "ours"
    if row[1] > t and LeaseTables._holder_alive(row[0]):
        return "held"
    cur = db.execute(
        "UPDATE leases SET owner = ?, expires_at = ? WHERE key = ? AND owner = ?",
        (owner, t + ttl, key, row[0]),
    )
    return "ours" if cur.rowcount == 1 else "held"


class LeaseTables(StoreBase):
    """Reads and writes of ``leases`` (migration 6)."""

    _lease_owner: str | None = None

    @property
    def lease_owner(self) -> str:
        """This store handle's identity in lease rows: ``host:pid:token``."""
        if self._lease_owner is None:
            self._lease_owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
            _LIVE_OWNERS.add(self._lease_owner)
        return self._lease_owner

    def acquire_lease(self, key: str, ttl: float = LEASE_TTL) -> bool:
        """Take the lease on ``key`` (True), or find it held by a live holder (False).

        Committed at once, outside any write-behind buffer: the point is that other processes
        see it before this one sends the call.
        """
        return self.acquire_leases([key], ttl).get(key) == "ours"

    def acquire_leases(self, keys: Sequence[str], ttl: float = LEASE_TTL) -> dict[str, LeaseState]:
        """Take the leases on ``keys`` in one transaction: each key's state afterwards.

        ``stored``: a successful outcome is already stored (another process answered it since
        this one last looked), so no lease is taken; ``ours``: this handle holds the lease (new,
        taken over from a dead or expired holder, or already its own); ``held``: a live holder
        has it. One transaction for all of them, committed at once, so the many calls a run
        starts together cost one commit, not one each.
        """
        return self.acquire_leases_soon(keys, ttl).result()

    def acquire_leases_soon(
        self, keys: Sequence[str], ttl: float = LEASE_TTL
    ) -> Future[dict[str, LeaseState]]:
        """:meth:`acquire_leases` as a future: under write-behind the transaction runs on the
        store's writer thread (the caller's thread goes on meanwhile), else at once."""
        if self.readonly:
            done: Future[dict[str, LeaseState]] = Future()
            done.set_result(dict.fromkeys(keys, "ours"))
            return done
        owner, todo = self.lease_owner, list(keys)
        if self._writer is not None:
            return self._writer.submit(lambda db: _take_leases(db, todo, owner, ttl))
        done = Future()
        try:
            done.set_result(_take_leases(self.db, todo, owner, ttl))
        except BaseException as e:
            done.set_exception(e)
        return done

    def release_lease(self, key: str) -> None:
        """Drop this handle's lease on ``key``; buffered with the call's outcome under write-behind,
        so both land in one transaction (after the flush's other writes: no other buffered write
        touches ``leases``)."""
        if not self.readonly:
            self._write(
                "DELETE FROM leases WHERE key = ? AND owner = ?",
                (key, self.lease_owner),
                commutes=True,
            )

    def release_all_leases(self) -> None:
        """Drop every lease this handle still holds (an interrupted call's)."""
        if self._lease_owner is not None and not self.readonly:
            self.db.execute("DELETE FROM leases WHERE owner = ?", (self._lease_owner,))

    @staticmethod
    def _holder_alive(owner: str) -> bool:
        host, _, rest = owner.partition(":")
        pid = rest.partition(":")[0]
        if host != socket.gethostname() or not pid.isdigit():
            return True  # cannot tell from here: the lease's time decides
        if int(pid) == os.getpid():
            return owner in _LIVE_OWNERS
        return _alive(int(pid))

    def close(self) -> None:
        try:
            self.flush()
            self.release_all_leases()
        except Exception:  # closing must not fail on a lease; the TTL or the pid check frees it
            pass
        finally:
            _LIVE_OWNERS.discard(self._lease_owner or "")
        super().close()
