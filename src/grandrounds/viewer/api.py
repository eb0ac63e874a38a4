"""The viewer's JSON API, apart from HTTP: GET answers from the index and store, review bodies
read and validated, and values made JSON-safe."""

from __future__ import annotations

import json
import math
from typing import Any

from grandrounds.store import ReviewInput
from grandrounds.viewer import queries
from grandrounds.viewer.state import ViewerState

#: Longest text field of a review (characters): names and ids are short, reasons a paragraph.
MAX_FIELD = {"reason": 10_000}
MAX_FIELD_DEFAULT = 500


def _flag(qs: dict[str, list[str]], name: str) -> bool:
    return qs.get(name, [""])[0] in ("1", "true", "on")


def _arg(qs: dict[str, list[str]], name: str, default: str = "") -> str:
    return qs.get(name, [default])[0] or default


def _int(qs: dict[str, list[str]], name: str, default: int, lo: int, hi: int) -> int:
    """An integer parameter within [lo, hi] (ValueError naming it otherwise)."""
    text = _arg(qs, name, str(default))
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}")
    return int(text)


def api_get(state: ViewerState, path: str, qs: dict[str, list[str]]) -> tuple[int, Any]:
    """(HTTP status, JSON body) of one GET under ``/api/``; ValueError on a malformed parameter,
    :class:`queries.QueryTooSlow` past the time budget."""
    state.refresh()
    con = state.con()
    with queries.time_bounded(con):
        if path == "/api/facets":
            return 200, queries.facets(con)
        if path == "/api/runs":
            return 200, queries.runs(state.store())
        if path == "/api/items":
            f = queries.Filters(
                benchmark=_arg(qs, "benchmark"),
                model=_arg(qs, "model"),
                run=_arg(qs, "run"),
                col=_arg(qs, "col"),
                dimension=_arg(qs, "dimension"),
                verdict=_arg(qs, "verdict"),
                disagree=_flag(qs, "disagree"),
                unknown=_flag(qs, "unknown"),
                queued=_flag(qs, "queued"),
                flagged=_flag(qs, "flagged"),
                q=_arg(qs, "q"),
            )
            return 200, queries.list_items(
                con, f, _int(qs, "page", 1, 1, 10**6), _int(qs, "per_page", 50, 1, queries.PAGE_MAX)
            )
        if path == "/api/item":  # by benchmark, dataset and sample id: the stable form of a link
            iid = queries.item_id(
                con, _arg(qs, "b") or "", _arg(qs, "d") or "", _arg(qs, "s") or ""
            )
            got = queries.item(con, state.store(), iid) if iid is not None else None
            return (200, got) if got else (404, {"error": "no such item"})
        if path.startswith("/api/item/"):
            tail = path.rsplit("/", 1)[1]
            if not tail.isdigit() or len(tail) > 12:
                raise ValueError("an item id is a whole number")
            got = queries.item(con, state.store(), int(tail))
            return (200, got) if got else (404, {"error": "no such item"})
    return 404, {"error": "not found"}


def _text_field(d: dict[str, Any], name: str) -> str:
    value = d.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text")
    limit = MAX_FIELD.get(name, MAX_FIELD_DEFAULT)
    if len(value) > limit:
        raise ValueError(f"{name} is limited to {limit} characters")
    return value


def _score(value: Any) -> float | None:
    """A posted score: a JSON number or numeric text, finite (None when absent)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("a score must be a number")
    try:
        score = float(value)
    except (ValueError, OverflowError):
        raise ValueError("a score must be a number") from None
    if not math.isfinite(score):
        raise ValueError("a score must be a finite number")
    return score


def review_from_json(body: bytes) -> tuple[ReviewInput, Any]:
    """(the review a posted JSON object describes, its ``csrf`` field); ValueError when malformed."""
    d = json.loads(body or b"{}")
    if not isinstance(d, dict):
        raise ValueError("send a JSON object")
    verdict = d.get("verdict")
    if verdict is not None and not isinstance(verdict, str):
        raise ValueError("verdict must be text")
    review = ReviewInput(
        run_id=_text_field(d, "run_id"),
        grader_fp=_text_field(d, "grader_fp"),
        sample_id=_text_field(d, "sample_id"),
        reviewer=_text_field(d, "reviewer"),
        reason=_text_field(d, "reason"),
        criterion_id=_text_field(d, "criterion_id"),
        verdict=verdict or None,
        score=_score(d.get("score")),
    )
    return review, d.get("csrf")


def finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities as null (JSON has no form for them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
