"""GAPS (AQ-MedAI/MedicalAiBenchEval): NSCLC clinical questions scored on A1..S4 rubric points.

Data: ``GAPS-NSCLC-preview.xlsx`` sheet ``Sheet1``
(index, question, 分类, rubrics, three reference-model answer columns; 92 questions, 1,691
points) and ``community_contributions.xlsx`` sheet ``社区贡献数据`` (5 questions). The rubric
is a JSON list in one cell, which Excel cuts at 32,767 characters: a cut list is repaired by
keeping its complete objects (recorded in metadata) or rejected with a DataError.
The model under test answers each question; the file's answer columns stay in metadata.

Protocols (``--protocol``):

- ``reference`` (AQ-MedAI/MedicalAiBenchEval @ 85e91cf): every point judged by every judge with
  judge_engine.py's positive or negative prompt (read at run time from the pinned file, by the
  point's ``type``), the reply read as judge_engine.call_model reads it (a ```` ```json {...} ````
  block whose ``criteria_met`` is a JSON boolean, else Unknown; no re-ask), judge_engine.vote
  (Unknown dropped, at least 2 valid votes and a label with at least 2, else ReviewNeeded, which
  counts as not met), clinical_scoring_calculator.calculate_scores (``max(0, met points) /
  positive points``, 4 decimals, 0 when a question has no positive point) with config.yaml's
  points, and the mean over every question (an answer that could not be obtained scores 0, as a
  row without judge results does there). The judges config.yaml names (``judge_models`` m1..m3:
  Kimi-K2-Instruct, Qwen3-235B-A22B-Instruct-2507, DeepSeek-V3.1 in config_model.yaml,
  temperature 0, max_tokens 32678) are recorded in the preset; the official code generates no
  candidate answers (they are columns of the sheet), so the candidate's settings are ours.
- ``grandrounds``: our judge prompts (``templates/gaps_*.txt``), tolerant JSON reading (fenced
  or not, full-width punctuation) with bounded re-asks, the same vote, and review_needed points
  left out of both the earned points and the maximum (coverage reported); unscored answers are
  left out of the mean.

Where the reference differs from the official code (tests/test_gaps_reference.py compares them):

- a tie between Met and Not Met with at least 2 votes each (4 or 5 judges) is ReviewNeeded here;
  judge_engine.vote picks ``max(set(labels), key=labels.count)``, i.e. whichever label the set
  yields first, which changes with the interpreter's string hash seed (PYTHONHASHSEED): not a
  function of the votes. The official 3-judge panel cannot tie.
- a rubric ``level`` in lower case (``a1``) earns its points here; config.yaml's keys are upper
  case, so it is worth 0 there. The published files have none.
- a claim with surrounding whitespace is shown to the judge stripped (none in the published
  files); a question cell with surrounding whitespace (NSCLC index 37) is shown as the cell has it.
- a point without ``type`` gets the negative prompt here when its level is S1..S4; the official
  review step defaults it to positive. Every point in the published files has a type.
- the candidate's reply is shown to the judges with reasoning traces removed; officially the
  answers are final texts already in the sheet, so there is nothing to compare.
- the irrelevant-content deduction (``--scoring gaps_irrelevant``, off in the official
  config.yaml) keeps our prompts under both protocols.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, require_file
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import group_cells, mean_cell, value_of
from grandrounds.scoring.gaps import LEVEL_POINTS, STRATEGIES, level_points
from grandrounds.sources.gaps import DIFFERS, MEDICAL_AI_BENCH_EVAL, PROTOCOLS

_BASE = MEDICAL_AI_BENCH_EVAL.url("data/input")
NSCLC = RemoteFile(
    f"{_BASE}/GAPS-NSCLC-preview.xlsx",
    "GAPS-NSCLC-preview.xlsx",
    "6ec15542ab9229c5165033a0e9f8220cbac7fa30d0c5259c4d308912e95f92d0",
)
COMMUNITY = RemoteFile(
    f"{_BASE}/community_contributions.xlsx",
    "community_contributions.xlsx",
    "7bf8540f0049d7527f69a693f281abb6c747071cca5633767b10f3c42b7e1ca4",
)
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
            raise DataError(
                path, where, f"rubric is not valid JSON: {e.msg} at char {e.pos}"
            ) from None
        fixed = repair_truncated_list(text)
        if fixed is None:
            raise DataError(
                path,
                where,
                f"rubric JSON is cut off ({len(cell)} chars) and no complete item remains",
            ) from None
        items, dropped = fixed
        note = {
            "rubric_repaired": True,
            "rubric_chars": len(cell),
            "rubric_chars_dropped": dropped,
            "rubric_at_excel_limit": len(cell) >= EXCEL_CELL_LIMIT,
        }
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
        kind = str(it.get("type") or "").strip().lower() or (
            "negative" if level.startswith("S") else "positive"
        )
        if kind not in ("positive", "negative"):
            raise DataError(
                path,
                f"{where}, rubric id {cid}",
                f"type must be positive or negative, got {kind!r}",
            )
        text = str(it["claim"]).strip()  # the judge sees the claim only, as in judge_engine.py
        tags = (f"level:{level}", f"type:{kind}") + (
            () if level in LEVEL_POINTS else ("points:none",)
        )
        out.append(Criterion(id=cid, text=text, points=float(level_points(level)), tags=tags))
    return tuple(out)


class GAPS(Benchmark):
    """GAPS. Params: ``subset`` nsclc (default) | community | all; ``rubric_column`` (rubrics)."""

    name = "gaps"
    description = "GAPS NSCLC: 92 Chinese thoracic-oncology questions, 1,691 A1..S4 rubric points, judge panel"
    language = "zh"
    needs_judge = True
    remote_files = (NSCLC, COMMUNITY)
    protocols = PROTOCOLS
    parameters = (
        Param(
            name="subset",
            type=str,
            default="nsclc",
            help="which workbook(s) a data directory is read from",
            choices=tuple(SUBSETS),
        ),
        Param(
            name="rubric_column",
            type=str,
            default="rubrics",
            help="the sheet column holding the rubric JSON",
        ),
    )
    scoring_options = (
        Param(
            name="gaps_min_valid",
            type=int,
            default=2,
            help="valid judge votes a point needs, else review_needed",
            minimum=1,
        ),
        Param(
            name="gaps_irrelevant",
            type=str,
            help="also deduct for irrelevant content, votes combined this way",
            choices=STRATEGIES,
        ),
    )

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [root / rf.filename for rf in SUBSETS[self.param("subset")]]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        """One sample per sheet row, read as asked for (openpyxl's read-only row iterator), the
        workbooks in :meth:`data_files` order.

        The workbook's shared-strings table (the text of every distinct cell) is not read whole
        on opening, as openpyxl does, but as far as the rows read so far need, its texts spilled
        to a temporary file (:mod:`grandrounds.benchmarks.readers.xlsx`): memory stays flat in
        the file's size, and the first rows need only the start of the table. Not held either:
        the parsed samples (bench/loader_memory.py measures the peak).
        """
        for path in self.data_files(root):
            yield from self._iter_file(path)

    def _iter_file(self, path: Path) -> Iterator[Sample]:
        """The samples of one workbook, opened with :func:`grandrounds.benchmarks.readers.xlsx.open_xlsx` (cell values as
        openpyxl's read-only mode gives them, the shared strings read lazily); a cell's bad
        shared-string index or an unreadable table is a DataError naming the sheet and row."""
        from grandrounds.benchmarks.readers.xlsx import SharedStringsError, open_xlsx, sheet_rows

        require_file(path)
        rubric_col = self.param("rubric_column")
        try:
            book = open_xlsx(path)
        except SharedStringsError as e:  # a cell over the limit in a part read on opening
            raise DataError(path, None, f"{e.member}: {e.problem}") from None
        except Exception as e:  # openpyxl raises several unrelated types for a bad file
            raise DataError(
                path, None, f"cannot open as xlsx: {' '.join(str(e).split())}"
            ) from None

        try:
            for ws in book.workbook.worksheets:
                rows = sheet_rows(
                    path, ws
                )  # a failure at a row (cell over the limit, damage) is a DataError naming it
                header = [str(h).strip() if h is not None else "" for h in next(rows, ())]
                if "question" in header and rubric_col in header:
                    yield from self._rows(path, ws.title, header, rows, rubric_col)
                    return
        finally:
            book.close()  # table, spill file and archive; also when the caller stops early
        raise DataError(path, None, f"no sheet has the columns 'question' and {rubric_col!r}")

    def _rows(
        self, path: Path, sheet: str, header: list[str], rows: Any, rubric_col: str
    ) -> Iterator[Sample]:
        prefix = (
            "community" if path.name == COMMUNITY.filename or sheet == "社区贡献数据" else "nsclc"
        )
        answer_cols = [h for h in header if h.endswith("_answer")]
        for r, values in enumerate(rows, start=2):
            rec = dict(zip(header, values))
            if all(v is None or str(v).strip() == "" for v in values):
                continue  # blank spreadsheet row, not a record
            where = f"sheet {sheet!r} row {r}"
            cell = str(rec.get("question") or "")
            question = cell.strip()
            if not question:
                raise DataError(path, where, "empty question")
            items, note = parse_rubric(rec.get(rubric_col), path, where)
            rubric = to_criteria(items, path, where)
            descs = {
                str(it.get("id", k + 1)): str(it["desc"])
                for k, it in enumerate(items)
                if it.get("desc")
            }
            qid = str(rec.get("index") or r - 1).strip()
            meta = {k: rec[k] for k in META_COLUMNS if rec.get(k) is not None}
            meta.update(
                note,
                sheet=sheet,
                row=r,
                language="zh",
                subset=prefix,
                category=str(rec.get("分类") or rec.get("specialty") or ""),
                reference_answers={c: rec[c] for c in answer_cols if rec.get(c)},
                **({"rubric_desc": descs} if descs else {}),
                **({"question_cell": cell} if cell != question else {}),
            )  # as the official judge sees it
            yield Sample(
                id=f"{prefix}/{qid}",
                benchmark=self.name,
                messages=(Message("user", question),),
                rubric=rubric,
                metadata=meta,
            )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec(
            "gaps",
            {
                "min_valid": int(self.scoring(options, "gaps_min_valid")),
                "irrelevant": self.scoring(options, "gaps_irrelevant"),
                "protocol": options.protocol,
            },
        )

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Mean question score by the run's protocol, with its CI; the other protocol's beside it.

        reference: the mean of calculate_scores' ``normalized`` over every question, an answer
        that could not be obtained scoring 0 (so ``n`` is every question and ``n_unscored``
        counts those inside it); grandrounds: the mean over scored answers. Breakdown family
        ``category`` (the file's 分类, or specialty) carries :data:`CELL_METRICS` beside each score.
        """
        proto = options.protocol
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        gs = [g for _, g in rows]
        overall = _cell(gs, proto)
        summary = _summary(gs, proto)
        extra = {
            "protocol": proto,
            "other_protocol": {
                "protocol": _other(proto),
                "score": summary["other_score"],
                "differs": DIFFERS,
            },
            **summary,
            "min_valid": int(self.scoring(options, "gaps_min_valid")),
        }
        label = "review_needed = not met" if proto == "reference" else "review_needed excluded"
        return Aggregate.of(
            f"GAPS score (0-1; {label})",
            overall,
            {
                "category": group_cells(
                    ((s.metadata.get("category") or "?", g) for s, g in rows),
                    lambda g: _cell(g, proto),
                )
            },
            extra,
        )


#: What each breakdown cell carries beside its score.
CELL_METRICS = ("other_score", "mean_coverage", "n_review_needed")


def _other(protocol: str) -> str:
    return "grandrounds" if protocol == "reference" else "reference"


def _score_cell(
    values: Sequence[float | None], protocol: str, metrics: dict[str, Any] | None = None
) -> Cell:
    """Mean question score by ``protocol``: reference counts a missing value as 0 (inside ``n``), grandrounds leaves it out."""
    if protocol != "reference":
        return mean_cell(values, metrics)
    cell = mean_cell([0.0 if v is None else v for v in values], metrics)
    return Cell(
        score=cell.score,
        n=cell.n,
        n_unscored=sum(1 for v in values if v is None),
        ci95=cell.ci95,
        metrics=cell.metrics,
    )


def _cell(grades: Sequence[Grade | None], protocol: str) -> Cell:
    """The score of some answers by ``protocol`` (CI from ``mean_ci``) with :data:`CELL_METRICS`."""
    summary = _summary(grades, protocol)
    return _score_cell(
        [value_of(g) for g in grades], protocol, {k: summary[k] for k in CELL_METRICS}
    )


def _summary(grades: Sequence[Grade | None], protocol: str) -> dict[str, Any]:
    """The other protocol's figure, coverage and review_needed counts over some grades."""
    gs = [g for g in grades if g is not None]
    others = [None if g is None else g.details.get("other_value") for g in grades]
    cov = [g.details["coverage"] for g in gs if g.details.get("coverage") is not None]
    return {
        "other_score": _score_cell(others, _other(protocol)).score,
        "n": len(grades),
        "n_scored": sum(1 for g in gs if g.value is not None),
        "mean_coverage": sum(cov) / len(cov) if cov else None,
        "n_review_needed": sum(int(g.details.get("n_review_needed", 0)) for g in gs),
    }
