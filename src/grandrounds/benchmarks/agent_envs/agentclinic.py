"""AgentClinic's clinic: the official loop (``main`` in agentclinic.py), one doctor inference a step.

The doctor (the candidate) is asked afresh every step, as ``DoctorAgent.inference_doctor`` asks
it: a system message (its budget, the turn counter and the case's presentation) and one user
message holding its own dialogue history and the last reply it got; on its last inference the
official final-question sentence is added to that reply. After each doctor reply:

- it holds "DIAGNOSIS READY": the case ends (finished) and the reply is the answer judged;
- it holds "REQUEST TEST": the measurement reader answers it (its history gets the request and the
  result; the patient's history gets the result);
- otherwise the patient answers (its history gets the question and the answer; the measurement
  reader's history gets the answer).

Each simulator keeps its own history as the official agents keep their ``agent_hist``, and is
asked with its official system prompt through ``simulate`` (the ``--simulator`` model, cached).
Every reply is taken with its whitespace runs collapsed, as ``query_model`` hands it on. After the
last inference without a diagnosis the episode ends as ``step_limit`` (the official loop asks the
patient once more and stops: that reply is never read, so it is not asked here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grandrounds.benchmarks.agents import Environment, Reaction, Simulate
from grandrounds.core.records import GenParams, Message, Response
from grandrounds.sources import agentclinic as official

SEP = official.HISTORY_SEPARATOR


@dataclass(frozen=True)
class Case:
    """What each agent is told of a case: the doctor's presentation, the patient's information and
    the measurement reader's (each as the official prompts format them)."""

    objective: str
    patient: str
    exam: str


class AgentClinicEnvironment(Environment):
    """One case: the doctor's, the patient's and the measurement reader's histories, fresh per episode."""

    def __init__(self, case: Case, max_inferences: int, simulator: GenParams) -> None:
        self.case = case
        self.max_inferences = max_inferences
        self.simulator = simulator
        self.asked = 0  # DoctorAgent.infs
        self.doctor_hist = self.patient_hist = self.measurement_hist = ""
        self.last_reply = ""  # main's pi_dialogue
        self.counts = {"patient": 0, "measurement": 0}

    def _doctor_input(self) -> str:
        if self.asked == self.max_inferences - 1:
            return self.last_reply + official.final_question()
        return self.last_reply

    def _doctor_messages(self) -> list[Message]:
        system = official.doctor_system(self.max_inferences, self.asked, self.case.objective)
        return [
            Message("system", system),
            Message("user", official.doctor_user(self.doctor_hist, self._doctor_input())),
        ]

    def start(self) -> list[Message]:
        return self._doctor_messages()

    async def react(self, reply: Response, simulate: Simulate) -> Reaction:
        said = official.official_reply(reply.text or "")
        question = self._doctor_input()
        self.doctor_hist += question + SEP + said + SEP
        self.asked += 1
        if official.DIAGNOSIS_READY in said:
            return Reaction(done=True, status="finished", final=said)
        if (
            self.asked >= self.max_inferences
        ):  # the budget is spent: no reply of a simulator is read again
            return Reaction()
        if official.REQUEST_TEST in said:
            role = "measurement"
            messages = [
                Message("system", official.measurement_system(self.case.exam)),
                Message("user", official.measurement_user(self.measurement_hist, said)),
            ]
        else:
            role = "patient"
            messages = [
                Message("system", official.patient_system(self.case.patient)),
                Message("user", official.patient_user(self.patient_hist, said)),
            ]
        answer = official.official_reply(
            (await simulate(role, messages, self.simulator)).text or ""
        )
        self.counts[role] += 1
        if role == "measurement":
            self.measurement_hist += said + SEP + answer + SEP
            self.patient_hist += answer + SEP  # patient_agent.add_hist
        else:
            self.patient_hist += said + SEP + answer + SEP
            self.measurement_hist += answer + SEP  # meas_agent.add_hist
        self.last_reply = answer
        return Reaction(
            events=[{"actor": role, "text": answer}], conversation=self._doctor_messages()
        )

    def state(self) -> dict[str, Any]:
        return {
            "inferences": self.asked,
            "patient_replies": self.counts["patient"],
            "measurements": self.counts["measurement"],
        }
