"""MedDialog's judged protocol, shared by its benchmark and its grader: the named peer's files (Medmarks'
``med_dialog`` environment, tmabraham/med-lm-envs @ 7ee0452, whose judge template it says is adapted
from HELM's MedDialog evaluation), our judge template, and the two presets."""

from __future__ import annotations

from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import MEDMARKS, TextRef

#: The environment: the candidate's system prompt (``PROMPT``), the data's BASE_URL, the reward arithmetic.
ENVIRONMENT = MEDMARKS.file(
    "environments/med_dialog/med_dialog/med_dialog.py",
    "45ad854910ce0e96882080a8f065183ecc95c37e99cffb452769613193c52c4d",
)
#: JUDGE_TEMPLATE (``.format(conversation=, response=, gold_response=, output_format=)``) and JUDGE_OUTPUT_JSON.
JUDGE_PROMPTS = MEDMARKS.file(
    "environments/med_dialog/med_dialog/judge_prompts.py",
    "a105c77147a39e479a2b0e593243cf13a5f5c31e6ca3b386f0a2316103369506",
)

#: Our judge prompt (the grandrounds protocol).
OUR_JUDGE = (
    "You are a physician reviewing a one-sentence summary of a patient-doctor conversation from an online "
    "consultation service, against a reference summary written for the same conversation.\n\n"
    "Conversation:\n{conversation}\n\nSummary to grade:\n{response}\n\nReference summary:\n{gold}\n\n"
    "Score the summary from 1 (very poor) to 5 (excellent) on accuracy (the patient's main medical issue and the "
    "clinical facts are right), completeness (nothing important to the patient's question is missing) and clarity "
    "(one clear sentence a clinician can use). Reply with one JSON object only: "
    '{{"accuracy": {{"reason": "...", "score": N}}, "completeness": {{"reason": "...", "score": N}}, '
    '"clarity": {{"reason": "...", "score": N}}}}'
)

REFERENCE = Protocol(
    name="reference",
    # SingleTurnEnv(system_prompt=PROMPT): the conversation is the user message; sampling is its runner's (none pinned): ours
    answer=Generation(temperature=0.0, max_tokens=1024, system=TextRef(ENVIRONMENT, "PROMPT")),
    judge=Generation(
        temperature=0.0, max_tokens=2048
    ),  # its judge sampling helper is not in the pinned files: ours
    judge_model="openai/gpt-4o-mini",  # load_environment(judge_model="gpt-4o-mini")
    extraction="the judge's JSON object as Medmarks' JSONParser finds it (the one ending at the last '}') with "
    "accuracy/completeness/clarity scores; unreadable -> re-asked (--max-reask), then unknown (Medmarks' "
    "figure, from the first reply with its 0s, reported beside, never folded in)",
    aggregation="answer = mean over the three dimensions of clamp(score, 0, 5) / 5 (_compute_normalized_reward), "
    "averaged over judges; benchmark = mean over answers with a known verdict; coverage and unknowns reported",
    source=f"{ENVIRONMENT.repo}@{ENVIRONMENT.commit[:7]} environments/med_dialog (med_dialog.py, judge_prompts.py)",
    settings={"judge_prompt": "JUDGE_TEMPLATE + JUDGE_OUTPUT_JSON", "system": "PROMPT"},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="tolerant JSON reading (fences, prose, 'score' as text); unreadable -> re-asked, then unknown",
    settings={"judge_prompt": "ours", "system": "none"},
)
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
