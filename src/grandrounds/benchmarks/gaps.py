"""GAPS (AQ-MedAI/MedicalAiBenchEval): NSCLC clinical questions scored on A1..S4 rubric points.

Data (PROTOCOLS.md section 3, format quirk 5): ``GAPS-NSCLC-preview.xlsx`` sheet ``Sheet1``
(index, question, 分类, rubrics, three reference-model answer columns; 92 questions, 1,691
points) and ``community_contributions.xlsx`` sheet ``社区贡献数据`` (5 questions). The rubric
is a JSON list in one cell, which Excel cuts at 32,767 characters: a cut list is repaired by
keeping its complete objects (recorded in metadata) or rejected with a DataError.
The model under test answers each question; the file's answer columns stay in metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, require_file
from grandrounds.errors import DataError
from grandrounds.params import Param
from grandrounds.registry import Spec
from grandrounds.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.scoring.cells import group_cells, mean_cell, value_of
from grandrounds.scoring.gaps import LEVEL_POINTS, STRATEGIES, level_points
from grandrounds.stats import mean_ci

COMMIT = "85e91cf8bfe4926a5b778250836a10f3166ef868"
_BASE = f"https://raw.githubusercontent.com/AQ-MedAI/MedicalAiBenchEval/{COMMIT}/data/input"
NSCLC = RemoteFile(f"{_BASE}/GAPS-NSCLC-preview.xlsx", "GAPS-NSCLC-preview.xlsx",
                   "6ec15542ab9229c5165033a0e9f8220cbac7fa30d0c5259c4d308912e95f92d0")
COMMUNITY = RemoteFile(f"{_BASE}/community_contributions.xlsx", "community_contributions.xlsx",
                       "7bf8540f0049d7527f69a693f281abb6c747071cca5633767b10f3c42b7e1ca4")
SUBSETS = {"nsclc": (NSCLC,), "community": (COMMUNITY,), "all": (NSCLC, COMMUNITY)}
EXCEL_CELL_LIMIT = 32767
META_COLUMNS = ("分类", "specialty", "difficulty", "source")


def repair_truncated_list(text: str) -> tuple[list[Any], int] | None:
    """Parse a JSON list cut mid-way: keep every complete top-level object, close the list.

    Returns (items, characters dropped) or None when no complete object survives.
    """
    depth, in_str, esc, last_end = 0, False, False, -1
    start = text.find("[")
    if start < 0:
        return None
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 1 and ch == "}":
                last_end = i
    if last_end < 0:
        return None
    try:
        items = json.loads(text[start : last_end + 1] + "]")
    except json.JSONDecodeError:
        return None
    return (items, len(text) - last_end - 1) if isinstance(items, list) else None


def parse_rubric(cell: Any, path: Path, where: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rubric items from a cell, with a note when the list had to be repaired."""
    if not isinstance(cell, str) or not cell.strip():
        raise DataError(path, where, "empty rubric cell")
    text = cell.strip()
    try:
        items, note = json.loads(text), {}
    except json.JSONDecodeError as e:
        if text.endswith("]"):  # complete but malformed: not a truncation, do not guess
            raise DataError(path, where, f"rubric is not valid JSON: {e.msg} at char {e.pos}") from None
        fixed = repair_truncated_list(text)
        if fixed is None:
            raise DataError(path, where, f"rubric JSON is cut off ({len(cell)} chars) and no complete item remains") from None
        items, dropped = fixed
        note = {"rubric_repaired": True, "rubric_chars": len(cell), "rubric_chars_dropped": dropped,
                "rubric_at_excel_limit": len(cell) >= EXCEL_CELL_LIMIT}
    if not isinstance(items, list) or not items:
        raise DataError(path, where, "rubric must be a non-empty JSON list")
    return items, note


def to_criteria(items: list[Any], path: Path, where: str) -> tuple[Criterion, ...]:
    """Rubric dicts -> criteria. A4/missing levels get 0 points and stay visible (tag level:A4)."""
    out, seen = [], set()
    for k, it in enumerate(items):
        if not isinstance(it, dict) or not str(it.get("claim", "")).strip():
            raise DataError(path, f"{where}, rubric item {k + 1}", "item needs a non-empty 'claim'")
        cid = str(it.get("id", k + 1))
        if cid in seen:
            raise DataError(path, f"{where}, rubric item {k + 1}", f"duplicate rubric id {cid}")
        seen.add(cid)
        level = str(it.get("level") or "").strip().upper() or "unknown"
        kind = str(it.get("type") or "").strip().lower() or ("negative" if level.startswith("S") else "positive")
        if kind not in ("positive", "negative"):
            raise DataError(path, f"{where}, rubric id {cid}", f"type must be positive or negative, got {kind!r}")
        text = str(it["claim"]).strip()  # the judge sees the claim only, as in judge_engine.py
        tags = (f"level:{level}", f"type:{kind}") + (() if level in LEVEL_POINTS else ("points:none",))
        out.append(Criterion(id=cid, text=text, points=float(level_points(level)), tags=tags))
    return tuple(out)


class GAPS(Benchmark):
    """GAPS. Params: ``subset`` nsclc (default) | community | all; ``rubric_column`` (rubrics)."""

    name = "gaps"
    description = "GAPS NSCLC: 92 Chinese thoracic-oncology questions, 1,691 A1..S4 rubric points, judge panel"
    language = "zh"
    needs_judge = True
    remote_files = (NSCLC, COMMUNITY)
    parameters = (
        Param("subset", str, "nsclc", "which workbook(s) a data directory is read from", tuple(SUBSETS)),
        Param("rubric_column", str, "rubrics", "the sheet column holding the rubric JSON"),
    )
    scoring_options = (
        Param("gaps_min_valid", int, 2, "valid judge votes a point needs, else review_needed", minimum=1),
        Param("gaps_irrelevant", str, None, "also deduct for irrelevant content, votes combined this way", STRATEGIES),
    )

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [root / rf.filename for rf in SUBSETS[self.param("subset")]]

    def load(self, root: Path) -> list[Sample]:
        return [s for path in self.data_files(root) for s in self._load_file(path)]

    def _load_file(self, path: Path) -> list[Sample]:
        import openpyxl

        require_file(path)
        rubric_col = self.param("rubric_column")
        try:
            wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
        except Exception as e:  # openpyxl raises several unrelated types for a bad file
            raise DataError(path, None, f"cannot open as xlsx: {e}") from None
        try:
            for ws in wb.worksheets:
                rows = ws.iter_rows(values_only=True)
                header = [str(h).strip() if h is not None else "" for h in next(rows, ())]
                if "question" in header and rubric_col in header:
                    return self._rows(path, ws.title, header, rows, rubric_col)
        finally:
            wb.close()
        raise DataError(path, None, f"no sheet has the columns 'question' and {rubric_col!r}")

    def _rows(self, path: Path, sheet: str, header: list[str], rows: Any, rubric_col: str) -> list[Sample]:
        prefix = "community" if path.name == COMMUNITY.filename or sheet == "社区贡献数据" else "nsclc"
        answer_cols = [h for h in header if h.endswith("_answer")]
        out = []
        for r, values in enumerate(rows, start=2):
            rec = dict(zip(header, values))
            if all(v is None or str(v).strip() == "" for v in values):
                continue  # blank spreadsheet row, not a record
            where = f"sheet {sheet!r} row {r}"
            question = str(rec.get("question") or "").strip()
            if not question:
                raise DataError(path, where, "empty question")
            items, note = parse_rubric(rec.get(rubric_col), path, where)
            rubric = to_criteria(items, path, where)
            descs = {str(it.get("id", k + 1)): str(it["desc"]) for k, it in enumerate(items) if it.get("desc")}
            qid = str(rec.get("index") or r - 1).strip()
            meta = {k: rec[k] for k in META_COLUMNS if rec.get(k) is not None}
            meta.update(note, sheet=sheet, row=r, language="zh", subset=prefix,
                        category=str(rec.get("分类") or rec.get("specialty") or ""),
                        reference_answers={c: rec[c] for c in answer_cols if rec.get(c)},
                        **({"rubric_desc": descs} if descs else {}))
            out.append(Sample(id=f"{prefix}/{qid}", benchmark=self.name, messages=(Message("user", question),),
                              rubric=rubric, metadata=meta))
        return out

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("gaps", {"min_valid": int(self.scoring(options, "gaps_min_valid")), "irrelevant": self.scoring(options, "gaps_irrelevant")})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Mean question score (ours) with bootstrap CI; the reference convention in extra.

        Breakdown family ``category`` (the file's 分类, or specialty): each cell's score is our mean
        with its CI, and :data:`CELL_METRICS` (the reference mean among them) sit beside it.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        overall = mean_cell([value_of(g) for _, g in rows])
        return Aggregate.of(
            "GAPS score (0-1; review_needed excluded)",
            overall,
            {"category": group_cells(((s.metadata.get("category") or "?", g) for s, g in rows), _cell)},
            _summary([g for _, g in rows]) | {"min_valid": int(self.scoring(options, "gaps_min_valid"))},
        )


#: What each breakdown cell carries beside our mean score.
CELL_METRICS = ("reference_score", "mean_coverage", "n_review_needed")


def _cell(grades: Sequence[Grade | None]) -> Cell:
    """Our mean score of some answers (CI from ``mean_ci``) with the reference mean, coverage and review count."""
    summary = _summary(grades)
    return mean_cell([value_of(g) for g in grades], {k: summary[k] for k in CELL_METRICS})


def _summary(grades: Sequence[Grade | None]) -> dict[str, Any]:
    """Both conventions, coverage and review_needed counts over some grades."""
    gs = [g for g in grades if g is not None]
    ours = [g.value for g in gs if g.value is not None]
    ref = [g.details["reference_value"] for g in gs if g.details.get("reference_value") is not None]
    cov = [g.details["coverage"] for g in gs if g.details.get("coverage") is not None]
    return {
        "score": sum(ours) / len(ours) if ours else None,
        "reference_score": sum(ref) / len(ref) if ref else None,
        "reference_ci95": mean_ci(ref),
        "n": len(grades),
        "n_scored": len(ours),
        "n_reference_scored": len(ref),
        "mean_coverage": sum(cov) / len(cov) if cov else None,
        "n_review_needed": sum(int(g.details.get("n_review_needed", 0)) for g in gs),
    }
