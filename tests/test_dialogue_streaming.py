"""Dialogues asked as they are read: a streamed benchmark's turns grouped on the fly, LLMEval-Med and
GAPS read record by record.

A run of a benchmark that reads its records one at a time groups each dialogue's consecutive turns
as it reads them (``samples.consecutive_groups``), holding one dialogue at a time; where a
dialogue's turns are apart in the stream it holds every sample and groups them over the whole set
as before. Either way it asks each dialogue's turns in order with the model's earlier answers and
stores the same rows as a run of the same benchmark read whole.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import grandrounds.benchmarks.readers.json_object_arrays as readers
from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions
from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.core.errors import DataError
from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.core.registry import BENCHMARKS, GRADERS, Spec
from grandrounds.graders.base import Grader
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.run.samples import consecutive_groups, group_samples
from grandrounds.scoring.cells import mean_cell
from grandrounds.sources.llmeval_med import CATEGORY_CODES
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file

# ---- a tiny multi-turn benchmark, streamed or read whole ---------------------------------------------

#: (sample id, "read" | "ask") in the order they happen, while a test watches.
EVENTS: list[tuple[str, str]] = []


class EchoGrader(Grader):
    """1.0 when the answer is the sample's target: what the model must say having seen the right history."""

    name = "dialogue-echo"

    async def grade(self, sample: Sample, response: Response, ctx: Any) -> Grade:
        return Grade(
            sample_id=sample.id,
            value=float(response.text == sample.target),
            extracted=response.text,
        )


class DialoguesWhole(Benchmark):
    """Turns in a JSON Lines file ({"dialogue", "turn", "text"}), read whole (the base iter_samples)."""

    name = "dialogue-echo"

    def load(self, root: Path) -> list[Sample]:
        return list(self._turns(root))

    def _turns(self, root: Path) -> Iterator[Sample]:
        for _no, rec in iter_jsonl(root):
            sid = f"{rec['dialogue']}/{rec['turn']}"
            EVENTS.append((sid, "read"))
            yield Sample(
                id=sid,
                benchmark=self.name,
                messages=(Message("user", rec["text"]),),
                target=rec["expect"],
                group=rec["dialogue"],
                turn=rec["turn"],
            )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("dialogue-echo", {})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        return Aggregate.of("echo", mean_cell([g.value for g in grades]), {}, {})


class DialoguesStreamed(DialoguesWhole):
    """The same benchmark reading one record at a time."""

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        return self._turns(root)


def answer_for(messages: Sequence[Any]) -> str:
    """What the scripted model says: how many earlier answers it was shown, and every user turn so far."""
    answers = sum(1 for m in messages if m.role == "assistant")
    return f"{answers}:" + "/".join(m.content for m in messages if m.role == "user")


def write_dialogues(path: Path, dialogues: list[tuple[str, list[int]]]) -> Path:
    """One line per turn, in the order given (each dialogue's turns listed in ``turns`` order, or
    a dialogue named twice to put its turns apart); ``expect`` is the answer that proves the history."""
    with open(path, "w", encoding="utf-8") as f:
        for name, turns in dialogues:
            for t in turns:
                text = f"{name}.{t}"
                before = [f"{name}.{k}" for k in range(1, t)]
                f.write(
                    json.dumps(
                        {
                            "dialogue": name,
                            "turn": t,
                            "text": text,
                            "expect": f"{t - 1}:" + "/".join([*before, text]),
                        }
                    )
                    + "\n"
                )
    return path


def run_echo(tmp_path: Path, cls: type, data: Path, label: str, limit: int | None = None):
    def script(req):
        EVENTS.append((req.messages[-1].content.replace(".", "/"), "ask"))
        return answer_for(req.messages)

    store_path = tmp_path / f"{label}.db"
    cfg = RunConfig(
        benchmark="dialogue-echo",
        model="scripted/echo",
        data=data,
        limit=limit,
        concurrency=1,
        provider_options={"script": script},
    )
    with (
        BENCHMARKS.registered("dialogue-echo", cls),
        GRADERS.registered("dialogue-echo", EchoGrader),
    ):
        EVENTS.clear()
        out = asyncio.run(run(Store(store_path), cfg))
        events = list(EVENTS)
    return out, stored_rows(store_path), events


def stored_rows(path: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(path) as db:
        return {
            "samples": db.execute(
                "SELECT benchmark, sample_id, idx, sample_json FROM samples ORDER BY idx"
            ).fetchall(),
            "answers": db.execute(
                "SELECT run_id, sample_id, request_key, prompt_json FROM answers ORDER BY sample_id"
            ).fetchall(),
            "grades": db.execute(
                "SELECT run_id, sample_id, value, grade_json FROM grades ORDER BY sample_id"
            ).fetchall(),
        }


# d2's turns are written 2, 1 (consecutive but not in turn order): asked 1 then 2, stored where read.
CONTIGUOUS = [("d1", [1, 2, 3]), ("d2", [2, 1]), ("d3", [1]), ("d4", [1, 2]), ("d5", [1, 2, 3])]


@pytest.fixture(autouse=True)
def stream_small_files(monkeypatch, request):
    """These tests are about the streamed path; a run holds a file of a few records from its check
    pass instead (samples.KEEP_SAMPLES), so here it holds none unless a test asks for the default."""
    import grandrounds.run.samples as samples

    if "keep_default" not in request.keywords:
        monkeypatch.setattr(samples, "KEEP_SAMPLES", 0)


@pytest.mark.keep_default
def test_a_small_streamed_file_is_held_from_its_check_and_stores_what_a_held_run_stores(tmp_path):
    data = write_dialogues(tmp_path / "d.jsonl", CONTIGUOUS)
    held, held_rows, _ = run_echo(tmp_path, DialoguesWhole, data, "held")
    small, rows, events = run_echo(tmp_path, DialoguesStreamed, data, "small")
    assert small.setup.kept is not None and small.result.score == 1.0 and rows == held_rows
    assert (
        len([e for e in events if e[1] == "read"]) == 11
    )  # read once: the check pass's samples are asked


def test_a_streamed_dialogue_benchmark_asks_turns_in_order_and_stores_what_a_held_run_stores(
    tmp_path,
):
    data = write_dialogues(tmp_path / "d.jsonl", CONTIGUOUS)
    held, held_rows, _ = run_echo(tmp_path, DialoguesWhole, data, "held")
    streamed, rows, events = run_echo(tmp_path, DialoguesStreamed, data, "streamed")
    assert (
        held.setup.kept is not None and streamed.setup.kept is None
    )  # the streamed run holds no sample list
    assert (
        streamed.result.score == 1.0 and streamed.result.n == 11
    )  # every turn saw its own earlier answers
    assert rows == held_rows and len(rows["samples"]) == 11
    assert [r[1:3] for r in rows["samples"][3:5]] == [("d2/2", 3), ("d2/1", 4)]  # positions as read
    # Asked as read: the first dialogue is asked before the second pass has read the last turn.
    second_pass = events[events.index(("d5/3", "read")) + 1 :]
    asks = [sid for sid, what in second_pass if what == "ask"]
    assert sorted(asks) == sorted({sid for sid, what in events if what == "read"})
    for d in (
        "d1",
        "d2",
        "d4",
        "d5",
    ):  # each dialogue's turns asked in turn order (workers interleave dialogues)
        mine = [sid for sid in asks if sid.startswith(d + "/")]
        assert mine == sorted(mine)
    assert second_pass.index(("d1/1", "ask")) < second_pass.index(("d5/3", "read"))


def test_turns_apart_in_the_stream_fall_back_to_holding_and_give_the_same_rows(tmp_path):
    apart = [("d1", [1]), ("d2", [1, 2]), ("d1", [2, 3]), ("d3", [1])]  # d1 starts again after d2
    data = write_dialogues(tmp_path / "d.jsonl", apart)
    held, held_rows, _ = run_echo(tmp_path, DialoguesWhole, data, "held")
    streamed, rows, _ = run_echo(tmp_path, DialoguesStreamed, data, "streamed")
    assert streamed.setup.kept is not None  # fell back: samples held, grouped over the whole set
    assert streamed.result.score == 1.0 and rows == held_rows
    assert [r[1:3] for r in rows["samples"]] == [
        ("d1/1", 0),
        ("d2/1", 1),
        ("d2/2", 2),
        ("d1/2", 3),
        ("d1/3", 4),
        ("d3/1", 5),
    ]


def test_a_limit_counts_dialogues_not_turns(tmp_path):
    data = write_dialogues(tmp_path / "d.jsonl", CONTIGUOUS)
    held, held_rows, _ = run_echo(tmp_path, DialoguesWhole, data, "held", limit=2)
    streamed, rows, _ = run_echo(tmp_path, DialoguesStreamed, data, "streamed", limit=2)
    # --limit 2: the first two dialogues whole (five turns), never a dialogue cut in two
    assert held.setup.n == streamed.setup.n == 5 and rows == held_rows
    assert sorted(r[1] for r in rows["samples"]) == ["d1/1", "d1/2", "d1/3", "d2/1", "d2/2"]
    assert [g.value for g in streamed.grades] == [1.0] * 5
    # --limit 4: four dialogues, eight turns
    four, rows4, _ = run_echo(tmp_path, DialoguesStreamed, data, "four", limit=4)
    assert four.setup.n == 8 and {r[1].split("/")[0] for r in rows4["samples"]} == {
        "d1",
        "d2",
        "d3",
        "d4",
    }


def test_a_rerun_of_a_checked_file_still_streams_and_resumes(tmp_path):
    data = write_dialogues(tmp_path / "d.jsonl", CONTIGUOUS)
    first, rows, _ = run_echo(tmp_path, DialoguesStreamed, data, "s")
    with sqlite3.connect(
        tmp_path / "s.db"
    ) as db:  # as after an interrupted run: not settled, so gone through again
        db.execute("DELETE FROM settled")
    db.close()
    again, rows_again, events = run_echo(tmp_path, DialoguesStreamed, data, "s")  # same store
    assert again.setup.kept is None and again.result.score == first.result.score == 1.0
    assert [e for e in events if e[1] == "ask"] == []  # answers from the cache, the file read once
    assert len([e for e in events if e[1] == "read"]) == 11
    # finished now: the same run again reads its result back, not the file
    third, _, events = run_echo(tmp_path, DialoguesStreamed, data, "s")
    assert third.result == again.result and [e for e in events if e[1] in ("ask", "read")] == []


def test_consecutive_groups_equal_group_samples_on_a_contiguous_stream():
    rng = random.Random(7)
    samples: list[Sample] = []
    for d in range(200):
        if rng.random() < 0.3:
            samples.append(Sample(id=f"single{d}", benchmark="x", messages=()))
            continue
        turns = list(range(1, rng.randint(1, 4) + 1))
        rng.shuffle(turns)
        samples += [
            Sample(id=f"g{d}/{t}", benchmark="x", messages=(), group=f"g{d}", turn=t) for t in turns
        ]
    want = [[(samples.index(s), s) for s in g] for g in group_samples(samples)]
    assert list(consecutive_groups(iter(samples))) == want


def test_consecutive_groups_refuse_a_dialogue_that_starts_again():
    turns = [
        Sample(id=i, benchmark="x", messages=(), group=g, turn=1)
        for i, g in (("a", "g"), ("b", "h"), ("c", "g"))
    ]
    with pytest.raises(DataError, match="dialogue 'g' starts again"):
        list(consecutive_groups(turns, "data.jsonl"))


# ---- LLMEval-Med: iter_samples == load ----------------------------------------------------------------


def llmeval_doc(rng: random.Random, dialogues: int) -> dict[str, list[dict[str, Any]]]:
    """LLMEval-Med's layout: categories of turns; dialogues of 1-3 rounds sharing groupCode, NaN here and there."""
    doc: dict[str, list[dict[str, Any]]] = {}
    for c, category in enumerate(CATEGORY_CODES):
        turns = doc.setdefault(category, [])
        for g in range(dialogues):
            for rnd in range(1, rng.randint(1, 3) + 1):
                turns.append(
                    {
                        "category1": category,
                        "category2": "子类",
                        "scene": f"场景{g % 7}",
                        "round": rnd,
                        "problem": f"问题 {c}-{g}-{rnd}：患者\u2028胸痛？",
                        "groupCode": g * 10 + c,
                        "sanswer": math.nan if rng.random() < 0.1 else f"答案 {g}",
                        "difficulty": rng.choice(["易", "中", "难"]),
                        "checklist": math.nan if rng.random() < 0.3 else "核心需求：\n1. 内容",
                    }
                )
    return doc


@pytest.fixture
def small_reads(monkeypatch):
    """Read 7 bytes at a time, so turns, numbers and multi-byte characters fall across reads."""
    monkeypatch.setattr(readers, "CHUNK", 7)


def test_llmeval_med_streams_the_real_file_as_load_reads_it():
    path = shared_file("llmeval-med", "dataset.json")
    bench = LLMEvalMed()
    streamed = bench.iter_samples(path)
    first = next(streamed)
    assert [first, *streamed] == bench.load(path) and first.id == "医疗知识/5/1"


@pytest.mark.parametrize("indent", [None, 2])
def test_llmeval_med_streams_generated_files_as_load_reads_them(tmp_path, small_reads, indent):
    path = tmp_path / "dataset.json"
    path.write_text(
        json.dumps(llmeval_doc(random.Random(indent or 0), 12), ensure_ascii=False, indent=indent),
        encoding="utf-8",
    )
    want = LLMEvalMed().load(path)
    got = list(LLMEvalMed().iter_samples(path))
    assert repr(got) == repr(want) and len(want) > 60  # repr: NaN is never equal to itself


def errors_of(path: Path) -> tuple[str, str]:
    out = []
    for read in (lambda: LLMEvalMed().load(path), lambda: list(LLMEvalMed().iter_samples(path))):
        with pytest.raises(DataError) as e:
            read()
        out.append(str(e.value))
    return out[0], out[1]


@pytest.mark.parametrize(
    "doc",
    [
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1}, {"problem": "问", "groupCode": 1, "round": 3}]}',
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1}, {"groupCode": 2, "round": 1}]}',
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1}, 7]}',
        '{"医疗知识": [{"problem": "问", "groupCode": 1.5, "round": 1}]}',
        '{"医疗知识": [], "其他": []}',
        '{"医疗知识": {"problem": "问"}}',
        '[{"problem": "问"}]',
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1},\n oops]}',
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1}]} extra',
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 1}',
    ],
)
def test_llmeval_med_stream_fails_as_load_fails(tmp_path, small_reads, doc):
    path = tmp_path / "dataset.json"
    path.write_text(doc, encoding="utf-8")
    whole, streamed = errors_of(path)
    assert streamed == whole and str(path) in whole


def test_llmeval_med_a_bad_turn_before_a_syntax_error_is_named_first(tmp_path):
    path = tmp_path / "dataset.json"
    path.write_text('{"医疗知识": [{"groupCode": 1, "round": 1}, oops]}', encoding="utf-8")
    whole, streamed = errors_of(path)
    assert "invalid JSON" in whole and streamed == f"{path}, 医疗知识[0]: missing 'problem'"


def test_llmeval_med_a_category_written_twice_is_an_error_when_streamed(tmp_path):
    path = tmp_path / "dataset.json"
    turn = {"problem": "问", "groupCode": 1, "round": 1}
    path.write_text(
        json.dumps({"医疗推理": [turn]}, ensure_ascii=False)[:-1]
        + ', "医疗推理": ['
        + json.dumps(turn)
        + "]}",
        encoding="utf-8",
    )
    assert len(LLMEvalMed().load(path)) == 1  # json keeps the second list only
    with pytest.raises(DataError, match="医疗推理: category written twice"):
        list(LLMEvalMed().iter_samples(path))


def _write(tmp_path: Path, doc: dict, tail: str = "") -> Path:
    path = tmp_path / "data" / "dataset.json"
    path.parent.mkdir(exist_ok=True)
    text = json.dumps(doc, ensure_ascii=False)
    path.write_text(text[:-1] + tail + "}" if tail else text, encoding="utf-8")
    return path


def test_llmeval_med_limit_reads_only_the_turns_it_asks(tmp_path):
    doc = llmeval_doc(random.Random(3), 5)
    want = [s.id for s in LLMEvalMed().load(_write(tmp_path, doc))][:10]
    broken = _write(
        tmp_path, doc, ', "其他": [oops'
    )  # past the turns asked: an unknown category, then invalid JSON
    assert [s.id for _, s in zip(range(10), LLMEvalMed().iter_samples(broken))] == want


def test_llmeval_med_run_streams_dialogues_with_earlier_answers(tmp_path):
    doc = llmeval_doc(random.Random(5), 4)
    data = _write(tmp_path, doc)

    judged = iter(range(10**6))

    def rule(body):
        if body["model"] == "judge":  # usable, unusable, unreadable in turn
            return ('{"判断依据": "ok", "得分": "[5]"}', '{"得分": "[2]"}', "无法评分")[
                next(judged) % 3
            ]
        earlier = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        return f"答{len(earlier)}"

    with LoopbackServer(rule, keep_bodies=True) as srv:
        cfg = RunConfig(
            benchmark="llmeval-med",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
            bench_params={"judge_runs": 1},
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
        bodies = srv.stats.bodies
    samples = LLMEvalMed().load(data)
    assert out.setup.kept is None and out.setup.n == len(samples)
    for body in (b for b in bodies if b["model"] == "cand"):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        answers = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        assert answers == [f"答{i}" for i in range(len(users) - 1)]  # own earlier answers, in order
        rounds = [int(u.split("-")[2].split("：")[0]) for u in users]
        assert rounds == list(range(1, len(users) + 1))
    assert sum(1 for b in bodies if b["model"] == "cand") == len(samples)
    # The run aggregates each turn's summary; the same figures come from the full samples and grades.
    full = out.setup.bench.aggregate(
        out.samples, out.grades, out.setup.bench.check_options(cfg.options)
    )
    assert out.samples == samples and 0 < out.result.score < 100 and out.result.n_unscored > 0
    assert (out.result.score, out.result.ci95, out.result.n, out.result.n_unscored) == (
        full.score,
        full.ci95,
        full.n,
        full.n_unscored,
    )
    assert (
        out.result.extra["mean_score"] == full.extra["mean_score"]
        and out.result.extra["other_protocol"] == full.extra["other_protocol"]
    )
    assert dict(out.result.breakdown["category"].items()) == dict(full.breakdown["category"])


# ---- GAPS: iter_samples == load -----------------------------------------------------------------------


def test_gaps_streams_the_real_files_as_load_reads_them():
    root = shared_file("gaps", "GAPS-NSCLC-preview.xlsx").parent
    shared_file("gaps", "community_contributions.xlsx")
    for subset, n in (("nsclc", 92), ("community", 5), ("all", 97)):
        bench = GAPS(subset=subset)
        streamed = bench.iter_samples(root)
        first = next(streamed)
        got = [first, *streamed]
        assert got == bench.load(root) and len(got) == n


def write_gaps(path: Path, rows: int, bad_row: int | None = None) -> Path:
    import openpyxl

    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("Sheet1")
    ws.append(["index", "question", "分类", "rubrics", "m1_answer"])
    for i in range(1, rows + 1):
        rubric = json.dumps(
            [
                {"id": 1, "claim": f"提到要点 {i}", "level": "A1", "type": "positive"},
                {"id": 2, "claim": "不建议手术", "level": "S2", "type": "negative"},
            ],
            ensure_ascii=False,
        )
        ws.append([i, f"问题 {i}？" if i != bad_row else "  ", "肺癌", rubric, f"回答 {i}"])
        if i % 5 == 0:
            ws.append([None, None, None, None, None])  # a blank row, skipped
    wb.save(path)
    return path


def test_gaps_streams_a_generated_workbook_as_load_reads_it(tmp_path):
    path = write_gaps(tmp_path / "GAPS-NSCLC-preview.xlsx", 300)
    got = list(GAPS().iter_samples(path))
    assert got == GAPS().load(path) and len(got) == 300
    assert got[5].id == "nsclc/6" and got[5].metadata["row"] == 8  # after the blank row 7


def test_gaps_reads_rows_as_asked_and_fails_as_load_fails(tmp_path):
    path = write_gaps(tmp_path / "GAPS-NSCLC-preview.xlsx", 200, bad_row=180)
    samples = GAPS().iter_samples(path)
    assert next(samples).id == "nsclc/1"  # read before the bad row is reached
    with pytest.raises(DataError) as streamed:
        list(samples)
    with pytest.raises(DataError) as whole:
        GAPS().load(path)
    assert (
        str(streamed.value) == str(whole.value) == f"{path}, sheet 'Sheet1' row 216: empty question"
    )
