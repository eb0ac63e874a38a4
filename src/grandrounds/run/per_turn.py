"""Store work asked during one turn of the event loop, done together at its end: the executors'
look-ups of stored calls (:class:`StoreLookups`, one query) and the leases their new calls take
(:class:`LeaseQueue`, one transaction), one instance of each per open store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from typing import Any, Generic, Self, TypeVar

from grandrounds.core.records import Response
from grandrounds.store import Store
from grandrounds.store.leases import LeaseState

T = TypeVar("T")


class PerTurn(Generic[T]):
    """Keys asked for during one turn of the event loop, answered together at its end.

    :meth:`ask` gives each key a future (one for a key asked twice); the first key of a turn
    schedules :meth:`_answer` with all of them. :meth:`_fail` hands an error to every caller.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: dict[str, asyncio.Future[T]] = {}

    def ask(self, key: str) -> asyncio.Future[T]:
        fut = self._waiting.get(key)
        if fut is None:
            loop = asyncio.get_running_loop()
            if not self._waiting:
                loop.call_soon(self._turn_ended)
            fut = self._waiting[key] = loop.create_future()
        return fut

    def _turn_ended(self) -> None:
        waiting, self._waiting = self._waiting, {}
        self._answer(waiting)

    def _answer(self, waiting: dict[str, asyncio.Future[T]]) -> None:
        raise NotImplementedError

    @staticmethod
    def _fail(waiting: dict[str, asyncio.Future[T]], err: BaseException) -> None:
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(err)

    @classmethod
    def of(cls, store: Store) -> Self:
        """The one instance of this class for ``store`` (shared by every executor using it)."""
        per_store = _PER_TURN.setdefault(cls, weakref.WeakKeyDictionary())
        found = per_store.get(store)
        if found is None:
            found = per_store[store] = cls(store)
        return found  # type: ignore[return-value]  # the cache of cls holds instances of cls


#: Per class, the instance of each open store.
_PER_TURN: dict[type, weakref.WeakKeyDictionary[Store, PerTurn[Any]]] = {}


class LeaseQueue(PerTurn[LeaseState]):
    """The lease requests made during one turn of the event loop, taken in one transaction.

    When replies land together, the calls that follow them start together: each asks for its
    lease, and the queue takes them all at the end of the loop's turn with one
    :meth:`~grandrounds.store.Store.acquire_leases` (one commit for all instead of one each,
    the larger part of a live call's store work). Under write-behind that transaction runs on
    the store's writer thread, and the calls go on when it has committed.
    """

    def _answer(self, waiting: dict[str, asyncio.Future[LeaseState]]) -> None:
        taken = self.store.acquire_leases_soon(
            list(waiting)
        )  # on the store's writer thread, under write-behind
        if taken.done():
            self._settle(waiting, taken)
        else:
            asyncio.wrap_future(taken).add_done_callback(lambda _: self._settle(waiting, taken))

    def _settle(
        self,
        waiting: dict[str, asyncio.Future[LeaseState]],
        taken: concurrent.futures.Future[dict[str, LeaseState]],
    ) -> None:
        err = taken.exception()
        if err is not None:  # e.g. the store is locked by another process past its timeout
            self._fail(waiting, err)
            return
        states = taken.result()
        for key, fut in waiting.items():
            if not fut.done():
                fut.set_result(states[key])
            elif states[key] == "ours":  # its caller was cancelled meanwhile: give the lease back
                self.store.release_lease(key)


class StoreLookups(PerTurn["Response | None"]):
    """The store look-ups asked during one turn of the event loop, made in one query.

    The calls a run starts together (a conversation's rubric items, the next questions when
    replies land together) each look in the store first; :meth:`Store.get_calls` answers them
    all with one ``SELECT ... IN`` at the end of the loop's turn. One query instead of one each
    matters most while the store's writer thread is busy: every statement hands the interpreter
    lock to it and waits to get it back (about 50 us a look-up against 15 us on an idle store,
    measured on HealthBench judge calls).
    """

    def _answer(self, waiting: dict[str, asyncio.Future[Response | None]]) -> None:
        try:
            found = self.store.get_calls(list(waiting))
        except BaseException as err:  # e.g. a damaged store: every caller raises it
            self._fail(waiting, err)
            return
        for key, fut in waiting.items():
            if not fut.done():
                fut.set_result(found.get(key))


class FinalFailures(PerTurn["Response | None"]):
    """The stored failures that asking again cannot mend (their finish reason is ``final``), looked
    up for the keys asked during one turn of the event loop in one query, beside :class:`StoreLookups`."""

    #: The finish reason that marks a failure as final (``executor.FINAL_OVERFLOW``).
    final = "context_length"

    def _answer(self, waiting: dict[str, asyncio.Future[Response | None]]) -> None:
        try:
            found = self.store.calls_by_key(list(waiting))
        except BaseException as err:
            self._fail(waiting, err)
            return
        for key, fut in waiting.items():
            hit = found.get(key)
            if not fut.done():
                fut.set_result(
                    hit
                    if hit is not None and not hit.ok and hit.finish_reason == self.final
                    else None
                )
