"""HealthBench's protocol, shared by its benchmarks and its grader: the official files (openai/simple-evals
at a pinned commit), the text read out of them, and the two presets (``reference``, ``grandrounds``)."""

from __future__ import annotations

from dataclasses import replace

from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import SIMPLE_EVALS, TextRef

#: Judge modes (``--judge-mode``); ``batched`` is ours and runs under the grandrounds protocol only.
JUDGE_MODES = ("per-criterion", "batched")

HEALTHBENCH_EVAL = SIMPLE_EVALS.file(
    "healthbench_eval.py", "89909957f005762edaded2f0e39fc9b3b242edd55e3ac0ce4c8dd886ac59d167"
)
CHAT_SAMPLER = SIMPLE_EVALS.file(
    "sampler/chat_completion_sampler.py",
    "d9d7568ad5b04379342b7f269a6028c6945c518bc8baa56969aad035afc8d435",
)
#: The official grader prompt, with ``<<conversation>>`` and ``<<rubric_item>>`` to replace.
GRADER_TEMPLATE = TextRef(HEALTHBENCH_EVAL, "GRADER_TEMPLATE")
#: The system message simple-evals' chat samplers send (candidate and grader alike).
API_SYSTEM_MESSAGE = TextRef(CHAT_SAMPLER, "OPENAI_SYSTEM_MESSAGE_API")
#: Our judge's system message under the grandrounds protocol.
OUR_JUDGE_SYSTEM = "You are a helpful assistant."

REFERENCE = Protocol(
    name="reference",
    # ChatCompletionSampler(system_message=OPENAI_SYSTEM_MESSAGE_API, max_tokens=2048), temperature
    # left at the sampler's default 0.5: the gpt-4.1 entry of simple_evals.py's model table.
    answer=Generation(temperature=0.5, max_tokens=2048, system=API_SYSTEM_MESSAGE),
    # physician_completions_main's grading_sampler (healthbench_eval.py): same settings. The grader
    # sends this system message itself (the runner does not add one to judge calls).
    judge=Generation(temperature=0.5, max_tokens=2048, system=API_SYSTEM_MESSAGE),
    judge_model="openai/gpt-4.1-2025-04-14",
    extraction="grader reply read like parse_json_to_dict: fences off, json.loads, criteria_met a JSON bool; "
    "unreadable -> re-asked (--max-reask), then unknown",
    aggregation="example = met points / positive points (unclipped); metric = clip(mean, 0, 1), bootstrap std of "
    "1000 resamples; an example with an unknown criterion is unscored",
    source=HEALTHBENCH_EVAL.url,
    settings={
        "judge_modes": ["per-criterion"],
        "grader_prompt": "GRADER_TEMPLATE",
        "answer_text": "as returned",
    },
)
GRANDROUNDS = replace(
    ours(
        REFERENCE,
        judge=Generation(temperature=0.0, max_tokens=2048, system=OUR_JUDGE_SYSTEM),
        extraction="tolerant JSON reading (prose, fences, full-width punctuation, 'true' strings); batched replies "
        "keyed by id or listed in prompt order; reasoning traces stripped from the answer",
        aggregation="example scored over the criteria with a verdict (coverage reported); metric = clip(mean, 0, 1), "
        "seeded bootstrap",
    ),
    settings={
        "judge_modes": list(JUDGE_MODES),
        "grader_prompt": "healthbench_grader.txt / healthbench_batched.txt",
    },
)
BATCHED_IS_OURS = (
    "--judge-mode batched is grandrounds' own judging (one call listing every criterion); the reference "
    "protocol asks one call per criterion with the official prompt. Use --protocol grandrounds for batched judging"
)
#: The presets by name, as ``Benchmark.protocols`` holds them.
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
