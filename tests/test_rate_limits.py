"""--rpm and --judge-rpm: call starts per endpoint spaced so that no rolling window holds more than
the limit, retries included, per model at an endpoint: a candidate and a judge that are one model
there share it (the lower limit wins), two models keep their own.

The window is a minute in use; here it is shrunk (``limits.RATE_WINDOW``) so a test takes about
a second. Times are the loopback server's arrival times: they trail the client's start times by a
delay that varies (each arrival up to about 10 ms early or late against an even 0.1 s spacing on
a loaded 2-core machine, so five spacings in a row can come out 0.02 s short), so a window is
checked ``SLACK`` seconds shorter than the limiter's, as in test_token_rate: still long enough
that a limiter with half the window, or none, fails every check.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run import limits
from grandrounds.run.config import RunConfig
from grandrounds.run.limits import EndpointLimits
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import shared_file
from tests.rubric_bench.triage import TriageRubric

WINDOW = 0.5
SLACK = 0.1


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "RATE_WINDOW", WINDOW)


def medqa() -> Path:
    return shared_file("medqa", "phrases_no_exclude_test.jsonl")


class Arrivals:
    """A server rule that notes when each request arrived (and which model it was for)."""

    def __init__(self, reply: Callable[[dict[str, Any]], Any]) -> None:
        self.reply = reply
        self.times: list[float] = []
        self.models: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.times.append(time.monotonic())
            self.models.append(str(body.get("model")))
        return self.reply(body)


def most_in_window(times: list[float], window: float) -> int:
    """The most arrivals in any half-open window [t, t + window)."""
    ts, best, j = sorted(times), 0, 0
    for i, t in enumerate(ts):
        while t - ts[j] >= window:
            j += 1
        best = max(best, i - j + 1)
    return best


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def verdict(body: dict[str, Any]) -> str:
    return json.dumps({"explanation": "ok", "criteria_met": True})


def triage_data(tmp_path: Path, n: int = 3) -> Path:
    rows = [
        {
            "id": f"t{i}",
            "question": f"question {i}",
            "urgency": "routine",
            "rubric": [{"text": f"item {i}.{k}", "points": k + 1} for k in range(4)],
        }
        for i in range(n)
    ]
    path = tmp_path / "triage.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rpm_spaces_answer_calls_and_is_not_part_of_the_run(tmp_path: Path) -> None:
    data, store = medqa(), str(tmp_path / "s.db")
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "30",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--rpm",
            "10",
            "--store",
            store,
        )
        assert r.exit_code == 0, r.output
        assert len(seen.times) == 30
        assert most_in_window(seen.times, WINDOW - SLACK) <= 10
        # evenly spaced, not 10 at once then a pause: 30 starts take 29 spacings of WINDOW / 10,
        # and half a window holds about half the limit
        assert max(seen.times) - min(seen.times) >= 29 * WINDOW / 10 - SLACK
        assert most_in_window(seen.times, WINDOW / 2 - SLACK) <= 6
        # the same run without the flag: same run id, every answer from the store
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "30",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            store,
        )
        assert r.exit_code == 0, r.output
        assert len(seen.times) == 30
    with Store(Path(store)) as st:
        assert len(st.runs()) == 1
    # without --rpm the same calls arrive together: the measure above does see a burst
    burst = Arrivals(lambda b: "A")
    with LoopbackServer(burst) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "30",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(tmp_path / "other.db"),
        )
        assert r.exit_code == 0, r.output
    assert most_in_window(burst.times, WINDOW) > 10


def test_retries_count_against_the_rate(tmp_path: Path) -> None:
    """A 429 answered with Retry-After 0 is retried at once by the executor, but the retry is a
    request: it waits for its start time like any other."""
    state = {"n": 0}

    def reply(body: dict[str, Any]) -> Any:
        state["n"] += 1
        return Fault("429", retry_after=0.0) if state["n"] % 2 == 1 and state["n"] <= 12 else "A"

    seen = Arrivals(reply)
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "10",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--rpm",
            "6",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.faults.get("429") == 6 and len(seen.times) == 16
    assert "6 retries" in " ".join(r.output.split())
    assert most_in_window(seen.times, WINDOW - SLACK) <= 6


def judging(body: dict[str, Any]) -> bool:
    """A triage-rubric request is a judge call when it carries the grading template (answers ask the bare question)."""
    return "rubric item" in str(body["messages"][-1]["content"])


@pytest.mark.parametrize(
    "flags",
    [["--rpm", "8"], ["--rpm", "600", "--judge-rpm", "8"], ["--judge-rpm", "8"]],
    ids=["candidate-limit", "lower-judge-limit", "judge-limit"],
)
def test_a_judge_that_is_the_candidates_model_on_its_endpoint_shares_the_lowest_rate(
    tmp_path: Path, flags: list[str]
) -> None:
    """Vendors limit each model: the candidate's own model asked as judge at the same endpoint is one limit."""
    seen = Arrivals(lambda b: verdict(b) if judging(b) else "advice")
    with BENCHMARKS.registered("triage-rubric", TriageRubric), LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path)),
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/m@{srv.base_url}",
            *flags,
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 3 + 12
    assert most_in_window(seen.times, WINDOW - SLACK) <= 8  # answers and judge calls together


def test_two_models_on_one_endpoint_each_keep_their_own_rate(tmp_path: Path) -> None:
    """A candidate and a judge of different models on one server: each model its own limit (the
    server's connection slots are still shared), so together they start more than either allows."""
    seen = Arrivals(lambda b: verdict(b) if b.get("model") == "j" else "advice")
    with BENCHMARKS.registered("triage-rubric", TriageRubric), LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path, 6)),
            "--model",
            "openai/c",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/j@{srv.base_url}",
            "--rpm",
            "6",
            "--judge-rpm",
            "8",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    cand = [t for t, m in zip(seen.times, seen.models) if m == "c"]
    judged = [t for t, m in zip(seen.times, seen.models) if m == "j"]
    assert len(cand) == 6 and len(judged) == 24
    assert most_in_window(cand, WINDOW - SLACK) <= 6
    assert most_in_window(judged, WINDOW - SLACK) <= 8
    assert (
        most_in_window(seen.times, WINDOW) > 8
    )  # together more than the lower limit: not one shared rate


def test_a_judge_on_another_endpoint_keeps_its_own_rate(tmp_path: Path) -> None:
    cand, judged = Arrivals(lambda b: "advice"), Arrivals(verdict)
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(cand) as c,
        LoopbackServer(judged) as j,
    ):
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path, 4)),
            "--model",
            "openai/c",
            "--base-url",
            c.base_url,
            "--judge",
            f"openai/j@{j.base_url}",
            "--rpm",
            "2",
            "--judge-rpm",
            "6",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(cand.times) == 4 and len(judged.times) == 16
    assert most_in_window(cand.times, WINDOW - SLACK) <= 2
    assert most_in_window(judged.times, WINDOW - SLACK) <= 6
    assert most_in_window(judged.times, WINDOW) > 2  # the candidate's limit is not the judge's


def test_regrade_judge_rpm(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(lambda b: "advice") as c,
        LoopbackServer(verdict) as j,
    ):
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path)),
            "--model",
            "openai/c",
            "--base-url",
            c.base_url,
            "--judge",
            f"openai/j@{j.base_url}",
            "--store",
            store,
        )
        assert r.exit_code == 0, r.output
        with Store(Path(store)) as st:
            (rec,) = st.runs()
        seen = Arrivals(verdict)
        with LoopbackServer(seen) as k:
            r = invoke(
                "regrade",
                "--run",
                rec.id,
                "--judge",
                f"openai/k@{k.base_url}",
                "--judge-rpm",
                "5",
                "--store",
                store,
            )
            assert r.exit_code == 0, r.output
    assert len(seen.times) == 12 and most_in_window(seen.times, WINDOW - SLACK) <= 5


def test_robustness_rpm_holds_across_its_runs(tmp_path: Path) -> None:
    """The unperturbed run and the probe run go one after the other: the spacing carries over."""
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "robustness",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "8",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--probe",
            "permute",
            "--seeds",
            "1",
            "--rpm",
            "5",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 16 and most_in_window(seen.times, WINDOW - SLACK) <= 5


def test_validate_judge_rpm(tmp_path: Path, official_reference: Path) -> None:
    from tests.test_healthbench_meta import http_rule, make_rows, write_rows

    path = write_rows(tmp_path / "meta.jsonl", make_rows(12, 3))
    seen = Arrivals(http_rule({}))
    with LoopbackServer(seen) as judge:
        r = invoke(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            f"openai/j@{judge.base_url}",
            "--data",
            str(path),
            "--judge-rpm",
            "4",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 12 and most_in_window(seen.times, WINDOW - SLACK) <= 4


@pytest.mark.parametrize(
    "command,flag,value",
    [
        ("run", "--rpm", "0"),
        ("run", "--rpm", "-1"),
        ("run", "--judge-rpm", "0"),
        ("regrade", "--judge-rpm", "-1"),
        ("robustness", "--rpm", "0"),
        ("validate-judge", "--judge-rpm", "0"),
    ],
)
def test_a_rate_below_one_is_refused_before_any_call(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        target = {
            "run": ["medqa", "--model", "openai/m", "--base-url", srv.base_url],
            "regrade": ["--run", "abcdef"],
            "robustness": ["medqa", "--model", "openai/m", "--base-url", srv.base_url],
            "validate-judge": ["healthbench-meta", "--judge", f"openai/j@{srv.base_url}"],
        }[command]
        r = invoke(command, *target, flag, value, "--store", str(tmp_path / "s.db"))
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if "Invalid value" in ln]
    # click's wording (typer < 0.29, as pinned) or pydantic's (typer 0.29)
    refused = (
        f"Invalid value for '{flag}': {value} is not in the range x>=1",
        f"Invalid value for '{flag}': Input should be greater than or equal to 1",
    )
    assert len(lines) == 1 and any(r in lines[0] for r in refused), lines
    assert not seen.times and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("field,value", [("rpm", 0), ("judge_rpm", -1), ("rpm", 2.5)])
def test_a_bad_rate_in_a_run_config_is_a_one_line_error_before_anything(
    tmp_path: Path, field: str, value: Any
) -> None:
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv, Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="medqa",
            model="openai/m",
            data=medqa(),
            base_url=srv.base_url,
            limit=2,
            **{field: value},
        )
        with pytest.raises(ConfigError) as err:
            asyncio.run(run(st, cfg))
        assert st.runs() == []
    flag = "--" + field.replace("_", "-")
    assert (
        str(err.value)
        == f"{flag} {value!r}: expected a whole number of requests per minute, at least 1"
    )
    assert not seen.times


def test_limiter_lowest_wins_and_spacing_carries_over_between_runs() -> None:
    limits = EndpointLimits(per=0.2)
    limits.limit_rate("http://x/v1", 10)
    limits.limit_rate("http://x/v1", None)  # no limit asked: changes nothing
    limits.limit_rate("http://x/v1", 4)
    limits.limit_rate("http://x/v1", 20)
    rate = limits.rate("http://x/v1")
    assert rate is not None and rate.limit == 4 and rate.spacing == pytest.approx(0.05)
    assert limits.rate("http://y/v1") is None

    async def starts(n: int) -> list[float]:
        out: list[float] = []

        async def one() -> None:
            await rate.wait()
            out.append(time.monotonic())

        await asyncio.gather(*(one() for _ in range(n)))
        return out

    first = asyncio.run(starts(6))
    second = asyncio.run(starts(6))  # a new event loop, as the next run of one command has
    times = first + second
    assert sorted(times) == first + second  # first come, first served
    assert times[-1] - times[0] >= 11 * 0.05 - 0.001  # 12 starts, 11 spacings, across the two loops
    assert (
        most_in_window(times, 0.2 - 0.001) <= 4
    )  # as they happened (measured a few microseconds after)
    assert most_in_window(times, 0.02) <= 2  # evenly: not 4 at once, then a pause
    with pytest.raises(ConfigError, match="--judge-rpm 0: expected a whole number"):
        limits.limit_rate("http://x/v1", 0, "--judge-rpm")
