"""LLMEval-Med's protocol, shared by its benchmark and its grader: the official scripts (llmeval/LLMEval-Med
at a pinned commit: answering, judge prompts and score parse, aggregation), the constants they fix,
and the two presets (``reference``, ``grandrounds``)."""

from __future__ import annotations

from collections.abc import Mapping

from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import UpstreamRepo

LLMEVAL_MED = UpstreamRepo(
    "llmeval-med", "llmeval/LLMEval-Med", "508516fafd288c896691442d657b4af619609535"
)
COMMIT, _REPO = LLMEVAL_MED.commit, LLMEVAL_MED.repo
#: The official scripts: judge prompts and score parse, aggregation, answering.
EVALUATE = LLMEVAL_MED.file(
    "evaluate/Evaluate.py",
    "3d5a3165940a5476ec56ef2989d570a3edec21414f23d5677f005bc3890002c9",
)
AGGREGATE = LLMEVAL_MED.file(
    "evaluate/Aggregate.py",
    "5a139fb5aac164ee8368b0e9c6b1753b848fde64deb04d87d13cf4e1bec69ead",
)
ANSWER = LLMEVAL_MED.file(
    "evaluate/Answer.py",
    "68ff385b61ad7a5f0e94a4f5dbde6264d5abdc7ccbf4c04b1c5f8241f0f54a7c",
)
DEFAULT_JUDGE_RUNS = 3  # the paper averages three judge runs

#: Category key in dataset.json -> short code (paper Table 2; Aggregate.py CATEGORY_CODES).
CATEGORY_CODES: Mapping[str, str] = {
    "医疗知识": "MK",
    "医疗语言理解": "MLU",
    "医疗推理": "MR",
    "医疗安全伦理": "MSE",
    "医疗文本生成": "MTG",
}
USABLE_THRESHOLD = 4.0  # Aggregate.py USABILITY_THRESHOLD
SYSTEM_PROMPT = (
    "You are a helpful assistant."  # Answer.py getresponse / Evaluate.py getresponse system message
)

REFERENCE = Protocol(
    name="reference",
    # Answer.py: pipeline(..., max_new_tokens=2048, do_sample=True) with no temperature or top_p, so
    # the model's own generation config decides; 1.0 is the default of transformers and of the
    # OpenAI API (transformers' default top_k=50 has no OpenAI-API counterpart).
    answer=Generation(temperature=1.0, max_tokens=2048, system=SYSTEM_PROMPT),
    # Evaluate.py: client.chat.completions.create(model="gpt-4o", messages=[system, user]) with no
    # temperature or max_tokens: the API defaults, temperature 1.0 and gpt-4o's output limit.
    judge=Generation(temperature=1.0, max_tokens=16384),
    judge_model="openai/gpt-4o",
    extraction="Evaluate.py: first [digits] of the stripped judge reply, kept if Aggregate.parse_score reads a number in [0, 5]; no re-ask",
    aggregation="Aggregate.py: mean of a question's valid run scores, usable if >= 4.0; rate = 100 x usable / every question",
    source=f"https://github.com/{_REPO}/tree/{COMMIT}/evaluate",
    settings={
        "judge_prompts": "Evaluate.py getresponse prompt_<category>, read from the pinned file",
        "judge_system": SYSTEM_PROMPT,
        "files": [f.describe() for f in (ANSWER, EVALUATE, AGGREGATE)],
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    answer=Generation(temperature=0.0, max_tokens=1024, system=SYSTEM_PROMPT),
    extraction="first [n], 【n】 or ［n］ after reasoning traces, 1..5 only; unreadable replies re-asked (--max-reask), then unknown",
    aggregation="usable share among answers with a valid score; answers with none are unscored (reported), not unusable",
)

#: The presets by name, as ``Benchmark.protocols`` holds them.
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
