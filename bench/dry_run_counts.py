"""--dry-run's counts against the calls the run then makes, on HealthBench-500 and MedQA.

For each case: a dry run (its plan.json), then the same command for real against loopback
candidate and judge servers that count the requests they receive, then the dry run again.
Prints one line per case: the dry run's answer and judge calls (exact / planned), the requests
the servers received during the dry run (must be 0) and during the run, the prompt tokens the
dry run counted or estimated, the usage the run recorded, and the dry run's wall time. The
third case resumes HealthBench (40 conversations) after a run whose judge failed on some calls.

    python bench/dry_run_counts.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from grandrounds.testing import Fault, LoopbackServer  # noqa: E402

MET = "```json\n" + json.dumps({"explanation": "ok", "criteria_met": True}) + "\n```"


def gr(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ) | {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    ref = ROOT.parent / "shared" / "reference"
    if "GRANDROUNDS_REFERENCE" not in env and ref.is_dir():
        env["GRANDROUNDS_REFERENCE"] = str(ref)
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args], capture_output=True, text=True, env=env
    )
    if r.returncode not in (0, 3):
        sys.exit(f"grandrounds {' '.join(args[:2])} failed ({r.returncode}):\n{r.stderr}")
    return r


def case(name: str, args: list[str], servers: list[LoopbackServer], work: Path) -> None:
    out = work / f"{name}-plan"
    before = [s.stats.requests for s in servers]
    start = time.perf_counter()
    gr("run", *args, "--dry-run", "--out", str(out))
    wall = time.perf_counter() - start
    during_dry = sum(s.stats.requests for s in servers) - sum(before)
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    gr("run", *args, "--out", str(work / f"{name}-run"))
    made = [s.stats.requests - b for s, b in zip(servers, before)]
    usage = json.loads((work / f"{name}-run" / "results.json").read_text(encoding="utf-8"))[
        "results"
    ][0]["extra"]["usage"]
    lines = {x["role"]: x for x in plan["lines"]}
    a, j = lines["answers"], lines.get("judge")
    judge_txt = (
        f"judges {j['to_make']} ({j['exact']} exact, {j['planned']} planned)" if j else "judges 0"
    )
    print(
        f"{name}: dry run counts {plan['calls_to_make']} calls: answers {a['to_make']} ({a['exact']} exact, {a['planned']} planned), "
        f"{judge_txt}; requests during the dry run {during_dry}; the run then made {sum(made)} "
        f"(answers {made[0]}{', judges ' + str(made[1]) if len(made) > 1 else ''}): "
        f"{'EQUAL' if sum(made) == plan['calls_to_make'] else 'DIFFERENT'}"
    )
    print(
        f"  prompt tokens counted by the dry run: answers {a['prompt_tokens']:,}{', judges ' + format(j['prompt_tokens'], ',') if j else ''} "
        f"({plan['lines'][0]['tokens_counted_by'].split(';')[0]}); usage the run recorded (the loopback server reports words): "
        f"{usage['prompt_tokens']:,} in, {usage['completion_tokens']:,} out; dry run wall {wall:.1f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    medqa = args.data_dir / "medqa" / "phrases_no_exclude_test.jsonl"
    hb = args.data_dir / "healthbench" / "healthbench_500.jsonl"
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        with LoopbackServer(lambda b: "Answer: C") as cand:
            case(
                "MedQA (1,273 questions)",
                [
                    "medqa",
                    "--data",
                    str(medqa),
                    "--model",
                    "openai/gpt-4o-mini",
                    "--base-url",
                    cand.base_url,
                    "--store",
                    str(work / "m.db"),
                ],
                [cand],
                work,
            )
        with (
            LoopbackServer(lambda b: "Rest, fluids, and see a doctor if it worsens.") as cand,
            LoopbackServer(lambda b: MET) as judge,
        ):
            case(
                "HealthBench-500 (per criterion)",
                [
                    "healthbench",
                    "--data",
                    str(hb),
                    "--model",
                    "openai/gpt-4o-mini",
                    "--base-url",
                    cand.base_url,
                    "--judge",
                    f"openai/gpt-4.1@{judge.base_url}",
                    "--concurrency",
                    "64",
                    "--store",
                    str(work / "h.db"),
                ],
                [cand, judge],
                work,
            )
        state = {"first": True}

        def flaky(body: dict) -> object:
            return (
                Fault("400")
                if state["first"] and len(body["messages"][-1]["content"]) % 5 == 0
                else MET
            )

        with LoopbackServer(lambda b: "Rest.") as cand, LoopbackServer(flaky) as judge:
            common = [
                "healthbench",
                "--data",
                str(hb),
                "--limit",
                "40",
                "--protocol",
                "grandrounds",
                "--model",
                "openai/gpt-4o-mini",
                "--base-url",
                cand.base_url,
                "--judge",
                f"openai/gpt-4.1@{judge.base_url}",
                "--store",
                str(work / "r.db"),
            ]
            gr("run", *common)
            failed = judge.stats.faults.get("400", 0)
            state["first"] = False
            print(f"(resume case: the first run's judge failed {failed} calls with HTTP 400)")
            case("HealthBench-40 resumed", common, [cand, judge], work)


if __name__ == "__main__":
    main()
