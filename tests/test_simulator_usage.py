"""AgentClinic's simulator calls (the patient and the measurement reader, purpose "simulate") are
counted in the result's usage as a role of their own, priced by the simulator model's price,
summed into the tokens and cost line, and given their own line in the call summary."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.run.costs import PriceTable, fmt_usd, run_usage, usage_cells, usage_line
from grandrounds.store.rows import CallUsage
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_agentclinic import FILES, Clinic

PRICES = {"doctor": (1.0, 4.0), "sim": (3.0, 12.0), "mod": (0.5, 2.0)}


def write_prices(path: Path) -> Path:
    path.write_text(
        "[models]\n"
        + "".join(
            f'"openai/{m}" = {{ input = {i}, output = {o} }}\n' for m, (i, o) in PRICES.items()
        ),
        encoding="utf-8",
    )
    return path


def run_cli(tmp_path: Path, srv: LoopbackServer, prices: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "out"
    args = [
        "run",
        "agentclinic",
        "--data",
        str(shared_file("agentclinic", FILES["medqa"])),
        "--limit",
        "5",
        "--model",
        "openai/doctor",
        "--base-url",
        srv.base_url,
        "--simulator",
        f"openai/sim@{srv.base_url}",
        "--judge",
        f"openai/mod@{srv.base_url}",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(out),
        "--prices",
        str(prices),
        "--concurrency",
        "4",
    ]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0], " ".join(
        r.output.split()
    )


def stored_calls(db: Path) -> dict[str, tuple[int, int, int]]:
    """purpose -> (calls, prompt tokens, completion tokens), counted straight from the store."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT purpose, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM calls GROUP BY purpose"
        ).fetchall()
        return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}
    finally:
        con.close()


def cost(model: str, prompt: int, completion: int) -> float:
    inp, outp = PRICES[model]
    return (prompt * inp + completion * outp) / 1e6


def test_simulator_calls_are_in_the_usage_the_cost_line_and_the_call_summary(tmp_path):
    clinic = Clinic("medqa")
    prices = write_prices(tmp_path / "prices.toml")
    with LoopbackServer(clinic.rule, keep_bodies=True) as srv:
        result, output = run_cli(tmp_path, srv, prices)
        sim_sent = sum(1 for b in srv.stats.bodies if b["model"] == "sim")
    assert clinic.mismatches == []
    calls = stored_calls(tmp_path / "s.db")
    n_sim, p_sim, c_sim = calls["simulate"]
    assert n_sim == sim_sent > 0  # every distinct simulator call, sent once and stored
    usage = result["extra"]["usage"]
    sims = usage["simulators"]
    assert [(s["model"], s["calls"], s["prompt_tokens"], s["completion_tokens"]) for s in sims] == [
        ("openai/sim", n_sim, p_sim, c_sim)
    ]
    assert sims[0]["cost_usd"] == round(cost("sim", p_sim, c_sim), 6)
    # the totals are every call in the store: the doctor's, the patient's and reader's, the moderator's
    assert usage["prompt_tokens"] == sum(v[1] for v in calls.values())
    assert usage["completion_tokens"] == sum(v[2] for v in calls.values())
    want = (
        cost("doctor", *calls["answer"][1:])
        + cost("sim", p_sim, c_sim)
        + cost("mod", *calls["judge"][1:])
    )
    assert usage["cost_usd"] == round(want, 6) and usage["cost_complete"] is True
    # the closing lines: the simulator's own call summary line and the cost with it
    assert f"simulator openai/sim: {n_sim} calls made, 0 from the store, 0 failed" in output
    assert (
        f"cost {fmt_usd(usage['cost_usd'])} at the packaged price table with {prices} on top"
        in output
    )
    assert f"tokens: {usage['prompt_tokens']:,} in" in output
    # the steps name their simulator calls: the keys are exactly the stored "simulate" calls
    con = sqlite3.connect(tmp_path / "s.db")
    try:
        keys = {
            k
            for (steps,) in con.execute("SELECT steps_json FROM episodes")
            for st in json.loads(steps)
            for k in st.get("simulator_keys", [])
        }
        stored = {k for (k,) in con.execute("SELECT key FROM calls WHERE purpose = 'simulate'")}
    finally:
        con.close()
    assert keys == stored


def test_the_same_command_again_counts_the_same_simulator_calls_from_the_store(tmp_path):
    clinic = Clinic("medqa")
    prices = write_prices(tmp_path / "prices.toml")
    with LoopbackServer(clinic.rule) as srv:
        first, _ = run_cli(tmp_path, srv, prices)
        sent = srv.stats.requests
        again, output = run_cli(tmp_path, srv, prices)
        assert srv.stats.requests == sent  # nothing asked again
    n_sim = stored_calls(tmp_path / "s.db")["simulate"][0]
    assert again["extra"]["usage"]["simulators"] == first["extra"]["usage"]["simulators"]
    assert again["extra"]["usage"]["simulators"][0]["calls"] == n_sim
    assert re.search(r"simulator openai/sim: 0 calls made, \d+ from the store", output)


def test_usage_without_a_simulator_keeps_its_keys_and_an_unpriced_simulator_is_not_shown_as_free():
    table = PriceTable(models={"openai/doctor": (1.0, 4.0)})
    answers = CallUsage(who="answers", calls=3, prompt_tokens=100, completion_tokens=10, no_usage=0)
    plain = run_usage("openai/doctor", answers, [], [], table)
    assert set(plain) == {
        "answers",
        "judges",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "cost_complete",
        "prices",
    }
    with_sim = run_usage(
        "openai/doctor",
        answers,
        [],
        [],
        table,
        simulator=(
            "openai/sim",
            CallUsage(who="simulator", calls=4, prompt_tokens=50, completion_tokens=5, no_usage=0),
        ),
    )
    assert with_sim["simulators"][0]["cost_usd"] is None  # no price: unknown, not $0
    assert with_sim["cost_complete"] is False
    assert with_sim["prompt_tokens"] == 150 and with_sim["completion_tokens"] == 15
    assert usage_cells({"usage": with_sim}) == ("150+15", fmt_usd(plain["cost_usd"]) + "+")
    missing = run_usage(
        "openai/doctor",
        answers,
        [],
        [],
        table,
        simulator=(
            "openai/sim",
            CallUsage(who="simulator", calls=2, prompt_tokens=0, completion_tokens=0, no_usage=2),
        ),
    )
    assert "(2 calls reported no usage)" in usage_line({"usage": missing})
