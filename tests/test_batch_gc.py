"""The collector tuning around a command's loop (eventloop.batch_gc): on while the loop runs,
undone afterwards, also when the command fails."""

from __future__ import annotations

import gc

import pytest

from grandrounds.core import eventloop


async def _gc_state() -> tuple[tuple[int, int, int], int]:
    return gc.get_threshold(), gc.get_freeze_count()


@pytest.fixture
def asyncio_loop(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "asyncio")  # the tuning is the same on either loop


def test_the_loop_runs_with_setup_objects_frozen_and_a_larger_young_generation(asyncio_loop):
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    thresholds, frozen = eventloop.run(_gc_state())
    assert thresholds == eventloop.BATCH_GC_THRESHOLDS
    assert frozen > 1000  # every module imported so far, at least
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def _fail() -> None:
    assert gc.get_threshold() == eventloop.BATCH_GC_THRESHOLDS
    raise RuntimeError("boom")


def test_the_collector_is_restored_when_the_command_fails(asyncio_loop):
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="boom"):
        eventloop.run(_fail())
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_made_during_the_run_are_still_collected(asyncio_loop):
    import weakref

    class Node:
        pass

    async def make_cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        ref = weakref.ref(a)
        del a, b
        gc.collect()
        return ref

    assert eventloop.run(make_cycle())() is None
