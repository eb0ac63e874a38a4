"""Agent episodes end to end: MedCalc-Bench with tools through the real CLI, with a scripted
candidate (in-process, and over the OpenAI wire on a loopback server), every step stored, pass^k,
the refusals, and resuming after kill -9 with the same transcripts and no call asked twice."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.records import (
    GenParams,
    Message,
    Request,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.anthropic import message_body, read_message
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.testing import LoopbackServer, Reply
from tests.conftest import shared_file

BENCH = "medcalc-bench-tools"


def medcalc_rows(limit: int) -> list[dict[str, str]]:
    path = shared_file("medcalc-bench", "test_data.csv")
    with path.open(encoding="utf-8", newline="") as f:
        return [row for _, row in zip(range(limit), csv.DictReader(f))]


def truth_of(request_text: str, rows: list[dict[str, str]]) -> dict[str, str]:
    """The row a prompt is about: its patient note and its question are in the prompt (several
    rows share a note; the question names the calculator)."""
    found = [
        row
        for row in rows
        if row["Patient Note"] in request_text and row["Question"] in request_text
    ]
    if not found:
        raise AssertionError("no row matches the prompt")
    # rows that repeat a note and question (7 pairs in the file) are one prompt: the first row answers for all
    return found[0]


def rule(rows: list[dict[str, str]]):
    """The candidate: first asks the Python tool to print the ground truth (odd rows: a wrong
    value), then answers with what the tool printed. A third of the rows ask the calculator first."""

    def script(req: Request) -> object:
        text = "\n".join(m.text for m in req.messages)
        row = truth_of(text, rows)
        results = [r for m in req.messages for r in m.tool_results]
        if not results:
            value = row["Ground Truth Answer"] if int(row["Row Number"]) % 2 == 0 else "-987654"
            calls = [ToolCallPart("p1", "python", json.dumps({"code": f"print({value!r})"}))]
            if int(row["Row Number"]) % 3 == 0:
                calls.insert(
                    0, ToolCallPart("c1", "calculator", json.dumps({"expression": "(2 + 3) * 4"}))
                )
            return calls
        printed = results[-1].content.strip()
        return json.dumps({"step_by_step_thinking": "from the tool", "answer": printed})

    return script


def cli(args: list[str], script) -> dict:
    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=script, **options)

    with PROVIDERS.registered("agentbot", Bot):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    return r


def run_args(tmp_path: Path, limit: int, *extra: str) -> list[str]:
    data = shared_file("medcalc-bench", "test_data.csv")
    return [
        "run",
        BENCH,
        "--data",
        str(data),
        "--limit",
        str(limit),
        "-m",
        "agentbot/x",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(tmp_path / "out"),
        "--protocol",
        "grandrounds",
        *extra,
    ]


def results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["results"][0]


def episodes(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT sample_id, epoch, status, steps_json FROM episodes ORDER BY sample_id, epoch"
        ).fetchall()
    finally:
        con.close()


@pytest.mark.bwrap
def test_success_rate_equals_independent_count(tmp_path):
    rows = medcalc_rows(24)
    cli(run_args(tmp_path, 24), rule(rows))
    res = results(tmp_path)
    expected = sum(1 for r in rows if int(r["Row Number"]) % 2 == 0) / len(rows)
    assert res["metric"] == "success_rate"
    assert res["score"] == pytest.approx(expected)
    assert res["n"] == 24 and res["n_unscored"] == 0
    assert res["extra"]["episodes"] == {"finished": 24}
    assert res["extra"]["sandbox"] == "bubblewrap"
    assert res["extra"]["seccomp"].startswith("on: ")  # the filter inside the sandbox
    eps = episodes(tmp_path / "s.db")
    assert len(eps) == 24 and all(e[2] == "finished" for e in eps)
    # Every step is stored: the tool calls with their arguments and what the tools answered.
    steps = {e[0]: json.loads(e[3]) for e in eps}
    first = next(r for r in rows if int(r["Row Number"]) % 3 == 0)
    s0 = steps[first["Row Number"]][0]
    assert [c["name"] for c in s0["tool_calls"]] == ["calculator", "python"]
    assert [ev["text"] for ev in s0["events"]][0] == "20"
    assert (
        len(steps[first["Row Number"]]) == 2 and steps[first["Row Number"]][1]["tool_calls"] == []
    )


@pytest.mark.bwrap
def test_rerun_makes_no_call_and_epochs_report_pass_k(tmp_path):
    rows = medcalc_rows(6)
    flaky_seen: dict[str, int] = {}

    def flaky(req: Request) -> object:
        # epoch 0 follows the rule; epoch 1 (attempt=1) gets every row right but row 1
        if req.attempt == 1:
            row = truth_of("\n".join(m.text for m in req.messages), rows)
            flaky_seen[row["Row Number"]] = flaky_seen.get(row["Row Number"], 0) + 1
            value = row["Ground Truth Answer"] if row["Row Number"] != "1" else "-987654"
            return json.dumps({"answer": value})
        return rule(rows)(req)

    first = cli(run_args(tmp_path, 6, "--epochs", "2"), flaky)
    assert "episodes: finished 12" in first.output and "pass^2" in first.output
    res = results(tmp_path)
    per_task = []
    for r in rows:
        c = int(int(r["Row Number"]) % 2 == 0) + int(r["Row Number"] != "1")
        per_task.append(c)
    assert res["score"] == pytest.approx(sum(c / 2 for c in per_task) / 6)
    assert res["extra"]["pass_k"]["1"] == pytest.approx(sum(c / 2 for c in per_task) / 6)
    assert res["extra"]["pass_k"]["2"] == pytest.approx(
        sum(comb(c, 2) / comb(2, 2) for c in per_task) / 6
    )
    before = len(episodes(tmp_path / "s.db"))
    r = cli(
        run_args(tmp_path, 6, "--epochs", "2"),
        lambda req: pytest.fail("a stored step was asked again"),
    )
    assert "0 calls made" in r.output
    assert len(episodes(tmp_path / "s.db")) == before == 12


@pytest.mark.bwrap
def test_unknowns_are_not_zeros(tmp_path):
    """A candidate whose call fails leaves its sample unscored (and asked again next time)."""
    rows = medcalc_rows(4)

    def failing(req: Request) -> object:
        row = truth_of("\n".join(m.text for m in req.messages), rows)
        if row["Row Number"] == "2":
            return RuntimeError("server exploded")
        return rule(rows)(req)

    cli(run_args(tmp_path, 4), failing)
    res = results(tmp_path)
    assert res["n_unscored"] == 1 and res["n"] == 3
    assert res["score"] == pytest.approx(1 / 3)  # rows 1 and 3 wrong, row 4 right; row 2 unknown
    assert dict(res["extra"]["episodes"]) == {"finished": 3, "answer_failed": 1}


def test_step_limit_counts_as_failure(tmp_path):
    medcalc_rows(3)
    cli(
        run_args(tmp_path, 3, "--param", "max_steps=2"),
        lambda req: [ToolCallPart("c", "calculator", '{"expression": "1+1"}')],
    )
    res = results(tmp_path)
    assert (
        res["score"] == 0.0
        and res["n_unscored"] == 0
        and res["extra"]["episodes"] == {"step_limit": 3}
    )
    assert all(len(json.loads(e[3])) == 2 for e in episodes(tmp_path / "s.db"))


def test_refusals(tmp_path):
    data = str(shared_file("medcalc-bench", "test_data.csv"))
    r = CliRunner().invoke(
        app,
        ["run", BENCH, "--data", data, "-m", "llamacpp/smollm2", "--store", str(tmp_path / "s.db")],
    )
    assert r.exit_code != 0 and "cannot send tools" in r.output
    r = CliRunner().invoke(
        app,
        [
            "run",
            BENCH,
            "--data",
            data,
            "-m",
            "scripted/x",
            "--simulator",
            "scripted/p",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code != 0 and "--simulator is not used" in r.output
    r = CliRunner().invoke(
        app,
        [
            "run",
            "medcalc-bench",
            "--data",
            data,
            "-m",
            "scripted/x",
            "--simulator",
            "scripted/p",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code != 0 and "--simulator is not used" in r.output
    r = CliRunner().invoke(
        app,
        [
            "run",
            BENCH,
            "--data",
            data,
            "-m",
            "scripted/x",
            "--param",
            "actions=text",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code != 0 and "actions" in r.output


@pytest.mark.bwrap
def test_regrade_is_refused_with_the_way_to_regrade(tmp_path):
    rows = medcalc_rows(2)
    cli(run_args(tmp_path, 2), rule(rows))
    from grandrounds.store import Store

    with Store(tmp_path / "s.db") as st:
        (run_rec,) = st.runs()
    r = CliRunner().invoke(app, ["regrade", "--run", run_rec.id, "--store", str(tmp_path / "s.db")])
    assert r.exit_code != 0 and "agent benchmark" in r.output and "run the same" in r.output


def test_tool_keys_leave_plain_requests_unchanged():
    plain = Request(provider="openai", model="m", messages=(Message("user", "hi"),))
    assert "tools" not in plain.canonical() and "tool_choice" not in plain.canonical()
    tooled = Request(
        provider="openai",
        model="m",
        messages=(Message("user", "hi"),),
        tools=(ToolSpec("calc", "d", {"type": "object"}),),
        tool_choice="auto",
    )
    assert tooled.key() != plain.key()
    assert (
        Request(
            provider="openai",
            model="m",
            messages=(Message("user", "hi"),),
            tools=(ToolSpec("calc", "other", {"type": "object"}),),
            tool_choice="auto",
        ).key()
        != tooled.key()
    )


def test_openai_wire_sends_tools_and_reads_calls(tmp_path):
    """Over HTTP: the tools and the tool messages as the Chat Completions API takes them."""
    rows = medcalc_rows(2)

    def serve(body: dict) -> object:
        msgs = body["messages"]
        assert (
            body["tools"][0]["function"]["name"] == "calculator" and body["tool_choice"] == "auto"
        )
        if msgs[-1]["role"] != "tool":
            return Reply(text="", tool_calls=(("calculator", {"expression": "6*7"}),))
        assistant = msgs[-2]
        assert (
            assistant["content"] == ""
        )  # never null beside tool calls (llama-cpp-python's server refuses it)
        assert assistant["tool_calls"][0]["function"] == {
            "name": "calculator",
            "arguments": '{"expression": "6*7"}',
        }
        assert msgs[-1] == {"role": "tool", "tool_call_id": "call_0", "content": "42"}
        row = truth_of("\n".join(str(m.get("content") or "") for m in msgs), rows)
        return json.dumps({"answer": row["Ground Truth Answer"]})

    with LoopbackServer(serve) as srv:
        data = str(shared_file("medcalc-bench", "test_data.csv"))
        r = CliRunner().invoke(
            app,
            [
                "run",
                BENCH,
                "--data",
                data,
                "--limit",
                "2",
                "-m",
                "openai/m",
                "--base-url",
                srv.base_url,
                "--store",
                str(tmp_path / "s.db"),
                "--out",
                str(tmp_path / "out"),
                "--protocol",
                "grandrounds",
            ],
            env={"OPENAI_API_KEY": "x", "COLUMNS": "200"},
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.requests == 4 and not srv.stats.rule_errors
    assert results(tmp_path)["score"] == 1.0


def test_anthropic_wire_tools():
    req = Request(
        provider="anthropic",
        model="claude",
        messages=(
            Message("system", "s"),
            Message("user", "q"),
            Message("assistant", (ToolCallPart("tu_1", "calculator", '{"expression": "1+1"}'),)),
            Message("tool", (ToolResultPart("tu_1", "2", "calculator"),)),
        ),
        params=GenParams(max_tokens=50),
        tools=(ToolSpec("calculator", "adds", {"type": "object"}),),
        tool_choice="auto",
    )
    body = message_body("claude", req)
    assert body["system"] == "s"
    assert body["tools"] == [
        {"name": "calculator", "description": "adds", "input_schema": {"type": "object"}}
    ]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "tu_1", "name": "calculator", "input": {"expression": "1+1"}}
        ],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "2"}],
    }
    resp = read_message(
        {
            "content": [
                {"type": "text", "text": "let me"},
                {"type": "tool_use", "id": "tu_2", "name": "python", "input": {"code": "print(1)"}},
            ],
            "stop_reason": "tool_use",
        },
        "k",
    )
    assert resp.text == "let me" and resp.tool_calls == (
        ToolCallPart("tu_2", "python", '{"code": "print(1)"}'),
    )


def _interrupted(step: dict) -> bool:
    return any(ev.get("outcome") == "interrupted" for ev in step.get("events", ()))


def _serve_rule(rows):
    def serve(body: dict) -> object:
        msgs = body["messages"]
        row = truth_of("\n".join(str(m.get("content") or "") for m in msgs), rows)
        tools_done = sum(1 for m in msgs if m["role"] == "tool")
        if tools_done < 3:  # three python steps, then the answer
            return Reply(text="", tool_calls=(("python", {"code": f"print({tools_done} + 1)"}),))
        return json.dumps({"answer": row["Ground Truth Answer"]})

    return serve


@pytest.mark.bwrap
def test_resume_after_kill_9(tmp_path):
    """A run killed mid-episode, then the same command again: the same transcripts (but for a tool
    call in flight at the kill, answered as stopped), and the calls of the second run are exactly
    those the first had not stored."""
    rows = medcalc_rows(6)
    data = str(shared_file("medcalc-bench", "test_data.csv"))
    db = tmp_path / "s.db"
    cmd = [
        sys.executable,
        "-m",
        "grandrounds",
        "run",
        BENCH,
        "--data",
        data,
        "--limit",
        "6",
        "-m",
        "openai/m",
        "--store",
        str(db),
        "--protocol",
        "grandrounds",
        "--concurrency",
        "2",
    ]
    env = {**os.environ, "OPENAI_API_KEY": "x", "COLUMNS": "200"}
    with LoopbackServer(
        _serve_rule(rows), latency=0.25
    ) as srv:  # one server (its URL is in every key) for both runs
        proc = subprocess.Popen(
            [*cmd, "--base-url", srv.base_url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while srv.stats.requests < 9 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first = srv.stats.requests
        con = sqlite3.connect(db)
        stored = con.execute("SELECT COUNT(*) FROM calls WHERE error IS NULL").fetchone()[0]
        partial = con.execute("SELECT COUNT(*) FROM episodes WHERE status = 'running'").fetchone()[
            0
        ]
        con.close()
        assert 0 < stored < 24 and first < 24
        done = subprocess.run(
            [*cmd, "--base-url", srv.base_url], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        second = srv.stats.requests - first
        assert second == 24 - stored, (first, stored, second)
        killed = episodes(db)
        # the same command from scratch on a new store gives the same transcripts
        fresh = tmp_path / "fresh.db"
        cmd3 = [c if c != str(db) else str(fresh) for c in cmd]
        subprocess.run(
            [*cmd3, "--base-url", srv.base_url],
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        )
    clean = episodes(fresh)
    # the same transcripts, but for a step whose tool was running at the kill: that call is
    # answered as stopped, not run again (the steps before it are the same)
    stopped = 0
    for k, c in zip(killed, clean):
        ks, cs = json.loads(k[3]), json.loads(c[3])
        cut = next((i for i, st in enumerate(ks) if _interrupted(st)), None)
        if cut is None:
            assert k == c
        else:
            stopped += 1
            assert ks[:cut] == cs[:cut] and ks[cut]["key"] == cs[cut]["key"]
    assert stopped <= 2  # at most one step per episode in flight (--concurrency 2)
    assert all(e[2] == "finished" for e in killed) and len(killed) == 6 == len(clean)
    print(
        f"kill -9 resume: {first} calls before the kill, {stored} stored, {partial} episodes mid-way, {second} on the re-run (24 in all)"
    )


def _without_bubblewrap(monkeypatch) -> None:
    from grandrounds.benchmarks.agent_envs import sandbox

    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-on-this-path")
    sandbox._bubblewrap_state.cache_clear()  # and again after the test: see the finally blocks


def test_no_sandbox_no_tool_stops_before_the_first_call(tmp_path, monkeypatch):
    from grandrounds.benchmarks.agent_envs import sandbox

    _without_bubblewrap(monkeypatch)
    asked: list[Request] = []

    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=lambda req: asked.append(req) or "1", **options)

    try:
        with PROVIDERS.registered("agentbot", Bot):
            r = CliRunner().invoke(app, run_args(tmp_path, 2), env={"COLUMNS": "300"})
    finally:
        sandbox._bubblewrap_state.cache_clear()
    assert r.exit_code != 0 and asked == []
    lines = [x for x in r.output.splitlines() if "bubblewrap" in x]
    assert len(lines) == 1, r.output
    assert (
        "the python tool cannot run: bubblewrap (bwrap-not-on-this-path) is not installed"
        in lines[0]
    )
    assert "apt-get install bubblewrap" in lines[0] and "sandbox=unsafe-audit-hook-only" in lines[0]


def test_unsafe_isolation_is_asked_by_name_and_recorded(tmp_path, monkeypatch):
    from grandrounds.benchmarks.agent_envs import sandbox

    _without_bubblewrap(monkeypatch)
    rows = medcalc_rows(6)
    try:
        cli(run_args(tmp_path, 6, "--param", "sandbox=unsafe-audit-hook-only"), rule(rows))
    finally:
        sandbox._bubblewrap_state.cache_clear()
    res = results(tmp_path)
    assert res["extra"]["sandbox"] == "unsafe-audit-hook-only"
    assert res["score"] == pytest.approx(sum(int(r["Row Number"]) % 2 == 0 for r in rows) / 6)
    from grandrounds.store import Store

    with Store(tmp_path / "s.db") as st:
        (run_rec,) = st.runs()
    assert (
        run_rec.benchmark_spec == 'medcalc-bench-tools{"sandbox":"unsafe-audit-hook-only"}'
    )  # its own run


ENDLESS = json.dumps({"code": "while True:\n    pass"})


@pytest.mark.bwrap
def test_time_budget_holds_while_tools_run(tmp_path):
    """A reply with three endless python calls: the episode ends at its time budget (plus the
    time to kill the sandbox), not after the three calls' own limits (10 s each)."""
    medcalc_rows(1)
    start = time.monotonic()
    cli(
        run_args(tmp_path, 1, "--param", "max_seconds_per_episode=2"),
        lambda req: [ToolCallPart(f"p{i}", "python", ENDLESS) for i in range(3)],
    )
    elapsed = time.monotonic() - start
    res = results(tmp_path)
    assert res["extra"]["episodes"] == {"step_limit": 1} and res["score"] == 0.0
    (step,) = json.loads(episodes(tmp_path / "s.db")[0][3])
    assert step["limit"].startswith("max_seconds_per_episode: 2 s ran out while the tools ran")
    assert elapsed < 6.0, elapsed  # 2 s of budget, the kill, and the run's own start and end
    print(f"three endless python calls, budget 2 s: the run took {elapsed:.2f} s")


def test_tool_calls_per_reply_are_capped(tmp_path):
    medcalc_rows(1)
    calc = json.dumps({"expression": "1+1"})
    start = time.monotonic()
    cli(
        run_args(tmp_path, 1),
        lambda req: [ToolCallPart(f"c{i}", "calculator", calc) for i in range(20000)],
    )
    elapsed = time.monotonic() - start
    (ep,) = episodes(tmp_path / "s.db")
    (step,) = json.loads(ep[3])
    assert ep[2] == "step_limit" and "events" not in step  # none of them ran
    assert step["limit"] == "max_tool_calls_per_reply: 20000 tool calls in one reply, over 32"
    assert len(step["tool_calls"]) == 32 and step["tool_calls_not_shown"] == 20000 - 32
    print(f"20,000 tool calls in one reply: stopped at the cap in {elapsed:.2f} s")


def test_tool_calls_per_episode_are_capped(tmp_path):
    medcalc_rows(1)
    calc = json.dumps({"expression": "1+1"})
    cli(
        run_args(tmp_path, 1, "--param", "max_tool_calls_per_episode=50"),
        lambda req: [ToolCallPart(f"c{i}", "calculator", calc) for i in range(20)],
    )
    (ep,) = episodes(tmp_path / "s.db")
    steps = json.loads(ep[3])
    assert ep[2] == "step_limit" and len(steps) == 3
    assert [len(s.get("events", ())) for s in steps] == [20, 20, 0]
    assert steps[2]["limit"] == (
        "max_tool_calls_per_episode: 60 tool calls in the episode, over 50"
    )


def _hang_then_answer(rows):
    def serve(body: dict) -> object:
        msgs = body["messages"]
        row = truth_of("\n".join(str(m.get("content") or "") for m in msgs), rows)
        if not any(m["role"] == "tool" for m in msgs):
            return Reply(text="", tool_calls=(("python", {"code": "import time\ntime.sleep(60)"}),))
        return json.dumps({"answer": row["Ground Truth Answer"]})

    return serve


@pytest.mark.bwrap
def test_a_tool_call_that_stops_the_harness_is_not_run_again(tmp_path):
    """The harness killed while a tool runs: the step was marked on disk before the tool ran, so
    the next run answers that call as stopped instead of running it again (and again)."""
    rows = medcalc_rows(1)
    data = str(shared_file("medcalc-bench", "test_data.csv"))
    db = tmp_path / "s.db"
    cmd = [sys.executable, "-m", "grandrounds", "run", BENCH, "--data", data, "--limit", "1"]
    cmd += ["-m", "openai/m", "--store", str(db), "--protocol", "grandrounds"]
    env = {**os.environ, "OPENAI_API_KEY": "x", "COLUMNS": "200"}
    with LoopbackServer(_hang_then_answer(rows)) as srv:
        proc = subprocess.Popen(
            [*cmd, "--base-url", srv.base_url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        marked: list = []
        while not marked and time.time() < deadline:
            time.sleep(0.1)
            if db.exists():
                con = sqlite3.connect(db)
                try:
                    marked = con.execute(
                        "SELECT steps_json FROM episodes WHERE status = 'running'"
                    ).fetchall()
                except sqlite3.OperationalError:
                    marked = []
                con.close()
        time.sleep(0.5)  # the tool is running (it sleeps 60 s)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert marked and json.loads(marked[0][0])[-1]["acting"] is True
        start = time.monotonic()
        done = subprocess.run(
            [*cmd, "--base-url", srv.base_url], env=env, capture_output=True, text=True, timeout=120
        )
        again = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    (ep,) = episodes(db)
    steps = json.loads(ep[3])
    assert ep[2] == "finished" and steps[0]["events"][0]["outcome"] == "interrupted"
    assert "not run again" in steps[0]["events"][0]["text"] and "acting" not in steps[0]
    assert again < 30, again  # the 60 s sleep did not run again


def test_a_sandbox_gone_mid_run_is_an_unknown_not_a_zero(monkeypatch):
    """bubblewrap checked before the run, then gone: the episode is an environment error
    (unscored, run again), never a tool result the candidate is graded on."""
    import asyncio

    from grandrounds.benchmarks.agent_envs import sandbox
    from grandrounds.benchmarks.agent_envs.medcalc_tools import MedCalcToolsEnvironment
    from grandrounds.benchmarks.agents import EnvironmentFailure
    from grandrounds.core.records import Response

    _without_bubblewrap(monkeypatch)
    env = MedCalcToolsEnvironment([Message("user", "q")])
    reply = Response(key="k", tool_calls=(ToolCallPart("p", "python", '{"code": "print(1)"}'),))
    try:
        with pytest.raises(EnvironmentFailure, match="bubblewrap .* is not installed"):
            asyncio.run(env.react(reply, None))  # type: ignore[arg-type]
    finally:
        sandbox._bubblewrap_state.cache_clear()
