"""CareQA open-ended's judged protocol, shared by its benchmark and its grader: the named peer's file
(Medmarks' ``careqa`` environment in mode ``open``, tmabraham/med-lm-envs @ 7ee0452), the text read
out of it at run time, our judge template, and the two presets.

Medmarks' judge answers four true/false questions about the answer against the reference
(``semantically_correct``, ``matches_details``, ``substantive_addition``, ``critical_error``) in XML
tags; the answer's reward is (correct + details + not addition + not error) / 4 (its ``accuracy``
function). Its XMLParser is built with the tag list in the same file, which names
``extraneous_information`` where the prompt asks for ``substantive_addition``: Medmarks' own figure
therefore always scores that term 0 (a missing tag is 0 there, inverted or not) and tops out at 0.75.
We read all four tags the prompt asks for (the formula as written); Medmarks' literal figure, read
with the parser's tag list taken from the file, is reported beside it.
"""

from __future__ import annotations

import ast
import re

from grandrounds.core.errors import DataError
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import MEDMARKS, read_text

#: environments/careqa/careqa.py: JUDGE_TEMPLATE, the open mode's default system prompt, the judge's XMLParser tags.
ENV = MEDMARKS.file(
    "environments/careqa/careqa.py",
    "c14a6bf56a4ecb1ba63ba17a8e74145e70fb55a7a158a8744bec51dadc2ddbd9",
)
OPEN_LOADER = "_load_open_ended_environment"
#: The four verdicts, and whether a "true" counts against the answer (Medmarks' ``invert=True``).
TAGS = {
    "semantically_correct": False,
    "matches_details": False,
    "substantive_addition": True,
    "critical_error": True,
}

#: Our judge prompt (the grandrounds protocol): the same four verdicts, asked our way.
OUR_JUDGE = (
    "You are a medical examiner grading a free-text answer to an exam question (Spanish specialised-healthcare "
    "exams: medicine, nursing, pharmacology, psychology, biology, chemistry) against the reference answer. The "
    "reference is correct but may be brief: do not penalise correct detail it lacks.\n\n"
    "<question>{question}</question>\n<reference_answer>{answer}</reference_answer>\n"
    "<assistant_answer>{response}</assistant_answer>\n\n"
    "Decide four things, each true or false:\n"
    "- semantically_correct: the answer states the reference's core claim (paraphrase and synonyms allowed).\n"
    "- matches_details: it also has every detail the question needs to match the reference exactly "
    "(false whenever semantically_correct is false).\n"
    "- substantive_addition: it adds claims beyond the question that could change whether it is judged correct "
    "(off-topic content, alternative answers); not definitions or supporting detail.\n"
    "- critical_error: it states something clearly false or unsafe.\n\n"
    "Think briefly inside <analysis></analysis>, then give each verdict as true or false in its own tag: "
    "<semantically_correct>...</semantically_correct> <matches_details>...</matches_details> "
    "<substantive_addition>...</substantive_addition> <critical_error>...</critical_error>"
)


def _open_loader() -> ast.FunctionDef:
    tree = ast.parse(read_text(ENV), filename=ENV.path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == OPEN_LOADER:
            return node
    raise DataError(ENV.url, None, f"no function {OPEN_LOADER!r} in the upstream file")


def candidate_system() -> str:
    """The open mode's default system prompt: the string after ``or`` in ``final_system_prompt = system_prompt or (...)``."""
    for node in ast.walk(_open_loader()):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "final_system_prompt" for t in node.targets)
            and isinstance(node.value, ast.BoolOp)
        ):
            last = node.value.values[-1]
            if isinstance(last, ast.Constant) and isinstance(last.value, str):
                return last.value
    raise DataError(
        ENV.url, None, f"no default system prompt in {OPEN_LOADER!r} in the upstream file"
    )


def parser_tags() -> tuple[str, ...]:
    """The tags Medmarks' judge parser reads: ``XMLParser(fields=[...])`` in the open mode's loader."""
    for node in ast.walk(_open_loader()):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "fields" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    return tuple(
                        e.value
                        for e in kw.value.elts
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    )
    raise DataError(
        ENV.url, None, f"no XMLParser(fields=...) in {OPEN_LOADER!r} in the upstream file"
    )


def answer_section(text: str) -> str:
    """Medmarks' ``extract_answer_section``: with both think tags, what follows the last ``</think>``; stripped."""
    if not text:
        return ""
    if "<think>" in text and "</think>" in text:
        return re.sub(r".*?</think>", "", text, flags=re.DOTALL).strip()
    return text.strip()


REFERENCE = Protocol(
    name="reference",
    # Medmarks fixes no candidate sampling (its runner's): greedy, 1,024 tokens (ours); system prompt read at run time.
    answer=Generation(temperature=0.0, max_tokens=1024),
    judge=Generation(
        temperature=0.0, max_tokens=2048
    ),  # its judge sampling helper is not in the pinned file: ours
    judge_model="openai/gpt-4o-mini",  # load_environment(judge_model="gpt-4o-mini")
    extraction="judge reply: the four XML verdict tags, each true when its text holds 'true' and not 'false' "
    "(Medmarks' parse_rubric_scores); a reply missing a tag -> re-asked (--max-reask), then unknown",
    aggregation="answer = (correct + details + (1 - addition) + (1 - critical error)) / 4, averaged over judges; "
    "benchmark = mean over answers with a known verdict; Medmarks' literal figure (its parser's tag list, "
    "unknown = 0) beside it",
    source=f"{ENV.repo}@{ENV.commit[:7]} {ENV.path} (mode open)",
    settings={
        "judge_prompt": "JUDGE_TEMPLATE",
        "system": f"{OPEN_LOADER} default system prompt",
        "reference_answer": "answer_explanation when the record has it, else answer (Medmarks' _map)",
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="our judge prompt; each tag read as true/false/yes/no (anything else: re-asked, "
    "then unknown)",
    settings={
        "judge_prompt": "ours",
        "system": "none",
        "reference_answer": "answer_explanation when the record has it, else answer",
    },
)
PROTOCOLS = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
