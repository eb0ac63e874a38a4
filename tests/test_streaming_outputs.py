"""``--out`` streams: ``samples.jsonl`` is written one chunk of samples at a time from the store,
each grade written out as it is stored (never made into records and back), and the lines are the
ones the record path writes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import Grade, Response, Result, Sample, Verdict, Vote
from grandrounds.run import outputs
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.outputs import (
    graded_line,
    json_line,
    sample_line,
    stored_lines,
    verdict_raw,
    write_outputs,
)
from grandrounds.run.runner import run as run_async
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_real_use import one_server


def record_lines(outcome: Any, st: Store) -> list[dict[str, Any]]:
    """The lines as the record path writes them: each grade read as records, then ``sample_line``."""
    out = []
    for part in outcome.read_back(st):
        prompts = st.answer_prompts_for(outcome.run.id, [smp.id for smp, _, _ in part])
        for smp, resp, grade in part:
            line = sample_line(outcome.result, smp, None, resp, grade)
            line["prompt"] = prompts[smp.id]["messages"] if smp.id in prompts else None
            out.append(line)
    return out


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Four HealthBench conversations judged per criterion, the first answer failing (a 400)."""
    from grandrounds.testing import Fault

    data = shared_file("healthbench", "healthbench_500.jsonl")
    db = tmp_path_factory.mktemp("out") / "s.db"
    first = json.loads(data.read_text(encoding="utf-8").splitlines()[0])["prompt"][-1]["content"]
    judge = one_server()

    def rule(body: dict[str, Any]) -> Any:
        if body["messages"][-1]["content"] == first:
            return Fault("400")
        return judge(body)

    with LoopbackServer(rule) as srv:
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/m",
            data=data,
            base_url=srv.base_url,
            limit=4,
            options=RunOptions(protocol="grandrounds"),
            judges=(JudgeConfig(spec="openai/j", base_url=srv.base_url),),
        )
        with Store(db) as st:
            outcome = asyncio.run(run_async(st, cfg))
    return db, outcome


def test_stored_lines_are_the_lines_the_record_path_writes(judged_run: tuple[Path, Any]) -> None:
    db, outcome = judged_run
    with Store(db) as st:
        fast, slow = list(stored_lines(outcome, st)), record_lines(outcome, st)
    assert len(fast) == 4 and fast == slow
    assert fast[0]["error"] and fast[0]["grade_status"] == "answer_failed"
    assert all(line["verdicts"] and line["prompt"] for line in fast[1:])
    # key for key, as JSON too (what lands in the file)
    assert [json.loads(json_line(x)) for x in fast] == [json.loads(json.dumps(x)) for x in slow]


def test_stored_lines_read_the_store_a_chunk_at_a_time(
    judged_run: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, outcome = judged_run
    monkeypatch.setattr(outcome, "READ_CHUNK", 2)
    asked: list[int] = []
    with Store(db) as st:
        real = st.grade_docs_for

        def counted(run_id: str, fp: str, ids: list[str]) -> dict[str, Any]:
            asked.append(len(ids))
            return real(run_id, fp, ids)

        monkeypatch.setattr(st, "grade_docs_for", counted)
        lines = stored_lines(outcome, st)
        next(lines)
        assert asked == [2], "the first line comes after one chunk is read, not the whole run"
        rest = list(lines)
    assert asked == [2, 2] and len(rest) == 3


def test_write_outputs_writes_each_line_as_it_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generator is written as it is iterated: when line k is asked for, the k lines before it
    have been encoded and handed to the file, so the lines are never held together."""
    out = tmp_path / "out"
    encoded: list[str] = []
    real = outputs.json_line
    monkeypatch.setattr(
        outputs, "json_line", lambda line: encoded.append(line["sample_id"]) or real(line)
    )
    when_asked: list[int] = []

    def lines():
        for i in range(5):
            when_asked.append(len(encoded))
            # a model's text with a lone surrogate (no UTF-8 form): written escaped, never stopping the file
            yield {"sample_id": f"s{i}", "response": "é \ud800"}

    write_outputs(out, [], lines())
    assert when_asked == [0, 1, 2, 3, 4]
    got = [json.loads(x) for x in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [g["sample_id"] for g in got] == ["s0", "s1", "s2", "s3", "s4"] and got[0][
        "response"
    ] == "é \ud800"


def test_json_line_is_the_standard_librarys_json() -> None:
    line = {"a": "ü 中", "b": [1, 2.5, None, True], "c": {"d": "x\ny"}}
    assert (
        json.loads(json_line(line)) == line
        and json_line(line).endswith("\n")
        and "ü 中" in json_line(line)
    )


def test_a_verdicts_raw_reply_is_the_records_own() -> None:
    votes = (
        Vote(judge="j1", status="met", raw="yes 1"),
        Vote(judge="j2", status="unmet", raw="no"),
        Vote(judge="j3", status="met", raw="yes 3"),
    )
    for status in ("met", "unmet", "unknown"):
        v = Verdict("c1", status, votes=votes)
        assert verdict_raw(to_jsonable(v)) == v.raw
    assert verdict_raw(to_jsonable(Verdict("c2", "met"))) == ""


def test_a_non_finite_stored_value_is_written_as_no_score() -> None:
    result = Result(
        benchmark="b",
        model="m",
        judge=None,
        metric="accuracy",
        score=0.5,
        ci95=None,
        n=1,
        n_unscored=0,
    )
    doc = to_jsonable(Grade(sample_id="s1", value=1.0, status="scored")) | {"value": float("inf")}
    line = graded_line(
        result, Sample(id="s1", benchmark="b", messages=()), Response(key="k", text="A"), doc
    )
    assert line["score"] is None and line["grade_status"] == "scored"


def test_stored_lines_read_the_samples_from_the_store_not_the_data_again(
    judged_run: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's samples are in the store: writing the outputs reads no data file (the 57 MB
    re-parse a 5,000-conversation HealthBench run paid), and the lines are, byte for byte, those
    written from the samples read again from the data (as before)."""
    from grandrounds.run.outputs import _data_lines

    db, outcome = judged_run
    with Store(db) as st:
        slow = list(_data_lines(outcome, st))
        assert [json.loads(json_line(x)) for x in slow] == [
            json.loads(json.dumps(x)) for x in record_lines(outcome, st)
        ]

        def no_data() -> Any:
            raise AssertionError("the data file was read again")

        monkeypatch.setattr(outcome.setup, "samples", no_data)
        fast = list(stored_lines(outcome, st))
    assert [json_line(x) for x in fast] == [json_line(x) for x in slow] and len(fast) == 4


def test_targets_read_from_the_store_only_where_they_read_back_as_the_data_gives_them(
    tmp_path: Path,
) -> None:
    """Stored samples give the lines where positions 0..n-1 are all there and no target holds an
    object (its keys were stored sorted: the data's order is lost); otherwise the data is read."""
    from grandrounds.run.outputs import _json_value, _stored_targets

    def stored(targets: list[Any]) -> Store:
        st = Store(tmp_path / f"t{len(list(tmp_path.iterdir()))}.db")
        st.put_samples(
            "b",
            "ds",
            [
                Sample(id=f"s{i}", benchmark="b", messages=(), target=t)
                for i, t in enumerate(targets)
            ],
        )
        return st

    with stored(["A", ["B", "C"], 2.5, None, 10**20]) as st:
        assert _stored_targets(st, "b", "ds", 5) and _stored_targets(st, "b", "ds", 3)
        assert not _stored_targets(st, "b", "ds", 6), "a sample of the run is missing"
        got = [_json_value(text) for _, _, text, _ in st.iter_sample_targets("b", "ds", 5)]
        assert got == ["A", ["B", "C"], 2.5, None, 10**20]
    with stored(["A", {"value": 1, "unit": "mg"}]) as st:
        assert _stored_targets(st, "b", "ds", 1) and not _stored_targets(st, "b", "ds", 2)


def test_a_run_whose_targets_hold_objects_writes_them_in_the_datas_order(
    judged_run: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, outcome = judged_run
    real = outcome.setup.samples
    import dataclasses

    def with_objects() -> Any:
        return (dataclasses.replace(smp, target={"z": 1, "a": [2]}) for smp in real())

    monkeypatch.setattr(outcome.setup, "samples", with_objects)
    with Store(db) as st:
        for smp in list(with_objects())[
            :1
        ]:  # the store's copy of the first sample now holds an object
            st.db.execute(
                "UPDATE samples SET sample_json = json_set(sample_json, '$.target', json('{\"a\":[2],\"z\":1}')) WHERE sample_id = ?",
                (smp.id,),
            )
        lines = list(stored_lines(outcome, st))
    assert all(json_line(x).count('"target":{"z":1,"a":[2]}') == 1 for x in lines), (
        "the data's key order, not the store's"
    )
