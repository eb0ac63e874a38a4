"""The commands' event loop: uvloop by default where installed, asyncio's own on request."""

from __future__ import annotations

import asyncio
import sys

import pytest

from grandrounds.core import eventloop
from grandrounds.core.errors import ConfigError
from grandrounds.testing import LoopbackServer

uvloop = pytest.importorskip(
    "uvloop", reason="uvloop is not installed (Windows, or installed without it)"
)


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_default_runs_on_uvloop(monkeypatch):
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.run(_loop_module()).startswith("uvloop")
    assert eventloop.loop_name() == "uvloop"


def test_asyncio_on_request(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.run(_loop_module()).startswith("asyncio")
    assert eventloop.loop_name() == "asyncio"


def test_a_bad_choice_is_a_clear_error_and_the_coroutine_is_closed(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "trio")
    coro = _loop_module()
    with pytest.raises(
        ConfigError,
        match=r"GRANDROUNDS_EVENT_LOOP is 'trio'; expected one of: auto, uvloop, asyncio",
    ):
        eventloop.run(coro)
    assert coro.cr_frame is None  # closed, not left to warn "never awaited"


def test_uvloop_required_but_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    monkeypatch.setenv(eventloop.ENV, "uvloop")
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        eventloop.loop_factory()
    monkeypatch.setenv(eventloop.ENV, "auto")
    assert eventloop.loop_factory() is None  # auto falls back to asyncio's loop


@pytest.mark.parametrize("choice", ["auto", "asyncio"])
def test_a_run_gives_the_same_result_on_either_loop(tmp_path, monkeypatch, choice):
    """The whole pipeline (HTTP client, store writer thread, leases) on each loop: same answers."""
    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.run.config import RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store

    monkeypatch.setenv(eventloop.ENV, choice)
    with LoopbackServer(lambda body: "The answer is A.", latency=0.001) as srv:
        cfg = RunConfig(
            benchmark="demo",
            model="openai/loop-test",
            base_url=srv.base_url,
            options=RunOptions(protocol="grandrounds"),
        )
        with Store(tmp_path / "s.db") as st:
            outcome = eventloop.run(run(st, cfg))
            assert outcome.answer_stats.made == 12 and outcome.answer_stats.failed == 0
            assert [r.text for r in outcome.responses.values()] == ["The answer is A."] * 12
            assert outcome.result.n == 12
