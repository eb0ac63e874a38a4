"""``--encoding`` names a run of its own (run id, stored run, result fingerprint), only when given,
so the id of every run made without it stays what it was; one file read through two codecs is two
datasets, each run's stored samples its own read's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.hashing import content_hash
from grandrounds.store import Store
from tests.conftest import medqa_records, write_jsonl


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def _runs(db: Path) -> dict[str, Any]:
    with Store(db) as st:
        return {r.id: (r, st.result(r.id, st.latest_grader_fp(r.id))) for r in st.runs()}


def _ident(rec: Any) -> dict[str, Any]:
    """What named a run before ``--encoding`` had a say, read back from its stored record:
    benchmark, model, base URL (none for scripted models), the options that change outputs,
    generation parameters, dataset and limit."""
    options = {
        k: v
        for k, v in rec.options.items()
        if k not in ("bench_params", "limit", "encoding", "engine")
    }
    return {
        "benchmark": rec.benchmark_spec,
        "model": rec.model,
        "base_url": "",
        "options": options,
        "gen": rec.gen_params,
        "dataset": rec.dataset_sha256,
        "limit": rec.options["limit"],
    }


def test_encoding_is_in_the_run_id_only_when_given(tmp_path: Path) -> None:
    rows = medqa_records(4)
    for (
        r
    ) in rows:  # a curly apostrophe (0x92 in Windows-1252, a C1 control in Latin-1) and an accent
        r["question"] = (
            r["question"].replace("'", "\u2019")
            + " He mentions M\u00e9ni\u00e8re\u2019s disease in his father."
        )
    cp1252 = write_jsonl(tmp_path / "cp1252" / "phrases_no_exclude_test.jsonl", rows, "cp1252")
    utf8 = write_jsonl(tmp_path / "utf8" / "phrases_no_exclude_test.jsonl", rows)
    db = tmp_path / "s.db"
    common = ["run", "medqa", "--model", "scripted/cand", "--store", str(db)]

    # no flag: the id is the one the same configuration always had; nothing about encodings is stored
    r = invoke(*common, "--data", str(utf8))
    assert r.exit_code == 0, r.output
    [(plain_id, (plain, plain_result))] = _runs(db).items()
    assert plain_id == content_hash(_ident(plain))[:16]
    assert "encoding" not in plain.options and "encoding" not in plain_result["fingerprint"]

    # the same bytes named as UTF-8: a run of its own, and the fingerprint says how it was read
    r = invoke(*common, "--data", str(utf8), "--encoding", "UTF-8")
    assert r.exit_code == 0, r.output
    named = {k: v for k, v in _runs(db).items() if k != plain_id}
    [(named_id, (rec, result))] = named.items()
    assert named_id != plain_id
    # read through a named codec, the bytes are a dataset of their own (samples stored apart)
    assert rec.dataset_sha256 == content_hash(
        {"dataset": plain.dataset_sha256, "encoding": "utf-8"}
    )
    assert rec.options["encoding"] == result["fingerprint"]["encoding"] == "utf-8"
    assert named_id == content_hash(_ident(rec) | {"encoding": "utf-8"})[:16]

    # one file read as Windows-1252 and as Latin-1: two runs (before, one id for both)
    for enc in (
        "cp1252",
        "latin-1",
        "windows-1252",
    ):  # windows-1252 is cp1252 by another name: no third run
        r = invoke(*common, "--data", str(cp1252), "--encoding", enc)
        assert r.exit_code == 0, r.output
    by_data = [
        (rec, res)
        for rec, res in _runs(db).values()
        if rec.data_source.startswith(str(cp1252.parent))
    ]
    assert sorted(rec.options["encoding"] for rec, _ in by_data) == ["cp1252", "iso8859-1"]
    assert sorted(res["fingerprint"]["encoding"] for _, res in by_data) == ["cp1252", "iso8859-1"]
    assert (
        len({rec.id for rec, _ in by_data}) == 2
        and len({rec.dataset_sha256 for rec, _ in by_data}) == 2
    )
    # the second read really is different text: its answers are other calls, and each run's stored
    # samples (what the viewer, the report and regrade show) are its own read's
    with Store(db) as st:
        prompts = [
            json.dumps(list(st.answer_prompts(rec.id).values()), ensure_ascii=False)
            for rec, _ in by_data
        ]
        stored = [
            json.dumps(
                [s.metadata.get("question") for s in st.samples(rec.benchmark, rec.dataset_sha256)],
                ensure_ascii=False,
            )
            for rec, _ in by_data
        ]
    assert ("Ménière’s" in prompts[0]) != ("Ménière’s" in prompts[1])
    assert [("Ménière’s" in p) for p in prompts] == [("Ménière’s" in q) for q in stored]
