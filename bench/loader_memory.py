"""Peak memory of ``grandrounds run BENCHMARK --limit 10`` on files of a million records.

For each benchmark, writes a file in its format (into a temporary folder, from a process of its
own), starts bench/throughput.py's fixed-latency server (and, for judged benchmarks, the test
suite's loopback server as candidate and judge) in their own processes, runs the real CLI in a
subprocess and prints its wall time and peak resident memory; then the same for the file cut to 10
records, for comparison. The formats: MedQA (JSON Lines, about 230 MB), MedCalc-Bench (CSV with a
header, each Patient Note quoted over three lines, about 420 MB), CMB (a JSON array of questions,
pretty-printed like the release, about 400 MB, and the answer-key array beside it, about 200 MB),
LLMEval-Med (dataset.json: five categories of turns, dialogues of 1-3 rounds, NaN where the release
has it, pretty-printed, about 515 MB for a million turns) and GAPS (an xlsx sheet, one question
per row with a 6-point rubric and two answer columns, its text in a shared-strings table as Excel
writes it; 100,000 rows is as large as is practical: 6 MB zipped, 14 s to write).

    python bench/loader_memory.py                         # 1,000,000 records of each
    python bench/loader_memory.py --records 200000 --bench medcalc-bench
    python bench/loader_memory.py --records 100000 --bench gaps
    python bench/loader_memory.py --full 100000           # a whole LLMEval-Med run, no --limit
    python bench/loader_memory.py --json-parsers 200      # json.load vs ijson on a 200 MB array
    python bench/loader_memory.py --src /tmp/old/src ...  # the same with another copy of the package

``--json-parsers MB`` instead compares the whole-file JSON reader (``read_json``: json.loads of the
text) with the incremental one (``iter_json_array``: ijson) on a generated array of CMB-shaped
questions, each in its own process: wall time and peak resident memory to read every record, and
to read the first 10.

``--full TURNS`` runs LLMEval-Med whole (every turn asked and judged once, the loopback server
answering), to show the run holds one dialogue at a time, not every sample.

Target (issue 11): under 200 MB with a million records.

Measured (2-core machine shared with other work; "before": the package before dialogues streamed,
LLMEval-Med and GAPS were read whole, run with --src):

    benchmark, data                         before: wall s / peak MB    after: wall s / peak MB
    llmeval-med 1,000,000 turns --limit 10           17.7 / 1,864             1.7 / 64
    gaps 100,000 rows --limit 10                     19.5 / 787              14.3 / 305
    gaps, the shared-strings table read lazily       22.1 / 479               1.2 / 77
    llmeval-med 100,000 turns, full run             121.8 / 433             119.0 / 228
    (10-record files: 0.6-0.7 s, 62-72 MB, both)

LLMEval-Med's 1.7 s is mostly hashing the 515 MB file (the dataset's key). GAPS' 14.3 s / 305 MB
was openpyxl reading the workbook's shared-strings table whole, twice (the check pass and the run
each open the workbook); with the table read only as far as the rows need
(benchmarks/readers/xlsx.py) it is 1.2 s / 77 MB, the same as the 10-row file. The second GAPS row
was measured on a later, slower machine, "before" being the package with the whole table read
(--src); its workbook states its used range (``<dimension>``) before the rows as Excel writes it:
without one, openpyxl's read-only sheet scans every row on opening (about 10 s here). The full run: 381 MB with dialogues streamed and the default
per-sample summary (a slim sample and grade), 228 MB with LLMEval-Med's own summary (id, category,
judge scores); also held: the ids of the dialogues already over.
Reading every turn of 200,000 (100 MB): ``load`` 2.0 s / 385 MB, ``iter_samples`` 1.8 s / 33 MB.
The lone-surrogate watch on the ijson path (``--json-parsers 200``): every record 1.98 s after,
1.83-1.89 s before, 23 MB both.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (the fixed-latency server)

BENCHMARKS = ("medqa", "medcalc-bench", "cmb", "llmeval-med", "gaps")
#: Benchmarks graded by a judge: run against the loopback server below, whose one reply both read.
JUDGED = ("llmeval-med", "gaps")
#: The loopback server's reply: a GAPS verdict (a JSON block, criteria_met) holding an LLMEval-Med
#: score ([4]); as a candidate's answer it is just text.
JUDGE_REPLY = '```json\n{"criteria_met": true, "得分": "[4]"}\n```'


def write(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {
                "question": f"A {30 + i % 50}-year-old presents with chest pain after exertion (case {i}). Which is the next step?",
                "options": {"A": "Discharge", "B": "ECG", "C": "Antibiotics", "D": "Reassure"},
                "answer_idx": "B",
                "answer": "ECG",
                "meta_info": "step2&3",
            }
            f.write(json.dumps(rec) + "\n")


MEDCALC_COLUMNS = (
    "Row Number",
    "Calculator ID",
    "Calculator Name",
    "Category",
    "Output Type",
    "Note ID",
    "Note Type",
    "Patient Note",
    "Question",
    "Relevant Entities",
    "Ground Truth Answer",
    "Lower Limit",
    "Upper Limit",
    "Ground Truth Explanation",
)


def write_medcalc(path: Path, n: int) -> None:
    """MedCalc-Bench's test_data.csv layout: a header, then rows whose Patient Note spans lines."""
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(MEDCALC_COLUMNS)
        for i in range(n):
            age, weight = 30 + i % 50, 60 + i % 40
            note = (
                f"A {age}-year-old man (case {i}) presents with fatigue.\n"
                f"Weight {weight} kg, height 175 cm, serum creatinine 1.1 mg/dL.\n"
                "He takes no medications and has no known allergies."
            )
            entities = repr(
                {"age": [age, "years"], "weight": [weight, "kg"], "creatinine": [1.1, "mg/dL"]}
            )
            w.writerow(
                [
                    i + 1,
                    2,
                    "Creatinine Clearance (Cockcroft-Gault Equation)",
                    "lab",
                    "decimal",
                    f"pmc-{i}",
                    "Extracted",
                    note,
                    "What is the patient's Creatinine Clearance in mL/min?",
                    entities,
                    "98.5",
                    "93.575",
                    "103.425",
                    "The Cockcroft-Gault equation gives the value.",
                ]
            )


def write_cmb(folder: Path, n: int) -> None:
    """CMB's answer key and question file: two JSON arrays joined on ``id``, listed in the same order."""
    types = ("单项选择题", "多项选择题")
    with (
        open(folder / "CMB-test-choice-answer.json", "w", encoding="utf-8") as key,
        open(folder / "CMB-test-choice-question-merge.json", "w", encoding="utf-8") as qs,
    ):
        key.write("[\n")
        qs.write("[\n")
        for i in range(n):
            sep = "" if i == 0 else ",\n"
            kind = types[i % 10 == 0]
            key.write(
                sep
                + json.dumps(
                    {
                        "id": i + 1,
                        "exam_type": "医师考试",
                        "exam_class": "规培结业",
                        "exam_subject": "内科",
                        "question_type": kind,
                        "answer": "BD" if i % 10 == 0 else "B",
                    },
                    ensure_ascii=False,
                    indent=4,
                )
            )
            qs.write(
                sep
                + json.dumps(
                    {
                        "id": i + 1,
                        "exam_type": "医师考试",
                        "exam_class": "规培结业",
                        "exam_subject": "内科",
                        "question": f"患者，男，{30 + i % 50}岁，活动后胸痛（病例{i}）。下一步最合适的检查是？",
                        "question_type": kind,
                        "option": {
                            "A": "出院观察",
                            "B": "心电图",
                            "C": "抗生素",
                            "D": "安慰",
                            "E": "",
                        },
                    },
                    ensure_ascii=False,
                    indent=4,
                )
            )
        key.write("\n]\n")
        qs.write("\n]\n")


LLMEVAL_CATEGORIES = ("医疗知识", "医疗语言理解", "医疗推理", "医疗安全伦理", "医疗文本生成")


def write_llmeval(path: Path, n: int) -> None:
    """LLMEval-Med's dataset.json layout with ``n`` turns: an object keyed by the five categories,
    each a list of turns (pretty-printed, non-ASCII kept, as released), dialogues of 1-3 rounds
    sharing ``groupCode``, a NaN checklist or reference answer here and there as the release has."""
    nan = float("nan")
    per = [n // 5 + (1 if c < n % 5 else 0) for c in range(5)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("{")
        for c, category in enumerate(LLMEVAL_CATEGORIES):
            f.write(("," if c else "") + f"\n    {json.dumps(category, ensure_ascii=False)}: [")
            written, group = 0, 0
            while written < per[c]:
                group += 1
                rounds = min(1 + group % 3, per[c] - written)
                for rnd in range(1, rounds + 1):
                    turn = {
                        "category1": category,
                        "category2": "医学基础知识/医学考试",
                        "scene": f"场景{group % 17}",
                        "round": rnd,
                        "problem": f"患者，男，{30 + group % 50}岁，活动后胸痛（对话{group}，第{rnd}轮）。下一步最合适的检查是什么？",
                        "groupCode": group,
                        "sanswer": nan
                        if written % 29 == 0
                        else f"首先应行心电图检查（对话{group}）。",
                        "difficulty": "中",
                        "checklist": nan
                        if written % 3 == 0
                        else "核心需求：\n1. 内容要求：提到心电图",
                    }
                    body = json.dumps(turn, ensure_ascii=False, indent=4).replace(
                        "\n", "\n        "
                    )
                    f.write(("," if written else "") + "\n        " + body)
                    written += 1
            f.write("\n    ]")
        f.write("\n}\n")


def write_gaps(path: Path, n: int) -> None:
    """GAPS' sheet layout (index, question, 分类, rubrics, answer columns) with ``n`` rows, each
    row's texts distinct: written with openpyxl's write-only mode, then given a shared-strings
    table (:func:`share_strings`) as Excel writes the release."""
    _write_gaps_inline(path, n)
    share_strings(path)


def share_strings(path: Path) -> None:
    """Move a workbook's inline strings (what openpyxl's write-only mode writes) into a
    shared-strings table, as Excel stores text: the table openpyxl reads whole on opening."""
    import re
    import zipfile
    from xml.sax.saxutils import escape

    with zipfile.ZipFile(path) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    index: dict[str, int] = {}

    def shared(m: re.Match[str]) -> str:
        at = index.setdefault(m.group(2), len(index))
        return f'<c r="{m.group(1)}" t="s"><v>{at}</v></c>'

    sheet = parts["xl/worksheets/sheet1.xml"].decode("utf-8")
    sheet = re.sub(
        r'<c r="([A-Z]+[0-9]+)" t="inlineStr"><is><t[^>]*>(.*?)</t></is></c>',
        shared,
        sheet,
        flags=re.S,
    )
    # Excel states the used range before the rows (openpyxl's write-only mode does not): without
    # it openpyxl's read-only sheet scans every row on opening to learn the size
    last = re.findall(r'<c r="([A-Z]+)([0-9]+)"', sheet[-2000:])[-1]
    sheet = sheet.replace(
        "<sheetViews>", f'<dimension ref="A1:{last[0]}{last[1]}" /><sheetViews>', 1
    )
    parts["xl/worksheets/sheet1.xml"] = sheet.encode("utf-8")
    del sheet
    table = "".join(
        f'<si><t xml:space="preserve">{text}</t></si>' for text in index
    )  # texts are XML-escaped already
    parts["xl/sharedStrings.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
        f'count="{len(index)}" uniqueCount="{len(index)}">{table}</sst>'
    ).encode()
    kind = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
    parts["[Content_Types].xml"] = parts["[Content_Types].xml"].replace(
        b"</Types>",
        f'<Override PartName="/xl/sharedStrings.xml" ContentType="{escape(kind)}"/></Types>'.encode(),
    )
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings"
    parts["xl/_rels/workbook.xml.rels"] = parts["xl/_rels/workbook.xml.rels"].replace(
        b"</Relationships>",
        f'<Relationship Id="rIdShared" Type="{rel}" Target="sharedStrings.xml"/></Relationships>'.encode(),
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)


def _write_gaps_inline(path: Path, n: int) -> None:
    import openpyxl

    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("Sheet1")
    ws.append(["index", "question", "分类", "rubrics", "m1_answer", "m2_answer"])
    levels = ("A1", "A1", "A2", "A3", "S1", "S2")
    for i in range(1, n + 1):
        rubric = [
            {
                "id": k + 1,
                "claim": f"回答应提到第{k + 1}项要点（问题{i}）：评估EGFR突变状态后再选择一线治疗方案",
                "level": lv,
                "type": "negative" if lv.startswith("S") else "positive",
                "desc": f"要点{k + 1}",
            }
            for k, lv in enumerate(levels)
        ]
        ws.append(
            [
                i,
                f"非小细胞肺癌患者（病例{i}），IIIA期，EGFR突变阳性，术后辅助治疗如何选择？",
                "治疗",
                json.dumps(rubric, ensure_ascii=False),
                f"建议奥希替尼辅助治疗三年（病例{i}）。",
                f"建议化疗后随访（病例{i}）。",
            ]
        )
    wb.save(path)


def write_data(bench: str, folder: Path, n: int) -> Path:
    """The ``--data`` of ``bench`` with ``n`` records, written under ``folder`` by a process of its
    own: the memory writing takes is not this one's, so the runs started from here (whose peak
    counts what they inherit at the fork) do not carry it."""
    q: mp.Queue[str] = mp.Queue()
    writer = mp.Process(target=_write_data, args=(bench, folder, n, q))
    writer.start()
    path = q.get()
    writer.join()
    if writer.exitcode:
        raise SystemExit(f"writing the {bench} data failed")
    return Path(path)


def _write_data(bench: str, folder: Path, n: int, q: mp.Queue[str]) -> None:
    try:
        q.put(str(_write(bench, folder, n)))
    except BaseException:
        q.put("")  # so the parent does not wait for ever
        raise


def _write(bench: str, folder: Path, n: int) -> Path:
    folder.mkdir()
    if bench == "llmeval-med":
        write_llmeval(folder / "dataset.json", n)
        return folder / "dataset.json"
    if bench == "gaps":
        write_gaps(folder / "GAPS-NSCLC-preview.xlsx", n)
        return folder / "GAPS-NSCLC-preview.xlsx"
    if bench == "medqa":
        write(folder / "data.jsonl", n)
        return folder / "data.jsonl"
    if bench == "medcalc-bench":
        write_medcalc(folder / "test_data.csv", n)
        return folder / "test_data.csv"
    write_cmb(folder, n)
    return folder


def size_mb(data: Path) -> float:
    files = sorted(data.iterdir()) if data.is_dir() else [data]
    return sum(f.stat().st_size for f in files) / 1e6


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grandrounds", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"grandrounds failed:\n{out[-3000:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, out


PARSE = r"""
import resource, sys, time
from itertools import islice
from pathlib import Path
from grandrounds.benchmarks.readers.json_docs import iter_json_array, read_json
how, path = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
if how == "read_json":
    n = sum(1 for _ in read_json(path))
elif how == "iter_json_array":
    n = sum(1 for _ in iter_json_array(path, "not an array"))
else:
    n = sum(1 for _ in islice(iter_json_array(path, "not an array"), 10))
print(n, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def compare_json_parsers(mb: int) -> None:
    """Whole-file json against ijson on an array of about ``mb`` MB, each reader in its own process."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "CMB-test-choice-question-merge.json"
        write_cmb(Path(d), 1000)  # to learn a record's size
        n = int(mb * 1e6 / (path.stat().st_size / 1000))
        write_cmb(Path(d), n)
        print(f"JSON array of {n:,} CMB questions, {path.stat().st_size / 1e6:.0f} MB")
        print(f"{'reader':<22}{'records':>10}{'wall s':>8}{'peak MB':>9}")
        for how, label in (
            ("read_json", "json.loads (whole)"),
            ("iter_json_array", "ijson (every record)"),
            ("first10", "ijson (first 10)"),
        ):
            out = subprocess.run(
                [sys.executable, "-c", PARSE, how, str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            count, wall, peak = out.stdout.split()
            print(f"{label:<22}{int(count):>10,}{float(wall):>8.2f}{float(peak):>9.1f}")


def serve_judge(q: mp.Queue[str]) -> None:
    """The test suite's loopback server, replying :data:`JUDGE_REPLY` to every request."""
    from grandrounds.testing import LoopbackServer

    with LoopbackServer(lambda body: JUDGE_REPLY) as srv:
        q.put(srv.base_url)
        time.sleep(36000)


def start_server(target: Any, *args: Any) -> tuple[mp.Process, str]:
    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=target, args=(*args, q), daemon=True)
    server.start()
    return server, q.get(timeout=60)


def run_args(bench: str, data: Path, store: Path, base_url: str, judge_url: str) -> list[str]:
    args = [
        "run",
        bench,
        "--data",
        str(data),
        "--store",
        str(store),
        "--model",
        "openai/bench",
        "--protocol",
        "grandrounds",
    ]
    if bench in JUDGED:
        args += [
            "--base-url",
            judge_url,
            "--judge",
            "openai/judge",
            "--judge-base-url",
            judge_url,
            "--max-reask",
            "0",
        ]
        args += (
            ["--judge-runs", "1"] if bench == "llmeval-med" else ["--judge", "openai/judge2"]
        )  # GAPS' vote needs 2
    else:
        args += ["--base-url", base_url]
    return args


def full_llmeval(turns: int, judge_url: str, env: dict[str, str]) -> None:
    """A whole LLMEval-Med run (no --limit) of ``turns`` turns, one judge run per answer."""
    with tempfile.TemporaryDirectory() as d:
        data = write_data("llmeval-med", Path(d) / "data", turns)
        print(
            f"llmeval-med full run: {turns:,} turns, {size_mb(data):.0f} MB, 1 judge run per answer"
        )
        wall, peak, out = run_cli(
            run_args("llmeval-med", data, Path(d) / "s.db", "", judge_url), env
        )
        assert f"n {turns}" in out, out
        print(f"{'wall s':>8}{'peak MB':>9}\n{wall:>8.2f}{peak:>9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument(
        "--bench",
        choices=BENCHMARKS,
        action="append",
        help="benchmark format(s) to measure (default: all)",
    )
    ap.add_argument(
        "--json-parsers",
        type=int,
        metavar="MB",
        help="only compare json.load with ijson on an array of MB megabytes",
    )
    ap.add_argument(
        "--full",
        type=int,
        metavar="TURNS",
        help="only a whole LLMEval-Med run (no --limit) of TURNS turns",
    )
    ap.add_argument(
        "--src",
        type=Path,
        help="run the grandrounds package found in this folder (e.g. a copy of an earlier src/)",
    )
    args = ap.parse_args()
    if args.src:  # every process started from here imports grandrounds from there
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(args.src.resolve()), os.environ.get("PYTHONPATH", "")) if p
        )
    if args.json_parsers:
        compare_json_parsers(args.json_parsers)
        return
    env = dict(
        os.environ,
        OPENAI_API_KEY="bench",
        GRANDROUNDS_CACHE=tempfile.mkdtemp(prefix="gr-bench-cache-"),
    )
    servers = []
    try:
        judge, judge_url = start_server(serve_judge)
        servers.append(judge)
        if args.full:
            full_llmeval(args.full, judge_url, env)
            return
        server, base_url = start_server(throughput.serve, 0.001, "fixed")
        servers.append(server)
        for bench in args.bench or BENCHMARKS:
            with tempfile.TemporaryDirectory() as d:
                big, small = (
                    write_data(bench, Path(d) / "big", args.records),
                    write_data(bench, Path(d) / "small", 10),
                )
                print(f"{bench}: {args.records:,} records, {size_mb(big):.0f} MB")
                print(f"{'file':<18}{'wall s':>8}{'peak MB':>9}")
                for label, path in (
                    (
                        "1M --limit 10"
                        if args.records == 1_000_000
                        else f"{args.records:,} --limit 10",
                        big,
                    ),
                    ("10 records", small),
                ):
                    store = Path(d) / f"{path.parent.name}-{path.name}.db"
                    wall, peak, out = run_cli(
                        [*run_args(bench, path, store, base_url, judge_url), "--limit", "10"], env
                    )
                    assert "n 10" in out, out
                    print(f"{label:<18}{wall:>8.2f}{peak:>9.1f}")
    finally:
        for s in servers:
            s.kill()


if __name__ == "__main__":
    main()
