"""The path a user takes against a real server: a server that answers one request at a time,
judge calls that fail and are retried by running the same command again, a context overflow,
a run in which every call fails, and runs of one model told apart.

The loopback server here answers one request at a time with a fixed delay (``serial=True``), as
llama-cpp-python's server does with one slot: requests beyond the one being answered wait in
its queue, and a client whose timeout counted that wait would give up on them.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.cli.common import NOTHING_SCORED
from grandrounds.cli.main import app
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.base import ModelSpec
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.run.limits import EndpointLimits
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import shared_file

# A criterion in HealthBench's per-criterion judge prompt (ours or the official one).
ITEM = re.compile(
    r"# Rubric item\n\[(-?\d+(?:\.\d+)?)\] (.*?)\n\n# (?:How to judge|Instructions)", re.S
)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "220"})


def criterion(body: dict) -> str | None:
    m = ITEM.search(str(body["messages"][-1]["content"]))
    return m.group(2) if m else None


def verdict(body: dict) -> str:
    return json.dumps(
        {"explanation": "by rule", "criteria_met": len(criterion(body) or "") % 2 == 0}
    )


def healthbench_rows(n: int) -> tuple[Path, int]:
    data = shared_file("healthbench", "healthbench_500.jsonl")
    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()[:n]]
    return data, sum(len(r["rubrics"]) for r in rows)


def calls(db: Path, purpose: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return list(con.execute("SELECT * FROM calls WHERE purpose = ?", (purpose,)))
    finally:
        con.close()


def one_server(judge_rule=verdict):
    """Candidate and judge on one serial server, as with one local llama.cpp server."""

    def rule(body: dict):
        return judge_rule(body) if criterion(body) is not None else "Please see a doctor today."

    return rule


def test_judge_run_on_a_one_request_at_a_time_server_ends_with_no_timeout(tmp_path: Path) -> None:
    data, n_crit = healthbench_rows(3)
    db = tmp_path / "s.db"
    with LoopbackServer(one_server(), latency=0.05, serial=True) as srv:
        t0 = time.perf_counter()
        r = invoke(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "3",
            "--model",
            "openai/local",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/local@{srv.base_url}",
            "--concurrency",
            "1",
            "--judge-concurrency",
            "1",
            "--timeout",
            "1.0",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        )
        wall = time.perf_counter() - t0
        assert r.exit_code == 0, r.output
        # the whole run took longer than one call may: a timeout counted from queueing would have hit
        assert srv.stats.requests == 3 + n_crit and wall > 1.0
        assert srv.stats.max_waiting == 0, (
            "the candidate and the judge share one slot: nothing waits in the server's line"
        )
    judged = calls(db, "judge")
    assert len(judged) == n_crit and all(c["error"] is None and c["attempts"] == 1 for c in judged)
    assert "timeout" not in r.output and "0 failed, 0 retries" in r.output


def test_judges_beyond_the_servers_capacity_time_out_while_they_queue(tmp_path: Path) -> None:
    """The contrast: six judge calls in flight on the same one-slot server wait in its queue, and
    the later ones pass a timeout shorter than the queue."""
    data, _ = healthbench_rows(1)
    db = tmp_path / "s.db"
    with LoopbackServer(one_server(), latency=0.1, serial=True) as srv:
        r = invoke(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "1",
            "--model",
            "openai/local",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/local@{srv.base_url}",
            "--judge-concurrency",
            "6",
            "--timeout",
            "0.25",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        )
        assert srv.stats.max_waiting > 1
    assert any(
        c["attempts"] > 1 or (c["error"] or "").startswith("timeout") for c in calls(db, "judge")
    ), r.output


def test_endpoint_limit_is_shared_by_every_executor_on_one_server(tmp_path: Path) -> None:
    async def go(srv: LoopbackServer) -> None:
        provider_cls = PROVIDERS.get("openai")
        limits = EndpointLimits()
        with Store(tmp_path / "s.db") as st:
            a = Executor(
                st,
                provider_cls(ModelSpec("openai", "cand", srv.base_url), api_key="k"),
                1,
                RetryPolicy(1),
                endpoints=limits,
            )
            j = Executor(
                st,
                provider_cls(ModelSpec("openai", "judge", srv.base_url), api_key="k"),
                1,
                RetryPolicy(1),
                endpoints=limits,
            )
            assert limits.capacity(srv.base_url) == 1

            def req(model: str, i: int) -> Request:
                return Request(
                    provider="openai",
                    model=model,
                    messages=(Message("user", f"q{i}"),),
                    params=GenParams(),
                    base_url=srv.base_url,
                )

            out = await asyncio.gather(
                *(e(req(e.provider.spec.model, i)) for i in range(4) for e in (a, j))
            )
            assert all(resp.ok for resp in out)
            for e in (a, j):
                await e.provider.aclose()

    with LoopbackServer(lambda b: "ok", latency=0.02) as srv:
        asyncio.run(go(srv))
        assert srv.stats.max_in_flight == 1, (
            "two executors of capacity 1 on one endpoint: one call at a time"
        )


def test_endpoint_capacity_is_the_largest_any_executor_asked_for() -> None:
    async def go() -> None:
        limits = EndpointLimits()
        first = limits.slot("http://h/v1", 1)
        assert limits.slot("http://h/v1", 4) is first and limits.capacity("http://h/v1") == 4
        held = [await first.acquire() for _ in range(4)]
        assert len(held) == 4 and first.locked()
        assert limits.slot("http://h/v1", 2) is first and limits.capacity("http://h/v1") == 4

    asyncio.run(go())


def test_rerun_retries_failed_judge_calls_and_nothing_else(tmp_path: Path) -> None:
    """The same command twice against the same servers: the second run sends exactly the judge
    calls that failed in the first, no answer call, and ends with every verdict known."""
    data, n_crit = healthbench_rows(3)
    db = tmp_path / "s.db"
    broken = {"on": True}

    def judge_rule(body: dict):
        if broken["on"] and len(criterion(body) or "") % 3 == 0:
            return Fault("400")
        return verdict(body)

    with LoopbackServer(lambda b: "See a doctor.") as cand, LoopbackServer(judge_rule) as judge:
        args = [
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "3",
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/j@{judge.base_url}",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
            "--out",
            str(tmp_path / "o"),
        ]
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        failed = judge.stats.faults["400"]
        assert 0 < failed < n_crit
        assert "re-running the same command retries" in r.output
        answers_before, judge_before = cand.stats.requests, judge.stats.requests
        broken["on"] = False
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert cand.stats.requests == answers_before, "answers come from the store"
        assert judge.stats.requests - judge_before == failed, (
            "exactly the failed judge calls are sent again"
        )
    result = json.loads((tmp_path / "o" / "results.json").read_text())["results"][0]
    assert result["extra"]["coverage"] == 1.0 and result["extra"]["n_judge_failed"] == 0
    assert all(c["error"] is None for c in calls(db, "judge"))
    assert "complete" in invoke("runs", "--store", str(db)).output


def llamacpp_overflow(n_ctx: int, prompt_tokens: int):
    """A judge rule that answers as llama.cpp's server does when prompt + max_tokens overflow its context."""

    def rule(body: dict):
        if prompt_tokens + int(body.get("max_tokens") or 0) > n_ctx:
            return Fault(
                "400",
                body={
                    "error": {
                        "code": 400,
                        "message": "the request exceeds the available context size, try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": prompt_tokens,
                        "n_ctx": n_ctx,
                    }
                },
            )
        return verdict(body)

    return rule


def test_context_overflow_shrinks_the_judges_max_tokens_to_what_the_server_leaves(
    tmp_path: Path,
) -> None:
    data, n_crit = healthbench_rows(1)
    db = tmp_path / "s.db"
    with (
        LoopbackServer(lambda b: "See a doctor.") as cand,
        LoopbackServer(llamacpp_overflow(4096, 3000), keep_bodies=True) as judge,
    ):
        r = invoke(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "1",
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/j@{judge.base_url}",
            "--judge-max-tokens",
            "2048",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        )
        assert r.exit_code == 0, r.output
        sent = [b["max_tokens"] for b in judge.stats.bodies]
    assert sent.count(2048) == n_crit and sent.count(4096 - 3000 - 16) == n_crit
    judged = calls(db, "judge")
    assert len(judged) == n_crit and all(c["error"] is None for c in judged)
    assert f"{n_crit} shrunk to fit the context" in r.output


def test_context_overflow_that_cannot_be_fitted_is_a_clear_unretried_failure(
    tmp_path: Path,
) -> None:
    data, _ = healthbench_rows(1)
    db = tmp_path / "s.db"
    with LoopbackServer(llamacpp_overflow(4096, 5000)) as srv:
        r = invoke(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "1",
            "--model",
            "openai/cand",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/j@{srv.base_url}",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        )
        assert srv.stats.requests == 1, "the candidate's overflow is not retried"
    assert r.exit_code == NOTHING_SCORED, r.output
    (answer,) = calls(db, "answer")
    assert answer["attempts"] == 1
    assert (
        "4096" in answer["error"]
        and "5000" in answer["error"]
        and "larger context" in answer["error"]
    )
    # the prompt alone (5000) is over the context (4096): no --max-tokens can help, so none is suggested
    assert (
        "--max-tokens" not in answer["error"]
        and "context" in r.output
        and "--max-tokens" not in r.output
    )


def test_gaps_with_one_judge_is_refused_before_any_call(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with LoopbackServer(lambda b: "x") as srv:
        r = invoke(
            "run",
            "gaps",
            "--model",
            f"openai/m@{srv.base_url}",
            "--judge",
            f"openai/j@{srv.base_url}",
            "--store",
            str(db),
        )
        assert srv.stats.requests == 0
    assert r.exit_code == 2 and "needs at least 2 judges" in r.output


def test_the_leaderboard_ranks_the_latest_complete_run_of_a_model_once_per_setting(
    tmp_path: Path,
) -> None:
    from grandrounds.reports import boards

    db = tmp_path / "s.db"

    def run(model: str, url: str, *extra: str) -> str:
        r = invoke(
            "run",
            "demo",
            "--model",
            model,
            "--base-url",
            url,
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
            *extra,
        )
        assert r.exit_code in (0, NOTHING_SCORED), r.output
        return re.search(r"run ([0-9a-f]{16})", r.output).group(1)

    # Runs of one model on three servers (a run id per endpoint): the same setting, three runs.
    with (
        LoopbackServer(lambda b: "Answer: B") as s1,
        LoopbackServer(lambda b: "Answer: C") as s2,
        LoopbackServer(lambda b: Fault("400")) as s3,
    ):
        first = run("openai/m", s1.base_url)  # complete
        part = run("openai/m", s1.base_url, "--limit", "6")  # another item set: another setting
        second = run("openai/m", s2.base_url)  # the same setting, later, complete
        run("openai/m", s3.base_url)  # the same setting, latest, every call failed
        other = run("openai/other", s1.base_url)
    (board,) = boards(Store(db))
    by_setting: dict[int, list] = {}
    for e in board.entries:
        by_setting.setdefault(e.setting, []).append(e)
    assert sorted(len(v) for v in by_setting.values()) == [1, 2], "one entry per model and setting"
    main = next(v for v in by_setting.values() if len(v) == 2)
    assert {e.row.run_id for e in main} == {second, other}, (
        "the latest complete run of m, never m against itself"
    )
    kept = next(e for e in main if e.row.run_id == second)
    assert any("3 runs of this model in this setting (2 not ranked)" in f for f in kept.flags)
    (limited,) = next(v for v in by_setting.values() if len(v) == 1)
    assert limited.row.run_id == part and limited.row.fingerprint["limit"] == 6
    assert first not in {e.row.run_id for e in board.entries}
    listing = invoke("runs", "--store", str(db)).output
    assert listing.count("complete") == 4 and "with failures (12 answers)" in listing
