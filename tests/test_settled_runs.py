"""A finished run re-run: the result read back (runner.settled_result), not every grade.

The same command run again after it finished makes no call and reads no grade: the grading is
*settled* (a row beside its result: how many grades, how many a re-run would redo, by status,
and the package version). Its printed summary, results.json and samples.jsonl equal those of the
run that went sample by sample. A run with a failed call, a grade written after the result, or
another version of the package goes sample by sample as before, and settles again.
HealthBench's real file (the first 12 conversations) with loopback candidate and judge.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import grandrounds
from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import result_from_json
from grandrounds.run.aggregate import Collected
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import shared_file
from tests.test_judge_e2e import judge_rule
from tests.test_token_rate import flat, invoke

N = 12


class Counting:
    """Counts the samples a run handles one by one (Collected.add) and the grades it reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.added = self.read = 0
        add, grade = Collected.add, Store.grade

        def counted_add(collected: Any, *args: Any) -> None:
            self.added += 1
            add(collected, *args)

        def counted_grade(store: Any, *args: Any) -> Any:
            self.read += 1
            return grade(store, *args)

        monkeypatch.setattr(Collected, "add", counted_add)
        monkeypatch.setattr(Store, "grade", counted_grade)

    def reset(self) -> None:
        self.added = self.read = 0


@pytest.fixture
def setting(tmp_path: Path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    with (
        LoopbackServer(lambda b: "Please see a doctor soon.") as cand,
        LoopbackServer(judge_rule(False)) as judge,
    ):
        args = [
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            str(N),
            "--model",
            "openai/cand",
            "--protocol",
            "grandrounds",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge.base_url}",
            "--store",
            str(tmp_path / "s.db"),
        ]
        yield args, cand, judge


def outputs(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    lines = [
        json.loads(x) for x in (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    return results, lines


def settled_rows(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    con = sqlite3.connect(db)
    try:
        return [
            (r, fp, json.loads(t))
            for r, fp, t in con.execute("SELECT run_id, grader_fp, tally_json FROM settled")
        ]
    finally:
        con.close()


def test_a_finished_run_is_read_back_with_the_same_outputs(
    setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, cand, judge = setting
    counting = Counting(monkeypatch)
    first = invoke(*args, "--out", str(tmp_path / "a"))
    assert first.exit_code == 0, first.output
    assert counting.added == N and cand.stats.requests == N and judge.stats.requests > N
    assert (
        counting.read == 0
    )  # a first run has no grade to read: none is looked up sample by sample
    ((_, _, tally),) = settled_rows(tmp_path / "s.db")
    assert tally == {"n": N, "redo": 0, "status": {"scored": N}, "version": grandrounds.__version__}

    counting.reset()
    asked = (cand.stats.requests, judge.stats.requests)
    again = invoke(*args, "--out", str(tmp_path / "b"))
    assert again.exit_code == 0, again.output
    assert (counting.added, counting.read) == (0, 0), "no sample handled, no grade read"
    assert (cand.stats.requests, judge.stats.requests) == asked
    assert f"answers: 0 calls made, {N} from the store, 0 failed" in flat(again.output)
    assert outputs(tmp_path / "b") == outputs(tmp_path / "a")

    # the same re-run sample by sample (the settled row removed) gives the same outputs and settles again
    con = sqlite3.connect(tmp_path / "s.db")
    con.execute("DELETE FROM settled")
    con.commit()
    con.close()
    slow = invoke(*args, "--out", str(tmp_path / "c"))
    assert slow.exit_code == 0, slow.output
    assert counting.added == N and counting.read == N
    assert outputs(tmp_path / "c") == outputs(tmp_path / "b")
    printed = [
        flat(out).split("Results", 1)[1].replace(str(tmp_path / x), "OUT")
        for out, x in ((slow.output, "c"), (again.output, "b"))
    ]
    assert printed[0] == printed[1]
    assert len(settled_rows(tmp_path / "s.db")) == 1


def test_the_stored_result_reads_back_equal(setting, tmp_path: Path) -> None:
    args, _, _ = setting
    assert invoke(*args).exit_code == 0
    with Store(tmp_path / "s.db") as st:
        ((run_id, fp, stored),) = list(st.results())
    back = result_from_json(stored)
    assert back.breakdown and back.ci95 is not None and back.n == N
    assert json.loads(canonical_json(back)) == stored


def test_a_failed_judge_call_keeps_the_run_unsettled_until_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = shared_file("healthbench", "healthbench_500.jsonl")
    failing = {"on": True}
    good = judge_rule(False)

    def judge_rule_with_faults(body: dict[str, Any]) -> Any:
        return (
            Fault("400")
            if failing["on"] and "emergency" in body["messages"][-1]["content"].lower()
            else good(body)
        )

    counting = Counting(monkeypatch)
    with (
        LoopbackServer(lambda b: "Please see a doctor soon.") as cand,
        LoopbackServer(judge_rule_with_faults) as judge,
    ):
        args = [
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            str(N),
            "--model",
            "openai/cand",
            "--protocol",
            "grandrounds",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge.base_url}",
            "--store",
            str(tmp_path / "s.db"),
        ]
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert sum(judge.stats.faults.values()) > 0
        ((_, _, tally),) = settled_rows(tmp_path / "s.db")
        assert 0 < tally["redo"] <= N

        # still failing: the re-run goes sample by sample and asks the failed calls again
        counting.reset()
        before = judge.stats.requests
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert counting.added == N and judge.stats.requests > before

        failing["on"] = False
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        ((_, _, tally),) = settled_rows(tmp_path / "s.db")
        assert tally["redo"] == 0

        counting.reset()
        before = judge.stats.requests
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert counting.added == 0 and judge.stats.requests == before


def test_a_grade_written_after_the_result_unsettles_the_grading(
    setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, _, _ = setting
    assert invoke(*args, "--out", str(tmp_path / "a")).exit_code == 0
    with Store(tmp_path / "s.db") as st:
        ((run_id, fp, stored),) = list(st.results())
        grades = st.grades(run_id, fp)
        sid = sorted(grades)[0]
        g = grades[sid]
        from dataclasses import replace

        st.put_grade(
            run_id, fp, replace(g, value=None, status="unreadable", error="marked by hand")
        )
        assert st.settled(run_id, fp) is None
    counting = Counting(monkeypatch)
    r = invoke(*args, "--out", str(tmp_path / "b"))
    assert r.exit_code == 0, r.output
    assert counting.added == N, "sample by sample: the new grade counts"
    results, _ = outputs(tmp_path / "b")
    assert results["results"][0]["n_unscored"] == 1
    ((_, _, tally),) = settled_rows(tmp_path / "s.db")
    assert tally["status"] == {"scored": N - 1, "unreadable": 1} and tally["redo"] == 0


def test_another_version_of_the_package_aggregates_anew(
    setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, cand, judge = setting
    assert invoke(*args).exit_code == 0
    counting = Counting(monkeypatch)
    monkeypatch.setattr(grandrounds, "__version__", grandrounds.__version__ + ".post1")
    asked = (cand.stats.requests, judge.stats.requests)
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert counting.added == N and (cand.stats.requests, judge.stats.requests) == asked, (
        "grades reused, result made anew"
    )
    ((_, _, tally),) = settled_rows(tmp_path / "s.db")
    assert tally["version"] == grandrounds.__version__


def test_other_options_do_not_read_back_the_result(
    setting, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--seed changes the bootstrap of the confidence interval: the run aggregates anew under it."""
    args, _, _ = setting
    assert invoke(*args).exit_code == 0
    counting = Counting(monkeypatch)
    r = invoke(*args, "--seed", "7")
    assert r.exit_code == 0, r.output
    assert counting.added == N


def test_run_returns_the_same_result_read_back_as_aggregated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the runner (no CLI): the result read back equals the one aggregated sample by
    sample, without the usage block the CLI adds to the stored copy."""
    import asyncio

    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.costs import with_usage
    from grandrounds.run.runner import run

    data = shared_file("healthbench", "healthbench_500.jsonl")
    with (
        LoopbackServer(lambda b: "See a doctor.") as cand,
        LoopbackServer(judge_rule(False)) as judge,
        Store(tmp_path / "s.db") as st,
    ):
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=cand.base_url,
            limit=5,
            judges=(JudgeConfig(spec="openai/judge", base_url=judge.base_url),),
        )
        counting = Counting(monkeypatch)
        first = asyncio.run(run(st, cfg))
        assert counting.added == 5
        counting.reset()
        with_usage(
            st, first.run.id, first.result, *first.usage
        )  # as the CLI does: the stored copy gains usage
        assert "usage" in st.result(first.run.id, first.fp_key)["extra"]
        again = asyncio.run(run(st, cfg))
        assert counting.added == 0 and again.answer_stats.cached == 5, (
            "read back, not aggregated again"
        )
        assert (
            again.result == first.result
            and again.counts == first.counts
            and again.usage == first.usage
        )
