"""Protocol presets, official text read from upstream files, and truncation counted.

- ``--protocol reference`` is the default; each preset's generation settings reach the requests;
  an explicit flag wins and is recorded as a deviation; the protocol is in the fingerprint and the
  run id, and the leaderboard never ranks results of two protocols in one setting.
- Official text is read out of the pinned upstream file (sha256-checked): from a reference folder
  or the cache, never from our source; a changed file is refused with its name.
- A reply cut off by the token limit is recorded and counted as ``n_truncated`` (answers) and
  ``n_truncated_judge`` (judge votes), also after a resume from the store.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.collect import result_rows
from grandrounds.analyses.leaderboard import leaderboard
from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.sources.protocols import Generation, Protocol
from grandrounds.sources.upstream import (
    REFERENCE_ENV,
    TextRef,
    UpstreamFile,
    UpstreamRepo,
    python_dict_string,
    python_string,
    read_text,
    yaml_value,
)
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer, Reply, last_user_text
from tests.conftest import reference_file
from tests.rubric_bench.triage import TriageRubric

ROOT = Path(__file__).resolve().parents[1]


def sources() -> dict[tuple[str, str], dict[str, str]]:
    """(folder, path) -> the SOURCES.tsv row."""
    with reference_file("SOURCES.tsv").open(encoding="utf-8") as fh:
        return {(r["dir"], r["path"]): r for r in csv.DictReader(fh, delimiter="\t")}


def upstream(folder: str, path: str) -> UpstreamFile:
    row = sources()[(folder, path)]
    return UpstreamRepo(folder, row["repository"], row["commit"]).file(path, row["sha256"])


# ---- reading official text ------------------------------------------------------------------
def test_reads_a_stripped_triple_quoted_constant_byte_for_byte(official_reference):
    f = upstream("simple-evals", "healthbench_eval.py")
    t = python_string(f, "GRADER_TEMPLATE")
    source = read_text(f)
    assert (
        t.text and t.text == t.text.strip() and t.text in source
    )  # the literal, ends stripped as .strip() does
    assert "<<conversation>>" in t.text and t.fields == ()
    assert t.fingerprint()["sha256"] == sources()[("simple-evals", "healthbench_eval.py")]["sha256"]


def test_reads_format_placeholders_and_renders_them(official_reference):
    t = python_string(upstream("simple-evals", "common.py"), "QUERY_TEMPLATE_MULTICHOICE")
    filled = t.text.format(Question="Q?", A="a", B="b", C="c", D="d")
    assert "Q?" in filled and "A) a" in filled


def test_f_string_placeholders_are_named_by_their_expression(tmp_path, monkeypatch):
    folder = tmp_path / "ref" / "demo"
    folder.mkdir(parents=True)
    src = 'X = 1\ndef build(row):\n    prompt = f"Note: {row[\'Note\']}\\nAsk {q}?" "  done"\n    return prompt\n'
    (folder / "mod.py").write_text(src, encoding="utf-8")
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "ref"))
    from grandrounds.core.hashing import file_sha256

    f = UpstreamRepo("demo", "o/r", "c" * 40).file("mod.py", file_sha256(folder / "mod.py"))
    t = python_string(f, "prompt", within="build")
    assert t.fields == ("row['Note']", "q")
    assert t.render({"row['Note']": "N1", "q": "why"}) == "Note: N1\nAsk why?  done"
    with pytest.raises(ConfigError, match="needs values for q"):
        t.render({"row['Note']": "N1"})
    with pytest.raises(DataError, match="no string assigned to 'missing'"):
        python_string(f, "missing")
    with pytest.raises(DataError, match="expected a string literal, found Constant"):
        python_string(f, "X")


def test_dict_entries_and_yaml_keys(tmp_path, monkeypatch, official_reference):
    folder = tmp_path / "ref" / "demo"
    folder.mkdir(parents=True)
    (folder / "p.py").write_text('PROMPTS = {"a": "first", "b": "sec" "ond"}\n', encoding="utf-8")
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "ref"))
    from grandrounds.core.hashing import file_sha256

    f = UpstreamRepo("demo", "o/r", "c" * 40).file("p.py", file_sha256(folder / "p.py"))
    assert python_dict_string(f, "PROMPTS", "b").text == "second"
    monkeypatch.setenv(REFERENCE_ENV, str(official_reference))
    y = upstream("lm-eval", "lm_eval/tasks/medqa/medqa.yaml")
    assert yaml_value(y, "doc_to_choice") == ["A", "B", "C", "D"]
    assert yaml_value(y, "doc_to_text") == {"!function": "preprocess_medqa.doc_to_text"}


def test_a_changed_upstream_file_is_refused_with_its_name(
    tmp_path, monkeypatch, official_reference
):
    src = official_reference / "simple-evals" / "common.py"
    folder = tmp_path / "ref" / "simple-evals"
    folder.mkdir(parents=True)
    (folder / "common.py").write_text(
        src.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8"
    )
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "ref"))
    f = replace(
        upstream("simple-evals", "common.py"), commit="f" * 40
    )  # not read before in this process
    with pytest.raises(DataError, match=r"common\.py: does not match the pinned upstream file"):
        python_string(f, "QUERY_TEMPLATE_MULTICHOICE")


def test_the_cache_serves_when_no_reference_folder_is_set(
    tmp_path, monkeypatch, official_reference
):
    monkeypatch.delenv(REFERENCE_ENV)
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    f = replace(
        upstream("pubmedqa", "evaluation.py"), commit="d" * 40
    )  # a commit not read before in this process
    dest = tmp_path / "cache" / "reference" / "pubmedqa" / "evaluation.py"
    dest.parent.mkdir(parents=True)
    dest.write_bytes((official_reference / "pubmedqa" / "evaluation.py").read_bytes())
    assert read_text(f) == dest.read_text(encoding="utf-8")


def test_every_pinned_upstream_file_in_the_source_matches_sources_tsv(official_reference):
    """Each UpstreamFile the project declares, in a repository the reference folder holds, names a
    SOURCES.tsv row: same repository, commit and sha256. (A Hugging Face file a reference protocol
    needs, MMLU-Pro's validation split, is data, not reference code: it is checked by its first
    download's sha256.)"""
    from tests.test_pins import declared_files

    rows = sources()
    held = {folder for folder, _ in rows}
    checked = 0
    for f in declared_files():
        if f.hub != "github" or f.folder not in held:
            continue
        row = rows.get((f.folder, f.path))
        assert row is not None, f"{f.folder}/{f.path} is not in SOURCES.tsv"
        assert (row["repository"], row["commit"], row["sha256"]) == (f.repo, f.commit, f.sha256)
        checked += 1
    assert checked >= 50


def test_no_official_template_text_is_pasted_into_the_source(official_reference):
    """Official prompt constants are read at run time, never copied: no long line of them appears in src/."""
    ours = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (ROOT / "src" / "grandrounds").rglob("*")
        if p.suffix in (".py", ".txt")
    )
    checks = [
        (upstream("simple-evals", "healthbench_eval.py"), "GRADER_TEMPLATE"),
        (upstream("simple-evals", "common.py"), "QUERY_TEMPLATE_MULTICHOICE"),
    ]
    for f, name in checks:
        for line in python_string(f, name).text.splitlines():
            if len(line) > 60:
                assert line not in ours, f"{name} line pasted into the source: {line[:50]}..."


# ---- presets reach the requests; deviations are recorded --------------------------------------
ROWS = [
    {
        "id": "t1",
        "question": "Chest pain for 20 minutes.",
        "urgency": "emergency",
        "rubric": [{"text": "Advises calling emergency services", "points": 5}],
    }
]


class PresetTriage(TriageRubric):
    """The triage benchmark with two presets that differ in every generation setting."""

    name = "preset-triage"
    protocols: ClassVar = {
        "reference": Protocol(
            name="reference",
            answer=Generation(
                temperature=0.5, max_tokens=2048, system="You are a careful triage nurse."
            ),
            judge=Generation(temperature=0.5, max_tokens=512),
            source="test",
        ),
        "grandrounds": Protocol(name="grandrounds"),
    }


def judge_rule(body: dict) -> str:
    assert "Advises calling" in last_user_text(body)
    return json.dumps({"explanation": "ok", "criteria_met": True})


@pytest.fixture
def triage_data(tmp_path: Path) -> Path:
    path = tmp_path / "triage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    return path


def _run(store_path: Path, data: Path, cand: LoopbackServer, judge: LoopbackServer, **kw) -> object:
    import asyncio

    cfg = RunConfig(
        benchmark="preset-triage",
        model="openai/cand",
        data=data,
        base_url=cand.base_url,
        judges=(JudgeConfig(spec="openai/judge", base_url=judge.base_url),),
        **kw,
    )
    with Store(store_path) as st:
        return asyncio.run(run(st, cfg))


def test_reference_preset_is_the_default_and_reaches_every_request(
    tmp_path, triage_data, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with (
        BENCHMARKS.registered("preset-triage", PresetTriage),
        LoopbackServer(lambda b: "Call 911.", keep_bodies=True) as cand,
        LoopbackServer(judge_rule, keep_bodies=True) as judge,
    ):
        out = _run(tmp_path / "s.db", triage_data, cand, judge)
        body = cand.stats.bodies[0]
        assert (body["temperature"], body["max_tokens"]) == (0.5, 2048)
        assert body["messages"][0] == {
            "role": "system",
            "content": "You are a careful triage nurse.",
        }
        jbody = judge.stats.bodies[0]
        assert (jbody["temperature"], jbody["max_tokens"]) == (0.5, 512)
        fp = out.result.fingerprint
        assert fp["protocol"]["name"] == "reference" and fp["protocol"]["deviations"] == {}
        assert fp["protocol"]["answer"]["system"] == "You are a careful triage nurse."
        assert out.result.extra["n_truncated"] == 0 and out.result.extra["n_truncated_judge"] == 0

        ours = _run(
            tmp_path / "s.db", triage_data, cand, judge, options=RunOptions(protocol="grandrounds")
        )
        body = cand.stats.bodies[-1]
        assert (body["temperature"], body["max_tokens"]) == (0.0, 1024) and body["messages"][0][
            "role"
        ] == "user"
        assert (
            ours.run.id != out.run.id
            and ours.result.fingerprint["protocol"]["name"] == "grandrounds"
        )

        dev = _run(
            tmp_path / "s.db",
            triage_data,
            cand,
            judge,
            gen_overrides={"temperature": 0.2, "max_tokens": None},
            judge_overrides={"max_tokens": 300},
        )
        assert (
            cand.stats.bodies[-1]["temperature"] == 0.2
            and cand.stats.bodies[-1]["max_tokens"] == 2048
        )
        assert judge.stats.bodies[-1]["max_tokens"] == 300
        deviations = dev.result.fingerprint["protocol"]["deviations"]
        assert deviations["answer"] == {"temperature": {"preset": 0.5, "used": 0.2}}
        assert deviations["judges"] == {
            "openai/judge": {"max_tokens": {"preset": 512, "used": 300}}
        }

        with Store(tmp_path / "s.db") as st:
            boards = leaderboard(result_rows(st))
        protos = {(e.row.protocol, e.setting) for b in boards for e in b.entries}
        assert {p for p, _ in protos} == {"reference", "grandrounds", "reference*"}
        assert len({s for _, s in protos}) == 3  # three settings: never ranked against each other


def test_an_unknown_protocol_is_a_one_line_error_before_any_call(tmp_path, triage_data):
    runner = CliRunner()
    with (
        BENCHMARKS.registered("preset-triage", PresetTriage),
        LoopbackServer(lambda b: "x") as cand,
    ):
        r = runner.invoke(
            app,
            [
                "run",
                "preset-triage",
                "--data",
                str(triage_data),
                "--model",
                "openai/c",
                "--base-url",
                cand.base_url,
                "--judge",
                f"openai/j@{cand.base_url}",
                "--protocol",
                "referense",
                "--store",
                str(tmp_path / "s.db"),
            ],
        )
        assert (
            r.exit_code == 2
            and "unknown --protocol 'referense'" in r.output
            and "did you mean reference?" in r.output
        )
        assert cand.stats.requests == 0


def test_the_protocols_judge_is_the_default_judge(tmp_path, triage_data, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    with (
        LoopbackServer(judge_rule, keep_bodies=True) as judge,
        LoopbackServer(lambda b: "Call 911.") as cand,
    ):

        class NamedJudge(PresetTriage):
            name = "preset-triage"
            protocols: ClassVar = {
                "reference": replace(
                    PresetTriage.protocols["reference"],
                    judge_model=f"openai/official-judge@{judge.base_url}",
                ),
                "grandrounds": Protocol(name="grandrounds"),
            }

        import asyncio

        with BENCHMARKS.registered("preset-triage", NamedJudge), Store(tmp_path / "s.db") as st:
            out = asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="preset-triage",
                        model="openai/cand",
                        data=triage_data,
                        base_url=cand.base_url,
                    ),
                )
            )
        assert out.result.judge.startswith("openai/official-judge")
        assert judge.stats.bodies[0]["model"] == "official-judge"


# ---- truncation -------------------------------------------------------------------------------
def test_truncated_answers_and_judge_replies_are_counted_and_survive_resume(
    tmp_path, triage_data, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    def cut_judge(body: dict) -> Reply:
        return Reply(
            text=json.dumps({"explanation": "ok", "criteria_met": True}), finish_reason="length"
        )

    with (
        BENCHMARKS.registered("preset-triage", PresetTriage),
        LoopbackServer(lambda b: Reply(text="Call 9", finish_reason="length")) as cand,
        LoopbackServer(cut_judge) as judge,
    ):
        first = _run(tmp_path / "s.db", triage_data, cand, judge)
        assert (
            first.result.extra["n_truncated"] == 1 and first.result.extra["n_truncated_judge"] == 1
        )
        assert first.responses["t1"].finish_reason == "length"
        again = _run(tmp_path / "s.db", triage_data, cand, judge)  # from the store: no call made
        assert cand.stats.requests == 1
        assert again.responses["t1"].cached and again.responses["t1"].truncated
        assert (
            again.result.extra["n_truncated"] == 1 and again.result.extra["n_truncated_judge"] == 1
        )


def test_scripted_provider_reports_a_finish_reason():
    import asyncio

    from grandrounds.core.records import Message, Request
    from grandrounds.providers.base import ModelSpec
    from grandrounds.providers.scripted import ScriptedProvider

    p = ScriptedProvider(ModelSpec.parse("scripted/x"), script=lambda r: ("cut", "length"))
    resp = asyncio.run(
        p.call(Request(provider="scripted", model="x", messages=(Message("user", "q"),)))
    )
    assert resp.text == "cut" and resp.truncated
    p2 = ScriptedProvider(ModelSpec.parse("scripted/x"))
    assert not asyncio.run(
        p2.call(Request(provider="scripted", model="x", messages=(Message("user", "q"),)))
    ).truncated


def test_text_refs_read_nothing_until_loaded(monkeypatch, tmp_path):
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    ref = TextRef(UpstreamRepo("x", "o/r", "e" * 40).file("a.py", "0" * 64), "T")
    g = Generation(system=ref)
    from grandrounds.sources.protocols import Protocol as P

    assert (
        P(name="reference", answer=g).describe()["answer"]["system"]["name"] == "T"
    )  # described without reading
