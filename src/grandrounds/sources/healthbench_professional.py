"""HealthBench Professional's protocol, shared by its benchmark and its grader: the reference files
(medicalsphere/HealthBench at a pinned commit), its grader prompt and length settings read out of
them, and the two presets (``reference``, ``grandrounds``)."""

from __future__ import annotations

import functools
from dataclasses import replace

from grandrounds.sources.healthbench import API_SYSTEM_MESSAGE
from grandrounds.sources.healthbench import GRANDROUNDS as HB_GRANDROUNDS
from grandrounds.sources.protocols import Generation, Protocol
from grandrounds.sources.upstream import TextRef, UpstreamRepo, python_value

PRO_REPOSITORY = UpstreamRepo(
    "healthbench-professional",
    "medicalsphere/HealthBench",
    "0f3b62dc841fde6ba376b5ff1eb6c26fe87a5e65",
)
PRO_EVAL = PRO_REPOSITORY.file(
    "healthbench/healthbench_eval.py",
    "114d9a790a2bc5063080f4a32682b1ffecade61577c3aa3e48841f3f0b699dec",
)
PRO_README = PRO_REPOSITORY.file(
    "README.md", "7da9f291791c71559cc8bb19b1c046675501563c497c1e66dd405f507ec68c9e"
)
#: The reference's grader prompt, with ``<<conversation>>`` and ``<<rubric_item>>`` to replace.
PRO_GRADER_TEMPLATE = TextRef(PRO_EVAL, "GRADER_TEMPLATE")
#: The grader model and reasoning effort README.md names for healthbench_professional.
JUDGE_MODEL = "gpt-5.4-2026-03-05"
JUDGE_REASONING_EFFORT = "low"

REFERENCE = Protocol(
    name="reference",
    # the candidate as HealthBench's reference: simple-evals' chat sampler for e.g. gpt-4.1
    answer=Generation(temperature=0.5, max_tokens=2048, system=API_SYSTEM_MESSAGE),
    # ResponsesSampler(model, reasoning_model=True, reasoning_effort="low"): no system message, no
    # temperature, no token limit; 1.0 is what reasoning models run at, 32,768 tokens is ours.
    judge=Generation(temperature=1.0, max_tokens=32768, system=None),
    judge_model="openai/" + JUDGE_MODEL,
    extraction="grader reply read like parse_json_to_dict: fences off, json.loads, criteria_met a JSON bool; "
    "unreadable -> re-asked (--max-reask), then unknown",
    aggregation="example = met points / positive points, length-adjusted: - 0.0147 x (chars - 2000) / 500 (unclipped); "
    "metric = clip(mean, 0, 1), bootstrap std of 1000 resamples; an example with an unknown criterion is unscored",
    source=PRO_EVAL.url,
    settings={
        "judge_modes": ["per-criterion"],
        "grader_prompt": "GRADER_TEMPLATE (healthbench/healthbench_eval.py)",
        "judge_api": "responses",
        "judge_reasoning_effort": JUDGE_REASONING_EFFORT,
        "judge_limits": "none sent by the reference (temperature and max tokens here are ours)",
        "length_adjustment": "PROFESSIONAL_LENGTH_ADJUSTMENT_CENTER, PROFESSIONAL_LENGTH_ADJUSTMENT_PENALTY_PER_500_CHARS",
    },
)
GRANDROUNDS = replace(
    HB_GRANDROUNDS,
    judge_model=REFERENCE.judge_model,
    aggregation="example scored over the criteria with a verdict (coverage reported), length-adjusted on the answer "
    "without reasoning traces; metric = clip(mean, 0, 1), seeded bootstrap",
)


@functools.cache
def length_settings() -> tuple[float, float]:
    """(center in characters, penalty per 500 characters), read from the pinned reference file."""
    center = python_value(PRO_EVAL, "PROFESSIONAL_LENGTH_ADJUSTMENT_CENTER")
    penalty = python_value(PRO_EVAL, "PROFESSIONAL_LENGTH_ADJUSTMENT_PENALTY_PER_500_CHARS")
    return float(center), float(penalty)


#: The presets by name, as ``Benchmark.protocols`` holds them.
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
