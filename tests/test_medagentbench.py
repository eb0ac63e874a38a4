"""MedAgentBench v1 through the real CLI against a synthetic FHIR fixture server and scripted agents.

The agent here acts by a rule on the task number ``k`` of ``task<c>_<k>``: even ``k`` does the task
right (from the record server's answers it GETs), ``k % 4 == 1`` makes a category-specific mistake,
``k % 4 == 3`` replies with something that is no action (category 7: keeps GETting until the step
limit). The expected success of every task is computed independently here, from the task file and
the fixture's own data, never from the grader.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.agent_envs.medagentbench import MedAgentBenchEnvironment
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medagentbench import MedAgentBench
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.records import Request, Response, ToolCallPart
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.medagentbench_grader import FINISH_POST, UNREADABLE_DATA
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.testing import LoopbackServer
from grandrounds.testing.fhir import NOW, FhirServer, synthetic_records
from tests.conftest import shared_file
from tests.official import load_official

ROOT = Path(__file__).resolve().parents[1]
SBAR = (
    "Situation: acute left knee injury, Background: radiology report indicates ACL tear. Assessment: ACL tear grade II. "
    "Recommendation: request for Orthopedic service to evaluate and provide management recommendations."
)
NOW_TEXT = "2023-11-13T10:15:00+00:00"


def data_dir() -> Path:
    return shared_file("medagentbench", "test_data_v2.json").parent


def tasks() -> list[dict[str, Any]]:
    return json.loads((data_dir() / "test_data_v2.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fhir():
    data = synthetic_records(tasks())
    with FhirServer(data) as server:
        yield server


# ---- the scripted agent -------------------------------------------------------------------


def _num(task: dict[str, Any]) -> tuple[int, int]:
    c, k = re.fullmatch(r"task(\d+)_(\d+)", task["id"]).groups()  # type: ignore[union-attr]
    return int(c), int(k)


def _labs(bundle: dict[str, Any]) -> list[tuple[datetime, float, str]]:
    return sorted(
        (
            datetime.fromisoformat(e["resource"]["effectiveDateTime"]),
            e["resource"]["valueQuantity"]["value"],
            e["resource"]["effectiveDateTime"],
        )
        for e in bundle.get("entry", [])
    )


def _first_query(task: dict[str, Any], base: str) -> str:
    c, _ = _num(task)
    mrn = task.get("eval_MRN")
    if c == 1:
        m = re.search(r"name (\S+) (.+?) and DOB of (\S+)\?", task["instruction"])
        return f"{base}Patient?given={m[1]}&family={m[2]}&birthdate={m[3]}"  # type: ignore[index]
    if c in (2, 3, 8):
        return f"{base}Patient?identifier={mrn}"
    code = {4: "MG", 5: "MG", 6: "GLU", 7: "GLU", 9: "K", 10: "A1C"}[c]
    since = (
        "&date=ge2023-11-12T10:15:00+00:00" if c == 4 else ""
    )  # an unescaped '+', as models write it
    return f"{base}Observation?patient={mrn}&code={code}{since}"


def plan(task: dict[str, Any], bundle: dict[str, Any], base: str) -> list[tuple]:
    """The agent's actions after its first GET: ("POST", url, payload) and ("FINISH", answers) or ("TEXT", reply)."""
    c, k = _num(task)
    right = k % 2 == 0
    if k % 4 == 3:
        return (
            [("GET", _first_query(task, base))] * 8
            if c == 7
            else [("TEXT", "The patient's record looks fine to me.")]
        )
    mrn = task.get("eval_MRN")
    subject = {"reference": f"Patient/{mrn}"}
    labs = _labs(bundle) if c >= 4 and c != 8 else []
    recent = [x for x in labs if x[0] >= NOW - timedelta(hours=24)]
    if c == 1:
        found = [e["resource"]["identifier"][0]["value"] for e in bundle.get("entry", [])]
        return [("FINISH", (found[:1] or ["Patient not found"]) if right else ["S0000000"])]
    if c == 2:
        born = datetime.fromisoformat(bundle["entry"][0]["resource"]["birthDate"])
        age = NOW.year - born.year - ((NOW.month, NOW.day) < (born.month, born.day))
        return [("FINISH", [age if right else age + 1])]
    if c == 3:
        payload = {
            "resourceType": "Observation",
            "category": [
                {
                    "coding": [
                        {
                            "system": "http://hl7.org/fhir/observation-category",
                            "code": "vital-signs",
                            "display": "Vital Signs",
                        }
                    ]
                }
            ],
            "code": {"text": "BP"},
            "effectiveDateTime": NOW_TEXT,
            "status": "final",
            "valueString": "118/77 mmHg" if right else "118/77",
            "subject": subject,
        }
        return [("POST", f"{base}Observation", payload), ("FINISH", [])]
    if c == 4:
        return [("FINISH", [recent[-1][1] if recent and right else -1])]
    if c == 5:
        if not recent:
            return [("FINISH", [])]
        v = recent[-1][1]
        if v > 1.9:
            return [("FINISH", [v])]
        dose = (4 if v < 1 else 2 if v < 1.5 else 1) if right else 2
        payload = {
            "resourceType": "MedicationRequest",
            "medicationCodeableConcept": {
                "coding": [{"system": "http://hl7.org/fhir/sid/ndc", "code": "0338-1715-40"}]
            },
            "authoredOn": NOW_TEXT,
            "dosageInstruction": [
                {
                    "route": "IV",
                    "doseAndRate": [
                        {
                            "doseQuantity": {"value": dose, "unit": "g"},
                            "rateQuantity": {"value": dose, "unit": "h"},
                        }
                    ],
                }
            ],
            "status": "active",
            "intent": "order",
            "subject": subject,
        }
        return [("POST", f"{base}MedicationRequest", payload), ("FINISH", [v])]
    if c == 6:
        pool = recent if right else labs
        return [("FINISH", [sum(x[1] for x in pool) / len(pool) if pool else -1])]
    if c == 7:
        pick = (labs[-1] if right else labs[0]) if labs else None
        return [("FINISH", [pick[1] if pick else -1])]
    if c == 8:
        payload = {
            "resourceType": "ServiceRequest",
            "code": {"coding": [{"system": "http://snomed.info/sct", "code": "306181000000106"}]},
            "authoredOn": NOW_TEXT,
            "status": "active",
            "intent": "order",
            "priority": "stat" if right else "routine",
            "subject": subject,
            "note": {"text": SBAR},
        }
        return [("POST", f"{base}ServiceRequest", payload), ("FINISH", [])]
    if c == 9:
        v = labs[-1][1] if labs else None
        if v is None or v >= 3.5:
            return [("FINISH", [v if v is not None else -1])]
        dose = round((3.5 - v) / 0.1 * 10 if right else (3.5 - v) * 10, 4)
        med = {
            "resourceType": "MedicationRequest",
            "medicationCodeableConcept": {
                "coding": [{"system": "http://hl7.org/fhir/sid/ndc", "code": "40032-917-01"}]
            },
            "authoredOn": NOW_TEXT,
            "dosageInstruction": [
                {"route": "oral", "doseAndRate": [{"doseQuantity": {"value": dose, "unit": "mEq"}}]}
            ],
            "status": "active",
            "intent": "order",
            "subject": subject,
        }
        lab = {
            "resourceType": "ServiceRequest",
            "code": {"coding": [{"system": "http://loinc.org", "code": "2823-3"}]},
            "authoredOn": NOW_TEXT,
            "status": "active",
            "intent": "order",
            "priority": "stat",
            "subject": subject,
            "occurrenceDateTime": "2023-11-14T08:00:00+00:00",
        }
        return [
            ("POST", f"{base}MedicationRequest", med),
            ("POST", f"{base}ServiceRequest", lab),
            ("FINISH", [v]),
        ]
    last = labs[-1] if labs else None
    answer = [last[1], last[2]] if last else [-1]
    old = last is None or last[0] < NOW - timedelta(days=365)
    if old and right:
        order = {
            "resourceType": "ServiceRequest",
            "code": {"coding": [{"system": "http://loinc.org", "code": "4548-4"}]},
            "authoredOn": NOW_TEXT,
            "status": "active",
            "intent": "order",
            "priority": "stat",
            "subject": subject,
        }
        return [("POST", f"{base}ServiceRequest", order), ("FINISH", answer)]
    return [("FINISH", answer)]


def expected_success(task: dict[str, Any], data: Any) -> bool:
    """Whether the rule's episode should pass, computed from the fixture's records and the task file."""
    c, k = _num(task)
    if k % 4 == 3:
        return False  # no action (or the step limit)
    if k % 2 == 0:
        return True
    mrn = task.get("eval_MRN")
    if c in (1, 2, 3, 8):
        return False  # a wrong MRN, age, BP value or priority
    code = {4: "MG", 5: "MG", 6: "GLU", 7: "GLU", 9: "K", 10: "A1C"}[c]
    labs = data.labs(mrn, code)
    recent = [x for x in labs if x[0] >= NOW - timedelta(hours=24)]
    if c == 4:  # answered -1
        return not recent
    if c == 5:  # orders 2 g over 2 h whatever the level
        return not recent or recent[-1][1] > 1.9 or 1 <= recent[-1][1] < 1.5
    if c == 6:  # the mean of every value, not the last 24 hours'
        return (
            bool(recent)
            and abs(sum(x[1] for x in labs) / len(labs) - sum(x[1] for x in recent) / len(recent))
            < 0.1
        )
    if c == 7:  # the oldest value instead of the latest
        return bool(labs) and labs[0][1] == labs[-1][1]
    if c == 9:  # a tenth of the dose
        return not labs or labs[-1][1] >= 3.5
    return bool(labs) and labs[-1][0] >= NOW - timedelta(days=365)  # task10: never orders


def _case(text: str, by_instruction: dict[str, dict[str, Any]]) -> dict[str, Any]:
    question = text.rsplit("Question: ", 1)[1]
    return by_instruction[question]


def _bundle(text: str) -> dict[str, Any]:
    body = text.split("Here is the response from the GET request:\n", 1)[1].rsplit(
        ". Please call FINISH", 1
    )[0]
    return json.loads(body)


def text_agent(messages: list[dict[str, Any]], by_instruction: dict[str, dict[str, Any]]) -> str:
    """The rule as text actions, from the conversation so far (role/content dicts)."""
    first = str(messages[0]["content"])
    task = _case(first, by_instruction)
    base = re.search(r"you should use (\S+) as the api_base", first)[1]  # type: ignore[index]
    step = sum(1 for m in messages if m["role"] == "assistant")
    if step == 0:
        return f"GET {_first_query(task, base)}"
    action = plan(task, _bundle(str(messages[2]["content"])), base)[step - 1]
    _, k = _num(task)
    if action[0] == "GET":
        return f"GET {action[1]}"
    if action[0] == "POST":
        return f"POST {action[1]}\n{json.dumps(action[2])}"
    if action[0] == "FINISH":
        reply = f"FINISH({json.dumps(action[1])})"
        return (
            f"```tool_code\n{reply}\n```" if k % 6 == 0 else reply
        )  # fenced, as the official loop strips
    return action[1]


def _wire(messages) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.text} for m in messages]


def native_agent(req: Request, by_instruction: dict[str, dict[str, Any]], base: str) -> object:
    """The same rule as native tool calls."""
    msgs = req.messages
    task = _case(msgs[0].text, by_instruction)
    step = sum(1 for m in msgs if m.role == "assistant")
    if step == 0:
        action: tuple = ("GET", _first_query(task, base))
    else:
        action = plan(task, _bundle(msgs[2].tool_results[0].content), base)[step - 1]
    if action[0] == "TEXT":
        return action[1]
    if action[0] == "GET":
        parts = urlsplit(action[1])
        resource = parts.path.rsplit("/", 1)[1]
        name = {"Patient": "get_patient", "Observation": "get_observation_labs"}[resource]
        return [ToolCallPart(f"c{step}", name, json.dumps(dict(parse_qsl(parts.query))))]
    if action[0] == "POST":
        name = {
            "Observation": "post_observation",
            "MedicationRequest": "post_medication_request",
            "ServiceRequest": "post_service_request",
        }
        return [ToolCallPart(f"c{step}", name[action[1].rsplit("/", 1)[1]], json.dumps(action[2]))]
    return [ToolCallPart(f"c{step}", "finish", json.dumps({"answers": action[1]}))]


def cli(args: list[str], script, exit_code: int = 0) -> Any:
    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=script, **options)

    with PROVIDERS.registered("mabbot", Bot):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == exit_code, (r.output, r.exception)
    return r


def run_args(tmp_path: Path, base: str, data: Path | None = None, *extra: str) -> list[str]:
    return [
        "run",
        "medagentbench",
        "--data",
        str(data or data_dir()),
        "-m",
        "mabbot/x",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(tmp_path / "out"),
        "--param",
        f"fhir_base={base}",
        *extra,
    ]


def results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["results"][0]


def episodes(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT sample_id, epoch, status, steps_json FROM episodes ORDER BY sample_id, epoch"
        ).fetchall()
    finally:
        con.close()


def grades(db: Path) -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(db)
    try:
        return {
            r[0]: json.loads(r[1]) for r in con.execute("SELECT sample_id, grade_json FROM grades")
        }
    finally:
        con.close()


# ---- tests ----------------------------------------------------------------------------------


def test_counts_and_bad_input(tmp_path):
    rows = tasks()
    bench = MedAgentBench()
    samples = bench.load(data_dir())
    assert len(samples) == 300
    cats: dict[str, int] = {}
    for s in samples:
        cats[s.metadata["category"]] = cats.get(s.metadata["category"], 0) + 1
    assert cats == {f"task{i}": 30 for i in range(1, 11)}
    assert len(bench._funcs or []) == 9
    assert len({r["eval_MRN"] for r in rows if r.get("eval_MRN")}) == 98
    env = bench.environment(samples[0], RunOptions())
    assert not env.tools  # text actions: no tools sent
    native_bench = MedAgentBench(actions="native")
    native = native_bench.environment(native_bench.load(data_dir())[0], RunOptions())
    assert len(native.tools) == 10 and {t.name for t in native.tools} >= {
        "get_observation_labs",
        "get_observation_vitals",
        "finish",
    }
    # bad input: a clear error naming the file and the record
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "funcs_v1.json").write_text(
        (data_dir() / "funcs_v1.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    broken = rows[:3] + [dict(rows[40], eval_MRN=None)]
    (bad / "test_data_v2.json").write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(DataError, match=r"test_data_v2\.json.*record 4 \(task2_11\).*eval_MRN"):
        MedAgentBench().load(bad)


def official_loop_outcome(reply: str, case: dict[str, Any], base: str) -> tuple:
    """What the official ``start_sample`` does with one reply (then a FINISH to end its loop)."""

    class Output:
        def __init__(self, status=None, result=None, history=None):
            self.status, self.result = status, result

    statuses = SimpleNamespace(
        COMPLETED="finished",
        AGENT_INVALID_ACTION="invalid_action",
        TASK_LIMIT_REACHED="step_limit",
        TASK_ERROR="task_error",
        AGENT_CONTEXT_LIMIT="context_limit",
    )
    asked: list[str] = []

    def fake_get(url, params=None, headers=None):
        asked.append(url)
        return {"status_code": 200, "data": f"<<{url}>>"}

    ns = load_official(
        "medagentbench/src/server/tasks/medagentbench/__init__.py",
        ["MedAgentBench_prompt", "MedAgentBench"],
        extra={
            "Task": object,
            "Session": object,
            "TaskOutput": Output,
            "SampleStatus": statuses,
            "AgentOutputStatus": SimpleNamespace(AGENT_CONTEXT_LIMIT="context"),
            "send_get_request": fake_get,
        },
    )
    official = object.__new__(ns.MedAgentBench)
    official.data, official.funcs, official.max_round, official.fhir_api_base = [case], [], 8, base
    replies = iter([reply, 'FINISH(["end"])'])
    injected: list[str] = []

    class Session:
        history: list = []

        def inject(self, msg):
            injected.append(msg["content"])

        async def action(self):
            return SimpleNamespace(status="normal", content=next(replies))

    out = asyncio.run(official.start_sample(0, Session()))
    after = injected[1] if len(injected) > 1 else None
    ended = out.status if out.result != '["end"]' else None
    return (after, ended, out.result if ended else None, asked[:1])


def our_outcome(reply: str, case: dict[str, Any], base: str) -> tuple:
    bench = MedAgentBench(fhir_base=base)
    bench.load(data_dir())
    sample = next(s for s in bench.load(data_dir()) if s.id == case["id"])
    env = bench.environment(sample, RunOptions())
    assert isinstance(env, MedAgentBenchEnvironment)

    async def fake_fetch(url):
        return 200, f"<<{url}>>", None

    async def no_reference():
        return None

    env._fetch = fake_fetch  # type: ignore[method-assign]
    env._fetch_reference = no_reference  # type: ignore[method-assign]
    reaction = asyncio.run(env.react(Response(key="k", text=reply), None))  # type: ignore[arg-type]
    after = reaction.messages[0].text if reaction.messages else None
    return (
        after,
        reaction.status if reaction.done else None,
        reaction.final if reaction.done and reaction.status == "finished" else None,
        env.gets[:1],
    )


def reply_corpus(base: str) -> list[str]:
    actions = [
        f"GET {base}Patient?identifier=S6534835",
        f"GET   {base}Observation?patient=S1&code=MG&date=ge2023-11-12T10:15:00+00:00",
        f"GET{base}Patient?name=Peter",
        f"GET {base}Procedure?patient=S1&date=2023",
        f'POST {base}Observation\n{{"resourceType": "Observation", "valueString": "118/77 mmHg"}}',
        f'POST {base}MedicationRequest\n\n{{"a": [1, 2, {{"b": null}}]}}\n',
        f"POST {base}ServiceRequest\n{{not json}}",
        f"POST {base}ServiceRequest",
        f'POST {base}Observation {{"resourceType": "Observation"}}',
        'FINISH(["S6534835"])',
        "FINISH([77])",
        "FINISH([])",
        'FINISH(["Patient not found"])',
        'FINISH([1.7, "2023-11-13T09:00:00+00:00"])',
        "FINISH([1]) done",
        "FINISH(",
        "FINISH",
        "finish([1])",
        "get the labs",
        "The answer is 42.",
        "",
        "POSTED",
        "GETTING",
        f"I will now call GET {base}Patient",
        "[GET]",
    ]
    wrappers = [
        "{}",
        "  {}  ",
        "\n{}\n",
        "```\n{}\n```",
        "```tool_code\n{}\n```",
        "Sure:\n{}",
        "{}\n```",
    ]
    return [w.format(a) if "{}" in w else a for a in actions for w in wrappers]


def test_parsing_agrees_with_the_official_loop(fhir):
    case = next(t for t in tasks() if t["id"] == "task2_1")
    base = fhir.base_url
    corpus = reply_corpus(base)
    agree, refused = 0, 0
    for reply in corpus:
        theirs, ours = official_loop_outcome(reply, case, base), our_outcome(reply, case, base)
        if theirs[3] and not theirs[3][0].startswith(
            base
        ):  # a GET off the server: fetched there, refused here
            assert (
                ours[0].startswith("Error in sending the GET request: refused")
                and ours[1:] == theirs[1:]
            ), reply
            refused += 1
        else:
            assert ours == theirs, reply
            agree += 1
    assert len(corpus) == 175 and refused == 6  # "GETTING" in the six wrappers that keep it first
    print(
        f"official parsing differential: {agree}/{len(corpus) - refused} replies agree; "
        f"{refused} GETs off the server refused (fetched by the official loop)"
    )


def test_get_off_the_server_is_refused_never_fetched(fhir):
    case = next(t for t in tasks() if t["id"] == "task2_1")
    after, status, _, gets = our_outcome(
        "GET http://169.254.169.254/latest/meta-data?x=1", case, fhir.base_url
    )
    assert status is None and after.startswith("Error in sending the GET request: refused")
    assert gets == ["http://169.254.169.254/latest/meta-data?x=1&_format=json"]


def test_all_300_tasks_text_protocol(tmp_path, fhir):
    rows = tasks()
    by_instruction = {t["instruction"]: t for t in rows}
    finals: dict[str, list[dict[str, Any]]] = {}

    def script(req: Request) -> object:
        msgs = _wire(req.messages)
        reply = text_agent(msgs, by_instruction)
        finals[_case(msgs[0]["content"], by_instruction)["id"]] = msgs + [
            {"role": "assistant", "content": reply}
        ]
        return reply

    before = dict(fhir.methods())
    cli(run_args(tmp_path, fhir.base_url), script)
    res = results(tmp_path)
    expect = {t["id"]: expected_success(t, fhir.data) for t in rows}
    assert res["metric"] == "success_rate" and res["n"] == 300 and res["n_unscored"] == 0
    assert res["score"] == pytest.approx(sum(expect.values()) / 300)
    for c in range(1, 11):
        ids = [i for i in expect if i.startswith(f"task{c}_")]
        assert res["breakdown"]["category"][f"task{c}"]["score"] == pytest.approx(
            sum(expect[i] for i in ids) / 30
        ), c
    n_step_limit = sum(1 for t in rows if _num(t) == (7, _num(t)[1]) and _num(t)[1] % 4 == 3)
    n_invalid = sum(1 for t in rows if _num(t)[1] % 4 == 3) - n_step_limit
    assert res["extra"]["episodes"] == {
        "finished": 300 - n_invalid - n_step_limit,
        "invalid_action": n_invalid,
        "step_limit": n_step_limit,
    }
    assert res["extra"]["pass_k"]["1"] == pytest.approx(
        res["score"]
    )  # unfinished episodes are failures in pass^k too
    # POSTs were recorded, never sent
    assert set(fhir.methods()) == {"GET"} and fhir.methods()["GET"] > before.get("GET", 0)
    # each check is named in the grade, and the one that failed says so
    g = grades(tmp_path / "s.db")
    checks = {
        sid: {c["name"]: c["passed"] for c in gr["details"]["epochs"][0]["checks"]}
        for sid, gr in g.items()
    }
    assert (
        checks["task3_1"]["value 118/77 mmHg"] is False
        and checks["task3_1"]["POST count == 1"] is True
    )
    assert (
        all(checks["task3_2"].values())
        and "subject Patient/" + rows[60 + 1]["eval_MRN"] in checks["task3_2"]
    )
    assert (
        checks["task8_1"]["priority stat"] is False
        and checks["task8_1"]["note holds the SBAR text"] is True
    )
    low_mg = [
        t["id"]
        for t in rows
        if _num(t)[0] == 5
        and _num(t)[1] % 4 == 1
        and (lambda r: r and not (r[-1][1] > 1.9 or 1 <= r[-1][1] < 1.5))(
            [x for x in fhir.data.labs(t["eval_MRN"], "MG") if x[0] >= NOW - timedelta(hours=24)]
        )
    ]
    assert low_mg, (
        "the fixture should give some task5 patient a deficiency other than a moderate one"
    )
    for sid in low_mg:
        failed = [n for n, ok in checks[sid].items() if not ok]
        assert failed and all(n.startswith(("dosage", "rate")) for n in failed), (sid, failed)
    # the official re-implementation's verdicts on the same conversations agree with ours
    verdicts = medmarks_verdicts(rows, finals, fhir)
    ours = {sid: gr["value"] == 1.0 for sid, gr in g.items()}
    assert verdicts == ours
    print(
        f"text protocol: {sum(ours.values())}/300 succeeded, independent computation {sum(expect.values())}/300; "
        f"re-implementation agrees on {sum(verdicts[i] == ours[i] for i in ours)}/300"
    )


def medmarks_verdicts(rows, finals, fhir) -> dict[str, bool]:
    """The public re-implementation's verdict on each recorded conversation (its FHIR reads go to the fixture)."""

    def send_get_request(url, params=None, headers=None):
        with urllib.request.urlopen(url.replace("+", "%2B")) as resp:
            return {"status_code": resp.status, "data": resp.read().decode("utf-8")}

    ns = load_official(
        "medagentbench-medmarks/environments/medagentbench/medagentbench.py",
        [
            "extract_posts",
            "check_has_post",
            "calculate_age",
            *[f"task{i}" for i in range(1, 11)],
            "eval",
        ],
        extra={"send_get_request": send_get_request},
    )
    out = {}
    for t in rows:
        conv = finals[t["id"]]
        last = conv[-1]["content"].strip().replace("```tool_code", "").replace("```", "").strip()
        if not last.startswith("FINISH("):
            out[t["id"]] = False  # the official loop ends without a result: counted as a failure
            continue
        history = [
            SimpleNamespace(
                role="agent" if m["role"] == "assistant" else "user", content=m["content"]
            )
            for m in conv
        ]
        results = SimpleNamespace(history=history, result=last[len("FINISH(") : -1])
        with contextlib.redirect_stdout(io.StringIO()):
            out[t["id"]] = ns.eval(t, results, fhir.base_url) is True
    return out


def test_native_protocol(tmp_path, fhir):
    rows = tasks()
    by_instruction = {t["instruction"]: t for t in rows}
    cli(
        run_args(tmp_path, fhir.base_url, None, "--param", "actions=native"),
        lambda req: native_agent(req, by_instruction, fhir.base_url),
    )
    res = results(tmp_path)
    expect = {t["id"]: expected_success(t, fhir.data) for t in rows}
    assert res["n"] == 300 and res["score"] == pytest.approx(sum(expect.values()) / 300)
    assert set(fhir.methods()) == {"GET"}
    steps = {e[0]: json.loads(e[3]) for e in episodes(tmp_path / "s.db")}
    assert steps["task3_2"][1]["tool_calls"][0]["name"] == "post_observation"
    assert steps["task3_2"][1]["events"][0]["text"].startswith("recorded, not sent")
    print(
        f"native protocol: {res['score'] * 300:.0f}/300, independent computation {sum(expect.values())}/300"
    )


def subset(tmp_path: Path, per_category: int, categories=range(1, 11)) -> Path:
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    rows = [t for t in tasks() if _num(t)[0] in categories and _num(t)[1] <= per_category]
    (d / "test_data_v2.json").write_text(json.dumps(rows), encoding="utf-8")
    (d / "funcs_v1.json").write_text(
        (data_dir() / "funcs_v1.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return d


def test_server_down_is_unknown_not_zero(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows = tasks()
    by_instruction = {t["instruction"]: t for t in rows}
    data = subset(tmp_path, 2, categories=(2, 4))
    r = cli(
        run_args(tmp_path, f"http://127.0.0.1:{port}/fhir/", data),
        lambda req: text_agent(_wire(req.messages), by_instruction),
        3,
    )
    assert "could not be scored" in r.output or "unscored 4" in r.output
    res = results(tmp_path)
    assert res["score"] is None and res["n_unscored"] == 4
    assert res["extra"]["episodes"] == {"environment_error": 4}
    eps = episodes(tmp_path / "s.db")
    assert all(
        e[2] == "environment_error" and "cannot be reached" in json.loads(e[3])[-1]["error"]
        for e in eps
    )


def _serve(by_instruction):
    def serve(body: dict) -> object:
        return text_agent(
            [{"role": m["role"], "content": m["content"]} for m in body["messages"]], by_instruction
        )

    return serve


def _running(db: Path) -> bool:
    if not db.exists():
        return False
    con = sqlite3.connect(db, timeout=5)
    try:
        return (
            con.execute("SELECT COUNT(*) FROM episodes WHERE status = 'running'").fetchone()[0] > 0
        )
    except sqlite3.OperationalError:  # the schema is not there yet
        return False
    finally:
        con.close()


def test_resume_after_kill_9(tmp_path, fhir):
    """A run killed mid-episode, then the same command: the same transcripts, and exactly the calls
    the first run had not stored."""
    rows = tasks()
    by_instruction = {t["instruction"]: t for t in rows}
    data = subset(tmp_path, 2)  # 20 tasks, 2 of each category
    db = tmp_path / "s.db"
    cmd = [
        sys.executable,
        "-m",
        "grandrounds",
        "run",
        "medagentbench",
        "--data",
        str(data),
        "-m",
        "openai/m",
        "--store",
        str(db),
        "--param",
        f"fhir_base={fhir.base_url}",
        "--concurrency",
        "2",
    ]
    env = {**os.environ, "OPENAI_API_KEY": "x", "COLUMNS": "200", "PYTHONPATH": str(ROOT / "src")}
    # one server throughout: its URL is part of every request's key (another URL is another model)
    with LoopbackServer(_serve(by_instruction), latency=0.3) as srv:
        full = [*cmd, "--base-url", srv.base_url]
        proc = subprocess.Popen(full, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 90
        while (
            srv.stats.requests < 15 or not _running(db)
        ) and time.time() < deadline:  # killed mid-episode
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first = srv.stats.requests
        srv.latency = 0.0
        con = sqlite3.connect(db)
        stored = con.execute(
            "SELECT COUNT(*) FROM calls WHERE error IS NULL AND purpose = 'answer'"
        ).fetchone()[0]
        partial = con.execute("SELECT COUNT(*) FROM episodes WHERE status = 'running'").fetchone()[
            0
        ]
        con.close()
        done = subprocess.run(full, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        second = srv.stats.requests - first
        fresh = tmp_path / "fresh.db"
        subprocess.run(
            [c if c != str(db) else str(fresh) for c in full],
            env=env,
            capture_output=True,
            timeout=180,
            check=True,
        )
        total = srv.stats.requests - first - second
    assert 0 < stored < total and partial > 0
    assert second == total - stored, (first, stored, second, total)
    assert episodes(db) == episodes(fresh) and len(episodes(db)) == 20
    assert set(fhir.methods()) == {"GET"}
    print(
        f"kill -9 resume: {first} calls before the kill, {stored} stored, {partial} episodes mid-way, "
        f"{second} on the re-run, {total} in a fresh run"
    )


def test_server_error_status_is_told_to_the_agent(fhir):
    """A 4xx from the server is the official error text the agent reads (the episode goes on)."""
    bench = MedAgentBench(fhir_base=fhir.base_url)
    sample = bench.load(data_dir())[30]
    env = bench.environment(sample, RunOptions())
    reaction = asyncio.run(
        env.react(Response(key="k", text=f"GET {fhir.base_url}Nothing?patient=S1"), None)
    )  # type: ignore[arg-type]
    asyncio.run(env.close())
    assert not reaction.done
    assert (
        reaction.messages[0].text
        == f"Error in sending the GET request: 404 Client Error: Not Found for url: {fhir.base_url}Nothing?patient=S1&_format=json"
    )


@pytest.mark.parametrize(
    "path",
    [
        "%2e%2e/secret?x=1",
        "%2E%2E/secret?x=1",
        "%252e%252e/secret?x=1",
        "Patient/%2e%2e/%2e%2e/secret?x=1",
        "Patient/..;/..;/secret?x=1",
        "Patient/../../secret?x=1",
        "/Patient?x=1",  # a doubled slash after the base
        "..%2fsecret?x=1",
        "Patient%5c..%5c..%5csecret?x=1",
    ],
)
def test_get_outside_the_base_path_is_refused_never_fetched(fhir, path):
    case = next(t for t in tasks() if t["id"] == "task2_1")
    after, status, _, _ = our_outcome(f"GET {fhir.base_url}{path}", case, fhir.base_url)
    assert status is None and after.startswith("Error in sending the GET request: refused"), after


def test_get_under_the_base_path_is_fetched_whatever_the_case_of_scheme_and_host(fhir):
    case = next(t for t in tasks() if t["id"] == "task2_1")
    shouting = fhir.base_url.replace("http://", "HTTP://")
    for url in (f"{fhir.base_url}Patient?identifier=S1", f"{shouting}Patient?identifier=S1"):
        after, status, _, _ = our_outcome(f"GET {url}", case, fhir.base_url)
        assert status is None and "<<" in after, after  # fetched (by the stand-in fetch)
    upper = fhir.base_url.replace("/fhir/", "/FHIR/")
    after, _, _, _ = our_outcome(f"GET {upper}Patient?identifier=S1", case, fhir.base_url)
    assert after.startswith("Error in sending the GET request: refused")


def test_failures_the_re_implementation_raises_on_count_as_it_counts_them(tmp_path):
    """Two ways the re-implementation fails a task by raising: a finishing reply holding "POST" on
    a task whose POSTs it reads (extract_posts looks past the last message), and record-server
    data its task function cannot read (a lab without a value). Run through the CLI on all 300
    tasks, our verdicts equal its verdicts on the same conversations and the same server."""
    rows = tasks()
    by_instruction = {t["instruction"]: t for t in rows}
    data = synthetic_records(rows)
    # a lab without its value, for one patient of each lab-reading category that fetches labs
    broken = {}
    for t in rows:
        c, k = _num(t)
        code = {4: "MG", 6: "GLU", 10: "A1C"}.get(c)
        if code and k == 2:
            lab = next(
                o
                for o in data.resources["Observation"]
                if o["subject"]["reference"] == f"Patient/{t['eval_MRN']}"
                and any(x["code"] == code for x in o["code"].get("coding", []))
            )
            del lab["valueQuantity"]
            broken[t["id"]] = t["eval_MRN"]
    finals: dict[str, list[dict[str, Any]]] = {}
    posted = set()

    def script(req: Request) -> object:
        msgs = _wire(req.messages)
        task = _case(msgs[0]["content"], by_instruction)
        try:
            reply = text_agent(msgs, by_instruction)
        except KeyError:  # the rule reads every lab's value: on the broken lab it gives up
            reply = "FINISH([-1])"
        c, k = _num(task)
        if reply.startswith("FINISH(") and c in (3, 8) and k % 5 == 2:
            reply = 'FINISH(["POST placed as asked"])'  # passes every POST check, holds "POST"
            posted.add(task["id"])
        finals[task["id"]] = msgs + [{"role": "assistant", "content": reply}]
        return reply

    with FhirServer(data) as server:
        cli(run_args(tmp_path, server.base_url), script)
        verdicts = medmarks_verdicts(rows, finals, server)
    g = grades(tmp_path / "s.db")
    ours = {sid: gr["value"] == 1.0 for sid, gr in g.items()}
    res = results(tmp_path)
    checks = {
        sid: {c["name"]: c["passed"] for e in gr["details"]["epochs"] for c in e["checks"]}
        for sid, gr in g.items()
    }
    # what the earlier reading gave: the POST-holding finishes passed every other check, the
    # unreadable labs were unscored; each is now a failure, as the re-implementation counts it
    before = sum(
        1 for sid in posted if all(ok for n, ok in checks[sid].items() if n != FINISH_POST)
    ) + sum(1 for sid in g if UNREADABLE_DATA in checks[sid])
    assert posted and all(checks[sid][FINISH_POST] is False for sid in posted)
    unreadable = {sid for sid in g if UNREADABLE_DATA in checks[sid]}
    assert unreadable and unreadable <= set(broken) | {
        t["id"] for t in rows if t.get("eval_MRN") in broken.values()
    }
    assert res["n_unscored"] == 0 and res["extra"]["server_data_unreadable"]["n"] == len(unreadable)
    disagree = sum(verdicts[i] != ours[i] for i in ours)
    assert disagree == 0
    print(
        f"medagentbench: {len(posted)} POST-holding finishes, {len(unreadable)} tasks on unreadable "
        f"data; verdicts differing from the re-implementation before {before}, after {disagree}/300"
    )
