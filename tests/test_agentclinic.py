"""AgentClinic through the real CLI: a doctor that acts by a rule, a scripted patient and measurement
reader, a scripted moderator; every prompt compared byte for byte with what the official loop
(agentclinic.py's own main and agent classes, run with a recording query_model) sends for the same
replies; success rates and statuses against a count made here from the case files; kill -9 mid-episode
then the same command: the same transcripts and no call asked twice."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.records import Message, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.testing import LoopbackServer
from tests.conftest import ROOT, offline_env, shared_file
from tests.official import load_official

pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid escape sequence"
)  # the official file's own regexes
WRONG = "Idiopathic placeholder syndrome"  # no case's diagnosis
FILES = {
    "medqa": "agentclinic_medqa.jsonl",
    "medqa_extended": "agentclinic_medqa_extended.jsonl",
    "nejm_extended": "agentclinic_nejm_extended.jsonl",
}
OFFICIAL_NAMES = {"medqa": "MedQA", "medqa_extended": "MedQA_Ext", "nejm_extended": "NEJM_Ext"}


def read_cases(dataset: str) -> list[dict[str, Any]]:
    """The case file's records, parsed here (line by line, blank lines skipped)."""
    path = shared_file("agentclinic", FILES[dataset])
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()
    ]


def correct_of(rec: dict[str, Any]) -> str:
    if "OSCE_Examination" in rec:
        return rec["OSCE_Examination"]["Correct_Diagnosis"]
    return next(a["text"] for a in rec["answers"] if a["correct"])


class Clinic:
    """The scripted participants. The patient and the measurement reader find their case by what
    their system prompt holds; the patient names the visit, which is how the doctor knows its case.

    The doctor's rule, by case index k: ask the patient, request a test, then diagnose: the correct
    diagnosis for even k, a wrong one for odd k; for k % 5 == 4 it never diagnoses. The moderator
    says "Yes" where the doctor's stated diagnosis occurs in its prompt twice (as the correct one too).
    """

    def __init__(self, dataset: str) -> None:
        self.cases = read_cases(dataset)
        self.mismatches: list[str] = []

    def _find(self, system: str, needles: list[str], who: str) -> int:
        hits = [k for k, n in enumerate(needles) if n in system]
        if len(hits) != 1:
            self.mismatches.append(f"{who}: {len(hits)} cases match")
            return -1
        return hits[0]

    def doctor(self, system: str, user: str) -> str:
        m = re.findall(r"\(visit (\d+)\)", user)
        if not m:
            return "What brings you in today?"
        k = int(m[0])
        if "RESULTS:" not in user:
            return "REQUEST TEST: Complete_Blood_Count"
        if k % 5 == 4:
            return "Is there anything else you have noticed?"
        return f"DIAGNOSIS READY: {correct_of(self.cases[k]) if k % 2 == 0 else WRONG}"

    def patient(self, system: str, user: str) -> str:
        needles = [
            repr(c["OSCE_Examination"]["Patient_Actor"]["History"])
            if "OSCE_Examination" in c
            else c["patient_info"]
            for c in self.cases
        ]
        k = self._find(system, needles, "patient")
        return f"I have   noticed\nit for a while (visit {k})."  # whitespace runs: collapsed as query_model does

    def measurement(self, system: str, user: str) -> str:
        # MedQA cases: the test results sit under the physical exam's "tests" key (exam_information)
        needles = [
            repr(c["OSCE_Examination"]["Physical_Examination_Findings"])[:-1]
            + ", 'tests': "
            + repr(c["OSCE_Examination"]["Test_Results"])
            + "}"
            if "OSCE_Examination" in c
            else c["physical_exams"]
            for c in self.cases
        ]
        k = self._find(system, needles, "measurement")
        return f"RESULTS:  NORMAL READINGS for visit {k}"

    def simulator(self, system: str, user: str) -> str:
        return (
            self.patient(system, user)
            if system.startswith("You are a patient")
            else self.measurement(system, user)
        )

    @staticmethod
    def moderator(system: str, user: str) -> str:
        stated = user.split("DIAGNOSIS READY:", 1)[1].split("\n", 1)[0].strip()
        return "Yes" if user.count(stated) >= 2 else "No"

    def rule(self, body: dict[str, Any]) -> str:
        msgs = body["messages"]
        system, user = msgs[0]["content"], msgs[-1]["content"]
        return {"doctor": self.doctor, "sim": self.simulator, "mod": self.moderator}[body["model"]](
            system, user
        )

    def expected(self, limit: int | None = None) -> dict[str, Any]:
        """The success rate and statuses the rules give, counted from the case indices."""
        n = len(self.cases) if limit is None else min(limit, len(self.cases))
        ks = range(n)
        correct = sum(1 for k in ks if k % 5 != 4 and k % 2 == 0)
        return {
            "n": n,
            "correct": correct,
            "rate": correct / n,
            "episodes": {
                "finished": sum(1 for k in ks if k % 5 != 4),
                "step_limit": sum(1 for k in ks if k % 5 == 4),
            },
        }


def official_calls(dataset: str, clinic: Clinic, n: int, monkeypatch) -> list[tuple[str, str, str]]:
    """(role, system, user) of every call the official main makes on the first ``n`` cases with the
    same scripted participants, its query_model replaced by a recorder that answers as the rules do
    and collapses whitespace as query_model's gpt4 path does. The patient call main still makes after
    the doctor's last inference (whose reply nothing reads) is left out, as a run here never asks it."""
    off = load_official(
        "agentclinic/agentclinic.py",
        [
            "main",
            "compare_results",
            "DoctorAgent",
            "PatientAgent",
            "MeasurementAgent",
            "ScenarioMedQA",
            "ScenarioLoaderMedQA",
            "ScenarioMedQAExtended",
            "ScenarioLoaderMedQAExtended",
            "ScenarioNEJMExtended",
            "ScenarioLoaderNEJMExtended",
        ],
    )
    calls: list[tuple[str, str, str]] = []
    state = {"doctor_calls": 0}

    def query_model(model_str, prompt, system_prompt, **_kw):
        if model_str == "doctor":
            state["doctor_calls"] = (
                1 if "You have asked 0 questions" in system_prompt else state["doctor_calls"] + 1
            )
            reply = clinic.doctor(system_prompt, prompt)
        elif model_str == "mod":
            reply = clinic.moderator(system_prompt, prompt)
        else:
            reply = clinic.simulator(system_prompt, prompt)
        if not (model_str in ("patient", "measurement") and state["doctor_calls"] == 20):
            calls.append(
                ({"doctor": "doctor", "mod": "mod"}.get(model_str, "sim"), system_prompt, prompt)
            )
        return re.sub(r"\s+", " ", reply)

    g = off.main.__globals__
    g.update(
        query_model=query_model,
        time=SimpleNamespace(sleep=lambda s: None),
        openai=SimpleNamespace(),
    )
    monkeypatch.chdir(shared_file("agentclinic", FILES[dataset]).parent)
    off.main(
        None,
        None,
        "llm",
        "None",
        "None",
        "doctor",
        "patient",
        "measurement",
        "mod",
        n,
        OFFICIAL_NAMES[dataset],
        False,
        20,
    )
    return calls


def cli_run(tmp_path: Path, dataset: str, srv: LoopbackServer, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"out-{dataset}"
    args = [
        "run",
        "agentclinic",
        "--param",
        f"dataset={dataset}",
        "--data",
        str(shared_file("agentclinic", FILES[dataset])),
        "--model",
        "openai/doctor",
        "--base-url",
        srv.base_url,
        "--simulator",
        f"openai/sim@{srv.base_url}",
        "--judge",
        f"openai/mod@{srv.base_url}",
        "--store",
        str(tmp_path / f"{dataset}.db"),
        "--out",
        str(out),
        "--concurrency",
        "8",
        *extra,
    ]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]


def sent(srv: LoopbackServer) -> list[tuple[str, str, str]]:
    return [
        (b["model"], b["messages"][0]["content"], b["messages"][-1]["content"])
        for b in srv.stats.bodies
    ]


def episode_rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT run_id, sample_id, epoch, status, steps_json FROM episodes ORDER BY run_id, sample_id, epoch"
        ).fetchall()
    finally:
        con.close()


# ---- the case files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dataset,count", [("medqa", 107), ("medqa_extended", 214), ("nejm_extended", 120)]
)
def test_case_files_load_with_their_counts(dataset, count):
    from grandrounds.benchmarks.agentclinic import AgentClinic

    path = shared_file("agentclinic", FILES[dataset])
    samples = AgentClinic(dataset=dataset).load(path)
    assert len(samples) == count
    assert [s.target for s in samples] == [correct_of(r) for r in read_cases(dataset)]


def test_a_broken_case_is_one_clear_error_naming_file_and_line(tmp_path):
    from grandrounds.benchmarks.agentclinic import AgentClinic
    from grandrounds.core.errors import DataError

    lines = shared_file("agentclinic", FILES["medqa"]).read_text(encoding="utf-8").split("\n")
    rec = json.loads(lines[2])
    rec["OSCE_Examination"]["Physical_Examination_Findings"] = "not an object"
    lines[2] = json.dumps(rec)
    bad = tmp_path / "agentclinic_medqa.jsonl"
    bad.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError) as e:
        AgentClinic().load(bad)
    assert (
        str(bad) in str(e.value)
        and "line 3" in str(e.value)
        and "Physical_Examination_Findings" in str(e.value)
    )
    nejm = json.loads(
        shared_file("agentclinic", FILES["nejm_extended"])
        .read_text(encoding="utf-8")
        .split("\n")[0]
    )
    for a in nejm["answers"]:
        a["correct"] = True
    bad = tmp_path / "agentclinic_nejm_extended.jsonl"
    bad.write_text(json.dumps(nejm) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1: expected exactly one answer"):
        AgentClinic(dataset="nejm_extended").load(bad)


# ---- the full run, and every prompt against the official loop ----------------------------------


def test_medqa_107_cases_through_the_cli_equal_the_count_and_the_official_prompts(
    tmp_path, monkeypatch
):
    clinic = Clinic("medqa")
    with LoopbackServer(clinic.rule, keep_bodies=True) as srv:
        result = cli_run(tmp_path, "medqa", srv)
        ours = sent(srv)
        params = {
            (
                b["model"],
                b.get("temperature"),
                b.get("max_tokens") or b.get("max_completion_tokens"),
            )
            for b in srv.stats.bodies
        }
    assert clinic.mismatches == []
    want = clinic.expected()
    assert (result["n"], result["n_unscored"]) == (107, 0)
    assert result["score"] == pytest.approx(want["rate"])  # 43 / 107
    assert result["extra"]["episodes"] == want["episodes"]  # 86 finished, 21 step_limit
    # byte for byte what the official main sends for the same replies, every call of every case
    # (a request identical to one made before, e.g. the moderator asked about the same pair of
    # diagnoses in two cases, is answered from the store: each distinct request is sent once)
    official = official_calls("medqa", clinic, 107, monkeypatch)
    assert set(ours) == set(official)
    assert max(Counter(ours).values()) == 1 and len(ours) == len(set(official))
    print(
        f"calls sent {len(ours)} ({Counter(o[0] for o in ours)}); the official loop's {len(official)}, {len(set(official))} distinct"
    )
    assert params == {
        ("doctor", 0.05, 200),
        ("sim", 0.05, 200),
        ("mod", 0.05, 200),
    }  # query_model's gpt4 settings
    # the moderator's calls are linked to the cases' grades: counted in the result's usage
    assert result["extra"]["usage"]["judges"][0]["calls"] == sum(1 for o in ours if o[0] == "mod")
    # a case that never diagnoses: 20 doctor inferences, the last with the official final question
    rows = {r[1]: r for r in episode_rows(tmp_path / "medqa.db")}
    steps = json.loads(rows["4"][4])
    assert rows["4"][3] == "step_limit" and len(steps) == 20
    last = [
        o
        for o in ours
        if o[0] == "doctor" and "(visit 4)" in o[2] and "You have asked 19 questions" in o[1]
    ]
    assert len(last) == 1 and "This is the final question" in last[0][2]
    # the transcript of a wrong case: the patient, the measurement reader, the doctor's diagnosis, the failed check
    steps = json.loads(rows["1"][4])
    assert [e["actor"] for s in steps for e in s.get("events", [])] == ["patient", "measurement"]
    assert steps[-1]["reply"] == f"DIAGNOSIS READY: {WRONG}"
    lines = [
        json.loads(x)
        for x in (tmp_path / "out-medqa" / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    epoch = next(x for x in lines if x["sample_id"] == "1")["details"]["epochs"][0]
    assert epoch["checks"] == [
        {
            "name": "diagnosis",
            "passed": False,
            "detail": f"{WRONG} vs {correct_of(clinic.cases[1])}",
        }
    ]
    assert epoch["judge"] == "No"


@pytest.mark.parametrize("dataset", ["medqa_extended", "nejm_extended"])
def test_other_case_files_send_the_official_prompts(tmp_path, monkeypatch, dataset):
    clinic = Clinic(dataset)
    with LoopbackServer(clinic.rule, keep_bodies=True) as srv:
        result = cli_run(tmp_path, dataset, srv, "--limit", "12")
        ours = sent(srv)
    assert clinic.mismatches == []
    want = clinic.expected(12)
    assert (
        result["score"] == pytest.approx(want["rate"])
        and result["extra"]["episodes"] == want["episodes"]
    )
    official = official_calls(dataset, clinic, 12, monkeypatch)
    assert set(ours) == set(official) and len(ours) == len(set(official))


# ---- the moderator ------------------------------------------------------------------------------


class Moderator:
    """A judge whose replies are given in order; it records the prompts it was sent."""

    name = "mod"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[Message, ...]] = []

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        self.asked.append(tuple(messages))
        return Response(key=f"k{len(self.asked)}", text=self.replies.pop(0))


@pytest.mark.parametrize(
    "protocol,replies,value,asked,official",
    [
        ("reference", ["Yes"], 1.0, 1, [True]),
        ("reference", ["no"], 0.0, 1, [False]),
        (
            "reference",
            ["Yes.", "Yes.", "Yes."],
            None,
            3,
            [False],
        ),  # neither "yes" nor "no": re-asked, then unknown, never 0
        # the official code reads only the first reply ("Maybe": wrong), never the re-ask's "YES"
        ("reference", ["Maybe", "YES"], 1.0, 2, [False]),
        ("grandrounds", ["**Yes.**"], 1.0, 1, [False]),
        ("grandrounds", ["<think>the same disease</think>\nNo."], 0.0, 1, [False]),
    ],
)
def test_moderator_reading(protocol, replies, value, asked, official):
    import asyncio

    from grandrounds.graders.agentclinic_grader import AgentClinicGrader, AgentClinicParams
    from grandrounds.graders.judging import delimit_answer, marked_answer

    grader = AgentClinicGrader(AgentClinicParams(protocol))
    judge = Moderator(*replies)
    sample = Sample(id="0", benchmark="agentclinic", messages=(), target="Myasthenia gravis")
    reply = "The findings fit. DIAGNOSIS READY: Myasthenia gravis"
    grade = asyncio.run(
        grader.grade(
            sample, Response(key="a", text=reply), GradeContext(judges=(judge,), max_reask=2)
        )
    )
    assert grade.value == value
    assert grade.status == ("scored" if value is not None else "unreadable")
    assert len(judge.asked) == asked
    assert grade.details["official_correct"] == official
    # the stored judge text is the first reply; the re-asks' replies are kept apart
    assert grade.extracted == replies[0] and grade.details["moderator_first"] == [replies[0]]
    assert grade.details["moderator_reasks"] == [replies[1:asked]]
    check = grade.details["checks"][0]
    assert (
        check["name"] == "diagnosis" and check["detail"] == "Myasthenia gravis vs Myasthenia gravis"
    )
    assert check["passed"] == (None if value is None else value == 1.0)
    # compare_results' prompts, byte for byte; under grandrounds the doctor's reply is between
    # answer markers (the official prompt around it unchanged)
    off = load_official("agentclinic/agentclinic.py", ["compare_results"])
    seen = []
    off.compare_results.__globals__["query_model"] = lambda m, prompt, system, **kw: (
        seen.append((system, prompt)) or "yes"
    )
    shown = reply if protocol == "reference" else delimit_answer(reply, "Myasthenia gravis")
    off.compare_results(shown, "Myasthenia gravis", "mod", None)
    assert [(m[0].content, m[1].content) for m in judge.asked[:1]] == seen
    assert (marked_answer(judge.asked[0][1].content) == reply) == (protocol == "grandrounds")


# ---- configuration ------------------------------------------------------------------------------


def test_missing_simulator_is_one_clear_error(tmp_path):
    args = [
        "run",
        "agentclinic",
        "--data",
        str(shared_file("agentclinic", FILES["medqa"])),
        "--model",
        "scripted/doc",
        "--judge",
        "scripted/mod",
        "--store",
        str(tmp_path / "s.db"),
    ]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 2
    assert (
        "agentclinic's patient is played by a model: pass --simulator PROVIDER/MODEL"
        in " ".join(r.output.split())
    )
    assert not (tmp_path / "s.db").exists() or episode_rows(tmp_path / "s.db") == []


def test_other_simulators_or_prompts_are_other_runs(tmp_path):
    from grandrounds.benchmarks.agentclinic import AgentClinic

    prints = AgentClinic().simulator_templates()
    assert set(prints) >= {"patient", "measurement"} and prints["patient"] != prints["measurement"]
    clinic = Clinic("medqa")
    ids = set()
    with LoopbackServer(clinic.rule) as srv:
        for sim in ("sim", "sim2"):
            args = [
                "run",
                "agentclinic",
                "--data",
                str(shared_file("agentclinic", FILES["medqa"])),
                "--model",
                "openai/doctor",
                "--base-url",
                srv.base_url,
                "--simulator",
                f"openai/{sim}@{srv.base_url}",
                "--judge",
                f"openai/mod@{srv.base_url}",
                "--store",
                str(tmp_path / "s.db"),
                "--dry-run",
            ]
            r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
            assert r.exit_code == 0, r.output
            ids.update(re.findall(r"run ([0-9a-f]{16})", r.output))
    assert len(ids) == 2, ids


# ---- kill -9 mid-episode, then the same command ----------------------------------------------


def _calls_stored(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return 0
    try:
        return con.execute("SELECT COUNT(*) FROM calls WHERE error IS NULL").fetchone()[0]
    except sqlite3.OperationalError:  # schema not written yet
        return 0
    finally:
        con.close()


def test_kill_minus_nine_mid_episode_resumes_with_the_same_transcripts_and_no_repeated_call(
    tmp_path,
):
    clinic = Clinic("medqa")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **offline_env())

    def cli(db: Path) -> subprocess.Popen:
        args = [
            "run",
            "agentclinic",
            "--data",
            str(shared_file("agentclinic", FILES["medqa"])),
            "--limit",
            "10",
            "--model",
            "openai/doctor",
            "--base-url",
            srv.base_url,
            "--simulator",
            f"openai/sim@{srv.base_url}",
            "--judge",
            f"openai/mod@{srv.base_url}",
            "--store",
            str(db),
            "--concurrency",
            "2",
        ]
        return subprocess.Popen(
            [sys.executable, "-m", "grandrounds", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )

    with LoopbackServer(clinic.rule, latency=0.03) as srv:
        p = cli(tmp_path / "clean.db")
        assert p.wait(300) == 0, p.stderr.read()
        total = srv.stats.requests
        assert total == _calls_stored(tmp_path / "clean.db")

        killed = tmp_path / "killed.db"
        start = srv.stats.requests
        p = cli(killed)
        deadline = time.time() + 120
        while time.time() < deadline and _calls_stored(killed) < 40:
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        assert p.returncode == -signal.SIGKILL
        before = _calls_stored(killed)
        asked_before = srv.stats.requests - start
        running = [r for r in episode_rows(killed) if r[3] == "running"]
        assert 40 <= before < total and running, "killed in the middle of an episode"

        start = srv.stats.requests
        p = cli(killed)
        assert p.wait(300) == 0, p.stderr.read()
        again = srv.stats.requests - start
    assert again == total - before  # every stored call replayed from the store, none asked twice
    assert episode_rows(killed) == episode_rows(tmp_path / "clean.db")
    print(
        f"calls in all {total}; stored before the kill {before} (asked {asked_before}); asked on the re-run {again}"
    )


def test_methods_of_the_same_name_are_read_from_their_own_class(official_reference):
    from grandrounds.core.errors import DataError
    from grandrounds.sources.agentclinic import AGENTCLINIC_PY
    from grandrounds.sources.upstream import (
        python_call_argument,
        python_returned_string,
        python_string,
    )

    patient = python_string(AGENTCLINIC_PY, "base", within="PatientAgent.system_prompt").text
    measurement = python_string(
        AGENTCLINIC_PY, "base", within="MeasurementAgent.system_prompt"
    ).text
    assert patient.startswith("You are a patient") and measurement.startswith(
        "You are an measurement reader"
    )
    # an undotted name still finds the first definition, as before
    assert python_string(AGENTCLINIC_PY, "base", within="system_prompt").text == patient
    assert python_returned_string(
        AGENTCLINIC_PY, "ScenarioNEJMExtended.examiner_information"
    ).text.endswith("diagnosis?")
    with pytest.raises(DataError, match="no function 'DoctorAgent.nowhere'"):
        python_call_argument(AGENTCLINIC_PY, "query_model", 1, within="DoctorAgent.nowhere")
    with pytest.raises(DataError, match="no call of 'query_model' with an argument 5"):
        python_call_argument(AGENTCLINIC_PY, "query_model", 5, within="compare_results")


# ---- the paper's figure: the official reading of the moderator's first reply -------------------


def paper_moderator(system: str, user: str) -> str:
    """A moderator that does not always say exactly yes: for the same disease "yes", "Yes." or
    "yes, same disease" by the length of the diagnosis; "No" otherwise."""
    stated = user.split("DIAGNOSIS READY:", 1)[1].split("\n", 1)[0].strip()
    if user.count(stated) < 2:
        return "No"
    return ("yes", "Yes.", "yes, same disease")[len(stated) % 3]


def test_the_official_figure_is_stored_and_printed_beside_the_headline(tmp_path, monkeypatch):
    clinic = Clinic("medqa")

    def rule(body: dict[str, Any]) -> str:
        if body["model"] == "mod":
            return paper_moderator(body["messages"][0]["content"], body["messages"][-1]["content"])
        return clinic.rule(body)

    out = tmp_path / "out"
    with LoopbackServer(rule, keep_bodies=True) as srv:
        args = [
            "run",
            "agentclinic",
            "--data",
            str(shared_file("agentclinic", FILES["medqa"])),
            "--model",
            "openai/doctor",
            "--base-url",
            srv.base_url,
            "--simulator",
            f"openai/sim@{srv.base_url}",
            "--judge",
            f"openai/mod@{srv.base_url}",
            "--store",
            str(tmp_path / "medqa.db"),
            "--out",
            str(out),
            "--concurrency",
            "8",
        ]
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code in (0, 1), (
        r.output,
        r.exception,
    )  # 1: some cases unscored (unread moderator)
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]
    # counted here from the case files and the moderator's rule
    said = {
        k: (
            None
            if k % 5 == 4
            else "No"
            if k % 2
            else ("yes", "Yes.", "yes, same disease")[len(correct_of(clinic.cases[k])) % 3]
        )
        for k in range(107)
    }
    official_right = sum(1 for v in said.values() if v == "yes")
    read = sum(1 for v in said.values() if v in (None, "yes", "No"))  # what our reading scores
    # the official loop on the same first replies: compare_results(...) == "yes", over every case presented
    off = load_official("agentclinic/agentclinic.py", ["compare_results"])
    got = []
    for v in said.values():
        if v is None:  # no diagnosis within the inferences: presented, not correct
            got.append(False)
            continue
        off.compare_results.__globals__["query_model"] = lambda *a, _v=v, **kw: re.sub(
            r"\s+", " ", _v
        )
        got.append(off.compare_results("DIAGNOSIS READY: x", "x", "mod", None) == "yes")
    assert sum(got) == official_right
    figure = result["extra"]["official"]
    assert (figure["correct"], figure["n"], figure["unknown"]) == (official_right, 107, 0)
    assert figure["score"] == pytest.approx(official_right / 107)
    # the headline: over the replies our reading reads (the others unscored, never a zero)
    assert (result["n"], result["n"] + result["n_unscored"]) == (read, 107)
    printed = f"{official_right}/107 = {official_right / 107:.3f}"
    assert "official AgentClinic's" in r.output and printed in " ".join(r.output.split())
    # the judge text stored for an episode is the moderator's first reply; re-asks kept apart
    lines = {
        x["sample_id"]: x
        for x in map(json.loads, (out / "samples.jsonl").read_text(encoding="utf-8").splitlines())
    }
    for k, v in said.items():
        epoch = lines[str(k)]["details"]["epochs"][0]
        if v is None:
            assert "official" not in epoch and epoch["status"] == "step_limit"
            continue
        assert epoch["judge"] == v and epoch["official"] == (v == "yes")
        assert epoch["judge_reasks"] == (
            [] if v in ("yes", "No") else [v] * len(epoch["judge_reasks"])
        )
        if v not in ("yes", "No"):
            assert epoch["judge_reasks"], k  # asked again, and the re-asks kept apart
    print(
        f"official {printed} beside headline {result['score']:.3f} over {read} read; "
        f"before: 0 of 107 grades kept the official reading, after: {107 - figure['unknown']}"
    )
