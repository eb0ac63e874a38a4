"""Peak memory of ``grandrounds run BENCHMARK --limit 10`` on files of a million records.

For each benchmark, writes a file in its format (into a temporary folder), starts
bench/throughput.py's fixed-latency server in its own process, runs the real CLI in a subprocess
and prints its wall time and peak resident memory; then the same for the file cut to 10 records,
for comparison. The formats: MedQA (JSON Lines, about 230 MB), MedCalc-Bench (CSV with a header,
each Patient Note quoted over three lines, about 420 MB) and CMB (a JSON array of questions,
pretty-printed like the release, about 400 MB, and the answer-key array beside it, about 200 MB).

    python bench/loader_memory.py                         # 1,000,000 records of each
    python bench/loader_memory.py --records 200000 --bench medcalc-bench
    python bench/loader_memory.py --json-parsers 200      # json.load vs ijson on a 200 MB array

``--json-parsers MB`` instead compares the whole-file JSON reader (``read_json``: json.loads of the
text) with the incremental one (``iter_json_array``: ijson) on a generated array of CMB-shaped
questions, each in its own process: wall time and peak resident memory to read every record, and
to read the first 10.

Target (issue 11): under 200 MB with a million records.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (the fixed-latency server)

BENCHMARKS = ("medqa", "medcalc-bench", "cmb")


def write(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {
                "question": f"A {30 + i % 50}-year-old presents with chest pain after exertion (case {i}). Which is the next step?",
                "options": {"A": "Discharge", "B": "ECG", "C": "Antibiotics", "D": "Reassure"},
                "answer_idx": "B", "answer": "ECG", "meta_info": "step2&3",
            }
            f.write(json.dumps(rec) + "\n")


MEDCALC_COLUMNS = ("Row Number", "Calculator ID", "Calculator Name", "Category", "Output Type", "Note ID", "Note Type",
                   "Patient Note", "Question", "Relevant Entities", "Ground Truth Answer", "Lower Limit", "Upper Limit",
                   "Ground Truth Explanation")


def write_medcalc(path: Path, n: int) -> None:
    """MedCalc-Bench's test_data.csv layout: a header, then rows whose Patient Note spans lines."""
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(MEDCALC_COLUMNS)
        for i in range(n):
            age, weight = 30 + i % 50, 60 + i % 40
            note = (f"A {age}-year-old man (case {i}) presents with fatigue.\n"
                    f"Weight {weight} kg, height 175 cm, serum creatinine 1.1 mg/dL.\n"
                    "He takes no medications and has no known allergies.")
            entities = repr({"age": [age, "years"], "weight": [weight, "kg"], "creatinine": [1.1, "mg/dL"]})
            w.writerow([i + 1, 2, "Creatinine Clearance (Cockcroft-Gault Equation)", "lab", "decimal", f"pmc-{i}", "Extracted",
                        note, "What is the patient's Creatinine Clearance in mL/min?", entities, "98.5", "93.575", "103.425",
                        "The Cockcroft-Gault equation gives the value."])


def write_cmb(folder: Path, n: int) -> None:
    """CMB's answer key and question file: two JSON arrays joined on ``id``, listed in the same order."""
    types = ("单项选择题", "多项选择题")
    with open(folder / "CMB-test-choice-answer.json", "w", encoding="utf-8") as key, \
            open(folder / "CMB-test-choice-question-merge.json", "w", encoding="utf-8") as qs:
        key.write("[\n")
        qs.write("[\n")
        for i in range(n):
            sep = "" if i == 0 else ",\n"
            kind = types[i % 10 == 0]
            key.write(sep + json.dumps({"id": i + 1, "exam_type": "医师考试", "exam_class": "规培结业", "exam_subject": "内科",
                                        "question_type": kind, "answer": "BD" if i % 10 == 0 else "B"},
                                       ensure_ascii=False, indent=4))
            qs.write(sep + json.dumps({"id": i + 1, "exam_type": "医师考试", "exam_class": "规培结业", "exam_subject": "内科",
                                       "question": f"患者，男，{30 + i % 50}岁，活动后胸痛（病例{i}）。下一步最合适的检查是？",
                                       "question_type": kind,
                                       "option": {"A": "出院观察", "B": "心电图", "C": "抗生素", "D": "安慰", "E": ""}},
                                      ensure_ascii=False, indent=4))
        key.write("\n]\n")
        qs.write("\n]\n")


def write_data(bench: str, folder: Path, n: int) -> Path:
    """The ``--data`` of ``bench`` with ``n`` records, written under ``folder``."""
    folder.mkdir()
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
    proc = subprocess.Popen([sys.executable, "-m", "grandrounds", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"grandrounds failed:\n{out[-3000:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, out


PARSE = r"""
import resource, sys, time
from itertools import islice
from pathlib import Path
from grandrounds.benchmarks.readers import iter_json_array, read_json
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
        for how, label in (("read_json", "json.loads (whole)"), ("iter_json_array", "ijson (every record)"),
                           ("first10", "ijson (first 10)")):
            out = subprocess.run([sys.executable, "-c", PARSE, how, str(path)], capture_output=True, text=True, check=True)
            count, wall, peak = out.stdout.split()
            print(f"{label:<22}{int(count):>10,}{float(wall):>8.2f}{float(peak):>9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--bench", choices=BENCHMARKS, action="append", help="benchmark format(s) to measure (default: all)")
    ap.add_argument("--json-parsers", type=int, metavar="MB", help="only compare json.load with ijson on an array of MB megabytes")
    args = ap.parse_args()
    if args.json_parsers:
        compare_json_parsers(args.json_parsers)
        return
    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=throughput.serve, args=(0.001, "fixed", q), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    env = dict(os.environ, OPENAI_API_KEY="bench", GRANDROUNDS_CACHE=tempfile.mkdtemp(prefix="gr-bench-cache-"))
    try:
        for bench in args.bench or BENCHMARKS:
            with tempfile.TemporaryDirectory() as d:
                big, small = write_data(bench, Path(d) / "big", args.records), write_data(bench, Path(d) / "small", 10)
                print(f"{bench}: {args.records:,} records, {size_mb(big):.0f} MB")
                print(f"{'file':<18}{'wall s':>8}{'peak MB':>9}")
                for label, path in (("1M --limit 10" if args.records == 1_000_000 else f"{args.records:,} --limit 10", big), ("10 records", small)):
                    wall, peak, out = run_cli(["run", bench, "--data", str(path), "--limit", "10", "--store", str(Path(d) / f"{path.name}.db"),
                                               "--model", "openai/bench", "--base-url", base_url, "--protocol", "grandrounds"], env)
                    assert "n 10" in out, out
                    print(f"{label:<18}{wall:>8.2f}{peak:>9.1f}")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
