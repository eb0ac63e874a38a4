"""Five protocols end to end: every real data file loads completely, and 20 samples go through
the real runner against loopback candidate and judge servers.

For ``llmeval-med``, ``gaps``, ``medcalc-bench``, ``medec`` and ``medbench``:

- each real file in ../shared/data loads in full (counts asserted and printed; run with ``-s``
  to see them). MedBench ships no local data, so a v4-format question file with answers is
  written in ``tmp_path``;
- ``run`` (the real runner, real HTTP through the ``openai`` SDK) answers and grades the first
  20 samples. The candidate replies in the format the benchmark's prompt asks for, the judges in
  the format their template asks for, both by deterministic rules, and each score is checked
  against an expected value worked out here from the raw file (csv/json/openpyxl), not through
  the benchmark module.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.benchmarks.medec import MEDEC
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.outcome import RunOutcome
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file

N = 20
MEDEC_TEST = "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
MEDEC_VAL = "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv"


# ---- helpers --------------------------------------------------------------------------------


def run_through(
    tmp_path: Path,
    benchmark: str,
    data: Path,
    cand_rule: Callable[[dict[str, Any]], str],
    judge_rule: Callable[[dict[str, Any]], str] | None = None,
    judge_models: tuple[str, ...] = (),
    bench_params: dict[str, Any] | None = None,
) -> tuple[RunOutcome, LoopbackServer, LoopbackServer | None]:
    """One run of ``N`` samples with a loopback candidate (and judge) server; servers returned for stats."""
    with LoopbackServer(cand_rule) as cand:
        if judge_rule is None:
            cfg = RunConfig(
                benchmark=benchmark,
                model="openai/cand",
                data=data,
                base_url=cand.base_url,
                limit=N,
                bench_params=bench_params or {},
            )
            return asyncio.run(run(Store(tmp_path / f"{benchmark}.db"), cfg)), cand, None
        with LoopbackServer(judge_rule) as judge:
            judges = tuple(
                JudgeConfig(spec=f"openai/{m}", base_url=judge.base_url) for m in judge_models
            )
            cfg = RunConfig(
                benchmark=benchmark,
                model="openai/cand",
                data=data,
                base_url=cand.base_url,
                limit=N,
                judges=judges,
                bench_params=bench_params or {},
            )
            out = asyncio.run(run(Store(tmp_path / f"{benchmark}.db"), cfg))
        return out, cand, judge


def check_complete(
    out: RunOutcome, cand: LoopbackServer, judge: LoopbackServer | None = None, n: int = N
) -> float:
    """A finished run of ``n`` samples: every answer ok, every sample scored, a finite numeric score."""
    for srv in (cand, judge):
        if srv is not None:
            assert srv.stats.rule_errors == [], srv.stats.rule_errors
    assert len(out.samples) == n and len(out.grades) == n
    assert cand.stats.requests == n, "one answer call per sample"
    assert all(r.ok for r in out.responses.values())
    res = out.result
    assert isinstance(res.score, float) and math.isfinite(res.score)
    assert res.n + res.n_unscored == n
    assert res.n_unscored == 0
    assert all(g.value is not None for g in out.grades)
    return res.score


def user_text(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


# ---- LLMEval-Med ----------------------------------------------------------------------------

LLMEVAL_SCORE = {0: 5, 1: 4, 2: 2}  # len(problem) % 3 -> the judge's score for that answer


def test_llmeval_med_file_loads_completely():
    path = shared_file("llmeval-med", "dataset.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    samples = LLMEvalMed().load(path)
    per_cat = {k: len(v) for k, v in raw.items()}
    print(f"\nllmeval-med dataset.json: {len(samples)} turns {per_cat}")
    assert len(samples) == 667 == sum(per_cat.values())
    assert len({s.id for s in samples}) == 667
    assert {s.metadata["category"] for s in samples} == set(raw)


def test_llmeval_med_20_through_runner(tmp_path):
    """Answer marks its problem's length mod 3; the judge scores [5], [4] or [2] by that mark."""
    path = shared_file("llmeval-med", "dataset.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    turns = [t for turns in raw.values() for t in turns]  # load order: categories, then rows

    def cand(body):
        assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
        return f"标记{len(user_text(body)) % 3}：建议结合临床。"

    def judge(body):
        text = user_text(body)  # Evaluate.py's prompt (the reference protocol, the default)
        assert body["model"] == "judge" and "### 学生的回答Response" in text
        assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
        answer = text.split("### 学生的回答Response", 1)[1].split("### 参考答案Sanswer", 1)[0]
        mark = int(re.search(r"标记(\d)", answer).group(1))
        return json.dumps(
            {"判断依据": f"标记{mark}", "得分": f"[{LLMEVAL_SCORE[mark]}]"}, ensure_ascii=False
        )

    out, c, j = run_through(tmp_path, "llmeval-med", path, cand, judge, ("judge",))
    # --limit N counts dialogues: their turns are the samples
    M = len(out.samples)
    assert len({s.group for s in out.samples}) == N and M > N
    marks = [len(t["problem"]) % 3 for t in turns[:M]]
    score = check_complete(out, c, j, M)
    assert j.stats.requests == 3 * M, "three judge runs per answer (the paper's default)"
    scores = [LLMEVAL_SCORE[m] for m in marks]
    usable = sum(s >= 4 for s in scores)
    assert 0 < usable < M, "the rule must give both usable and unusable answers"
    assert score == pytest.approx(100.0 * usable / M)
    assert out.result.extra["mean_score"] == pytest.approx(sum(scores) / M)
    assert out.result.extra["other_protocol"]["score"] == pytest.approx(
        100.0 * usable / M
    )  # grandrounds reads them alike
    assert [g.details["run_scores"] for g in out.grades] == [[s] * 3 for s in scores]
    for g, s in zip(
        out.grades, scores
    ):  # each run is a typed whole-answer vote, not a fake criterion
        assert g.verdicts == () and [(v.judge, v.run, v.score) for v in g.votes] == [
            ("openai/judge", r, float(s)) for r in range(3)
        ]
    # Every run's score and basis is shown in the offline report, escaped.
    from grandrounds.reports import build_report

    with Store(tmp_path / "llmeval-med.db") as st:
        (page,) = build_report(st, "html", tmp_path / "report.html")
    html = page.read_text(encoding="utf-8")
    assert html.count("<ul class='votes'>") == M and html.count("openai/judge run 2: ") == M
    assert f"标记{marks[0]}</small>" in html
    print(
        f"\nllmeval-med run: usability {score:.1f}% ({usable}/{M}), mean score {sum(scores) / M:.2f}"
    )


# ---- GAPS -----------------------------------------------------------------------------------

GAPS_POINTS = {"A1": 5, "A2": 3, "A3": 1}  # positive levels; S1..S4 deduct, A4 is worth nothing


def gaps_raw_rubrics(path: Path, limit: int) -> list[list[dict[str, Any]]]:
    """The first ``limit`` rubric lists of the NSCLC sheet, read with openpyxl directly."""
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        rows = wb["Sheet1"].iter_rows(values_only=True)
        header = [str(h) for h in next(rows)]
        col = header.index("rubrics")
        out = []
        for values in rows:
            if len(out) == limit:
                break
            if values[col]:
                out.append(json.loads(values[col]))
        return out
    finally:
        wb.close()


def test_gaps_files_load_completely():
    nsclc = shared_file("gaps", "GAPS-NSCLC-preview.xlsx")
    community = shared_file("gaps", "community_contributions.xlsx")
    root = nsclc.parent
    by_subset = {s: GAPS(subset=s).load(root) for s in ("nsclc", "community", "all")}
    by_file = {p.name: GAPS().load(p) for p in (nsclc, community)}
    points = sum(len(s.rubric) for s in by_subset["nsclc"])
    print(
        f"\ngaps GAPS-NSCLC-preview.xlsx: {len(by_file[nsclc.name])} questions, {points} rubric points;"
        f" community_contributions.xlsx: {len(by_file[community.name])} questions;"
        f" subset=all: {len(by_subset['all'])}"
    )
    assert len(by_subset["nsclc"]) == len(by_file[nsclc.name]) == 92
    assert len(by_subset["community"]) == len(by_file[community.name]) == 5
    assert len(by_subset["all"]) == 97 and len({s.id for s in by_subset["all"]}) == 97
    assert points == 1691  # the module docstring's count of rubric points
    assert all(s.rubric for s in by_subset["all"])


def test_gaps_panel_of_three_20_through_runner(tmp_path):
    """Three judges (one server, three model names) say met on positives, not met on negatives."""
    path = shared_file("gaps", "GAPS-NSCLC-preview.xlsx")
    panel = ("j1", "j2", "j3")

    def cand(body):
        return "建议完善分期检查后，由多学科团队制定个体化治疗方案。"

    def judge(body):
        text = user_text(body)
        assert body["model"] in panel
        positive, negative = (
            "正向评判标准" in text,
            "负向评判标准" in text,
        )  # judge_engine.py's prompts (reference)
        assert positive != negative, "exactly one of the two GAPS templates"
        verdict = {"explanation": "按规则判定", "criteria_met": positive}
        return "```json\n" + json.dumps(verdict, ensure_ascii=False) + "\n```"

    out, c, j = run_through(tmp_path, "gaps", path, cand, judge, panel)
    score = check_complete(out, c, j)
    raw = gaps_raw_rubrics(path, N)
    n_points = sum(len(r) for r in raw)
    assert j.stats.requests == 3 * n_points, "every point asked of every judge once"
    assert score == 1.0
    assert out.result.extra["other_protocol"]["score"] == 1.0
    assert out.result.extra["n_review_needed"] == 0 and out.result.extra["mean_coverage"] == 1.0
    for g, items in zip(out.grades, raw):
        max_points = sum(
            GAPS_POINTS.get(str(it.get("level", "")).strip().upper(), 0) for it in items
        )
        assert (
            g.details["max_points"]
            == g.details["earned_reference"]
            == g.details["earned_ours"]
            == max_points
        )
        negatives = {
            str(it.get("id")) for it in items if str(it.get("level", "")).upper().startswith("S")
        }
        for v in g.verdicts:
            want = "unmet" if v.criterion_id in negatives else "met"
            assert v.status == want and v.statuses == (want,) * 3
            assert [x.judge for x in v.votes] == ["openai/j1", "openai/j2", "openai/j3"]
    print(
        f"\ngaps run: score {score} (grandrounds {out.result.extra['other_protocol']['score']}), "
        f"{n_points} points x 3 judges = {j.stats.requests} judge calls"
    )


# ---- MedCalc-Bench --------------------------------------------------------------------------


def test_medcalc_file_loads_completely():
    path = shared_file("medcalc-bench", "test_data.csv")
    samples = MedCalcBench().load(path)
    rows = read_csv(path)
    print(f"\nmedcalc-bench test_data.csv: {len(samples)} rows")
    assert len(samples) == len(rows) == 1047
    assert [s.id for s in samples] == [r["Row Number"] for r in rows]
    assert len({s.id for s in samples}) == 1047


def wrong_value(row: dict[str, str]) -> str:
    """A value the official tolerance rules reject for this row."""
    truth = row["Ground Truth Answer"]
    if row["Calculator ID"] in ("13", "68"):
        month, day, year = truth.split("/")
        return f"{month}/{day}/{int(year) + 1}"
    if row["Calculator ID"] == "69":
        return "(99 weeks, 6 days)"
    if row["Output Type"] == "decimal":
        return str(float(row["Upper Limit"]) * 2 + 10)
    return str(int(truth) + 3)


def test_medcalc_20_through_runner(tmp_path):
    """Even Row Numbers get the Ground Truth Answer echoed, odd ones a value out of tolerance."""
    path = shared_file("medcalc-bench", "test_data.csv")
    rows = read_csv(path)[:N]

    def cand(body):
        assert '"answer"' in body["messages"][0]["content"], (
            "the system prompt asks for JSON with an answer"
        )
        text = user_text(body)
        (row,) = [r for r in rows if r["Patient Note"] in text and r["Question"] in text]
        value = row["Ground Truth Answer"] if int(row["Row Number"]) % 2 == 0 else wrong_value(row)
        return json.dumps(
            {"step_by_step_thinking": "Apply the formula to the note's values.", "answer": value}
        )

    out, c, _ = run_through(tmp_path, "medcalc-bench", path, cand)
    score = check_complete(out, c)
    even = [int(r["Row Number"]) % 2 == 0 for r in rows]
    assert 0 < sum(even) < N
    assert score == pytest.approx(sum(even) / N)
    assert [g.value for g in out.grades] == [float(e) for e in even]
    assert out.result.extra["n_unextractable"] == 0
    print(f"\nmedcalc-bench run: accuracy {score} ({sum(even)}/{N})")


# ---- MEDEC ----------------------------------------------------------------------------------


def test_medec_files_load_completely():
    test_csv = shared_file("medec", MEDEC_TEST)
    val_csv = shared_file("medec", MEDEC_VAL)
    root = test_csv.parent
    by_split = {s: MEDEC(split=s).load(root) for s in ("test", "validation", "both")}
    by_file = {p.name: MEDEC().load(p) for p in (test_csv, val_csv)}
    nonblank = {
        p.name: sum(1 for r in read_csv(p) if any((v or "").strip() for v in r.values()))
        for p in (test_csv, val_csv)
    }
    print(
        f"\nmedec {MEDEC_TEST}: {len(by_split['test'])} texts; {MEDEC_VAL}: {len(by_split['validation'])} texts"
    )
    assert len(by_split["test"]) == len(by_file[MEDEC_TEST]) == nonblank[MEDEC_TEST] == 597
    assert len(by_split["validation"]) == len(by_file[MEDEC_VAL]) == nonblank[MEDEC_VAL] == 574
    assert len(by_split["both"]) == 1171 and len({s.id for s in by_split["both"]}) == 1171
    assert {s.metadata["split"] for s in by_split["test"]} == {"test"}
    assert {s.metadata["split"] for s in by_split["validation"]} == {"validation"}


def test_medec_20_through_runner(tmp_path):
    """Texts 0,1 mod 4: the ground truth echoed; 2 mod 4: "no error"; 3 mod 4: a bogus error in sentence 0."""
    path = shared_file("medec", MEDEC_TEST)
    rows = [r for r in read_csv(path) if r["Text ID"].strip()][:N]
    truth = {
        r["Text ID"].strip(): (
            i,
            int(float(r["Error Flag"])),
            int(float(r["Error Sentence ID"])),
            r["Corrected Sentence"],
        )
        for i, r in enumerate(rows)
    }

    def cand(body):
        text = user_text(body)
        assert '"error"' in text and '"sentence_id"' in text and '"corrected"' in text
        i, flag, sid, corrected = truth[re.search(r"Text ID: (\S+)", text).group(1)]
        if i % 4 in (0, 1):
            reply = {
                "error": bool(flag),
                "sentence_id": sid,
                "corrected": corrected if flag else "NA",
            }
        elif i % 4 == 2:
            reply = {"error": False, "sentence_id": -1, "corrected": "NA"}
        else:
            reply = {"error": True, "sentence_id": 0, "corrected": "zzqx qqzz"}
        return json.dumps(reply)

    out, c, _ = run_through(
        tmp_path, "medec", shared_file("medec"), cand, bench_params={"split": "test"}
    )
    score = check_complete(out, c)
    flag_ok = sent_ok = corr = 0.0
    for i, flag, sid, _ in truth.values():
        if i % 4 in (0, 1):
            flag_ok, sent_ok, corr = (
                flag_ok + 1,
                sent_ok + 1,
                corr + 1,
            )  # exact echo: ROUGE-1 F = 1, or NA = NA
        elif i % 4 == 2:
            flag_ok, sent_ok, corr = (
                flag_ok + (flag == 0),
                sent_ok + (flag == 0),
                corr + (flag == 0),
            )
        else:
            flag_ok, sent_ok = (
                flag_ok + (flag == 1),
                sent_ok + (sid == 0),
            )  # nonsense words: ROUGE-1 F = 0
    assert 0 < flag_ok < N
    extra = out.result.extra
    assert score == pytest.approx(flag_ok / N)
    assert extra["error_sentence_accuracy"] == pytest.approx(sent_ok / N)
    assert extra["r1fc"] == pytest.approx(corr / N)
    assert extra["n_unparseable"] == 0
    print(f"\nmedec run: flag accuracy {score}, sentence accuracy {sent_ok / N}, R1FC {corr / N}")


# ---- MedBench -------------------------------------------------------------------------------

SINGLE = (
    "你是一名医疗安全领域专家，请完成下列医疗安全单选题，只需要输出最适合的选项字母，不要输出解释。\n## 问题\n",
    [
        ("医疗膳食的留样时间至少为：", "48小时", ("72小时", "24小时", "12小时")),
        (
            "手术安全核查应由哪些人员共同完成？",
            "手术医师、麻醉医师和巡回护士",
            ("主刀医师一人", "巡回护士一人", "患者家属"),
        ),
        (
            "发生针刺伤后首先应当：",
            "由近心端向远心端挤出伤口血液并冲洗",
            ("立即包扎", "涂抹碘伏后继续工作", "等待下班后处理"),
        ),
    ],
)
MULTI = (
    "你是一名医学专家，请完成下列多选题，只需要输出所有正确的选项字母，不要输出解释。\n## 问题\n",
    [
        ("下列属于非小细胞肺癌的病理类型有：", ("腺癌", "鳞状细胞癌"), ("小细胞癌", "类癌")),
        ("下列哪些药物属于抗凝药？", ("华法林", "肝素"), ("阿莫西林", "二甲双胍")),
        ("高血压急症的处理原则包括：", ("静脉降压", "控制降压速度"), ("立即降至正常", "口服补液")),
    ],
)


def medbench_rows(spec: tuple[str, list], source: str) -> list[tuple[dict[str, Any], str]]:
    """v4 lines (question with options inline, answer, other.id/source), each id 4x with rotated options."""
    stem, questions = spec
    out = []
    for qid, (q, right, wrong) in enumerate(questions, start=1):
        right = (right,) if isinstance(right, str) else right
        base = list(right) + list(wrong)
        for rot in range(4):
            opts = base[rot:] + base[:rot]
            letters = "".join(sorted(chr(65 + opts.index(r)) for r in right))
            question = (
                stem + q + "\n" + "\n".join(f"{chr(65 + k)}. {o}" for k, o in enumerate(opts))
            )
            out.append(
                (
                    {
                        "question": question,
                        "answer": letters,
                        "other": {"id": qid, "source": source},
                    },
                    letters,
                )
            )
    return out


def write_medbench(tmp_path: Path) -> Path:
    d = tmp_path / "medbench"
    d.mkdir(exist_ok=True)
    for name, spec in (("MedMulti_V4", MULTI), ("MedSafety_V4", SINGLE)):
        lines = [json.dumps(rec, ensure_ascii=False) for rec, _ in medbench_rows(spec, name)]
        (d / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def test_medbench_written_file_loads_completely(tmp_path):
    d = write_medbench(tmp_path)
    samples = MedBench().load(d)
    per_file = {p.name: len(MedBench().load(p)) for p in sorted(d.glob("*.jsonl"))}
    print(f"\nmedbench (written v4 files, no local data): {per_file}")
    assert per_file == {"MedMulti_V4.jsonl": 12, "MedSafety_V4.jsonl": 12}
    assert len(samples) == 24 and len({s.id for s in samples}) == 24
    assert all(s.target for s in samples)


def test_medbench_20_through_runner(tmp_path):
    """The candidate gives the right letters except on every third row, where it shifts them by one."""
    d = write_medbench(tmp_path)
    # Files are read in name order: MedMulti (12 rows), then MedSafety; the run takes the first 20.
    rows = medbench_rows(MULTI, "MedMulti_V4") + medbench_rows(SINGLE, "MedSafety_V4")
    gold = {rec["question"]: (k, letters) for k, (rec, letters) in enumerate(rows)}
    assert len(gold) == len(rows), "every row's question text is distinct"

    def cand(body):
        assert body["messages"][0]["content"] == "you are a helpful assistant."
        k, letters = gold[user_text(body)]
        if k % 3 == 2:
            letters = "".join(sorted(chr(65 + (ord(x) - 65 + 1) % 4) for x in letters))
        return letters

    out, c, _ = run_through(tmp_path, "medbench", d, cand)
    score = check_complete(out, c)
    right = [k % 3 != 2 for k in range(N)]
    # a shift by one never maps a letter set onto itself for sets of 1 or 2 of 4 letters
    assert score == pytest.approx(sum(right) / N)
    assert [g.value for g in out.grades] == [float(r) for r in right]
    assert out.result.extra["n_withheld"] == 0
    assert (
        out.result.breakdown["source"]["MedMulti_V4"].n == 12
        and out.result.breakdown["source"]["MedSafety_V4"].n == 8
    )
    print(f"\nmedbench run: accuracy {score} ({sum(right)}/{N})")
