"""MedicationQA's judged protocol, shared by its benchmark and its grader: the named peer's files
(Medmarks' ``medicationqa`` environment, tmabraham/med-lm-envs @ 7ee0452), the text read out of them,
our judge template, and the two presets."""

from __future__ import annotations

import ast

from grandrounds.core.errors import DataError
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import MEDMARKS, read_text

#: JUDGE_TEMPLATE (``.format(question=, response=, gold_response=, output_format=)``) and JUDGE_OUTPUT_JSON.
JUDGE_PROMPTS = MEDMARKS.file(
    "environments/medicationqa/medicationqa/judge_prompts.py",
    "3d61155eaa15eade7b4edcea98830be21f748a065fae53e5ee9969356d8b1c36",
)
#: The environment: its candidate system prompt (``SingleTurnEnv(system_prompt=...)``) and default judge.
ENVIRONMENT = MEDMARKS.file(
    "environments/medicationqa/medicationqa/medicationqa.py",
    "efa44b7737c1361574fba99a887beae3ce478379f640ad2d363b575de39bc8d5",
)
#: The dimensions the judge scores 1-5 (JUDGE_DIMENSIONS there; the keys its JSON carries).
DIMENSIONS = ("accuracy", "completeness", "clarity")

#: Our judge prompt (the grandrounds protocol).
OUR_JUDGE = (
    "You are a pharmacist grading an answer to a consumer's medication question against a reference answer "
    "taken from a trusted drug-information page. The reference may be an excerpt: do not penalise correct "
    "information it lacks.\n\nQuestion:\n{question}\n\nAnswer to grade:\n{response}\n\nReference answer:\n{gold}\n\n"
    "Score the answer from 1 (very poor) to 5 (excellent) on accuracy (medically correct, no misinformation), "
    "completeness (covers what the question needs) and clarity (understandable for a layperson). Reply with "
    'one JSON object only: {{"accuracy": {{"reason": "...", "score": N}}, "completeness": {{"reason": "...", '
    '"score": N}}, "clarity": {{"reason": "...", "score": N}}}}'
)


def call_keyword_string(within: str, keyword: str) -> str:
    """The string constant passed as ``keyword=`` to a call inside function ``within`` of the environment
    file (its candidate system prompt is an argument of ``vf.SingleTurnEnv``, not a named constant)."""
    tree = ast.parse(read_text(ENVIRONMENT), filename=ENVIRONMENT.path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == within:
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    for kw in call.keywords:
                        if (
                            kw.arg == keyword
                            and isinstance(kw.value, ast.Constant)
                            and isinstance(kw.value.value, str)
                        ):
                            return kw.value.value
    raise DataError(
        ENVIRONMENT.url, None, f"no string passed as {keyword}= in {within!r} in the upstream file"
    )


def candidate_system() -> str:
    return call_keyword_string("load_environment", "system_prompt")


REFERENCE = Protocol(
    name="reference",
    # The candidate: Medmarks' system prompt (read at run time); sampling left to its runner (none pinned): ours.
    answer=Generation(temperature=0.0, max_tokens=1024),
    # load_environment(judge_model="gpt-4o-mini"); its judge sampling comes from a helper not published here: ours
    judge=Generation(temperature=0.0, max_tokens=2048),
    judge_model="openai/gpt-4o-mini",
    extraction="the judge's JSON object as Medmarks' JSONParser finds it (the one ending at the last '}') with "
    "accuracy/completeness/clarity scores; unreadable -> re-asked (--max-reask), then unknown (Medmarks' "
    "figure, from the first reply with its 0s, reported beside, never folded in)",
    aggregation="answer = mean over the three dimensions of clamp(score, 0, 5) / 5, averaged over the judges; "
    "benchmark = mean over answers with a known verdict; coverage and unknowns reported",
    source=f"{ENVIRONMENT.repo}@{ENVIRONMENT.commit[:7]} environments/medicationqa (judge_prompts.py, medicationqa.py)",
    settings={
        "judge_prompt": "JUDGE_TEMPLATE + JUDGE_OUTPUT_JSON",
        "system": "the environment's system_prompt",
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="tolerant JSON reading (fences, prose, 'score' as text); unreadable -> re-asked, then unknown",
    settings={"judge_prompt": "ours", "system": "none"},
)
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
