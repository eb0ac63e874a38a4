"""--tpm and --judge-tpm: the tokens of call starts per endpoint, so that no rolling window holds more
than the limit; each attempt reserves its estimate (prompt tokens by the project's counter plus
max_tokens), corrected to the usage the server reports; a request larger than the limit is refused
without being sent; limits are per model at an endpoint: a judge that is the candidate's own model
there shares the lower limit, two models keep their own.

The window is a minute in use; here it is shrunk (``limits.RATE_WINDOW``) so a test takes a few
seconds. Times are the loopback server's arrival times, which trail the client's start times by a
delay that varies (a few milliseconds, up to 80 ms seen on a loaded 2-core machine), so a window
is checked ``SLACK`` seconds shorter than the limiter's: still long enough that a limiter with half
the window, or none, fails every check.
The tokens of each arrival are recomputed from the body the server received, with the same
counter the executor uses (``openai/m`` is no tiktoken model: the estimate of ``costs``).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds import testing
from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Message, Usage
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run import limits as rate_limits
from grandrounds.run.config import RunConfig
from grandrounds.run.costs import token_counter
from grandrounds.run.limits import EndpointLimits, TokenRate
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import shared_file
from tests.rubric_bench.triage import TriageRubric

WINDOW = 0.5
SLACK = 0.1
FORMS = (
    "expected tokens per minute as N (prompt + output), or input=N and/or output=N for separate limits (Anthropic's), "
    "comma-separated, each a whole number at least 1"
)
COUNTER = token_counter("openai/m")


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rate_limits, "RATE_WINDOW", WINDOW)


@pytest.fixture
def no_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loopback server answers without a ``usage`` block (as some OpenAI-compatible servers do)."""
    payload = testing._chat_payload

    def without_usage(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = payload(*args, **kwargs)
        out.pop("usage", None)
        return out

    monkeypatch.setattr(testing, "_chat_payload", without_usage)


def estimated(body: dict[str, Any]) -> int:
    """A request's reservation as the executor makes it: prompt tokens (estimate) plus max_tokens.
    A Messages API body (Anthropic) carries the system prompt apart: it is counted as the system
    message it was."""
    system = (Message("system", body["system"]),) if body.get("system") else ()
    return COUNTER.messages(
        system + tuple(Message(m["role"], m["content"]) for m in body["messages"])
    ) + int(body["max_tokens"])


def reported(body: dict[str, Any], text: str) -> int:
    """The usage the loopback server reports for a reply (prompt words plus reply words)."""
    return sum(len(str(m["content"]).split()) for m in body["messages"]) + len(text.split())


class Arrivals:
    """A server rule that notes when each request arrived, its model and its tokens."""

    def __init__(self, reply: Callable[[dict[str, Any]], Any]) -> None:
        self.reply = reply
        self.times: list[float] = []
        self.models: list[str] = []
        self.estimates: list[int] = []
        #: The prompt part of each estimate (the rest is max_tokens).
        self.prompts: list[int] = []
        self.max_tokens: list[int] = []
        self.usage: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        out = self.reply(body)
        with self._lock:
            self.times.append(time.monotonic())
            self.models.append(str(body.get("model")))
            self.estimates.append(estimated(body))
            self.max_tokens.append(int(body["max_tokens"]))
            self.prompts.append(self.estimates[-1] - self.max_tokens[-1])
            self.usage.append(reported(body, out) if isinstance(out, str) else 0)
        return out


def most_in_window(times: list[float], tokens: list[int], window: float) -> int:
    """The most tokens of arrivals in any half-open window [t, t + window)."""
    pairs = sorted(zip(times, tokens))
    best = total = j = 0
    for t, n in pairs:
        total += n
        while t - pairs[j][0] >= window:
            total -= pairs[j][1]
            j += 1
        best = max(best, total)
    return best


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def flat(output: str) -> str:
    return " ".join(output.split())


def medqa() -> Path:
    return shared_file("medqa", "phrases_no_exclude_test.jsonl")


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


def test_no_window_holds_more_estimated_tokens_than_the_limit(
    tmp_path: Path, no_usage: None
) -> None:
    """Without reported usage every reservation keeps its estimate: no window holds more than
    --tpm of them, and the same calls sent without the flag do arrive together."""
    data, store = medqa(), str(tmp_path / "s.db")
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "16",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--tpm",
            "1500",
            "--store",
            store,
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 16
    assert all(150 < e < 1500 for e in seen.estimates), (
        seen.estimates
    )  # several calls fit a window, none is refused
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= 1500
    # 16 starts of this size cannot fit in one window: the limit held them back
    assert sum(seen.estimates) > 2 * 1500
    assert max(seen.times) - min(seen.times) >= WINDOW * (sum(seen.estimates) // 1500 - 1) - SLACK
    with Store(Path(store)) as st:
        assert len(st.runs()) == 1  # rates are not part of the run
    burst = Arrivals(lambda b: "A")
    with LoopbackServer(burst) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "16",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--store",
            str(tmp_path / "other.db"),
        )
        assert r.exit_code == 0, r.output
    assert most_in_window(burst.times, burst.estimates, WINDOW) > 1500


def test_reported_usage_replaces_the_estimate_and_lets_more_calls_in(tmp_path: Path) -> None:
    """The server reports far fewer tokens than prompt + max_tokens: the freed room takes more
    calls into one window than the estimates alone would, and the tokens the server counted stay
    under the limit in every window."""
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "24",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "512",
            "--tpm",
            "2000",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 24
    assert all(u < e for u, e in zip(seen.usage, seen.estimates))
    assert most_in_window(seen.times, seen.usage, WINDOW - SLACK) <= 2000
    # uncorrected, no more than 2,000 // the smallest estimate could start in one window; corrected, more did
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) > 2000
    assert most_in_window(seen.times, [1] * 24, WINDOW - SLACK) > 2000 // min(seen.estimates)


def test_retries_reserve_like_any_request(tmp_path: Path, no_usage: None) -> None:
    state = {"n": 0}

    def reply(body: dict[str, Any]) -> Any:
        state["n"] += 1
        return Fault("429", retry_after=0.0) if state["n"] % 2 == 1 and state["n"] <= 8 else "A"

    seen = Arrivals(reply)
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "6",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--tpm",
            "1200",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.faults.get("429") == 4 and len(seen.times) == 10
    assert "4 retries" in flat(r.output)
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= 1200


@pytest.mark.parametrize("rpm,tpm", [(2, 1500), (6, 700)], ids=["requests-bind", "tokens-bind"])
def test_request_and_token_rates_hold_together(
    tmp_path: Path, no_usage: None, rpm: int, tpm: int
) -> None:
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "12",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--rpm",
            str(rpm),
            "--tpm",
            str(tpm),
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 12
    assert max(seen.estimates) * 3 < 1500 and min(seen.estimates) * 3 > 700  # which limit binds
    assert most_in_window(seen.times, [1] * 12, WINDOW - SLACK) <= rpm
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= tpm


def test_a_request_over_the_limit_is_refused_without_being_sent(tmp_path: Path) -> None:
    seen = Arrivals(lambda b: "A")
    store = tmp_path / "s.db"
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "3",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--tpm",
            "100",
            "--store",
            str(store),
        )
    assert not seen.times, "nothing is sent"
    out = flat(r.output)
    # the three requests differ in size, and count as one reason: the estimate is on the error's second line
    assert (
        "answers: 3 calls made, 0 from the store, 3 failed, 0 retries; failures: over --tpm 100: a request larger "
        "than a minute allows was not sent; raise --tpm… x3"
    ) in out
    with Store(store) as st:
        errors = [row[0] for row in st.db.execute("SELECT error FROM calls")]
    assert len(errors) == 3
    for err in errors:
        m = re.fullmatch(
            r"over --tpm 100: a request larger than a minute allows was not sent; raise --tpm or lower --max-tokens\n"
            r"estimated ([\d,]+) tokens \(prompt ([\d,]+) \+ max_tokens 64\)",
            err,
        )
        assert m is not None, err
        assert int(m[1].replace(",", "")) == int(m[2].replace(",", "")) + 64 > 100
    assert r.exit_code == 3  # nothing could be scored


def test_a_judge_request_over_the_judge_limit_names_the_judge_flags(tmp_path: Path) -> None:
    seen = Arrivals(lambda b: verdict(b) if b.get("model") == "j" else "advice")
    store = tmp_path / "s.db"
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(seen) as c,
        LoopbackServer(seen) as j,
    ):
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path, 2)),
            "--model",
            "openai/c",
            "--base-url",
            c.base_url,
            "--judge",
            f"openai/j@{j.base_url}",
            "--judge-max-tokens",
            "300",
            "--judge-tpm",
            "200",
            "--store",
            str(store),
        )
    assert seen.models == ["c", "c"], "answers are sent, no judge call is"
    with Store(store) as st:
        errors = [
            row[0] for row in st.db.execute("SELECT error FROM calls WHERE purpose = 'judge'")
        ]
    assert len(errors) == 8 and all(
        e.startswith(
            "over --judge-tpm 200: a request larger than a minute allows was not sent; "
            "raise --judge-tpm or lower --judge-max-tokens\nestimated "
        )
        for e in errors
    )
    assert "judge openai/j: 8 calls made, 0 from the store, 8 failed, 0 retries" in flat(r.output)


def judging(body: dict[str, Any]) -> bool:
    """A triage-rubric request is a judge call when it carries the grading template (answers ask the bare question)."""
    return "rubric item" in str(body["messages"][-1]["content"])


@pytest.mark.parametrize(
    "flags,limit",
    [
        (["--tpm", "500"], 500),
        (["--tpm", "90000", "--judge-tpm", "500"], 500),
        (["--judge-tpm", "500"], 500),
    ],
    ids=["candidate-limit", "lower-judge-limit", "judge-limit"],
)
def test_a_judge_that_is_the_candidates_model_on_its_endpoint_shares_the_lower_token_rate(
    tmp_path: Path, no_usage: None, flags: list[str], limit: int
) -> None:
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
            "--max-tokens",
            "64",
            "--judge-max-tokens",
            "64",
            *flags,
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 3 + 12
    assert sum(seen.estimates) > 2 * limit
    assert (
        most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= limit
    )  # answers and judge calls together


def test_two_models_on_one_endpoint_each_keep_their_own_token_rate(
    tmp_path: Path, no_usage: None
) -> None:
    """Vendors count each model's tokens apart: a candidate and a judge of different models on one
    server each keep their own limit, so together a window holds more than either allows."""
    seen = Arrivals(lambda b: verdict(b) if b.get("model") == "j" else "advice")
    with BENCHMARKS.registered("triage-rubric", TriageRubric), LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "triage-rubric",
            "--data",
            str(triage_data(tmp_path)),
            "--model",
            "openai/c",
            "--base-url",
            srv.base_url,
            "--judge",
            f"openai/j@{srv.base_url}",
            "--max-tokens",
            "64",
            "--judge-max-tokens",
            "64",
            "--tpm",
            "500",
            "--judge-tpm",
            "1000",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    cand = [(t, e) for t, e, m in zip(seen.times, seen.estimates, seen.models) if m == "c"]
    judged = [(t, e) for t, e, m in zip(seen.times, seen.estimates, seen.models) if m == "j"]
    assert len(cand) == 3 and len(judged) == 12
    assert most_in_window([t for t, _ in cand], [e for _, e in cand], WINDOW - SLACK) <= 500
    assert most_in_window([t for t, _ in judged], [e for _, e in judged], WINDOW - SLACK) <= 1000
    assert sum(e for _, e in judged) > 1000  # the judge's own limit held it back...
    # ...and not the candidate's: one limit of 500 for both would keep the judge's window near 500
    assert most_in_window([t for t, _ in judged], [e for _, e in judged], WINDOW - SLACK) > 700


def test_regrade_judge_tpm(tmp_path: Path, no_usage: None) -> None:
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
                "--judge-max-tokens",
                "64",
                "--judge-tpm",
                "700",
                "--store",
                store,
            )
            assert r.exit_code == 0, r.output
    assert len(seen.times) == 12 and sum(seen.estimates) > 2 * 700
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= 700


def test_robustness_tpm_holds_across_its_runs(tmp_path: Path, no_usage: None) -> None:
    """The unperturbed run and the probe run go one after the other: the tokens reserved carry over."""
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "robustness",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "5",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--probe",
            "permute",
            "--seeds",
            "1",
            "--max-tokens",
            "64",
            "--tpm",
            "1200",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 10 and sum(seen.estimates) > 2 * 1200
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) <= 1200


@pytest.mark.parametrize(
    "command,flag,value,why",
    [
        ("run", "--tpm", "0", "expected a whole number of tokens per minute, at least 1"),
        ("run", "--judge-tpm", "-5", "expected a whole number of tokens per minute, at least 1"),
        ("regrade", "--judge-tpm", "0", "expected a whole number of tokens per minute, at least 1"),
        ("robustness", "--tpm", "0", "expected a whole number of tokens per minute, at least 1"),
        (
            "robustness",
            "--attacker-tpm",
            "0",
            "expected a whole number of tokens per minute, at least 1",
        ),
        (
            "validate-judge",
            "--judge-tpm",
            "0",
            "expected a whole number of tokens per minute, at least 1",
        ),
        ("run", "--tpm", "input=0", "expected a whole number of tokens per minute, at least 1"),
        ("run", "--tpm", "inptu=500", FORMS),
        ("run", "--judge-tpm", "output=5,output=6", FORMS),
        ("run", "--tpm", "5000,6000", FORMS),
        ("robustness", "--attacker-tpm", "input=1.5e5", FORMS),
        ("validate-judge", "--judge-tpm", "output=", FORMS),
        ("regrade", "--judge-tpm", "", FORMS),
    ],
)
def test_a_bad_token_rate_is_refused_before_any_call(
    tmp_path: Path, command: str, flag: str, value: str, why: str
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
    assert f"Invalid value for '{flag}': {value}: {why}" in flat(r.output.replace("│", " ")), (
        r.output
    )
    assert not seen.times and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "field,value", [("tpm", 0), ("judge_tpm", -1), ("tpm", 2.5), ("tpm", True)]
)
def test_a_bad_token_rate_in_a_run_config_is_a_one_line_error_before_anything(
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
        == f"{flag} {value!r}: expected a whole number of tokens per minute, at least 1"
    )
    assert not seen.times


def test_dry_run_prints_the_least_time_under_the_token_rate(tmp_path: Path, no_usage: None) -> None:
    """The dry run's tokens are the reservations the run then makes (no usage reported: the
    estimates stand), and its least time is those tokens over the limit."""
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        args = [
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "12",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--tpm",
            "1500",
            "--store",
            str(tmp_path / "s.db"),
        ]
        r = invoke(*args, "--dry-run", "--out", str(tmp_path / "plan"))
        assert r.exit_code == 0, r.output
        assert not seen.times
        plan = json.loads((tmp_path / "plan" / "plan.json").read_text(encoding="utf-8"))
        (rate,) = plan["tpm"]
        assert (
            rate["endpoint"] == srv.base_url and rate["limit"] == 1500 and rate["flag"] == "--tpm"
        )
        answers = plan["lines"][0]
        assert rate["tokens"] == answers["prompt_tokens"] + answers["output_tokens"]
        assert plan["least_minutes_under_tpm"] == pytest.approx(rate["tokens"] / 1500)
        seconds = round(rate["tokens"] / 1500 * 60)
        shown = f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
        assert (
            f"least time under the token rate: {shown} ({rate['tokens']:,} estimated tokens at --tpm 1,500; "
            "output counted at max_tokens: a pilot run gives a closer figure)"
        ) in flat(r.output)
        r = invoke(*args)
        assert r.exit_code == 0, r.output
    assert (
        sum(seen.estimates) == rate["tokens"]
    )  # what the run reserved is what the dry run counted


def test_dry_run_takes_the_lower_rate_of_a_shared_model_and_flags_requests_over_it(
    tmp_path: Path,
) -> None:
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(lambda b: "advice") as srv,
    ):
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
            "--judge-max-tokens",
            "300",
            "--tpm",
            "100000",
            "--judge-tpm",
            "250",
            "--dry-run",
            "--out",
            str(tmp_path / "plan"),
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.requests == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text(encoding="utf-8"))
    (rate,) = plan["tpm"]
    assert (rate["limit"], rate["flag"]) == (250, "--judge-tpm")
    assert rate["tokens"] == sum(x["prompt_tokens"] + x["output_tokens"] for x in plan["lines"])
    assert any(
        n.startswith("the largest judge request of openai/m, about ")
        and n.endswith(
            "is over --judge-tpm 250: the run refuses such requests without sending them"
        )
        for n in plan["notes"]
    ), plan["notes"]
    assert "least time under the token rate:" in flat(r.output)
    r = invoke(
        "run",
        "triage-rubric",
        "--data",
        str(triage_data(tmp_path)),
        "--model",
        "openai/c",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--dry-run",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert "least time" not in r.output  # no token rate, no such line

    def plan_with_judge_at(judge_url: str, out: str) -> tuple[Any, dict[str, Any]]:
        """The dry run of candidate openai/c at :9 (--tpm 100) and judge openai/j at ``judge_url`` (--judge-tpm 300)."""
        with BENCHMARKS.registered("triage-rubric", TriageRubric):
            r = invoke(
                "run",
                "triage-rubric",
                "--data",
                str(triage_data(tmp_path)),
                "--model",
                "openai/c",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--judge",
                f"openai/j@{judge_url}",
                "--tpm",
                "100",
                "--judge-tpm",
                "300",
                "--dry-run",
                "--out",
                str(tmp_path / out),
                "--store",
                str(tmp_path / "s.db"),
            )
            assert r.exit_code == 0, r.output
        return r, json.loads((tmp_path / out / "plan.json").read_text(encoding="utf-8"))

    # candidate and judge on two endpoints: each its own limit, asked at once, the slower decides
    r, plan = plan_with_judge_at("http://127.0.0.1:10/v1", "plan2")
    rates = {x["endpoint"]: x for x in plan["tpm"]}
    assert (rates["http://127.0.0.1:9/v1"]["limit"], rates["http://127.0.0.1:10/v1"]["limit"]) == (
        100,
        300,
    )
    for x, ln in zip(plan["tpm"], plan["lines"]):
        assert x["tokens"] == ln["prompt_tokens"] + ln["output_tokens"] and x[
            "least_minutes"
        ] == pytest.approx(x["tokens"] / x["limit"])
    assert plan["least_minutes_under_tpm"] == max(x["least_minutes"] for x in plan["tpm"])
    assert " estimated tokens at --judge-tpm 300 on http://127.0.0.1:10/v1 (j): " in flat(r.output)
    # two models on one endpoint: each its own limit there too
    r, plan = plan_with_judge_at("http://127.0.0.1:9/v1", "plan3")
    assert [(x["endpoint"], x["limits"], x["limit"]) for x in plan["tpm"]] == [
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1 (c)", 100),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1 (j)", 300),
    ]
    for x, ln in zip(plan["tpm"], plan["lines"]):
        assert x["tokens"] == ln["prompt_tokens"] + ln["output_tokens"]


# ---- the limiter on its own ------------------------------------------------------------------------


def test_first_come_first_served_a_large_request_is_not_overtaken() -> None:
    """A small request that would fit now waits behind a large one ahead of it that does not."""
    rate = TokenRate("http://fcfs.test/v1", 100, 0.3)
    order: list[tuple[str, float]] = []

    async def take(name: str, tokens: int) -> None:
        held = await rate.reserve(tokens)
        order.append((name, held.start))

    async def main() -> None:
        first = asyncio.ensure_future(take("a", 60))
        await asyncio.sleep(0)
        big = asyncio.ensure_future(take("big", 90))
        await asyncio.sleep(0.01)
        smalls = [asyncio.ensure_future(take(f"s{i}", 10)) for i in range(3)]
        await asyncio.gather(first, big, *smalls)

    asyncio.run(main())
    assert [n for n, _ in order] == ["a", "big", "s0", "s1", "s2"]
    starts = dict(order)
    assert starts["big"] - starts["a"] >= 0.3  # waited for the 60 to leave the window
    assert starts["s0"] >= starts["big"]  # though 60 + 10 fitted at once, s0 did not jump ahead
    assert starts["s0"] - starts["big"] < 0.15  # 90 + 10 fits: s0 goes right after the big one
    assert (
        starts["s1"] - starts["big"] >= 0.3
    )  # 90 + 10 + 10 does not: s1 waits for the 90 to leave


def test_a_correction_frees_room_at_once_and_no_usage_leaves_the_estimate() -> None:
    rate = TokenRate("http://correct.test/v1", 100, 5.0)

    async def main() -> tuple[float, float, int]:
        a = await rate.reserve(90)
        b = await rate.reserve(5)
        rate.settle(b, Usage())  # nothing reported: the estimate stands
        waiting = asyncio.ensure_future(rate.reserve(50))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # 95 + 50 > 100
        rate.settle(a, Usage(prompt_tokens=12, completion_tokens=8))  # 90 -> 20
        c = await waiting
        return a.start, c.start, b.tokens

    a_start, c_start, b_tokens = asyncio.run(main())
    assert b_tokens == 5
    assert c_start - a_start < 2.5  # well before the 90 would have left a 5 s window
    assert rate.ledger.used == 20 + 5 + 50


def test_lowest_limit_wins_with_its_flag_and_the_refusal_names_it() -> None:
    limits = EndpointLimits(per=0.2)
    limits.limit_tokens("http://low.test/v1", 5000, "--tpm")
    limits.limit_tokens("http://low.test/v1", None, "--judge-tpm")
    limits.limit_tokens("http://low.test/v1", 800, "--judge-tpm")
    limits.limit_tokens("http://low.test/v1", 2000, "--tpm")
    rate = limits.tokens("http://low.test/v1")
    assert rate is not None and (rate.limit, rate.flag) == (800, "--judge-tpm")
    assert limits.tokens("http://other.test/v1") is None
    assert rate.refusal(300, 500) is None
    assert rate.refusal(301, 500, "--judge-max-tokens") == (
        "over --judge-tpm 800: a request larger than a minute allows was not sent; raise --judge-tpm or lower --judge-max-tokens\n"
        "estimated 801 tokens (prompt 301 + max_tokens 500)"
    )
    with pytest.raises(
        ConfigError, match="--judge-tpm 0: expected a whole number of tokens per minute"
    ):
        limits.limit_tokens("http://low.test/v1", 0, "--judge-tpm")


# ---- separate input and output limits (Anthropic's) --------------------------------------------------


@pytest.mark.parametrize(
    "tpm,binds",
    [("input=700,output=100000", "input"), ("output=200,input=100000", "output")],
    ids=["input-binds", "output-binds"],
)
def test_separate_input_and_output_limits_each_hold(
    tmp_path: Path, no_usage: None, tpm: str, binds: str
) -> None:
    """``--tpm input=N,output=M``: prompts alone are held under N and max_tokens alone under M in
    every window; the prompt plus output is under no limit of its own."""
    seen = Arrivals(lambda b: "A")
    with LoopbackServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "12",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--max-tokens",
            "64",
            "--tpm",
            tpm,
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
    assert len(seen.times) == 12
    limits = dict(part.split("=") for part in tpm.split(","))
    assert most_in_window(seen.times, seen.prompts, WINDOW - SLACK) <= int(limits["input"])
    assert most_in_window(seen.times, seen.max_tokens, WINDOW - SLACK) <= int(limits["output"])
    held = seen.prompts if binds == "input" else seen.max_tokens
    assert sum(held) > 2 * int(
        limits[binds]
    )  # the binding limit cannot take them all in one window...
    assert (
        max(seen.times) - min(seen.times) >= WINDOW * (sum(held) // int(limits[binds]) - 1) - SLACK
    )  # ...so it spread them
    # an input limit counts no output and an output limit no prompt: the same calls under one total
    # limit of the binding size would have been held back further
    assert most_in_window(seen.times, seen.estimates, WINDOW - SLACK) > int(limits[binds])


def test_anthropic_input_and_output_limits_are_corrected_to_its_reported_usage(
    tmp_path: Path,
) -> None:
    """An ``anthropic/`` model under ``--tpm input=N,output=M``: each call reserves its prompt under N
    and its max_tokens under M, and Anthropic's reported usage (input_tokens, output_tokens)
    replaces both, so one-word replies free the output limit that max_tokens 512 would have held."""
    from grandrounds.testing.batch import BatchServer

    seen = Arrivals(lambda b: "A")
    with BatchServer(seen) as srv:
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(medqa()),
            "--limit",
            "16",
            "--model",
            "anthropic/claude-test",
            "--base-url",
            srv.anthropic_url,
            "--max-tokens",
            "512",
            "--tpm",
            "input=2400,output=1100",
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.live == 16
    assert all(p < 400 for p in seen.prompts), (
        seen.prompts
    )  # the input limit takes several calls a window
    # uncorrected, 1,100 // 512 = 2 calls a window; corrected to one output token each, more started together
    assert most_in_window(seen.times, [1] * 16, WINDOW - SLACK) > 2
    assert most_in_window(seen.times, seen.max_tokens, WINDOW - SLACK) > 1100
    # what Anthropic counted stays under both limits in every window
    words_in = [
        u - 1 for u in seen.usage
    ]  # the loopback's input_tokens: the prompt's words (its reply is one word)
    assert most_in_window(seen.times, words_in, WINDOW - SLACK) <= 2400
    assert most_in_window(seen.times, [1] * 16, WINDOW - SLACK) <= 1100


def test_separate_limits_refuse_a_request_over_either_and_name_it() -> None:
    limits = EndpointLimits(per=0.2)
    limits.limit_tokens("http://split.test/v1", "input=900,output=300", "--tpm")
    limits.limit_tokens(
        "http://split.test/v1", rate_limits.TokenLimits(output=200, total=5000), "--judge-tpm"
    )
    rate = limits.tokens("http://split.test/v1")
    assert rate is not None
    assert rate.limits == {
        "input": (900, "--tpm"),
        "output": (200, "--judge-tpm"),
        "total": (5000, "--judge-tpm"),
    }
    assert rate.refusal(900, 200) is None
    assert rate.refusal(901, 10) == (
        "over --tpm input=900: a prompt larger than a minute allows was not sent; raise --tpm's input limit\n"
        "the prompt is an estimated 901 tokens"
    )
    assert rate.refusal(10, 201, "--judge-max-tokens") == (
        "over --judge-tpm output=200: max_tokens larger than a minute allows, so the request was not sent; "
        "raise --judge-tpm's output limit or lower --judge-max-tokens\nmax_tokens 201"
    )
    assert rate.limit == 5000 and rate.flag == "--judge-tpm"
    assert str(rate_limits.token_limits(" 9000 , OUTPUT=20")) == "9000,output=20"
    assert rate_limits.token_limits(9000) == rate_limits.TokenLimits(total=9000)
    with pytest.raises(
        ConfigError, match=r"^--tpm 'input=9,input=9': expected tokens per minute as N"
    ):
        rate_limits.token_limits("input=9,input=9")
    with pytest.raises(
        ConfigError,
        match=r"^--judge-tpm TokenLimits\(total=None, input=None, output=None\): expected",
    ):
        rate_limits.token_limits(rate_limits.TokenLimits(), "--judge-tpm")


def test_an_input_limit_holds_prompts_and_an_output_limit_outputs_apart() -> None:
    """The limiter on its own: under input=100,output=50 a call of 60 prompt tokens waits for
    another 60 to leave the window, while outputs fill their own limit; a call needing both waits
    until both fit."""
    rate = TokenRate("http://kinds.test/v1", rate_limits.TokenLimits(input=100, output=50), 0.3)
    starts: dict[str, float] = {}

    async def take(name: str, prompt: int, output: int) -> None:
        starts[name] = (await rate.reserve(prompt, output)).start

    async def main() -> None:
        await take("p1", 60, 0)
        await take("o1", 0, 40)  # the output limit is its own: no wait behind the prompt
        await take("p2", 60, 0)  # 120 prompt tokens do not fit 100
        await take("both", 30, 10)  # prompt 60 + 30 fits, output 40 + 10 fits: at once
        await take(
            "o2", 10, 45
        )  # o1 left with p1; prompts 100 fit, outputs 10 + 45 do not: waits for both to leave

    asyncio.run(main())
    assert starts["o1"] - starts["p1"] < 0.1
    assert starts["p2"] - starts["p1"] >= 0.3
    assert starts["both"] - starts["p2"] < 0.1
    assert starts["o2"] - starts["both"] >= 0.3
    assert (
        rate.ledger.prompt == 10 and rate.ledger.output == 45
    )  # p2 and both left the window with it


def test_dry_run_gives_the_least_time_under_each_limit(tmp_path: Path) -> None:
    """Under separate limits the dry run counts prompt tokens against the input limit and output
    tokens against the output limit; the slower decides the least time, and a request whose
    max_tokens alone is over the output limit is flagged."""
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(lambda b: "advice") as srv,
    ):
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
            "--judge-max-tokens",
            "300",
            "--max-tokens",
            "100",
            "--tpm",
            "input=50000,output=5000",
            "--judge-tpm",
            "output=250",
            "--dry-run",
            "--out",
            str(tmp_path / "plan"),
            "--store",
            str(tmp_path / "s.db"),
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.requests == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text(encoding="utf-8"))
    rates = {x["counts"]: x for x in plan["tpm"]}
    assert set(rates) == {"input", "output"}
    assert (rates["input"]["limit"], rates["input"]["flag"]) == (50000, "--tpm")
    assert (rates["output"]["limit"], rates["output"]["flag"]) == (
        250,
        "--judge-tpm",
    )  # the lower of 5,000 and 250
    assert rates["input"]["tokens"] == sum(x["prompt_tokens"] for x in plan["lines"])
    assert rates["output"]["tokens"] == sum(x["output_tokens"] for x in plan["lines"])
    assert plan["least_minutes_under_tpm"] == pytest.approx(
        max(x["tokens"] / x["limit"] for x in plan["tpm"])
    )
    assert any(
        n.startswith(
            "the largest judge request of openai/m, about 300 max_tokens, is over --judge-tpm output=250"
        )
        for n in plan["notes"]
    ), plan["notes"]
    assert not any(
        "answer request" in n for n in plan["notes"]
    )  # max_tokens 100 fits both output limits
    text = flat(r.output)
    assert f"{rates['input']['tokens']:,} estimated input tokens at --tpm input=50,000" in text
    assert (
        f"{rates['output']['tokens']:,} estimated output tokens at --judge-tpm output=250" in text
    )
