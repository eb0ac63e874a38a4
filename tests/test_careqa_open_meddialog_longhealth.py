"""careqa-open, meddialog, longhealth: no copy of their data in ../shared, so each is tested on small files
written here in the dataset's published layout, run through the real CLI with a scripted model (and a
scripted judge for the judged two) whose score is computed independently, fed bad input, and compared
with the peer's own code (Medmarks' environment files, loaded with ast out of a local snapshot of
tmabraham/med-lm-envs) on document selection, prompts and judge-reply arithmetic.

The reference protocols read Medmarks' files at run time: the tests take them from the local snapshot
when present (skipped otherwise); ``--protocol grandrounds`` runs need none."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.careqa_open import CareQAOpen
from grandrounds.benchmarks.longhealth import ENV as LH_ENV
from grandrounds.benchmarks.longhealth import LongHealth
from grandrounds.benchmarks.meddialog import MedDialog
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.careqa_open_grader import combine, medmarks_literal, verdicts
from grandrounds.graders.medicationqa_grader import dimension_scores, normalized
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.sources.careqa_open import ENV as CAREQA_ENV
from grandrounds.sources.careqa_open import answer_section, candidate_system, parser_tags
from grandrounds.sources.meddialog import ENVIRONMENT as MD_ENV
from grandrounds.sources.meddialog import JUDGE_PROMPTS as MD_JUDGE
from grandrounds.sources.protocols import system_text
from tests.exam_cli import cli_run
from tests.test_careqa_metamedqa_supergpqa_taiwan import write_json, write_jsonl
from tests.test_kormedmcqa_cmexam_medconceptsqa import load_official, upstream_bytes

UPSTREAM = (CAREQA_ENV, MD_ENV, MD_JUDGE, LH_ENV)


@pytest.fixture()
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reference folder holding Medmarks' files, from the local snapshot of tmabraham/med-lm-envs."""
    root = tmp_path / "ref"
    for f in UPSTREAM:
        dest = root / f.folder / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(upstream_bytes(f))
        assert file_sha256(dest) == f.sha256, f.path
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(root))
    return root


# ---- files in the published layouts ---------------------------------------------------------------

CAREQA_OPEN = [
    {
        "exam_id": 1,
        "question": "Which vitamin deficiency causes scurvy? ",
        "answer": "Vitamin C deficiency.",
        "year": 2020,
        "category": "medicine",
        "unique_id": "o1",
    },
    {
        "exam_id": 2,
        "question": "What is the normal adult resting heart rate range?",
        "answer": "60 to 100 beats per minute.",
        "year": 2021,
        "category": "nursing",
        "unique_id": "o2",
    },
    {
        "exam_id": 3,
        "question": "Which enzyme fixes CO₂ in the Calvin cycle?",
        "answer": "RuBisCO.",
        "year": 2021,
        "category": "biology",
        "unique_id": "o3",
    },
    {
        "exam_id": 4,
        "question": "Drug class of atenolol?",
        "answer": "A cardioselective beta-blocker.",
        "year": 2022,
        "category": "pharmacology",
        "unique_id": "o4",
    },
    {
        "exam_id": 5,
        "question": "pH of pure water at 25 °C?",
        "answer": "",
        "year": 2022,
        "category": "chemistry",
        "unique_id": "o5",
    },
]


def meddialog_rows(subset: str) -> list[dict]:
    convs = [
        (
            "I get cramps in my left forearm when I bend my arm. Could a pinched nerve in my neck cause it?",
            "Could forearm cramps be due to a pinched nerve in the neck?",
        ),
        (
            "My friend has severe pain above both kneecaps; his MRI shows a meniscus tear. What should he do?",
            "Please interpret my friend's knee MRI report.",
        ),
        (
            "I have had a dry cough for three weeks after a cold. Is this normal?",
            "Is a three-week cough after a cold normal?",
        ),
    ]
    return [
        {
            "id": i + (100 if subset == "icliniq" else 0),
            "src": f"Patient ({subset}): {s}\nDoctor: Hi, thanks for the query.",
            "tgt": t,
        }
        for i, (s, t) in enumerate(convs)
    ]


def write_meddialog(root: Path, rows: dict[str, list[dict]] | None = None) -> Path:
    for subset in ("healthcaremagic", "icliniq"):
        (root / subset).mkdir(parents=True, exist_ok=True)
        (root / subset / "test.json").write_text(
            json.dumps({"data": (rows or {}).get(subset, meddialog_rows(subset))}), encoding="utf-8"
        )
    return root


def longhealth_bench(patients: int = 4, questions: int = 3) -> dict:
    rng = random.Random(7)
    out = {}
    for p in range(1, patients + 1):
        pid = f"patient_{p:02d}"
        texts = {
            f"text_{t}": f"[{pid} document {t}] "
            + " ".join(f"w{rng.randint(0, 999)}" for _ in range(rng.randint(300, 2600)))
            for t in range(rng.randint(3, 6))
        }
        qs = []
        for n in range(1, questions + 1):
            opts = {f"answer_{L}": f"{pid} q{n} option {L}" for L in "abcde"}
            loc = {
                f"text_{(n + k) % len(texts)}": {"start": [1], "end": [5]} for k in range(1 + n % 2)
            }
            qs.append(
                {
                    "No": n,
                    "question": f"What did {pid} receive (question {n})?",
                    **opts,
                    "correct": opts[f"answer_{'abcde'[(p + n) % 5]}"],
                    "answer_location": loc,
                }
            )
        out[pid] = {
            "name": f"Name {p}",
            "birthday": "1970-01-01",
            "diagnosis": "Dx",
            "texts": texts,
            "questions": qs,
        }
    return out


def write_longhealth(path: Path, bench: dict | None = None) -> Path:
    path.write_text(json.dumps(bench or longhealth_bench(), ensure_ascii=False), encoding="utf-8")
    return path


# ---- loading -----------------------------------------------------------------------------------------


def test_files_load_with_their_counts_keys_and_breakdown_labels(tmp_path: Path) -> None:
    care = CareQAOpen().load(write_json(tmp_path / "CareQA_en_open.json", CAREQA_OPEN).parent)
    assert [s.id for s in care] == ["o1", "o2", "o3", "o4", "o5"] and care[0].metadata[
        "question"
    ] == "Which vitamin deficiency causes scurvy?"
    assert (
        care[1].target == "60 to 100 beats per minute."
        and care[4].target == ""
        and care[2].metadata["category"] == "biology"
    )
    write_jsonl(
        tmp_path / "CareQA_en_open.json",
        [{**r, "answer_explanation": f"Because {r['answer']}"} for r in CAREQA_OPEN],
    )
    assert (
        CareQAOpen().load(tmp_path)[0].target == "Because Vitamin C deficiency."
    )  # Medmarks prefers answer_explanation

    md = MedDialog().load(write_meddialog(tmp_path / "md"))
    assert (
        len(md) == 6
        and [s.id for s in md[:2]] == ["healthcaremagic-0", "healthcaremagic-1"]
        and md[3].id == "icliniq-100"
    )
    assert md[4].metadata["subset"] == "icliniq" and md[0].target.startswith("Could forearm")
    assert len(MedDialog(subsets=["icliniq"]).load(tmp_path / "md")) == 3
    assert len(MedDialog().load(tmp_path / "md" / "icliniq" / "test.json")) == 3

    lh = LongHealth().load(write_longhealth(tmp_path / "benchmark_v5.json"))
    assert (
        len(lh) == 12 and {len(s.choices) for s in lh} == {5} and lh[0].id == "patient_01-1-task1"
    )
    bench = longhealth_bench()
    assert [s.target for s in lh[:3]] == ["ABCDE"[(1 + n) % 5] for n in (1, 2, 3)]
    assert all(
        any(
            bench[s.metadata["patient"]]["texts"][t] in s.metadata["documents"]
            for t in bench[s.metadata["patient"]]["questions"][0]["answer_location"]
        )
        for s in lh[:1]
    )


def test_longhealth_parameters_change_the_items_and_the_spec(
    tmp_path: Path, reference: Path
) -> None:
    path = write_longhealth(tmp_path / "benchmark_v5.json")
    t2 = LongHealth(task="task2").load(path)
    assert (
        len(t2) == 24
        and {len(s.choices) for s in t2} == {6}
        and {s.metadata["task"] for s in t2} == {"task2_negation", "task2_identification"}
    )
    assert all(s.target == "F" for s in t2 if s.metadata["task"] == "task2_negation")
    assert len(LongHealth(task="all").load(path)) == 36
    a, b = LongHealth().load(path), LongHealth(doc_seed=1).load(path)
    assert [s.metadata["documents"] for s in a] != [s.metadata["documents"] for s in b]
    assert [s.metadata["documents"] for s in a] == [
        s.metadata["documents"] for s in LongHealth().load(path)
    ]  # seeded: repeatable
    small = LongHealth(max_context_tokens=500).load(path)
    assert all(sum(map(len, s.metadata["documents"])) <= 2000 for s in small)
    assert LongHealth(doc_seed=1).spec().args != LongHealth().spec().args


# ---- differential: Medmarks' own code ----------------------------------------------------------------------


def _medmarks_longhealth():
    official = load_official(
        upstream_bytes(LH_ENV).decode(),
        [
            "_build_longhealth_prompt",
            "_simple_truncate_documents",
            "_maybe_shuffle_options",
            "_prepare_task1_data",
            "_sample_distraction_docs",
            "_prepare_task2_data",
            "LONGHEALTH_SYSTEM_PROMPT",
        ],
    )
    return official


@pytest.mark.parametrize(
    "task, budget, seed",
    [("task1", 16000, 2718), ("task2", 16000, 2718), ("task1", 3000, 5), ("task2", 900, 9)],
)
def test_longhealth_items_and_prompts_equal_medmarks(
    tmp_path: Path, reference: Path, task: str, budget: int, seed: int
) -> None:
    official = _medmarks_longhealth()
    bench = longhealth_bench(5, 4)
    prepare = official._prepare_task1_data if task == "task1" else official._prepare_task2_data
    theirs = prepare(bench, budget, True, seed, False, 1618)
    ours = LongHealth(task=task, max_context_tokens=budget, doc_seed=seed).load(
        write_longhealth(tmp_path / "b.json", bench)
    )
    assert len(ours) == len(theirs)
    same = 0
    for s, t in zip(ours, theirs):
        prompt = LongHealth().prompt(s, RunOptions()).messages[-1].content
        assert prompt == t["question"] and s.target == t["answer"], s.id
        same += 1
    assert (
        system_text(LongHealth.protocols["reference"].answer) == official.LONGHEALTH_SYSTEM_PROMPT
    )
    print(
        f"longhealth {task} budget {budget} seed {seed}: {same}/{len(theirs)} items with Medmarks' documents, order, prompt and answer"
    )


MED_REPLIES = [
    "<analysis>ok</analysis><semantically_correct>true</semantically_correct><matches_details>false</matches_details>"
    "<substantive_addition>false</substantive_addition><critical_error>false</critical_error>",
    "<semantically_correct> True </semantically_correct><matches_details>TRUE</matches_details>"
    "<substantive_addition>true</substantive_addition><critical_error>true</critical_error>",
    "<semantically_correct>[true/false]</semantically_correct><matches_details>not true</matches_details>"
    "<substantive_addition>False.</substantive_addition><critical_error>no</critical_error>",
    "<semantically_correct>true</semantically_correct><matches_details>true</matches_details><critical_error>false</critical_error>",
    "<semantically_correct>yes</semantically_correct><matches_details>yes</matches_details>"
    "<substantive_addition>no</substantive_addition><critical_error>no</critical_error>",
    "The answer is correct.",
    "",
    "<extraneous_information>true</extraneous_information><semantically_correct>true</semantically_correct>",
    "<semantically_correct>\ntrue\n</semantically_correct>\n<matches_details>\nfalse\n</matches_details>\n"
    "<substantive_addition>\nfalse\n</substantive_addition>\n<critical_error>\ntrue\n</critical_error>",
]


def _medmarks_careqa_score(official: SimpleNamespace, text: str, fields: tuple[str, ...]) -> float:
    """Medmarks' accuracy() on a judge reply: its XMLParser (stood in for: each declared tag's text, else None)
    and its own parse_rubric_scores, with verifiers' get_parsed_field stood in for by getattr."""
    ns = SimpleNamespace(
        **{
            f: (m.group(1) if (m := re.search(rf"<{f}>\s*(.*?)\s*</{f}>", text, re.S)) else None)
            for f in fields
        }
    )
    official.parse_rubric_scores.__globals__["get_parsed_field"] = lambda n, name, default: getattr(
        n, name, default
    )
    p = official.parse_rubric_scores
    return (
        p(ns, "semantically_correct")
        + p(ns, "matches_details")
        + p(ns, "substantive_addition", invert=True)
        + p(ns, "critical_error", invert=True)
    ) / 4.0


def test_careqa_open_judge_arithmetic_matches_medmarks(reference: Path) -> None:
    official = load_official(
        upstream_bytes(CAREQA_ENV).decode(),
        ["parse_rubric_scores", "extract_answer_section", "JUDGE_TEMPLATE"],
    )
    fields = parser_tags()
    assert "substantive_addition" not in fields  # the quirk the module documents
    all_four = ("semantically_correct", "matches_details", "substantive_addition", "critical_error")
    agree_literal = agree_intended = 0
    for reply in MED_REPLIES:
        assert medmarks_literal(reply, fields) == _medmarks_careqa_score(official, reply, fields), (
            reply
        )
        agree_literal += 1
        got = verdicts(reply, "reference")
        if (
            got is not None
        ):  # all four tags present: our value is Medmarks' formula read with every tag the prompt asks for
            assert combine(got) == _medmarks_careqa_score(official, reply, all_four), reply
            agree_intended += 1
    for text in [
        "plain",
        "<think>a</think>answer",
        "x<think>a</think>b</think> c",
        "<think>open only",
        "  ",
    ]:
        assert answer_section(text) == official.extract_answer_section(text)
    print(
        f"careqa-open: Medmarks' literal figure equal on {agree_literal}/{len(MED_REPLIES)} judge replies; "
        f"the four-tag value equal on {agree_intended}/{agree_intended} replies with all four tags"
    )


def test_meddialog_arithmetic_matches_medmarks(reference: Path) -> None:
    official = load_official(
        upstream_bytes(MD_ENV).decode(),
        ["JUDGE_DIMENSIONS", "_coerce_score", "_compute_normalized_reward", "PROMPT"],
    )
    cases = [
        {"accuracy": {"score": 4}, "completeness": {"score": "3"}, "clarity": {"score": 7}},
        {"accuracy": {"score": -1}, "completeness": {"score": 2.5}, "clarity": {"score": " 5 "}},
        {"accuracy": {"score": 5}, "completeness": {"score": "n/a"}, "clarity": {"score": None}},
    ]
    for c in cases:
        scores = dimension_scores(json.dumps(c))
        theirs = official._compute_normalized_reward(c)
        ours = (
            normalized(scores) if scores is not None else 0.0
        )  # an unreadable vote is unknown for us, 0 for Medmarks
        assert scores is None or ours == pytest.approx(theirs), c
    assert system_text(MedDialog.protocols["reference"].answer) == official.PROMPT
    print(f"meddialog: {len(cases)} judge score sets read with Medmarks' arithmetic")


def test_reference_prompts_are_medmarks_texts(tmp_path: Path, reference: Path) -> None:
    official = load_official(upstream_bytes(CAREQA_ENV).decode(), ["JUDGE_TEMPLATE"])
    care = CareQAOpen().load(write_json(tmp_path / "CareQA_en_open.json", CAREQA_OPEN).parent)[0]
    msgs = CareQAOpen().prompt(care, RunOptions()).messages
    assert [m.role for m in msgs] == ["system", "user"] and msgs[
        1
    ].content == "Which vitamin deficiency causes scurvy?"
    assert msgs[0].content == candidate_system() and msgs[0].content.startswith("Instructions:")
    from grandrounds.graders.careqa_open_grader import CareQAOpenGrader, CareQAOpenParams

    prompt = CareQAOpenGrader(CareQAOpenParams("reference")).judge_prompt(
        care, "<think>hm</think> Vitamin C "
    )
    assert prompt == official.JUDGE_TEMPLATE.format(
        question=care.metadata["question"], answer=care.target, response="Vitamin C"
    )


# ---- CLI runs counted independently ---------------------------------------------------------------------


def careqa_judge(req) -> str:
    """The scripted CareQA judge: verdicts from the reference answer's length; every 4th length unreadable."""
    ref = re.findall(r"<reference_answer>([^<]*)</reference_answer>", req.messages[-1].content)[-1]
    n = len(ref)
    if n % 4 == 0:
        return "I think the answer is fine."
    v = {
        "semantically_correct": n % 2 == 1,
        "matches_details": n % 3 == 0,
        "substantive_addition": n % 5 == 0,
        "critical_error": n % 7 == 0,
    }
    return "<analysis>x</analysis>" + "".join(f"<{k}>{str(b).lower()}</{k}>" for k, b in v.items())


def meddialog_judge(req) -> str:
    text = req.messages[-1].content
    n = len(text) % 97
    if n % 5 == 0:
        return "Scores: accuracy 4"
    return json.dumps(
        {
            "accuracy": {"score": 1 + n % 5},
            "completeness": {"score": 1 + (n // 5) % 5},
            "clarity": {"score": str(1 + n % 3)},
        }
    )


def judged_run(
    tmp_path: Path, bench: str, data: Path, judge, protocol: str, systems: list | None = None
) -> dict:
    def answer(req):
        if systems is not None:
            systems.append(req.messages[0].content if req.messages[0].role == "system" else None)
        return "A short answer."

    class Candidate(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=answer, **kw)

    class Judge(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=judge, **kw)

    out = tmp_path / f"out-{bench}-{protocol}"
    with PROVIDERS.registered("lb3-cand", Candidate), PROVIDERS.registered("lb3-judge", Judge):
        r = CliRunner().invoke(
            app,
            [
                "run",
                bench,
                "--data",
                str(data),
                "--model",
                "lb3-cand/x",
                "--judge",
                "lb3-judge/j",
                "--protocol",
                protocol,
                "--store",
                str(tmp_path / f"{bench}-{protocol}.db"),
                "--out",
                str(out),
            ],
            env={"COLUMNS": "200"},
        )
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_judged_cli_runs_score_the_independent_count(
    tmp_path: Path, protocol: str, request: pytest.FixtureRequest
) -> None:
    if protocol == "reference":
        request.getfixturevalue("reference")
    # careqa-open: the judge's verdicts depend on the reference answer only, so the count needs no prompt
    data = write_json(tmp_path / "CareQA_en_open.json", CAREQA_OPEN)
    systems: list = []
    res = judged_run(tmp_path, "careqa-open", data, careqa_judge, protocol, systems)
    assert set(systems) == ({candidate_system()} if protocol == "reference" else {None})
    want, unknown = [], 0
    for r in CAREQA_OPEN:
        if not r["answer"]:
            continue
        n = len(r["answer"])
        if n % 4 == 0:
            unknown += 1
            continue
        want.append(((n % 2 == 1) + (n % 3 == 0) + (n % 5 != 0) + (n % 7 != 0)) / 4)
    assert res["n"] == len(want) and res["score"] == pytest.approx(sum(want) / len(want))
    assert res["extra"]["n_unknown"] == unknown and res["extra"]["n_no_reference"] == 1
    assert set(res["breakdown"]["category"]) == {
        "medicine",
        "nursing",
        "biology",
        "pharmacology",
        "chemistry",
    }
    if (
        protocol == "reference"
    ):  # Medmarks' literal figure: substantive_addition never read (0), unknown = 0
        lit = [
            ((n % 2 == 1) + (n % 3 == 0) + (n % 7 != 0)) / 4 if n % 4 else 0.0
            for n in (len(r["answer"]) for r in CAREQA_OPEN if r["answer"])
        ]
        assert res["extra"]["medmarks_literal"] == pytest.approx(sum(lit) / len(lit))
    print("careqa-open", protocol, res["score"], f"{len(want)} scored, {unknown} unknown")

    # meddialog: the judge's scores depend on its whole prompt, so the count rebuilds each prompt
    from grandrounds.graders.meddialog_grader import MedDialogGrader, MedDialogParams

    root = write_meddialog(tmp_path / "md")
    systems = []
    res = judged_run(tmp_path, "meddialog", root, meddialog_judge, protocol, systems)
    assert set(systems) == (
        {system_text(MedDialog.protocols["reference"].answer)}
        if protocol == "reference"
        else {None}
    )
    grader = MedDialogGrader(MedDialogParams(protocol))
    want, unknown = [], 0
    for s in MedDialog().load(root):
        reply = meddialog_judge(
            SimpleNamespace(
                messages=[SimpleNamespace(content=grader.judge_prompt(s, "A short answer."))]
            )
        )
        scores = dimension_scores(reply)
        if scores is None:
            unknown += 1
        else:
            want.append(normalized(scores))
    assert (
        res["n"] == len(want)
        and res["score"] == pytest.approx(sum(want) / len(want))
        and res["extra"]["n_unknown"] == unknown
    )
    assert set(res["breakdown"]["subset"]) == {"healthcaremagic", "icliniq"}
    print("meddialog", protocol, res["score"], f"{len(want)} scored, {unknown} unknown")


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_longhealth_cli_run_scores_the_independent_count(
    tmp_path: Path, protocol: str, request: pytest.FixtureRequest
) -> None:
    if protocol == "reference":
        request.getfixturevalue("reference")
    bench = longhealth_bench()
    data = write_longhealth(tmp_path / "benchmark_v5.json", bench)

    def reply(req):
        text = req.messages[-1].content
        if "question 2)" in text and "patient_03" in text.split("What did ")[-1]:
            return "I cannot tell from these letters."
        return "The correct answer is B: whatever the option says."

    res = cli_run(tmp_path, "longhealth", data, reply, "--protocol", protocol)
    items = [(pid, q) for pid, p in bench.items() for q in p["questions"]]
    right = sum(
        1
        for pid, q in items
        if q["correct"] == q["answer_b"] and not (pid == "patient_03" and q["No"] == 2)
    )
    assert res["n"] == len(items) and res["score"] == pytest.approx(right / len(items))
    assert res["extra"]["n_unextracted"] == 1 and set(res["breakdown"]["task"]) == {"task1"}
    assert set(res["breakdown"]["patient"]) == set(bench)
    print("longhealth", protocol, res["score"], f"{right}/{len(items)}")


# ---- bad input -------------------------------------------------------------------------------------------


def test_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    rows = [CAREQA_OPEN[0], {k: v for k, v in CAREQA_OPEN[1].items() if k != "answer"}]
    with pytest.raises(DataError, match=r"CareQA_en_open\.json.*record 1.*missing 'answer'") as e:
        CareQAOpen().load(write_json(tmp_path / "CareQA_en_open.json", rows).parent)
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"line 2.*empty 'question'"):
        CareQAOpen().load(
            write_jsonl(
                tmp_path / "CareQA_en_open.json",
                [CAREQA_OPEN[0], {**CAREQA_OPEN[1], "question": " "}],
            ).parent
        )

    write_meddialog(
        tmp_path / "md", {"icliniq": [meddialog_rows("icliniq")[0], {"id": 9, "src": "x"}]}
    )
    with pytest.raises(DataError, match=r"icliniq/test\.json.*record 1.*missing or empty 'tgt'"):
        MedDialog().load(tmp_path / "md")
    (tmp_path / "md" / "icliniq" / "test.json").write_text(
        json.dumps([{"src": "a", "tgt": "b"}]), encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"'data' array"):
        MedDialog().load(tmp_path / "md")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"layout: <subset>/test\.json"):
        MedDialog().load(tmp_path / "empty")

    bench = longhealth_bench(2, 2)
    bench["patient_02"]["questions"][1]["correct"] = "not an option"
    with pytest.raises(
        DataError, match=r"benchmark_v5\.json.*patient patient_02 question 2.*none of the options"
    ):
        LongHealth().load(write_longhealth(tmp_path / "benchmark_v5.json", bench))
    bench = longhealth_bench(2, 2)
    del bench["patient_01"]["questions"][0]["answer_c"]
    with pytest.raises(DataError, match=r"patient patient_01 question 1.*missing answer_c"):
        LongHealth().load(write_longhealth(tmp_path / "benchmark_v5.json", bench))


@pytest.mark.parametrize("mode", ["text-loglik", "next-token"])
def test_longhealth_log_prob_modes_score_every_option(
    tmp_path: Path, mode: str, reference: Path
) -> None:
    path = write_longhealth(tmp_path / "benchmark_v5.json")
    for bench, n in ((LongHealth(), 5), (LongHealth(task="task2"), 6)):
        s = bench.load(path)[1]
        p = bench.prompt(s, RunOptions(answer_mode=mode, protocol="grandrounds"))
        assert (
            len(p.continuations) == n and s.metadata["documents"][0][:40] in p.messages[-1].content
        )
