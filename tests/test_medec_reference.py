"""MEDEC under the reference protocol against the official MEDIQA-CORR 2024 scorer, on the 597 test texts.

The scorer's own functions (``parse_reference_file``, ``parse_run_submission_file``,
``compute_accuracy``, ``get_nlg_eval_data``, ``NLGMetrics``) are pulled out of
../shared/reference/medec and fed temp files in its formats: the test CSV without its 328 empty
rows (medec.py docstring, exception 1) and one submission file per case. ``NLGMetrics`` runs with
ROUGE only (BERTScore and BLEURT need model checkpoints; grandrounds reports them as not computed).
The same replies go through MEDEC's grader and aggregate; every figure must agree to 1e-9, per
text and overall.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medec import MEDEC
from grandrounds.core.records import Response, Sample
from grandrounds.scoring.medec import PANDAS_NA
from tests.conftest import shared_file
from tests.grading import grade_answer
from tests.official import load_official

SCRIPT = "medec/evaluation/mediqa-corr-2024-eval-script-2-all-metrics.py"
TEST_CSV = "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
TOL = 1e-9
pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid escape sequence:DeprecationWarning"
)  # the official file's regexes


# ---- pandas' read_csv as parse_reference_file uses it (the real one when installed) ---------------


class _Frame:
    """``pd.read_csv(path)`` for a MEDEC file: default NA spellings -> NaN, a column of integers -> int,
    of numbers with NaN -> float (pandas' inference); ``iterrows`` gives (index, row mapping)."""

    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        cols: dict[str, list[Any]] = {k: [r[k] for r in rows] for k in (rows[0] if rows else {})}
        self.rows = [
            dict(zip(cols, vals)) for vals in zip(*(self._column(v) for v in cols.values()))
        ]

    @staticmethod
    def _column(values: list[str]) -> list[Any]:
        cells = [None if v in PANDAS_NA else v for v in values]
        present = [v for v in cells if v is not None]
        if present and all(re.fullmatch(r"-?\d+", v) for v in present):
            return (
                [int(v) if v is not None else math.nan for v in cells]
                if len(present) == len(cells)
                else [float(v) if v is not None else math.nan for v in cells]
            )
        return [v if v is not None else math.nan for v in cells]

    def iterrows(self):
        return enumerate(self.rows)


def _pandas() -> Any:
    try:
        import pandas

        return pandas
    except ImportError:
        return SimpleNamespace(read_csv=_Frame)


@pytest.fixture(scope="module")
def official() -> SimpleNamespace:
    names = [
        "parse_reference_file",
        "parse_run_submission_file",
        "compute_accuracy",
        "increment_counter",
        "clip",
        "NLGMetrics",
        "get_nlg_eval_data",
    ]
    # the script opens its submission file with the locale's encoding; ours are UTF-8
    return load_official(
        SCRIPT, names, extra={"pd": _pandas(), "open": functools.partial(open, encoding="utf-8")}
    )


@pytest.fixture(scope="module")
def medec(tmp_path_factory) -> tuple[list[Sample], Path]:
    """The 597 test texts, and the test CSV without its empty rows (the file the official parser is given)."""
    src = shared_file("medec", TEST_CSV)
    samples = MEDEC(split="test").load(src.parent)
    clean = tmp_path_factory.mktemp("medec") / "reference.csv"
    with open(src, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    with open(clean, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([r for r in rows if any(c.strip() for c in r)])
    return samples, clean


# ---- the cases: one reply per text, and the submission text the official scorer is given --------


def _sentence(s: Sample, k: int) -> str:
    lines = s.messages[0].content.split("\n\n", 2)[2].split("\n")
    return lines[k % len(lines)].split(" ", 1)[1]


def _correction(s: Sample) -> str:
    return " ".join(s.target["corrected_raw"].split())


def _paraphrase(text: str, i: int) -> str:
    words = text.rstrip(".").split()
    if i % 3 == 0:
        return " ".join(["In", "this", "case,"] + words[1:]) + "."
    if i % 3 == 1:
        return " ".join(words[len(words) // 2 :] + words[: len(words) // 2])
    return " ".join(w for j, w in enumerate(words) if j % 4 != 1) + " instead."


def _case_change(text: str, i: int) -> str:
    return (text.upper(), text.lower(), text.title(), text.swapcase())[i % 4]


def _line(s: Sample, flag: Any, sid: Any, corrected: str | None) -> str:
    return " ".join(str(x) for x in (s.id, flag, sid, corrected) if x is not None)


def _json(s: Sample, error: bool, sid: Any, corrected: Any) -> tuple[str, str]:
    """A JSON reply, and the line it stands for (medec_extract.submission_text's documented rule)."""
    reply = json.dumps({"error": error, "sentence_id": sid, "corrected": corrected})
    if error and sid is None:
        return reply, ""
    text = " ".join(corrected.split()) if error and isinstance(corrected, str) else ""
    return reply, _line(s, int(error), -1 if sid is None else sid, text or "NA")


def _same(text: str) -> tuple[str, str]:
    return text, text


Case = Callable[[Sample, int], "tuple[str, str]"]


def _exact(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    return _same(
        _line(s, 1, t["sentence_id"], _correction(s)) if t["flag"] else _line(s, 0, -1, "NA")
    )


def _exact_json(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    return _json(s, bool(t["flag"]), t["sentence_id"], t["corrected_raw"])


def _wrong_flag(s: Sample, i: int) -> tuple[str, str]:
    return _same(_line(s, 0, -1, "NA") if s.target["flag"] else _line(s, 1, i % 5, _sentence(s, i)))


def _wrong_sentence(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    return _same(
        _line(s, 1, t["sentence_id"] + 1, _correction(s))
        if t["flag"]
        else _line(s, 0, 1 + i % 5, "NA")
    )


def _paraphrased(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    if not t["flag"]:
        return _same(_line(s, 0, -1, "NA"))
    return (
        _same(_line(s, 1, t["sentence_id"], _paraphrase(_correction(s), i)))
        if i % 2
        else _json(s, True, t["sentence_id"], _paraphrase(_correction(s), i))
    )


def _case_changed(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    if not t["flag"]:
        return _same(_line(s, 0, -1, "NA"))
    return _same(_line(s, 1, t["sentence_id"], _case_change(_correction(s), i)))


def _missing_correction(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    return _same(_line(s, t["flag"], t["sentence_id"], None))


def _na(s: Sample, i: int) -> tuple[str, str]:
    t = s.target
    return _same(_line(s, t["flag"], t["sentence_id"], ("NA", "na", "N/A", '"NA"')[i % 4]))


def _empty(s: Sample, i: int) -> tuple[str, str]:
    return _same("")


def _edges(s: Sample, i: int) -> tuple[str, str]:
    """Shapes the official parser treats in its own way, one per text in turn."""
    t, c = s.target, _correction(s)
    sid, flag = t["sentence_id"], t["flag"]
    shapes: list[Callable[[], tuple[str, str]]] = [
        lambda: _same(_line(s, flag, sid, f'"{c}"')),  # quotes stripped
        lambda: _same(_line(s, flag, sid, '""')),  # quotes only: one is kept
        lambda: _same(_line(s, f"0{flag}", sid, c)),  # "01" is not "1"
        lambda: _same(_line(s, 0, sid, c)),  # flag 0 forces NA
        lambda: _same(_line(s, flag, f"0{sid}" if sid >= 0 else "-01", c)),  # "010" is not "10"
        lambda: _same(_line(s, flag, sid, c).upper()),  # upper-case id: invalid line
        lambda: _same(f"{s.id}  {flag} {sid} {c}"),  # two spaces: invalid line
        lambda: _same(f"{s.id}\t{flag}\t{sid}\t{c}   with   spaces"),  # tabs are whitespace
        lambda: _same(_line(s, flag, sid, c.replace(" ", "\\t", 2))),  # "\t" expanded by re.sub
        lambda: _same(
            _line(s, 1 - flag, 0, "x") + "\n" + _line(s, flag, sid, c)
        ),  # the last line wins
        lambda: _same(_line(s, flag, sid, c) + "\r\n" + _line(s, 1 - flag, 0, "y z")),
        lambda: _same(
            f"Answer:\n{_line(s, flag, sid, c)}\nThat is all."
        ),  # prose lines are invalid
        lambda: _same(_line(s, flag, sid, c.replace(" ", "\u00a0", 1))),  # NBSP splits like a space
        lambda: _same(
            _line(s, flag, sid, c.replace(".", ". .", 1))
        ),  # an empty "sentence" for rouge
        lambda: _json(s, bool(flag), sid, None),  # null correction: NA
        lambda: _json(s, bool(flag), None, c),  # no sentence id
        lambda: _json(s, bool(flag), sid, f"  {c}\n(see above) "),
        lambda: (
            f"<think>{_line(s, 1 - flag, 0, 'x')}</think>" + _json(s, bool(flag), sid, c)[0],
            _json(s, bool(flag), sid, c)[1],
        ),
        lambda: _same(_line(s, flag, sid, c.lower().rstrip("."))),
        lambda: _same(_line(s, flag, -1 if flag else 0, "Na")),  # "Na" is not "NA"
    ]
    return shapes[i % len(shapes)]()


CASES: dict[str, Case] = {
    "exact ground truth (line)": _exact,
    "exact ground truth (JSON)": _exact_json,
    "wrong flag": _wrong_flag,
    "wrong sentence": _wrong_sentence,
    "correction paraphrased": _paraphrased,
    "correction case changed": _case_changed,
    "missing correction": _missing_correction,
    "NA / na / N/A": _na,
    "empty reply": _empty,
    "parser edge shapes": _edges,
}


# ---- running both sides ---------------------------------------------------------------------------


def _official_run(
    off: SimpleNamespace, ref_csv: Path, submission: str, tmp: Path
) -> dict[str, Any]:
    sub = tmp / "submission.txt"
    sub.write_text(submission, encoding="utf-8", newline="")
    with contextlib.redirect_stdout(io.StringIO()):  # it prints each invalid line
        ref_corr, ref_flags, ref_sid = off.parse_reference_file(str(ref_csv))
        cand_corr, cand_flags, cand_sid = off.parse_run_submission_file(str(sub))
    acc = off.compute_accuracy(ref_flags, ref_sid, cand_flags, cand_sid)
    nlg, n_pairs = _nlg(off, ref_corr, cand_corr)
    per_text = {}
    for tid in ref_flags:
        one, _ = _nlg(off, {tid: ref_corr[tid]}, {tid: cand_corr[tid]} if tid in cand_corr else {})
        per_text[tid] = {
            "flag_correct": tid in cand_flags and cand_flags[tid] == ref_flags[tid],
            "sentence_correct": tid in cand_sid and cand_sid[tid] == ref_sid[tid],
            "correction_score": one["R1FC"],
            "r2_score": one["R2FC"],
            "rl_score": one["RLFC"],
        }
    return {"accuracy": acc, "nlg": nlg, "n_pairs": n_pairs, "per_text": per_text}


def _nlg(off: SimpleNamespace, ref_corr: dict, cand_corr: dict) -> tuple[dict[str, Any], int]:
    """NLGMetrics' figures (ROUGE only) and the number of pairs it scored with ROUGE."""
    refs, preds, counters = off.get_nlg_eval_data(ref_corr, cand_corr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of no pairs (all NA or missing)
        return off.NLGMetrics(metrics=["ROUGE"]).compute(refs, preds, counters), len(preds)


def _ours(samples: list[Sample], replies: list[str]) -> tuple[Any, dict[str, dict[str, Any]]]:
    bench = MEDEC(split="test")
    grader = bench.grader(RunOptions())
    grades = [grade_answer(grader, s, Response(key=s.id, text=r)) for s, r in zip(samples, replies)]
    return bench.aggregate(samples, grades, RunOptions()), {g.sample_id: g.details for g in grades}


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return b is None
    return (a is None and b is None) or (
        a is not None and b is not None and abs(float(a) - float(b)) <= TOL
    )


#: (official figure, our extra key)
FIGURES = [
    ("Error Flags Accuracy", "error_flag_accuracy"),
    ("Error Sentence Detection Accuracy", "error_sentence_accuracy"),
    ("R1FC", "r1fc"),
    ("R2FC", "r2fc"),
    ("RLFC", "rlfc"),
    ("R1F_subset_check", "r1f_subset"),
    ("R2F_subset_check", "r2f_subset"),
    ("RLF_subset_check", "rlf_subset"),
]
PER_TEXT = ("flag_correct", "sentence_correct", "correction_score", "r2_score", "rl_score")


def test_reference_protocol_equals_the_official_scorer_on_597_texts(official, medec, tmp_path):
    samples, ref_csv = medec
    assert len(samples) == 597
    table = []
    for name, case in CASES.items():
        pairs = [case(s, i) for i, s in enumerate(samples)]
        replies = [r for r, _ in pairs]
        submission = "".join(f"{line}\n" for _, line in pairs if line)
        off = _official_run(official, ref_csv, submission, tmp_path)
        agg, details = _ours(samples, replies)
        got = {"Error Flags Accuracy": agg.score} | {o: agg.extra[k] for o, k in FIGURES[1:]}
        want = off["accuracy"] | off["nlg"]
        overall = [o for o, _ in FIGURES if _close(want[o], got[o])]
        assert agg.extra["n_rouge_pairs"] == off["n_pairs"], name
        agree = {
            k: sum(1 for s in samples if _close(off["per_text"][s.id][k], details[s.id][k]))
            for k in PER_TEXT
        }
        other = agg.extra["other_protocol"]
        shown = (
            f"flag {want['Error Flags Accuracy']:.4f} sentence {want['Error Sentence Detection Accuracy']:.4f} "
            f"R1FC {want['R1FC']:.4f} (grandrounds: flag {other['score']:.4f} R1FC {other['r1fc']:.4f})"
        )
        table.append(
            (
                name,
                len(samples),
                agree,
                f"{len(overall)}/{len(FIGURES)}",
                {o: (want[o], got[o]) for o, _ in FIGURES if o not in overall},
                shown,
            )
        )
    print(
        "\ncase | texts | per-text agreement (flag, sentence, R1, R2, RL) | overall figures agreeing | official figures"
    )
    for name, n, agree, overall, bad, shown in table:
        print(
            f"{name} | {n} | {', '.join(str(v) for v in agree.values())} | {overall} {bad or ''}| {shown}"
        )
    for name, n, agree, _overall, bad, _ in table:
        assert all(v == n for v in agree.values()) and not bad, (name, agree, bad)


def test_where_the_official_script_stops_we_count(official, medec, tmp_path):
    """Exceptions 2 and 3 of the medec.py docstring: the official script raises, the reference protocol counts."""
    samples, ref_csv = medec
    s0, s1 = [s for s in samples if s.target["flag"]][:2]
    with pytest.raises(ValueError, match="Hypothesis is empty"):
        _official_run(official, ref_csv, "ms-test-0 1 10 ...\n", tmp_path)
    with pytest.raises(re.error, match="bad escape"):
        _official_run(official, ref_csv, "ms-test-0 1 10 Schistosoma \\d mansoni\n", tmp_path)
    agg, details = _ours(
        [s0, s1],
        [
            _line(s0, 1, s0.target["sentence_id"], "..."),
            _line(s1, 1, s1.target["sentence_id"], "Schistosoma \\d mansoni"),
        ],
    )
    assert (
        details[s0.id]["rouge_error"] == "Hypothesis is empty."
        and details[s0.id]["correction_score"] == 0.0
    )
    assert (
        details[s1.id]["official_error"].startswith("re.error: bad escape")
        and details[s1.id]["unparseable"]
    )
    assert (
        agg.extra["n_official_errors"] == 1
        and agg.extra["n_rouge_errors"] == 1
        and agg.extra["r1fc"] == 0.0
    )
    assert agg.extra["error_flag_accuracy"] == 0.5  # the "..." line was read: its flag is right


def test_the_published_test_csv_read_as_is_makes_every_flag_wrong(official, medec, tmp_path):
    """Exception 1: pandas reads the published file's flag and sentence columns as floats (its empty rows)."""
    samples, ref_csv = medec
    exact = "".join(f"{_exact(s, i)[1]}\n" for i, s in enumerate(samples))
    with contextlib.redirect_stdout(io.StringIO()):
        _, flags, sids = official.parse_reference_file(str(shared_file("medec", TEST_CSV)))
    assert (
        len(flags) == 598 and flags["ms-test-0"] == "1.0" and sids["ms-test-0"] == "10.0"
    )  # 597 texts + one NaN id
    off = _official_run(official, ref_csv, exact, tmp_path)
    assert (
        off["accuracy"]["Error Flags Accuracy"] == 1.0
    )  # the same predictions against the file without empty rows
    agg, _ = _ours(samples, [_exact(s, i)[0] for i, s in enumerate(samples)])
    assert agg.score == 1.0
