"""MedAgentBench v1's checks, one named check per assertion, so a transcript shows which one failed.

The official grader (``refsol.py``) is gated; these checks follow the public re-implementation
(MedARC-AI/med-lm-envs, environments/medagentbench/medagentbench.py @ 6568528, functions
``task1`` ... ``task10``), read and rewritten here:

- "no POST" is that re-implementation's ``check_has_post``: no reply of the agent contains the text
  ``POST`` (under the native protocol: no POST tool was called either);
- the POSTs checked are the accepted ones, read out of the reply as its ``extract_posts`` does
  (first line after ``POST`` is the URL, the rest the JSON payload);
- the expected answers of tasks 2 and 4-10 are recomputed from the record server's data, fetched
  by the environment at the end of the episode with the re-implementation's own queries
  (:func:`reference_query`) and kept in the episode's state as facts (:func:`reference_facts`):
  the grader does no network I/O of its own;
- the answer is the text inside ``FINISH(...)`` read as JSON and compared with Python's ``==`` as
  the re-implementation compares it (so ``[77.0]`` equals ``[77]``); tasks 5, 9 and 10 also accept
  ``[]`` (only a check was asked), task 6 accepts a mean within 0.1.

Every check of a task is evaluated (not only up to the first failure, as the asserts there stop);
a task passes when all of them pass, which is the re-implementation's verdict.

Two places where the re-implementation fails a task by raising, counted as it counts them:

- a task whose POSTs are read (``extract_posts``: tasks 3 and 8, and 5, 9, 10 where an order is
  due) fails when the agent's finishing reply holds the text ``POST``: ``extract_posts`` looks at
  the message after every agent message holding ``POST``, and after the last one there is none
  (an ``IndexError`` its ``eval`` turns into a failure). The check "FINISH reply holds no POST" says so;
- record-server data the checks cannot read (a lab without a value, a date that does not parse, a
  search answer that is not a Bundle) raises in the re-implementation's task function and fails the
  task. It fails here too, with the one check "record server's data readable" naming what was
  wrong; ``details["grandrounds"]`` says that our own reading would leave the task unscored (it
  says nothing of the agent), and the result counts such tasks beside the headline
  (``extra["server_data_unreadable"]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext, Grader, unscored

#: The tasks' fixed "now", as every task context states it.
NOW_TEXT = "2023-11-13T10:15:00+00:00"
NOW = datetime.fromisoformat(NOW_TEXT)
SBAR_NOTE = (
    "Situation: acute left knee injury, Background: radiology report indicates ACL tear. Assessment: ACL tear grade II. "
    "Recommendation: request for Orthopedic service to evaluate and provide management recommendations."
)
_LAB_OF = {
    "task4": "MG",
    "task5": "MG",
    "task6": "GLU",
    "task7": "GLU",
    "task9": "K",
    "task10": "A1C",
}
_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)

Check = dict[str, Any]


def reference_query(task: str, mrn: str) -> str | None:
    """The search (relative to the server's base URL, without ``&_format=json``) whose result the
    checks of ``task`` need, or None: the re-implementation's own queries."""
    if task == "task2":
        return f"Patient?identifier={mrn}"
    code = _LAB_OF.get(task)
    return f"Observation?patient={mrn}&code={code}&_count=5000" if code else None


def reference_facts(task: str, bundle: Mapping[str, Any]) -> dict[str, Any]:
    """What the checks read from the search's Bundle: the first patient's birth date (task 2), or
    each lab's ``[effectiveDateTime, value]`` in the Bundle's order (the others)."""
    entries = [e.get("resource", {}) for e in bundle.get("entry", []) or []]
    if task == "task2":
        return {"birthDate": entries[0].get("birthDate") if entries else None}
    for r in entries:  # the re-implementation reads both of every entry, and raises without them
        if "effectiveDateTime" not in r or "value" not in (r.get("valueQuantity") or {}):
            return {
                "unreadable": f"{r.get('resourceType', 'a resource')} {r.get('id', '?')} has no "
                + ("effectiveDateTime" if "effectiveDateTime" not in r else "valueQuantity.value")
            }
    return {
        "labs": [
            [r.get("effectiveDateTime"), (r.get("valueQuantity") or {}).get("value")]
            for r in entries
        ]
    }


def check(name: str, passed: bool, detail: str = "") -> Check:
    return {"name": name, "passed": bool(passed), "detail": detail}


def _show(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _get(obj: Any, path: Sequence[Any]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _field(name: str, payload: Any, path: Sequence[Any], test: Callable[[Any], bool]) -> Check:
    where = "".join(f"[{p!r}]" for p in path)
    try:
        got = _get(payload, path)
        return check(name, test(got), f"payload{where} = {_show(got)}")
    except _ERRORS:
        return check(name, False, f"payload{where} is missing or malformed")


# ---- the facts ---------------------------------------------------------------------------


def _last(
    labs: Sequence[Sequence[Any]], since: datetime | None = None
) -> tuple[datetime | None, Any, Any]:
    """(time, value, time as written) of the latest lab (on or after ``since``), the first one on a tie."""
    best: tuple[datetime | None, Any, Any] = (None, None, None)
    for when_text, value in labs:
        when = datetime.fromisoformat(when_text)
        if since is not None and when < since:
            continue
        if best[0] is None or when > best[0]:
            best = (when, value, when_text)
    return best


def age_on(dob: str, today: datetime = NOW) -> int:
    """Whole years from ``dob`` (YYYY-MM-DD) to the tasks' "now"."""
    born = datetime.strptime(dob, "%Y-%m-%d")
    return today.year - born.year - ((today.month, today.day) < (born.month, born.day))


# ---- the checks ------------------------------------------------------------------------


def _answer(
    final: str | None, expected: Any, *, empty_ok: bool = False, tolerance: float | None = None
) -> Check:
    name = (
        f"answer == {_show(expected)}"
        + (" or []" if empty_ok else "")
        + (f" (within {tolerance})" if tolerance else "")
    )
    try:
        got = json.loads(final or "")
    except ValueError:
        return check(name, False, f"the FINISH answer is not JSON: {_show(final)}")
    try:
        if tolerance is not None:
            ok = len(got) == 1 and abs(got[0] - expected[0]) < tolerance
        else:
            ok = got == expected or (empty_ok and got == [])
    except _ERRORS:
        ok = False
    return check(name, ok, f"answered {_show(got)}")


def _no_post(state: Mapping[str, Any]) -> Check:
    n = int(state.get("post_replies", 0))
    return check("no POST", n == 0, f"{n} replies hold a POST" if n else "")


#: The check a task fails where the record server's data cannot be read (see the module's notes).
UNREADABLE_DATA = "record server's data readable"
#: The check a task whose POSTs are read fails where the finishing reply holds "POST".
FINISH_POST = "FINISH reply holds no POST"


def _posts(state: Mapping[str, Any], count: int) -> tuple[list[Check], list[dict[str, Any]]]:
    posts = list(state.get("posts", []))
    out = [check(f"POST count == {count}", len(posts) == count, f"{len(posts)} accepted POSTs")]
    if state.get("finish_post"):  # extract_posts raises on it: the task fails there
        out.append(
            check(FINISH_POST, False, "the finishing reply holds 'POST' (extract_posts raises)")
        )
    return out, posts


def _url(post: Mapping[str, Any], base: str, resource: str) -> Check:
    return check(
        f"POST url {resource}",
        post.get("url") == f"{base}{resource}",
        f"url = {_show(post.get('url'))}",
    )


def _order_fields(payload: Any, mrn: str, *, exact_time: bool = True) -> list[Check]:
    at = (lambda v: v == NOW_TEXT) if exact_time else (lambda v: "2023-11-13T10:15" in v)
    return [
        _field(
            "authoredOn " + (NOW_TEXT if exact_time else "2023-11-13T10:15"),
            payload,
            ["authoredOn"],
            at,
        ),
        _field("status active", payload, ["status"], lambda v: v == "active"),
        _field("intent order", payload, ["intent"], lambda v: v == "order"),
        _field(
            f"subject Patient/{mrn}",
            payload,
            ["subject"],
            lambda v: v == {"reference": f"Patient/{mrn}"},
        ),
    ]


def _service_request(payload: Any, mrn: str, system: str, code: str) -> list[Check]:
    return [
        _field(
            "resourceType ServiceRequest",
            payload,
            ["resourceType"],
            lambda v: v == "ServiceRequest",
        ),
        _field(f"code {code}", payload, ["code", "coding", 0, "code"], lambda v: v == code),
        _field(
            f"code system {system}", payload, ["code", "coding", 0, "system"], lambda v: v == system
        ),
        _field("priority stat", payload, ["priority"], lambda v: v == "stat"),
        *_order_fields(payload, mrn),
    ]


def _medication(payload: Any, mrn: str, ndc: str) -> list[Check]:
    return [
        _field(
            "resourceType MedicationRequest",
            payload,
            ["resourceType"],
            lambda v: v == "MedicationRequest",
        ),
        _field(
            "medication system NDC",
            payload,
            ["medicationCodeableConcept", "coding", 0, "system"],
            lambda v: v == "http://hl7.org/fhir/sid/ndc",
        ),
        _field(
            f"medication NDC {ndc}",
            payload,
            ["medicationCodeableConcept", "coding", 0, "code"],
            lambda v: v == ndc,
        ),
        *_order_fields(payload, mrn, exact_time=False),
    ]


def _task1(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    return [_no_post(state), _answer(final, case.get("sol"))]


def _task2(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    dob = state["reference"].get("birthDate")
    if not dob:
        return [
            _no_post(state),
            check(
                "reference: the patient exists",
                False,
                "the record server has no birth date for this MRN",
            ),
        ]
    return [_no_post(state), _answer(final, [age_on(dob)])]


def _task3(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    out, posts = _posts(state, 1)
    if len(posts) != 1:
        return out
    p, mrn = posts[0].get("payload"), case["eval_MRN"]
    vital = {
        "system": "http://hl7.org/fhir/observation-category",
        "code": "vital-signs",
        "display": "Vital Signs",
    }
    return out + [
        _url(posts[0], state["fhir_base"], "Observation"),
        _field("resourceType Observation", p, ["resourceType"], lambda v: v == "Observation"),
        _field(
            "category vital-signs",
            p,
            ["category"],
            lambda v: len(v) == 1 and len(v[0]["coding"]) == 1 and v[0]["coding"][0] == vital,
        ),
        _field("code BP", p, ["code"], lambda v: v == {"text": "BP"}),
        _field(f"effectiveDateTime {NOW_TEXT}", p, ["effectiveDateTime"], lambda v: v == NOW_TEXT),
        _field("status final", p, ["status"], lambda v: v == "final"),
        _field("value 118/77 mmHg", p, ["valueString"], lambda v: v == "118/77 mmHg"),
        _field(
            f"subject Patient/{mrn}", p, ["subject"], lambda v: v == {"reference": f"Patient/{mrn}"}
        ),
    ]


def _task4(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    _, value, _ = _last(state["reference"]["labs"], NOW - timedelta(hours=24))
    return [_no_post(state), _answer(final, [value if value is not None else -1])]


def _magnesium_dose(value: float) -> tuple[int, int]:
    """(grams, hours) of IV magnesium for a low level, as the task's dosing instructions say."""
    return (4, 4) if value < 1 else (2, 2) if value < 1.5 else (1, 1)


def _task5(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    _, value, _ = _last(state["reference"]["labs"], NOW - timedelta(hours=24))
    if value is None:  # nothing to order, and the answer is not checked
        return [_no_post(state)]
    if value > 1.9:
        return [_no_post(state), _answer(final, [value], empty_ok=True)]
    out, posts = _posts(state, 1)
    if len(posts) == 1:
        p = posts[0].get("payload")
        dose, rate = _magnesium_dose(value)
        out += [
            _url(posts[0], state["fhir_base"], "MedicationRequest"),
            *_medication(p, case["eval_MRN"], "0338-1715-40"),
            _field("route IV", p, ["dosageInstruction", 0, "route"], lambda v: v == "IV"),
            _field(
                f"dosage {dose} g",
                p,
                ["dosageInstruction", 0, "doseAndRate", 0, "doseQuantity"],
                lambda v: v == {"value": dose, "unit": "g"},
            ),
            _field(
                f"rate {rate} h",
                p,
                ["dosageInstruction", 0, "doseAndRate", 0, "rateQuantity"],
                lambda v: v == {"value": rate, "unit": "h"},
            ),
        ]
    return out + [_answer(final, [value], empty_ok=True)]


def _task6(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    since = NOW - timedelta(hours=24)
    values = [v for t, v in state["reference"]["labs"] if datetime.fromisoformat(t) >= since]
    return [
        _no_post(state),
        _answer(final, [sum(values) / len(values) if values else -1], tolerance=0.1),
    ]


def _task7(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    _, value, _ = _last(state["reference"]["labs"])
    return [_no_post(state), _answer(final, [value if value is not None else -1])]


def _task8(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    out, posts = _posts(state, 1)
    if len(posts) != 1:
        return out
    p = posts[0].get("payload")
    return out + [
        _url(posts[0], state["fhir_base"], "ServiceRequest"),
        *_service_request(p, case["eval_MRN"], "http://snomed.info/sct", "306181000000106"),
        _field("note holds the SBAR text", p, ["note", "text"], lambda v: SBAR_NOTE in v),
    ]


def _task9(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    _, value, _ = _last(state["reference"]["labs"])
    if value is None or value >= 3.5:
        return [
            _no_post(state),
            _answer(final, [value if value is not None else -1], empty_ok=True),
        ]
    out, posts = _posts(state, 2)
    if len(posts) == 2:
        med, lab, mrn = posts[0].get("payload"), posts[1].get("payload"), case["eval_MRN"]
        dose = (
            (3.5 - value) / 0.1 * 10
        )  # 10 mEq per 0.1 below 3.5, as the task's dosing instructions say
        out += [
            _url(posts[0], state["fhir_base"], "MedicationRequest"),
            *_medication(med, mrn, "40032-917-01"),
            _field(
                "route oral",
                med,
                ["dosageInstruction", 0, "route"],
                lambda v: v.lower().strip() == "oral",
            ),
            _field(
                f"dosage {dose:g} mEq",
                med,
                ["dosageInstruction", 0, "doseAndRate", 0, "doseQuantity", "value"],
                lambda v: abs(v - dose) <= 0.1,
            ),
            _field(
                "dosage unit mEq",
                med,
                ["dosageInstruction", 0, "doseAndRate", 0, "doseQuantity", "unit"],
                lambda v: v == "mEq",
            ),
            _url(posts[1], state["fhir_base"], "ServiceRequest"),
            *_service_request(lab, mrn, "http://loinc.org", "2823-3"),
            _field(
                "occurrence 2023-11-14T08:",
                lab,
                ["occurrenceDateTime"],
                lambda v: "2023-11-14T08:" in v,
            ),
        ]
    return out + [_answer(final, [value], empty_ok=True)]


def _task10(case: Mapping[str, Any], state: Mapping[str, Any], final: str | None) -> list[Check]:
    when, value, written = _last(state["reference"]["labs"])
    expected = [-1] if value is None else [value, written]
    if value is None or (
        when is not None and when < datetime.fromisoformat("2022-11-13T10:15:00+00:00")
    ):
        out, posts = _posts(state, 1)
        if len(posts) == 1:
            out += [
                _url(posts[0], state["fhir_base"], "ServiceRequest"),
                *_service_request(
                    posts[0].get("payload"), case["eval_MRN"], "http://loinc.org", "4548-4"
                ),
            ]
    else:
        out = [_no_post(state)]
    return out + [_answer(final, expected, empty_ok=True)]


TASK_CHECKS: dict[
    str, Callable[[Mapping[str, Any], Mapping[str, Any], str | None], list[Check]]
] = {
    "task1": _task1,
    "task2": _task2,
    "task3": _task3,
    "task4": _task4,
    "task5": _task5,
    "task6": _task6,
    "task7": _task7,
    "task8": _task8,
    "task9": _task9,
    "task10": _task10,
}


def task_checks(
    case: Mapping[str, Any], state: Mapping[str, Any], final: str | None
) -> list[Check]:
    """The named checks of one finished episode (``case``: the task's fields; ``state``: the environment's)."""
    return TASK_CHECKS[str(case["category"])](case, state, final)


class MedAgentBenchGrader(Grader):
    """Success (1.0) when every check of the task passes, else 0.0; ``details["checks"]`` names each."""

    name = "medagentbench"

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        episode = ctx.episode
        if episode is None:
            return unscored(
                sample,
                "grader_error",
                "medagentbench grades agent episodes (run it as an agent benchmark)",
            )
        state = episode.get("state") or {}
        category = str(sample.metadata.get("category"))
        if category not in TASK_CHECKS:
            return unscored(
                sample, "grader_error", f"task {sample.id!r}: unknown category {category!r}"
            )
        if reference_query(category, "") is not None and not isinstance(
            state.get("reference"), Mapping
        ):
            return unscored(
                sample,
                "grader_error",
                f"task {sample.id!r}: the environment kept no reference data from the record server",
            )
        unreadable = state["reference"].get("unreadable") if "reference" in state else None
        try:
            if unreadable:
                raise ValueError(unreadable)
            checks = task_checks(sample.metadata, state, episode.get("final"))
        except (
            _ERRORS
        ) as e:  # the server's data is not what the checks read (a missing field, a bad date)
            why = f"the record server's data could not be read: {type(e).__name__}: {e}"
            return Grade(  # a failure, as the re-implementation counts it; ours said beside
                sample_id=sample.id,
                value=0.0,
                extracted=episode.get("final"),
                details={
                    "checks": [check(UNREADABLE_DATA, False, why)],
                    "grandrounds": f"unscored: {why}",
                },
            )
        passed = all(c["passed"] for c in checks)
        return Grade(
            sample_id=sample.id,
            value=1.0 if passed else 0.0,
            extracted=episode.get("final"),
            details={"checks": checks},
        )
