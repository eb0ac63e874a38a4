"""GAPS' protocol, shared by its benchmark and its grader: the official files (AQ-MedAI/MedicalAiBenchEval at
a pinned commit: judge prompts, reply parsing and vote; scoring; points and judge panel) and the two
presets (``reference``, ``grandrounds``)."""

from __future__ import annotations

from grandrounds.scoring.gaps import LEVEL_POINTS
from grandrounds.sources.protocols import OUR_ANSWER, Generation, Protocol, ours
from grandrounds.sources.upstream import UpstreamRepo

MEDICAL_AI_BENCH_EVAL = UpstreamRepo(
    "gaps", "AQ-MedAI/MedicalAiBenchEval", "85e91cf8bfe4926a5b778250836a10f3166ef868"
)
COMMIT, _REPO = MEDICAL_AI_BENCH_EVAL.commit, MEDICAL_AI_BENCH_EVAL.repo
#: The official files: judge prompts, parse and vote; scoring; points and panel.
JUDGE_ENGINE = MEDICAL_AI_BENCH_EVAL.file(
    "judge_engine.py",
    "08f09bdd168c00b2bc149bf23465e8adf23e5bea2678cb98906bcca7dbcdac00",
)
CALCULATOR = MEDICAL_AI_BENCH_EVAL.file(
    "clinical_scoring_calculator.py",
    "d75029533bc5449f7c609194c84eec7dc0d2606940e879dab561825c3b0b1dba",
)
CONFIG = MEDICAL_AI_BENCH_EVAL.file(
    "config.yaml",
    "ca5d2eca1567cd67fdaf78beb10938e1a76ffe07acf70829f6d262cf95853e9c",
)
#: config.yaml ``models.judge_models`` (m1..m3) as config_model.yaml names them (read at commit
#: 9b0e4d2, the only version available; config.yaml there is byte-identical to 85e91cf's).
JUDGE_PANEL = (
    "openai/Kimi-K2-Instruct",
    "openai/Qwen3-235B-A22B-Instruct-2507",
    "openai/DeepSeek-V3.1",
)

REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,  # no official candidate setup: the answers are columns of the input sheet
    # config_model.yaml m1..m3: temperature 0, max_tokens 32678 (sic), sent through LangChain ChatOpenAI
    judge=Generation(temperature=0.0, max_tokens=32678),
    extraction="judge_engine.call_model: ```json {...}``` block with a boolean criteria_met, else Unknown; no re-ask",
    aggregation="judge_engine.vote (ReviewNeeded = not met); calculate_scores max(0, met points) / positive points; mean over every question",
    source=f"https://github.com/{_REPO}/tree/{COMMIT}",
    settings={
        "judge_prompts": "judge_engine.py build_prompt_positive / build_prompt_negative, read from the pinned file",
        "judge_panel": list(JUDGE_PANEL),
        "judge_extra_body": {
            "m1": {"enable_sec_check": False},
            "m2": {"top_k": 20, "min_p": 0, "enable_sec_check": False},
        },
        "candidate": "none published (answers come with the sheet); ours",
        "points": dict(LEVEL_POINTS),
        "files": [f.describe() for f in (JUDGE_ENGINE, CALCULATOR, CONFIG)],
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="tolerant JSON (fenced or not, full-width punctuation); unreadable replies re-asked (--max-reask), then unknown",
    aggregation="same vote; review_needed points left out of earned and maximum; unscored answers left out of the mean",
)
DIFFERS = "prompts, judge settings, reply parsing (fenced JSON only, no re-ask) and whether review_needed points count as not met"

#: The presets by name, as ``Benchmark.protocols`` holds them.
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
