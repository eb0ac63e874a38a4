"""MedEQBench's protocol, shared by its benchmark and its grader: the official files (AQ-MedAI/MedEQBench at
a pinned commit: judge prompt and evaluator, line parser and arithmetic, run configuration) and the
two presets (``reference``, ``grandrounds``)."""

from __future__ import annotations

from dataclasses import replace

from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import TextRef, UpstreamRepo

MEDEQBENCH = UpstreamRepo(
    "medeqbench", "AQ-MedAI/MedEQBench", "8a3a047d48e6ab49e3a263cc06c07c3787d0fb87"
)
COMMIT, REPOSITORY = MEDEQBENCH.commit, MEDEQBENCH.repo

#: The official files: the judge prompt and evaluator; the line parser, arithmetic
#: and judge call; the run configuration (candidate model and settings).
EVALUATOR = MEDEQBENCH.file(
    "Health_EQBench/Health_EQBench.py",
    "b85ec70eb4f6c0654b7577bb9788259240b48e014ab55ec2eb44ecda462478b2",
)
UTILS = MEDEQBENCH.file(
    "Health_EQBench/utils.py",
    "7d1d9a095f936b183be5e75d1a7b33103c136ac75a38051fc6771bd9b8de6192",
)
CONFIG = MEDEQBENCH.file(
    "configs/examples_config.py",
    "b22a5e1e4882265026626ff09fb2702948e1875b99615f37d31e5d116078ce67",
)
#: The official judge prompt (a module-level constant of Health_EQBench.py, filled by str.format).
EVALUATE_PROMPT = TextRef(EVALUATOR, "evaluate_prompt")

REFERENCE = Protocol(
    name="reference",
    # configs/examples_config.py: models=[dict(type=OpenAI, path='gpt-4.1', max_out_len=16384, temperature=0.7)]
    # and the inferencer's max_out_len=1024 * 16; the prompt is the bare question as one HUMAN turn
    # (no system message); no top_p is set.
    answer=Generation(temperature=0.7, max_tokens=16384),
    # utils.py: evaluate_score -> llm_infer(prompt, EVAL_MODEL_NAME='gpt-4.1', max_tokens=8192,
    # temperature=0.0) -> openai_api_infer_stream(..., top_p=1), the prompt as one user message.
    judge=Generation(temperature=0.0, max_tokens=8192, top_p=1.0),
    judge_model="openai/gpt-4.1",
    extraction="utils.py parse_llm_evaluation's line pattern on the raw reply (ASCII ':' and '| Reason: … |' required); every line counts; no re-ask",
    aggregation="utils.py calc_score_percent_one_query per question (missing items count 0); Health_EQBench.py: plain mean over answers, a failed or unreadable judge reply counting 0",
    source=f"https://github.com/{REPOSITORY}/tree/{COMMIT}",
    settings={
        "judge_prompt": "Health_EQBench.py evaluate_prompt, read from the pinned file",
        "answer_to_judge": "as returned (the official reasoning stripper is not called)",
        "items": "utils.py parse_rubric (drops rows 72 and 399 item 6); dimensions by its jieba + TF-IDF mapping, tabulated",
        "files": [f.describe() for f in (CONFIG, EVALUATOR, UTILS)],
    },
)
GRANDROUNDS = replace(
    ours(
        REFERENCE,
        extraction="tolerant line reader (full-width punctuation and digits, missing Reason, quoted 0/1, reasoning removed); first line per item; missing items re-asked, then unknown",
        aggregation="question score over items with a known verdict; answers with no known positive item unscored; mean over scored answers",
    ),
    settings={
        "judge_prompt": "templates/medeq_judge.txt",
        "answer_to_judge": "reasoning traces removed",
    },
)

#: The presets by name, as ``Benchmark.protocols`` holds them.
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
