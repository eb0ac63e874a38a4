"""MMLU-Pro health and M-ARC: the real files, TIGER-Lab's (and M-ARC's) prompt byte for byte from the
official single_request, their readings and random fallback against the official functions, and CLI
runs counted independently from the files."""

from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.mmlu_pro import MARC, MMLUProHealth, jitter_ages
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.graders.readings_aj import m_arc_guess, m_arc_letter, mmlu_pro_letter
from grandrounds.run.config import RunConfig, check_run
from tests.conftest import shared_file
from tests.official import load_official
from tests.test_cli import gr

PRO = "mmlu-pro/evaluate_from_api.py"
MARC_API = "m-arc/evaluate_from_api.py"


def pro_rows() -> list[dict]:
    path = shared_file("mmlu-pro-health", "test.jsonl")
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def marc_rows() -> list[dict]:
    with open(shared_file("m-arc", "test_medARCv1.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_real_files_load_with_the_source_notes_counts() -> None:
    pro = MMLUProHealth(shots=0).load(shared_file("mmlu-pro-health", "test.jsonl").parent)
    assert len(pro) == 818 and len({s.id for s in pro}) == 818
    assert Counter(len(s.choices) for s in pro) == {
        10: 597,
        9: 67,
        8: 42,
        7: 21,
        6: 8,
        5: 8,
        4: 72,
        3: 3,
    }
    assert [s.target for s in pro] == [r["answer_idx"] for r in pro_rows()]
    assert pro[0].id == "6001" and pro[0].metadata["src"] == "ori_mmlu-virology"
    marc = MARC(shots=0).load(shared_file("m-arc", "test_medARCv1.csv").parent)
    assert len(marc) == 100 and marc[0].id == "ID001"
    assert Counter(len(s.choices) for s in marc) == {5: 93, 6: 2, 7: 5}
    assert Counter(s.target for s in marc) == {"D": 33, "E": 22, "C": 18, "A": 14, "B": 11, "F": 2}
    assert Counter(s.metadata["src"] for s in marc) == {
        "emergency": 46,
        "general_medicine": 44,
        "neuro_icu": 10,
    }


def validation_rows() -> list[dict]:
    """Stand-ins for MMLU-Pro's validation split (not available here): five health rows, as the real split has, and two of another category."""
    rows = []
    for i in range(7):
        rows.append(
            {
                "question_id": i,
                "category": "health" if i not in (1, 4) else "law",
                "question": f"Example {i}: which nerve?",
                "options": ["Ulnar", "Median", "N/A", "Radial"],
                "answer": "B",
                "answer_index": 1,
                "cot_content": f"A: Let's think step by step. Example {i} reasoning. The answer is (B).",
            }
        )
    return rows


def official_prompt(relpath: str, row: dict, examples: list[dict]) -> str:
    """The text the official single_request sends (instruction + inputs), call_api replaced by a recorder."""
    sent: list[str] = []
    ns = load_official(
        relpath,
        ["single_request", "format_example", "extract_answer", "preprocess"],
        {
            "call_api": lambda client, instruction, inputs: (
                sent.append(instruction + inputs) or "The answer is (A)"
            ),
            "process_age_strings": lambda text: text,
        },
    )
    cot = ns.preprocess([dict(e) for e in examples])
    ns.single_request(None, row, cot, [])
    return sent[0]


@pytest.mark.parametrize("which", ["mmlu-pro", "m-arc"])
def test_reference_prompt_is_the_official_single_request_text(tmp_path: Path, which: str) -> None:
    shots = tmp_path / "validation.jsonl"
    shots.write_text("\n".join(json.dumps(r) for r in validation_rows()), encoding="utf-8")
    if which == "mmlu-pro":
        bench, rel = MMLUProHealth(fewshot=str(shots)), PRO
        samples = bench.load(shared_file("mmlu-pro-health", "test.jsonl"))
        rows = [
            {
                "question_id": r["realidx"],
                "question": r["question"],
                "options": list(r["options"].values()),
                "category": r["category"],
            }
            for r in pro_rows()
        ]
    else:
        bench, rel = MARC(fewshot=str(shots)), MARC_API
        samples = bench.load(shared_file("m-arc", "test_medARCv1.csv"))
        rows = [
            {
                "question_id": r["question_id"],
                "question": r["question"],
                "options": json.loads(r["options"]),
                "category": r["category"],
            }
            for r in marc_rows()
        ]
    for sample, row in list(zip(samples, rows))[::7]:
        assert bench.reference_prompt(sample) == official_prompt(rel, row, validation_rows())
    assert "Example 1" not in bench.reference_prompt(
        samples[0]
    )  # another category's example is left out
    prompt = bench.prompt(samples[0], RunOptions()).messages
    assert (
        len(prompt) == 1
        and prompt[0].role == "user"
        and bench.protocols["reference"].answer.system is None
    )


def test_age_jitter_draws_as_the_official_process_age_strings() -> None:
    ns = load_official(MARC_API, ["process_age_strings"])
    for row in marc_rows()[:30]:
        random.seed(7)
        want = ns.process_age_strings(row["question"])
        assert jitter_ages(row["question"], random.Random(7)) == want
    bench = MARC(shots=0)
    sample = bench.load(shared_file("m-arc", "test_medARCv1.csv"))[0]
    one = bench.prompt(sample, RunOptions(seed=1)).messages[0].content
    assert (
        one
        == bench.prompt(sample, RunOptions(seed=1)).messages[0].content
        != bench.prompt(sample, RunOptions(seed=2)).messages[0].content
    )
    assert re.search(r"A 22\.0\d\d year-old woman", one)
    assert (
        "A 22-year-old woman"
        in bench.prompt(sample, RunOptions(protocol="grandrounds")).messages[0].content
    )


REPLIES = [
    "The answer is (C).",
    "the answer is D",
    "Answer: B",
    "answer: e\nAnswer: F",
    "**The answer is (G)**",
    "I think C.",
    "A or B? Probably B",
    "Final Answer: H",
    "x",
    "",
    "The answer is (K).",
    "Answer:   J",
    "Option (D) is the best course of action.",
    "The best course of action to perform immediately is (E)",
    "best course of action is [B]",
    "So the best next action: (A)",
    "The answer is \\boxed{C}",
    "Therefore, I pick (I).",
    "None of the options",
    "B\nC\nD",
    "answer is (a)",
    "**Answer:** D",
]


def test_readings_agree_with_the_official_extract_answer() -> None:
    pro = load_official(PRO, ["extract_answer", "extract_again", "extract_final"])
    marc = load_official(MARC_API, ["extract_answer"])
    for reply in REPLIES:
        clean = reply.replace("**", "")  # single_request removes it before extract_answer
        assert mmlu_pro_letter(reply) == pro.extract_answer(clean), reply
        assert m_arc_letter(reply) == marc.extract_answer(clean), reply
    print(
        f"mmlu-pro and m-arc readings: {len(REPLIES)}/{len(REPLIES)} replies read as extract_answer reads them"
    )


def test_random_fallback_is_m_arc_update_result(tmp_path: Path) -> None:
    ns = load_official(MARC_API, ["update_result"])
    items = [
        {
            "category": "health",
            "pred": None,
            "options": ["o"] * n,
            "answer_index": k,
            "answer": "ABCDEFG"[k],
        }
        for n in (3, 5, 6, 7)
        for k in range(n)
    ]
    path = tmp_path / "res.json"
    path.write_text(json.dumps(items))
    _, record = ns.update_result(str(path))
    ours = sum(m_arc_guess(len(it["options"])) == it["answer_index"] for it in items)
    assert record["health"]["corr"] == ours and record["health"]["wrong"] == len(items) - ours


def test_cli_runs_count_the_scripted_answers_from_the_files(tmp_path: Path) -> None:
    # "A" is read by MMLU-Pro's last-letter rule, so its accuracy is the share of A keys.
    r = gr(
        "run",
        "mmlu-pro-health",
        "--param",
        "shots=0",
        "--data",
        str(shared_file("mmlu-pro-health", "test.jsonl")),
        "--model",
        "scripted/always-a",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(tmp_path / "pro"),
    )
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "pro" / "results.json").read_text())["results"][0]
    rows = pro_rows()
    assert result["n"] == 818 and result["score"] == pytest.approx(
        sum(x["answer_idx"] == "A" for x in rows) / 818
    )
    src = result["breakdown"]["src"]["ori_mmlu-virology"]
    virology = [x for x in rows if x["src"] == "ori_mmlu-virology"]
    assert src["n"] == 46 and src["score"] == pytest.approx(
        sum(x["answer_idx"] == "A" for x in virology) / 46
    )
    # M-ARC's patterns read nothing in a bare "A": each item scores the option drawn after random.seed(12345).
    r = gr(
        "run",
        "m-arc",
        "--param",
        "shots=0",
        "--data",
        str(shared_file("m-arc", "test_medARCv1.csv")),
        "--model",
        "scripted/always-a",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(tmp_path / "marc"),
    )
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "marc" / "results.json").read_text())["results"][0]
    drawn = 0
    for row in marc_rows():
        random.seed(12345)
        drawn += random.randint(0, len(json.loads(row["options"])) - 1) == int(row["answer_index"])
    assert result["n"] == 100 and result["score"] == pytest.approx(drawn / 100)
    a_keys = sum(row["answer"] == "A" for row in marc_rows())
    assert result["extra"]["other_protocol"]["score"] == pytest.approx(
        a_keys / 100
    )  # ours reads the bare "A"


HF_VALIDATION = "/datasets/TIGER-Lab/MMLU-Pro/resolve/main/data/validation-00000-of-00001.parquet"


def validation_parquet(tmp_path: Path) -> tuple[Path, list[dict]]:
    """MMLU-Pro's validation split: the real file where the data folder holds it, else one built
    here in its format (its columns and types) from :func:`validation_rows`."""
    real = shared_file("mmlu-pro-health", "test.jsonl").parent / "validation-00000-of-00001.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    if real.is_file():
        return real, pq.read_table(real).to_pylist()
    rows = [
        {**r, "answer": "B", "answer_index": 1, "src": f"ori_mmlu-{r['category']}"}
        for r in validation_rows()
    ]
    path = tmp_path / "validation-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path, rows


def test_default_run_downloads_the_validation_split_through_hf_endpoint(
    tmp_path: Path, monkeypatch
) -> None:
    from typer.testing import CliRunner

    from grandrounds.cli.main import app
    from grandrounds.testing import LoopbackServer
    from tests.test_offline import MIRROR_VARS, Mirror, forget

    for var in MIRROR_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    forget()
    parquet, val = validation_parquet(tmp_path)
    rows = {
        str(r["realidx"]): {
            "question_id": r["realidx"],
            "question": r["question"],
            "options": list(r["options"].values()),
            "category": r["category"],
        }
        for r in pro_rows()
    }
    with (
        Mirror({HF_VALIDATION: parquet}) as m,
        LoopbackServer(lambda body: "The answer is (A)", keep_bodies=True) as srv,
    ):
        monkeypatch.setenv("HF_ENDPOINT", m.url)
        args = [
            "run",
            "mmlu-pro-health",
            "--data",
            str(shared_file("mmlu-pro-health", "test.jsonl")),
        ]
        args += ["--model", "openai/cand", "--base-url", srv.base_url, "--limit", "30"]
        args += ["--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "out")]
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert r.exit_code == 0, (r.output, r.exception)
        assert m.hits == [HF_VALIDATION]  # downloaded once, through HF_ENDPOINT
        bodies = list(srv.stats.bodies)
        # fetch and bundle hold it too (the bundle from the cache the run filled: no new download)
        r = CliRunner().invoke(
            app,
            [
                "bundle",
                "--out",
                str(tmp_path / "b"),
                "mmlu-pro-health",
                "--data",
                f"mmlu-pro-health={shared_file('mmlu-pro-health', 'test.jsonl')}",
            ],
        )
        assert r.exit_code == 0, (r.output, r.exception)
        assert m.hits == [HF_VALIDATION]
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    rel = "reference/mmlu-pro-hf/data/validation-00000-of-00001.parquet"
    assert rel in manifest["files"] and (tmp_path / "b" / rel).read_bytes() == parquet.read_bytes()
    result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert result["n"] == 30
    sent = {b["messages"][0]["content"] for b in bodies}
    want = {
        official_prompt(PRO, row, val)
        for row in [
            rows[s["sample_id"]]
            for s in map(json.loads, (tmp_path / "out" / "samples.jsonl").read_text().splitlines())
        ]
    }
    assert len(want) == 30 and sent == want  # byte for byte the official single_request text
    assert all(len(b["messages"]) == 1 for b in bodies)
    print(
        f"mmlu-pro-health default run: {len(sent)}/30 prompts byte-equal to evaluate_from_api.py's"
    )
    # the grandrounds protocol stays zero-shot; M-ARC offers no letter-loglik
    sample = MMLUProHealth().load(shared_file("mmlu-pro-health", "test.jsonl"))[0]
    assert MMLUProHealth().prompt(sample, RunOptions(protocol="grandrounds")).messages
    with pytest.raises(ConfigError, match="letter-loglik"):
        check_run(
            RunConfig(
                benchmark="m-arc",
                model="scripted/x",
                options=RunOptions(answer_mode="letter-loglik"),
            )
        )


def test_a_failed_validation_download_is_one_error_naming_the_ways_out(tmp_path, monkeypatch):
    from tests.test_offline import MIRROR_VARS, Mirror, forget

    for var in MIRROR_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    forget()
    sample = MMLUProHealth().load(shared_file("mmlu-pro-health", "test.jsonl"))[0]
    with Mirror({}) as m:
        monkeypatch.setenv("HF_ENDPOINT", m.url)
        with pytest.raises(DataError, match="HTTP Error 404") as e:
            MMLUProHealth().prompt(sample, RunOptions())
    assert "grandrounds fetch" in str(e.value) and "--protocol grandrounds" in str(e.value)
    forget()


def test_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    rows = pro_rows()[:3]
    rows[2] = {**rows[2], "answer_idx": "Z"}
    bad = tmp_path / "test.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"line 3.*'Z'"):
        MMLUProHealth(shots=0).load(bad)
    text = (
        shared_file("m-arc", "test_medARCv1.csv")
        .read_text(encoding="utf-8")
        .replace(',"[""Amputate the arm""', ',"[""Amputate', 1)
    )
    (tmp_path / "test_medARCv1.csv").write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match="JSON list"):
        MARC(shots=0).load(tmp_path)


@pytest.mark.parametrize("mode", ["text-loglik", "next-token"])
def test_log_prob_modes_score_up_to_ten_options(tmp_path: Path, mode: str) -> None:
    import asyncio

    from grandrounds.run.runner import run
    from grandrounds.store import Store

    rows = pro_rows()

    def script(req):  # the last continuation (the last option) scores highest
        return {c: float(i) for i, c in enumerate(req.continuations)}

    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="mmlu-pro-health",
                    model="scripted/last",
                    bench_params={"shots": 0},
                    data=shared_file("mmlu-pro-health", "test.jsonl"),
                    options=RunOptions(answer_mode=mode),
                    provider_options={"script": script},
                ),
            )
        )
    last = sum(r["answer_idx"] == list(r["options"])[-1] for r in rows)
    assert out.result.n == 818 and out.result.score == pytest.approx(last / 818)


def _loopback_run(tmp_path: Path, bench: str, data: Path, reply: str, *extra: str):
    from typer.testing import CliRunner

    from grandrounds.cli.main import app
    from grandrounds.testing import LoopbackServer

    out = tmp_path / f"out-{bench}-{len(extra)}"
    with LoopbackServer(lambda body: reply, keep_bodies=True) as srv:
        args = ["run", bench, "--param", "shots=0", "--data", str(data), "--model", "openai/cand"]
        args += ["--base-url", srv.base_url, "--store", str(tmp_path / "s.db"), "--out", str(out)]
        r = CliRunner().invoke(app, [*args, *extra], env={"COLUMNS": "200"})
        bodies = list(srv.stats.bodies)
    assert r.exit_code == 0, (r.output, r.exception)
    result = json.loads((out / "results.json").read_text())["results"][0]
    return result, bodies, r.output


def test_results_count_the_right_answers_from_the_random_fallback(tmp_path: Path) -> None:
    # "not sure" holds no standalone capital letter: neither script reads a letter in it, and
    # every item is scored by the option each draws (M-ARC: random.seed(12345) then randint)
    ns = load_official(MARC_API, ["update_result"])
    items = [
        {
            "category": "health",
            "pred": None,
            "options": json.loads(r["options"]),
            "answer_index": int(r["answer_index"]),
            "answer": r["answer"],
        }
        for r in marc_rows()
    ]
    path = tmp_path / "res.json"
    path.write_text(json.dumps(items))
    _, record = ns.update_result(str(path))
    right = int(record["health"]["corr"])
    result, _, output = _loopback_run(
        tmp_path, "m-arc", shared_file("m-arc", "test_medARCv1.csv"), "not sure"
    )
    fb = result["extra"]["reference_fallback"]
    assert (fb["n"], fb["right"]) == (100, right) and result["score"] == pytest.approx(right / 100)
    chance = sum(1 / len(it["options"]) for it in items)
    assert fb["expected_right"] == pytest.approx(chance, abs=1e-3)
    assert (
        f"100 replies read no letter and were scored by a random option, {right} of them right"
        in output
    )
    # a model that answers: nothing drawn, nothing said
    result, _, output = _loopback_run(
        tmp_path, "m-arc", shared_file("m-arc", "test_medARCv1.csv"), "The answer is (D)"
    )
    assert "reference_fallback" not in result["extra"] and "reference fallback" not in output
    print(
        f"m-arc, no readable reply: {right}/100 right, all from the fallback (chance {chance:.1f})"
    )


def test_sampled_runs_ask_identical_prompts_of_different_items_apart(tmp_path: Path) -> None:
    rows = pro_rows()
    distinct = len({(r["question"], tuple(r["options"].values())) for r in rows})
    data = shared_file("mmlu-pro-health", "test.jsonl")
    _, greedy, _ = _loopback_run(tmp_path, "mmlu-pro-health", data, "The answer is (A)")
    _, sampled, _ = _loopback_run(
        tmp_path, "mmlu-pro-health", data, "The answer is (A)", "--temperature", "0.7"
    )
    # greedy: one call per distinct prompt (identical prompts share a reply); sampled: every item
    assert len(greedy) == distinct < 818 and len(sampled) == 818
    print(f"mmlu-pro-health: greedy {len(greedy)} calls ({818 - distinct} shared), sampled 818")
