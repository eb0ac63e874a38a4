"""Runs that hold one record at a time: streaming readers, summaries instead of samples and grades,
usage counted by the store, and data checked once per store.

A run reads a large streaming benchmark's file twice (once to check every record before any call,
once as it asks; a small one's samples are held from the first pass) and keeps only each sample's
summary for the aggregate; these tests pin that the figures it reports are the ones computed from
the full samples and grades.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import Benchmark, slim_grade, slim_sample
from grandrounds.benchmarks.healthbench import HealthBench
from grandrounds.benchmarks.readers.decoding import data_encoding, iter_lines
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.core.errors import DataError
from grandrounds.core.records import judge_calls
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_real_use import one_server


def medqa_file(path: Path, n: int, bad_line: int | None = None) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(1, n + 1):
            if i == bad_line:
                f.write('{"question": "truncated\n')
                continue
            f.write(
                json.dumps(
                    {
                        "question": f"Q{i}: second option?",
                        "options": {"A": "a", "B": "b", "C": "c", "D": "d"},
                        "answer_idx": "B",
                        "meta_info": "step1",
                    }
                )
                + "\n"
            )
    return path


# ---- readers ------------------------------------------------------------------------------
def test_iter_lines_splits_at_newlines_only_across_read_chunks(tmp_path, monkeypatch):
    import grandrounds.benchmarks.readers.decoding as readers

    monkeypatch.setattr(readers, "CHUNK", 7)  # lines and multi-byte characters cut across reads
    text = "第一行\u2028同一行\n\nsecond — line\r\nlast without newline"
    p = tmp_path / "t.jsonl"
    p.write_text(text, encoding="utf-8")
    assert [line for _, line in iter_lines(p)] == text.split("\n")
    assert [no for no, _ in iter_lines(p)] == [1, 2, 3, 4]


@pytest.mark.parametrize("encoding", ["utf-16", "gb18030", "utf-8"])
def test_iter_lines_with_a_named_encoding_decodes_incrementally(tmp_path, monkeypatch, encoding):
    import grandrounds.benchmarks.readers.decoding as readers

    monkeypatch.setattr(readers, "CHUNK", 5)
    text = "\ufeff问题一\n问题二：全角，标点\n"
    p = tmp_path / "t.jsonl"
    p.write_bytes(text.encode(encoding))
    with data_encoding(encoding):
        lines = [line for _, line in iter_lines(p)]
    assert lines == ["问题一", "问题二：全角，标点", ""]


def test_iter_lines_names_the_line_a_named_encoding_cannot_decode(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": "\xff"}\n')
    with data_encoding("utf-8"), pytest.raises(DataError) as e:
        list(iter_lines(p))
    assert e.value.where == 3 and "cannot decode as utf-8" in str(e.value)


def test_a_gb18030_file_is_still_read_without_encoding(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(('{"q": "患者男性，45岁，胸痛两小时。"}\n' * 3).encode("gb18030"))
    assert [rec["q"] for _, rec in iter_jsonl(p)] == ["患者男性，45岁，胸痛两小时。"] * 3


def test_limit_reads_only_the_records_it_asks(tmp_path):
    """A malformed record after the limit is never read: the first N are, and only they are checked."""
    data = medqa_file(tmp_path / "big.jsonl", 50, bad_line=12)
    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/b",
                    data=data,
                    limit=10,
                    provider_options={"script": lambda body: "Answer: B"},
                ),
            )
        )
        assert out.result.n == 10 and out.result.score == 1.0
        with pytest.raises(DataError) as e:
            asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="medqa",
                        model="scripted/b",
                        data=data,
                        provider_options={"script": lambda body: "Answer: B"},
                    ),
                )
            )
    assert e.value.where == 12  # the full run refuses the file, before any call
    with sqlite3.connect(tmp_path / "s.db") as con:
        assert con.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 10


# ---- summaries ----------------------------------------------------------------------------
def test_slim_sample_and_grade_drop_only_texts():
    from grandrounds.core.records import Grade, Message, Sample, Verdict, Vote

    smp = Sample(
        id="s",
        benchmark="b",
        messages=(Message("user", "long prompt"),),
        target="A",
        metadata={"k": 1},
    )
    g = Grade(
        sample_id="s",
        value=1.0,
        verdicts=(
            Verdict(
                "c",
                "met",
                "why",
                (Vote(judge="j", status="met", explanation="e", raw="r", keys=("k1",)),),
            ),
        ),
    )
    assert slim_sample(smp).messages == () and slim_sample(smp).metadata == {"k": 1}
    v = slim_grade(g).verdicts[0]
    assert (v.explanation, v.votes[0].raw, v.votes[0].explanation, v.votes[0].keys, v.status) == (
        "",
        "",
        "",
        ("k1",),
        "met",
    )


def test_healthbench_result_equals_the_aggregate_of_full_samples_and_grades(tmp_path):
    """The run aggregates summaries; the same figures come from the full samples and grades."""
    data = shared_file("healthbench", "healthbench_500.jsonl")
    with LoopbackServer(one_server()) as srv, Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            limit=8,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
            options=_grandrounds(),
        )
        out = asyncio.run(run(st, cfg))
        bench = HealthBench()
        full = bench.aggregate(out.samples, out.grades, out.setup.bench.check_options(cfg.options))
    assert out.result.n == 8
    assert (out.result.score, out.result.ci95, out.result.n_unscored) == (
        full.score,
        full.ci95,
        full.n_unscored,
    )
    assert {
        k: {c: cell.score for c, cell in v.items()} for k, v in out.result.breakdown.items()
    } == {k: {c: cell.score for c, cell in v.items()} for k, v in full.breakdown.items()}


def _grandrounds():
    from grandrounds.benchmarks.base import RunOptions

    return RunOptions(protocol="grandrounds")


def test_default_summaries_give_the_same_aggregate_on_an_exam(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/mix",
                    data=data,
                    limit=40,
                    provider_options={"script": lambda body: "Answer: B"},
                ),
            )
        )
        bench = out.setup.bench
        assert type(bench).summarize is Benchmark.summarize
        full = bench.aggregate(
            out.samples,
            out.grades,
            bench.check_options(RunConfig(benchmark="medqa", model="x").options),
        )
    assert (out.result.score, out.result.ci95, out.result.n) == (full.score, full.ci95, full.n)
    assert out.result.extra["n_items"] == 40


# ---- usage in SQL, data checked once ----------------------------------------------------------
def test_usage_counts_each_judge_call_once_from_the_store(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    with LoopbackServer(one_server()) as srv, Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            limit=5,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
            options=_grandrounds(),
        )
        out = asyncio.run(run(st, cfg))
        keys = {k for g in out.grades for _, k in judge_calls(g)}
        answers, judged = out.usage
        assert answers.calls == 5
        assert [(u.who, u.calls) for u in judged] == [("openai/judge", len(keys))]
        again = asyncio.run(run(st, cfg))  # warm: nothing asked, the same calls counted
        assert again.answer_stats.made == 0 and again.usage == out.usage


def count_medqa_reads(monkeypatch) -> list[int]:
    """A list that grows by one each time a run starts reading MedQA's file."""
    from grandrounds.benchmarks.medqa import MedQA

    reads: list[int] = []
    original = MedQA.iter_samples

    def counting(self, root):
        reads.append(1)
        return original(self, root)

    monkeypatch.setattr(MedQA, "iter_samples", counting)
    return reads


def test_data_checked_once_is_read_once_on_a_rerun(tmp_path, monkeypatch):
    import grandrounds.run.samples as samples

    monkeypatch.setattr(samples, "KEEP_SAMPLES", 10)  # 20 records: more than a run holds
    data = medqa_file(tmp_path / "q.jsonl", 20)
    reads = count_medqa_reads(monkeypatch)
    cfg = RunConfig(
        benchmark="medqa",
        model="scripted/b",
        data=data,
        provider_options={"script": lambda body: "Answer: B"},
    )
    with Store(tmp_path / "s.db") as st:
        asyncio.run(run(st, cfg))
        first = len(reads)
        st.db.execute("DELETE FROM settled")  # as after an interrupted run: gone through again
        asyncio.run(run(st, cfg))
        second = len(reads)
        asyncio.run(run(st, cfg))  # finished: its result read back
    # checked, asked, and (MedQA's reference protocol samples) read once more for the items whose
    # prompt an earlier item has, which a sampled run asks apart; then only asked; then neither
    assert (first, second - first, len(reads) - second) == (3, 1, 0)


def test_a_small_file_is_read_once_and_held_a_large_one_streams(tmp_path, monkeypatch):
    """Up to KEEP_SAMPLES, the samples the check pass read are the ones the run asks (one read of
    the file); past it they are let go and the run reads the file again, one record at a time.
    Either way the same calls are made, with the same result."""
    import grandrounds.run.samples as samples

    data = medqa_file(tmp_path / "q.jsonl", 30)
    reads = count_medqa_reads(monkeypatch)
    asked: dict[int, list[str]] = {}
    outs = {}
    for keep in (30, 29):
        monkeypatch.setattr(samples, "KEEP_SAMPLES", keep)
        reads.clear()
        seen = asked.setdefault(keep, [])

        def script(request, seen=seen):
            seen.append(re.search(r"\bQ\d+:", request.messages[-1].content).group(0))
            return "Answer: B"

        with Store(tmp_path / f"s{keep}.db") as st:
            outs[keep] = asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="medqa",
                        model="scripted/b",
                        data=data,
                        provider_options={"script": script},
                    ),
                )
            )
            assert (outs[keep].setup.kept is not None) == (
                keep == 30
            )  # held, or streamed from the file
        # streamed: read again to ask, and once more for repeated prompts (a sampled protocol)
        assert len(reads) == (1 if keep == 30 else 3)
    assert sorted(asked[30]) == sorted(asked[29]) == sorted(f"Q{i}:" for i in range(1, 31))
    assert (
        (outs[30].result.score, outs[30].result.n)
        == (outs[29].result.score, outs[29].result.n)
        == (1.0, 30)
    )


def test_migration_fills_the_judge_calls_of_grades_stored_before_it(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    db = tmp_path / "s.db"
    with LoopbackServer(one_server()) as srv, Store(db) as st:
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            limit=3,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
            options=_grandrounds(),
        )
        out = asyncio.run(run(st, cfg))
        expected = sorted((g.sample_id, k, j) for g in out.grades for j, k in judge_calls(g))
    with sqlite3.connect(db) as con:  # the store as version 6 left it
        con.executescript(
            "DROP TABLE grade_calls; DROP INDEX calls_usage; DROP TABLE checked_data; "
            "DELETE FROM schema_migrations WHERE version = 7;"
        )
    with Store(db) as st:
        rows = sorted(
            tuple(r) for r in st.db.execute("SELECT sample_id, key, judge FROM grade_calls")
        )
    assert [tuple(r) for r in rows] == expected and len(expected) > 3


def test_write_behind_keeps_a_replaced_grades_calls_in_order(tmp_path):
    """A grade's judge calls are deleted and written again with it; buffered writes flushed in
    batches must not run a later grade's delete after its own inserts."""
    from grandrounds.core.records import Grade, Verdict, Vote

    def grade(sid: str, n: int) -> Grade:
        return Grade(
            sample_id=sid,
            value=1.0,
            verdicts=tuple(
                Verdict(
                    f"c{i}", "met", votes=(Vote(judge="j", status="met", keys=(f"{sid}-k{i}",)),)
                )
                for i in range(n)
            ),
        )

    from tests.test_store_api import run_record

    with Store(tmp_path / "s.db") as st:
        st.put_grader("fp", {})
        run = st.ensure_run(run_record()).id
        with st.write_behind(max_rows=4):  # flushes cut through the writes of one grade
            st.put_grade(run, "fp", grade("a", 3))
            st.put_grade(run, "fp", grade("b", 2))
            st.put_grade(run, "fp", grade("b", 2))  # replaced: the same calls again
        rows = sorted(tuple(r) for r in st.db.execute("SELECT sample_id, key FROM grade_calls"))
    assert rows == [("a", "a-k0"), ("a", "a-k1"), ("a", "a-k2"), ("b", "b-k0"), ("b", "b-k1")]
