"""``run --out`` and ``regrade`` read a run back a chunk at a time (issue 11, flat memory).

The chunk sizes are made small here so a dozen samples span several chunks; each test checks
that what is written or computed is what reading the whole run at once gives (the lines built
from the outcome's full lists, the values the judge's rule gives), and that the store was read
one bounded chunk at a time, the lines of a chunk written before the next chunk is read.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import grandrounds.run.regrade as regrade_mod
import grandrounds.store.runs as store_runs
from grandrounds.cli import running as cli
from grandrounds.cli.main import app
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run import outputs
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.outcome import RunOutcome
from grandrounds.run.outputs import sample_line, write_outputs
from grandrounds.run.regrade import RegradeRequest, regrade
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.rubric_bench.triage import TriageRubric
from tests.test_cli_commands import ALPHA, DEMO, demo_script
from tests.test_grade_status import DIALOGUES, DialogueTriage
from tests.test_regrade import FAST, ROWS, by_model, expected, judge_rule, run_triage, values

#: ROWS and three more conversations (new ids and questions, the same rubric items): 7 samples.
MORE_ROWS = ROWS + [
    dict(r, id=f"{r['id']}-b", question=r["question"] + " Again.") for r in ROWS[:3]
]


class Reads:
    """Records the store's chunk readers as they are called: the ids each was asked for, and how
    many lines ``write_outputs`` had taken (and so written: it writes each before taking the next)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> None:
        self.calls: list[tuple[str, list[str], int | None]] = []
        self.taken: int | None = None
        for name in names:
            real = getattr(Store, name)

            def spy(st: Store, *args: Any, _real: Any = real, _name: str = name) -> Any:
                self.calls.append((_name, list(args[-1]), self.taken))
                return _real(st, *args)

            monkeypatch.setattr(Store, name, spy)
        real_write = outputs.write_outputs

        def counting_write(out: Path, results: Any, lines: Any) -> None:
            def counted() -> Any:
                self.taken = 0
                for line in lines:
                    yield line
                    self.taken += 1

            real_write(out, results, counted())

        monkeypatch.setattr(outputs, "write_outputs", counting_write)

    def of(self, name: str) -> list[tuple[list[str], int | None]]:
        return [(ids, written) for n, ids, written in self.calls if n == name]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunOutcome, "READ_CHUNK", 5)
    monkeypatch.setattr(regrade_mod, "READ_CHUNK", 3)
    monkeypatch.setattr(store_runs, "IN_CHUNK", 2)  # and each chunk bound two ids at a time


@pytest.fixture
def triage7(tmp_path: Path):
    path = tmp_path / "triage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MORE_ROWS) + "\n", encoding="utf-8")
    with BENCHMARKS.registered("triage-rubric", TriageRubric):
        yield path


# ---- run --out -----------------------------------------------------------------------------------


def test_run_out_writes_every_line_in_order_one_chunk_at_a_time(
    tmp_path, monkeypatch, small_chunks
):
    import grandrounds.run.runner as runner_mod

    db, out = tmp_path / "s.db", tmp_path / "out"
    outcomes: list[RunOutcome] = []
    real_run = runner_mod.run

    async def keep(*args: Any, **kw: Any) -> RunOutcome:
        outcomes.append(await real_run(*args, **kw))
        return outcomes[-1]

    monkeypatch.setattr(runner_mod, "run", keep)
    reads = Reads(monkeypatch, ("grade_docs_for", "answers_for", "answer_prompts_for"))
    cfg = RunConfig(
        benchmark="demo", model="scripted/alpha", provider_options={"script": demo_script(ALPHA)}
    )
    cli.run_configs([cfg], db, out)

    [o] = outcomes
    grade_reads, answer_reads, prompt_reads = (
        reads.of(name) for name in ("grade_docs_for", "answers_for", "answer_prompts_for")
    )
    ids = [smp.id for smp in o.samples]  # the data's order (read again here, after the reads above)
    lines = [
        json.loads(x) for x in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [x["sample_id"] for x in lines] == ids and len(ids) == len(DEMO) == 12
    # the chunks: 5, 5, 2 samples, each read once, after the lines of the chunk before were written
    assert [ids_ for ids_, _ in grade_reads] == [ids[0:5], ids[5:10], ids[10:12]]
    assert [written for _, written in grade_reads] == [0, 5, 10]
    assert [ids_ for ids_, _ in answer_reads] == [ids[0:5], ids[5:10], ids[10:12]]
    assert [ids_ for ids_, _ in prompt_reads] == [ids[0:5], ids[5:10], ids[10:12]]

    # each line is what the outcome's whole lists give (the samples, responses and grades read at
    # once, the prompt as stored with the answer)
    with Store(db, readonly=True) as st:
        prompts = st.answer_prompts(o.run.id)
    want = [
        sample_line(o.result, smp, prompts[smp.id]["messages"], o.responses[smp.id], g)
        for smp, g in zip(o.samples, o.grades)
    ]
    assert lines == json.loads(json.dumps(want))
    assert (
        sum(x["score"] == 1.0 for x in lines) == len(ALPHA)
        and lines[0]["prompt"][-1]["role"] == "user"
    )
    assert json.loads((out / "results.json").read_text())["results"][0]["score"] == pytest.approx(
        len(ALPHA) / 12
    )
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "samples.jsonl"]


def test_run_outcome_read_back_is_lazy(tmp_path, monkeypatch, small_chunks):
    with Store(tmp_path / "s.db") as st:
        o = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/alpha",
                    provider_options={"script": demo_script(ALPHA)},
                ),
            )
        )
        reads = Reads(monkeypatch, ("grades_for",))
        chunks = o.read_back()
        assert reads.calls == [], "nothing is read before the first chunk is asked for"
        first = next(chunks)
        assert len(first) == 5 and len(reads.calls) == 1
        rest = list(chunks)
        assert [len(c) for c in rest] == [5, 2] and len(reads.calls) == 3
        assert [smp.id for c in (first, *rest) for smp, _, _ in c] == [smp.id for smp in o.samples]
        assert [g for c in (first, *rest) for _, _, g in c] == o.grades


def test_write_outputs_failing_while_lines_are_read_leaves_the_earlier_files(tmp_path):
    from tests.test_outputs import a_result, lines_for

    write_outputs(tmp_path, [a_result(score=0.25)], lines_for(2))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def lines():
        yield from lines_for(3)
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError, match="went away"):
        write_outputs(tmp_path, [a_result(score=0.9)], lines())
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before, (
        "both files as they were, no temporary file left"
    )


# ---- regrade -------------------------------------------------------------------------------------


def test_regrade_across_chunks_gives_the_judges_values_in_order_and_reads_chunk_by_chunk(
    triage7, tmp_path, monkeypatch, small_chunks
):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage7, cand.base_url, judge.base_url)
        reads = Reads(monkeypatch, ("samples_by_id", "answers_for", "grades_for"))
        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-b", base_url=judge.base_url),),
            retry=FAST,
        )
        got = asyncio.run(regrade(st, req))
        ids = [r["id"] for r in MORE_ROWS]
        assert [ids_ for ids_, _ in reads.of("samples_by_id")] == [ids[0:3], ids[3:6], ids[6:7]]
        assert [ids_ for ids_, _ in reads.of("answers_for")] == [ids[0:3], ids[3:6], ids[6:7]]
        assert reads.of("grades_for") == [], "no previous grade is read unless completing a grading"

        want = {r["id"]: expected(r, by_model("judge-b")) for r in MORE_ROWS}
        assert want != {r["id"]: expected(r, by_model("judge-a")) for r in MORE_ROWS}
        assert [smp.id for smp in got.samples] == ids and [g.sample_id for g in got.grades] == ids
        assert values(got.grades) == pytest.approx(want)
        assert (got.result.n, got.result.n_unscored) == (len(ids), 0)
        assert got.result.score == pytest.approx(sum(want.values()) / len(ids))
        fp = st.latest_grader_fp(out.run.id)
        assert {g.sample_id: g for g in got.grades} == st.grades(out.run.id, fp)
        stored = st.grades(out.run.id, fp)

        # the same re-grade read in one chunk: the same result and the same stored grades
        monkeypatch.setattr(regrade_mod, "READ_CHUNK", 1000)
        monkeypatch.setattr(store_runs, "IN_CHUNK", 500)
        whole = asyncio.run(regrade(st, req))
        for field in ("score", "ci95", "n", "n_unscored", "breakdown", "extra"):
            assert getattr(whole.result, field) == getattr(got.result, field), field
        assert st.grades(out.run.id, fp) == stored


def test_regrade_only_unknown_across_chunks_asks_only_the_unknown_items(
    triage7, tmp_path, monkeypatch, small_chunks
):
    garbled = frozenset({"Asks about allergies before aspirin", "Prescribes antibiotics"})
    state = {"garble": True}
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule(garbled, state)) as judge,
    ):
        out = run_triage(st, triage7, cand.base_url, judge.base_url, max_reask=0)
        asked = judge.stats.requests
        state["garble"] = False
        reads = Reads(monkeypatch, ("grades_for",))
        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),),
            max_reask=0,
            only_unknown=True,
            retry=FAST,
        )
        got = asyncio.run(regrade(st, req))
        ids = [r["id"] for r in MORE_ROWS]
        n_garbled = sum(1 for r in MORE_ROWS for c in r["rubric"] if c["text"] in garbled)
        assert judge.stats.requests == asked + n_garbled, "only the unknown items, in every chunk"
        # the previous grades, read a chunk at a time as the re-grade reaches it (then the read-back)
        assert [ids_ for ids_, _ in reads.of("grades_for")][:3] == [ids[0:3], ids[3:6], ids[6:7]]
        assert values(got.grades) == pytest.approx(
            {r["id"]: expected(r, by_model("judge-a")) for r in MORE_ROWS}
        )


def test_regrade_across_chunks_keeps_turns_graded_without_an_answer(
    tmp_path, monkeypatch, small_chunks
):
    from grandrounds.testing import Fault

    monkeypatch.setattr(regrade_mod, "READ_CHUNK", 2)
    data = tmp_path / "dialogues.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in DIALOGUES) + "\n", encoding="utf-8")
    first_d2 = DIALOGUES[1]["turns"][0]["question"]

    def cand_rule(body: dict[str, Any]):
        return Fault("400") if body["messages"][0]["content"] == first_d2 else "advice"

    with (
        BENCHMARKS.registered("dialogue-triage", DialogueTriage),
        Store(tmp_path / "s.db") as st,
        LoopbackServer(cand_rule) as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        judges = (JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),)
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="dialogue-triage",
                    model="openai/cand",
                    data=data,
                    base_url=cand.base_url,
                    judges=judges,
                    retry=FAST,
                ),
            )
        )
        got = asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=judges, retry=FAST)))
        assert (
            [g.sample_id for g in got.grades]
            == [g.sample_id for g in out.grades]
            == ["d1-1", "d1-2", "d2-1", "d2-2", "d2-3"]
        )
        assert [g.status for g in got.grades] == [
            "scored",
            "scored",
            "answer_failed",
            "not_asked",
            "not_asked",
        ]
        assert (
            (got.result.n, got.result.n_unscored) == (out.result.n, out.result.n_unscored) == (2, 3)
        )


def test_regrade_out_writes_the_stored_grades_in_order(
    triage7, tmp_path, monkeypatch, small_chunks
):
    db, dest = tmp_path / "s.db", tmp_path / "re"
    with LoopbackServer(lambda b: "advice") as cand, LoopbackServer(judge_rule()) as judge:
        with Store(db) as st:
            out = run_triage(st, triage7, cand.base_url, judge.base_url)
        reads = Reads(monkeypatch, ("grade_docs_for",))
        r = CliRunner().invoke(
            app,
            [
                "regrade",
                "--run",
                out.run.id,
                "--judge",
                f"openai/judge-b@{judge.base_url}",
                "--store",
                str(db),
                "--out",
                str(dest),
            ],
            env={"COLUMNS": "200"},
        )
        assert r.exit_code == 0, r.output
    ids = [row["id"] for row in MORE_ROWS]
    lines = [
        json.loads(x) for x in (dest / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [x["sample_id"] for x in lines] == ids
    assert [written for _, written in reads.of("grade_docs_for")] == [0, 3, 6], (
        "each chunk written before the next is read"
    )
    result = json.loads((dest / "results.json").read_text())["results"][0]
    with Store(db, readonly=True) as st:
        fp = st.latest_grader_fp(out.run.id)
        grades, answers = st.grades(out.run.id, fp), st.answers(out.run.id)
        samples = {s.id: s for s in st.samples("triage-rubric", out.run.dataset_sha256)}
        prompts = st.answer_prompts(out.run.id)
    assert result["judge"] == "openai/judge-b"
    # the lines `run --out` writes: the prompt sent with each answer
    want = [
        sample_line(
            out.result, samples[sid], prompts[sid]["messages"], answers[sid][1], grades[sid]
        )
        for sid in ids
    ]
    assert lines == json.loads(json.dumps(want))
    assert [x["score"] for x in lines] == pytest.approx(
        [expected(row, by_model("judge-b")) for row in MORE_ROWS]
    )
