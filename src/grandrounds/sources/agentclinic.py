"""AgentClinic's official loop text and settings, shared by the benchmark and its grader.

Everything said to the doctor, the patient, the measurement reader and the moderator is read at
run time out of the pinned ``agentclinic.py`` (SamuelSchmidgall/AgentClinic @ b6570ed), never
copied here:

- the doctor: ``DoctorAgent.system_prompt``'s ``base`` (the inference budget and the turn counter,
  "You have asked N questions so far"; no image request) and ``presentation`` (the case's objective),
  and the user prompt ``DoctorAgent.inference_doctor`` sends (its dialogue history and the last
  patient or measurement reply), with ``main``'s final-question sentence on the last inference;
- the patient: ``PatientAgent.system_prompt`` (``base`` + ``symptoms``: the patient's information)
  and the prompt of ``PatientAgent.inference_patient``;
- the measurement reader: ``MeasurementAgent.system_prompt`` (``base`` + ``presentation``: the exam
  information) and the prompt of ``MeasurementAgent.inference_measurement``;
- the moderator: ``compare_results``'s system and user prompts.

``query_model``'s default path (``gpt4``, and every OpenAI and Replicate model) sends a system and
a user message with temperature 0.05 and at most 200 new tokens, and collapses each reply's
whitespace runs to one space (``re.sub("\\s+", " ", answer)``) before anything reads it; both are
reproduced here (:data:`OFFICIAL_GENERATION`, :func:`official_reply`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from grandrounds.core.hashing import text_hash
from grandrounds.core.textutil import strip_leading_reasoning
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    UpstreamFile,
    UpstreamRepo,
    UpstreamText,
    python_appended_strings,
    python_call_argument,
    python_returned_string,
    python_string,
)

AGENTCLINIC = UpstreamRepo(
    "agentclinic", "SamuelSchmidgall/AgentClinic", "b6570edefb940857a7c334350656b29f9d984f24"
)
REPO, COMMIT = AGENTCLINIC.repo, AGENTCLINIC.commit
AGENTCLINIC_PY = AGENTCLINIC.file(
    "agentclinic.py",
    "ee9cfb3020c7addf717ba8eb3510ba81b2b4b53071cba67d0663ad6c7c6ddbd3",
)
#: query_model's gpt4 path (agentclinic.py): temperature 0.05, max_tokens 200, for every agent.
OFFICIAL_GENERATION = Generation(temperature=0.05, max_tokens=200)
#: The words the official loop looks for in the doctor's reply (``main``: ``in doctor_dialogue``).
DIAGNOSIS_READY = "DIAGNOSIS READY"
REQUEST_TEST = "REQUEST TEST"
#: What the official agents put after each entry of a dialogue history (``agent_hist += ... + "\n\n"``).
HISTORY_SEPARATOR = "\n\n"

REFERENCE = Protocol(
    name="reference",
    answer=OFFICIAL_GENERATION,
    judge=OFFICIAL_GENERATION,
    judge_model="openai/gpt-4-turbo-preview",  # query_model's "gpt4" (the default --moderator_llm)
    extraction="the doctor's reply holding 'DIAGNOSIS READY' ends the case; compare_results: the moderator's "
    "reply, whitespace collapsed and lower-cased, 'yes' is correct, 'no' wrong, anything else re-asked, then unknown",
    aggregation="accuracy over cases; a case with no diagnosis within the inference budget is wrong",
    source=f"https://github.com/{REPO}/blob/{COMMIT}/agentclinic.py",
    settings={
        "files": [AGENTCLINIC_PY.describe()],
        "replies": "whitespace runs collapsed to one space (query_model)",
        "simulators": "patient and measurement reader: temperature 0.05, max_tokens 200",
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="as reference, but the moderator's yes or no is read with reasoning, quotes, emphasis and a final period around it",
    aggregation="accuracy over cases; a case with no diagnosis within the inference budget is wrong",
    settings=dict(REFERENCE.settings),
)


@functools.lru_cache(maxsize=4)
def texts(source: UpstreamFile = AGENTCLINIC_PY) -> dict[str, UpstreamText]:
    """Every official text the loop uses, by role (read once per process)."""
    call = functools.partial(python_call_argument, source, "query_model")
    return {
        "doctor_base": python_string(source, "base", within="DoctorAgent.system_prompt"),
        "doctor_presentation": python_string(
            source, "presentation", within="DoctorAgent.system_prompt"
        ),
        "doctor_user": call(1, within="DoctorAgent.inference_doctor"),
        "final_question": python_appended_strings(source, "pi_dialogue", within="main")[0],
        "patient_base": python_string(source, "base", within="PatientAgent.system_prompt"),
        "patient_symptoms": python_string(source, "symptoms", within="PatientAgent.system_prompt"),
        "patient_user": call(1, within="PatientAgent.inference_patient"),
        "measurement_base": python_string(source, "base", within="MeasurementAgent.system_prompt"),
        "measurement_presentation": python_string(
            source, "presentation", within="MeasurementAgent.system_prompt"
        ),
        "measurement_user": call(1, within="MeasurementAgent.inference_measurement"),
        "moderator_user": call(1, within="compare_results"),
        "moderator_system": call(2, within="compare_results"),
        "nejm_presentation": python_returned_string(
            source, "ScenarioNEJMExtended.examiner_information"
        ),
    }


def doctor_system(max_inferences: int, asked: int, presentation: str) -> str:
    """DoctorAgent.system_prompt() with no bias and no image request."""
    t = texts()
    base = t["doctor_base"]
    # the image-request sentence is a conditional on self.img_request: off (as main's default)
    (img_field,) = [f for f in base.fields if f not in ("self.MAX_INFS", "self.infs")]
    if "self.img_request" not in img_field:
        raise ValueError(f"unexpected placeholder {img_field!r} in {base.name}")
    return base.render({"self.MAX_INFS": max_inferences, "self.infs": asked, img_field: ""}) + t[
        "doctor_presentation"
    ].render({"self.presentation": presentation})


def nejm_presentation() -> str:
    """What ScenarioNEJMExtended.examiner_information() gives the doctor (the vignette is not shown)."""
    return texts()["nejm_presentation"].render()


def doctor_user(history: str, question: str) -> str:
    """The prompt of DoctorAgent.inference_doctor(question) with ``history`` (its agent_hist)."""
    return texts()["doctor_user"].render({"self.agent_hist": history, "question": question})


def final_question() -> str:
    """What main adds to the doctor's input on its last inference."""
    return texts()["final_question"].render()


def patient_system(information: str) -> str:
    t = texts()
    return t["patient_base"].render() + t["patient_symptoms"].render({"self.symptoms": information})


def patient_user(history: str, question: str) -> str:
    return texts()["patient_user"].render({"self.agent_hist": history, "question": question})


def measurement_system(information: str) -> str:
    t = texts()
    return t["measurement_base"].render() + t["measurement_presentation"].render(
        {"self.information": information}
    )


def measurement_user(history: str, question: str) -> str:
    return texts()["measurement_user"].render({"self.agent_hist": history, "question": question})


def moderator_prompts(diagnosis: str, correct: str) -> tuple[str, str]:
    """compare_results' (system, user) prompts for the doctor's reply and the correct diagnosis."""
    t = texts()
    user = t["moderator_user"].render({"correct_diagnosis": correct, "diagnosis": diagnosis})
    return t["moderator_system"].render(), user


def official_reply(text: str) -> str:
    """A reply as query_model hands it on: whitespace runs collapsed to one space."""
    return re.sub(r"\s+", " ", text)


def official_correct(reply: str) -> bool:
    """compare_results(...) == "yes": the official code's literal reading (anything else is wrong)."""
    return official_reply(reply).lower() == "yes"


def moderator_reading(reply: str, protocol: str) -> bool | None:
    """The moderator's yes (True) or no (False), or None where the reply says neither.

    ``reference``: the reply as compare_results reads it (whitespace collapsed, lower-cased) is
    exactly ``yes`` or ``no``; ``grandrounds``: the same words with leading reasoning, quotes,
    emphasis and a final period around them.
    """
    text = official_reply(reply).lower()
    if protocol == "grandrounds":
        text = re.sub(
            r"^[\s\"'*`]+|[\s\"'*`.!]+$", "", official_reply(strip_leading_reasoning(reply)).lower()
        )
    return True if text == "yes" else False if text == "no" else None


def simulator_fingerprint() -> dict[str, Any]:
    """Hashes of the patient's and the measurement reader's prompts and the file they come from."""
    t = texts()

    def digest(*names: str) -> str:
        return text_hash("\x1f".join(t[n].text for n in names))[:16]

    return {
        "patient": digest("patient_base", "patient_symptoms", "patient_user"),
        "measurement": digest("measurement_base", "measurement_presentation", "measurement_user"),
        "generation": {
            "temperature": OFFICIAL_GENERATION.temperature,
            "max_tokens": OFFICIAL_GENERATION.max_tokens,
        },
        "source": AGENTCLINIC_PY.describe(),
    }
