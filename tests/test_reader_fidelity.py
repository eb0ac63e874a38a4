"""Readings against their references, item by item, through the real CLI.

Each test writes at least 200 reply shapes, has a scripted model (or judge) give them through
``grandrounds run``, and reads back every sample of ``samples.jsonl``. Where a reference's code is
pinned, it is executed from its pinned file (tests/official.py) on the same reply and compared with
what the run recorded; where grandrounds' own reader is the reference, the shapes carry the reading
their wording states (a stated answer, its revision, or none when ambiguous). Each test prints its
disagreement count, and none is allowed.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.headqa import HeadQA
from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from tests.conftest import shared_file
from tests.official import load_official

LETTERS = "ABCD"
PAIRS = [(a, b) for a in range(4) for b in range(4) if a != b]  # 12 ordered option pairs


def run_cli(
    tmp_path: Path,
    bench: str,
    data: Path,
    replies: Sequence[str],
    *extra: str,
    judge: Sequence[str] | None = None,
) -> tuple[dict, list[dict]]:
    """``grandrounds run`` with a model giving ``replies`` in turn (and a judge giving ``judge`` in
    turn): results.json's result and every line of samples.jsonl."""
    answers, verdicts = itertools.cycle(replies), itertools.cycle(judge or ["-"])

    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=lambda req: next(answers), **options)

    class Judge(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=lambda req: next(verdicts), **options)

    out = tmp_path / "out"
    args = ["run", bench, "--data", str(data), "--model", "fidbot/x"]
    args += ["--store", str(tmp_path / "s.db"), "--out", str(out), *extra]
    if judge is not None:
        args += ["--judge", "fidjudge/j", "--max-reask", "0"]
    with PROVIDERS.registered("fidbot", Bot), PROVIDERS.registered("fidjudge", Judge):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]
    lines = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x.strip()]
    return result, lines


def report(name: str, total: int, disagree: list[Any]) -> None:
    print(f"{name}: {len(disagree)} of {total} replies disagree with the reference")
    assert total >= 200, f"{name}: only {total} reply shapes"
    assert not disagree, disagree[:5]


# ---- grandrounds' own reader: the last stated answer, revisions, ambiguity ------------------------

# (template, which of the pair it states: 0 the first, 1 the revision, None ambiguous)
OWN_SHAPES: tuple[tuple[str, int | None], ...] = (
    ("Answer: {a}\n\nWait, actually the answer is {b}.", 1),
    ("Answer: {a} ... Wait, actually the answer is {b}.", 1),
    ("Answer: {a} … Wait, actually the answer is {b}.", 1),
    ("The answer is {a}. Hmm, on second thought, the answer is {b}.", 1),
    ("Final answer: {a}. Actually, no, the answer is {b}.", 1),
    ("**Answer: {a}**\n\nWait, the correct answer is **{b}**.", 1),
    ("答案：{a}。等等，实际上答案是{b}。", 1),
    ("答案：{a}\n不对，答案应该是{b}。", 1),
    ("答案是{a}……等等，其实答案是{b}。", 1),
    ("正确答案：{a}。更正：正确答案是{b}。", 1),
    ("정답: {a}. 잠깐, 사실 정답은 {b}입니다.", 1),
    ("정답은 {a}입니다.\n아니, 정답은 {b}입니다.", 1),
    ("Answer: {a}", 0),
    ("Answer: {a}. Why not {b}? Because answer: {b} would cause bleeding.", 0),
    ("答案：{a}", 0),
    ("정답은 {a}입니다.", 0),
    ("Answer: {a} or {b}", None),
    ("答案：{a}或{b}", None),
)


def own_shapes() -> list[tuple[str, str | None]]:
    """(reply, the letter it states) for every template and ordered pair of letters."""
    out = []
    for template, which in OWN_SHAPES:
        for a, b in PAIRS:
            pair = (LETTERS[a], LETTERS[b])
            out.append(
                (template.format(a=pair[0], b=pair[1]), None if which is None else pair[which])
            )
    return out


def test_own_reader_takes_the_last_stated_answer_through_the_cli(tmp_path: Path) -> None:
    shapes = own_shapes()
    data = tmp_path / "exam"
    data.mkdir()
    with open(data / "demo_exam.jsonl", "w", encoding="utf-8") as f:
        for i in range(len(shapes)):
            options = {k: f"option {k} of item {i}" for k in LETTERS}
            row = {"question": f"Item {i}: which option?", "options": options, "answer_idx": "A"}
            f.write(json.dumps(row | {"answer": options["A"], "meta_info": "x"}) + "\n")
    _, lines = run_cli(tmp_path, "demo", data, [s for s, _ in shapes], "--protocol", "grandrounds")
    intended = dict(shapes)
    assert {ln["response"] for ln in lines} == set(intended)
    disagree = [
        (ln["response"], ln["extracted"], intended[ln["response"]])
        for ln in lines
        if ln["extracted"] != intended[ln["response"]]
    ]
    report("our reader (demo, grandrounds)", len(lines), disagree)


# ---- HEAD-QA: the number a reply states (grandrounds) ---------------------------------------------

NUMBER_SHAPES: tuple[tuple[str, int | None], ...] = (
    ("The answer is ({a}). Option {b} is incorrect.", 0),
    ("La respuesta correcta es la {a}", 0),
    ("La respuesta correcta es la opción {a}. La opción {b} es incorrecta.", 0),
    ("Answer: {a}. Wait, actually the answer is {b}.", 1),
    ("Respuesta: {a}\nRespuesta final: {b}", 1),
    ("Option {b} is tempting, but the answer is {a}.", 0),
    ("Option {a} is best.", 0),
    ("Answer: {a} or {b}", None),
    ("\\boxed{{{a}}}", 0),
    ("**Answer:** ({a}); option {b} is a distractor.", 0),
    ("<answer>{a}</answer>", 0),
    ("Option {b} is not correct; option {a} is.", 0),
    ("I think {a} or {b}", None),
    ("Answer: {a}\nOption {b} is wrong.", 0),
    ("La respuesta es {a} o {b}", None),
    ("{a}", 0),
    ("The answer is option {a}, not {b}.", 0),
    ("Respuesta: {a}. Espera, en realidad la respuesta es {b}.", 1),
    ("Answer: {a} (option {b} was my first thought).", 0),
    ("The correct option is {a}; {b} is a distractor.", 0),
    ("Final answer: {a}\nNote: option {b} is wrong.", 0),
)


def number_shapes() -> list[tuple[str, int | None]]:
    out = []
    for template, which in NUMBER_SHAPES:
        for a, b in PAIRS:
            pair = (a + 1, b + 1)
            out.append(
                (template.format(a=pair[0], b=pair[1]), None if which is None else pair[which])
            )
    return out


def headqa_keys() -> dict[str, tuple[dict[str, str], str]]:
    return {s.id: (dict(s.choices), s.target) for s in HeadQA().load(shared_file("head-qa"))}


def test_headqa_number_reading_through_the_cli(tmp_path: Path) -> None:
    shapes = dict(number_shapes())
    replies = list(dict.fromkeys(shapes))
    _, lines = run_cli(
        tmp_path,
        "head-qa",
        shared_file("head-qa"),
        replies,
        "--protocol",
        "grandrounds",
        "--limit",
        str(len(replies)),
    )
    keys = headqa_keys()
    disagree = []
    for ln in lines:
        choices, _ = keys[ln["sample_id"]]
        want = shapes[ln["response"]]
        got = ln["extracted"]
        number = list(choices).index(got) + 1 if got else None
        if number != want:
            disagree.append((ln["response"], number, want))
    report("HEAD-QA number reading (grandrounds)", len(lines), disagree)


# ---- Medmarks' reading, executed from the pinned files ----------------------------------------------


def load_whole(relpath: str, extra: dict[str, Any] | None = None) -> Any:
    """Every top-level function, class and constant of a pinned file (tests/official.py) but those
    ``extra`` stands in for (a dataclass cannot be made in a namespace that is not a module)."""
    import ast

    from tests.conftest import reference_file

    tree = ast.parse(reference_file(*relpath.split("/")).read_text(encoding="utf-8"))
    names = [
        n.name if hasattr(n, "name") else n.targets[0].id  # type: ignore[attr-defined]
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        or (
            isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
        )
    ]
    return load_official(relpath, [n for n in names if n not in (extra or {})], extra)


def medmarks_official() -> tuple[Callable[..., bool], Any, Callable[[str], str]]:
    """multiple_choice_accuracy (Medmarks), verifiers' XMLParser and extract_boxed_answer (v0.1.7.post0)."""
    mca = load_whole(
        "medmarks-envs/REDACTED_verifiers/rewards/multiple_choice_accuracy.py",
        {"MCQAccuracyResult": object},  # only built with return_details, never asked for here
    ).multiple_choice_accuracy
    parser = load_official(
        "verifiers/verifiers/parsers/parser.py", ["Parser"], {"Messages": Any, "ChatMessage": Any}
    ).Parser
    xml = load_official(
        "verifiers/verifiers/parsers/xml_parser.py",
        ["XMLParser"],
        {"Parser": parser, "Messages": Any, "ChatMessage": Any},
    ).XMLParser
    boxed = load_official(
        "verifiers/verifiers/utils/data_utils.py", ["extract_boxed_answer"]
    ).extract_boxed_answer
    return mca, xml, boxed


def xml_official(xml_parser: Any, reply: str) -> str:
    """What a Medmarks XML environment grades: parse_answer over the chat completion, or ""."""
    completion = [{"role": "assistant", "content": reply}]
    return xml_parser.parse_answer(completion) or ""


def medmarks_shapes(labels: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Replies in and out of Medmarks' formats, naming options by label or by text."""
    out = []
    for a, b in PAIRS:
        la, lb, ta = labels[a], labels[b], texts[a]
        out += [
            f"<answer>{la}</answer>",
            f"Reasoning.\n<answer>{la}</answer>\nOn reflection <answer>{lb}</answer>",
            f"<think>Maybe {lb}.</think>\n<answer>{la}</answer>",
            f"<answer>The answer is {la}</answer>",
            f"<answer>{ta}</answer>",
            f"Answer: {la}",
            f"\\boxed{{{la}}}",
            f"\\boxed{{{lb}}} at first, finally \\boxed{{{la}}}",
            f"The answer is {la}. Option {lb} is incorrect.",
            f"{la}. {ta}",
            f"I think it is {ta}.",
            f"Not {la}; the answer is {lb}.",
            f"Between {la} and {lb}, 50% sure it is {la}",
            f"{la} or {lb}",
            "I cannot tell.",
            f"So the answer is **{la}**",
            f"<answer>\n{la}\n</answer>",
            f"Answer: ({la.lower()})",
            f"Therefore, {la}.",
            f"Final answer: {la}\n\nWait, actually the answer is {lb}.",
        ]
    return list(dict.fromkeys(out))


def numbered_options(prompt: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(\d+)\. (.*)$", prompt, re.M)][-4:]


def test_headqa_reference_reads_as_medmarks_through_the_cli(tmp_path: Path) -> None:
    mca, xml, _ = medmarks_official()
    parser = xml(fields=["answer"], answer_field="answer")
    rows = HeadQA().load(shared_file("head-qa"))
    replies = []
    for s in rows[:20]:
        replies += medmarks_shapes(["1", "2", "3", "4"], [t.strip() for t in s.choices.values()])
    replies = list(dict.fromkeys(replies))[:400]
    _, lines = run_cli(
        tmp_path,
        "head-qa",
        shared_file("head-qa"),
        replies,
        "--protocol",
        "reference",
        "--limit",
        str(len(replies)),
    )
    keys = headqa_keys()
    disagree = []
    for ln in lines:
        choices, target = keys[ln["sample_id"]]
        number = list(choices).index(target) + 1
        want = mca(
            llm_answer=xml_official(parser, ln["response"]),
            answer_letter=str(number),
            answer_text=choices[target].strip(),
        )
        if float(want) != ln["score"]:
            disagree.append((ln["response"], ln["score"], want))
    report("HEAD-QA reference (Medmarks XML + multiple_choice_accuracy)", len(lines), disagree)


def careqa_file(root: Path, n: int) -> Path:
    rows = [
        {
            "question": f"Question {i}: which is right?",
            **{f"op{k}": f"Option text {k} {chr(97 + i % 26)}" for k in range(1, 5)},
            "cop": 1 + i % 4,
            "year": 2020 + i % 5,
            "category": ["medicine", "nursing"][i % 2],
            "unique_id": f"u{i}",
            "exam_id": i,
        }
        for i in range(n)
    ]
    path = root / "CareQA_en.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def metamedqa_file(root: Path, n: int) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = []
    for i in range(n):
        texts = [f"Choice {k} of {i}" for k in range(4 + i % 3)]
        options = {L: (texts[j] if j < len(texts) else None) for j, L in enumerate("ABCDEF")}
        key = "ABCD"[i % 4]
        rows.append(
            {
                "question": f"Item {i}?",
                "options": options,
                "answer": options[key],
                "answer_idx": key,
                "kind": "plain",
                "meta_info": "",
            }
        )
    path = root / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize(
    "bench, fmt", [("careqa-mc", "boxed"), ("metamedqa", "plain"), ("supergpqa-medicine", "boxed")]
)
def test_medmarks_letter_exams_read_as_medmarks_through_the_cli(
    tmp_path: Path, bench: str, fmt: str
) -> None:
    from grandrounds.core.registry import BENCHMARKS

    mca, _, boxed = medmarks_official()
    replies = list(
        dict.fromkeys(
            lead + r
            for lead in ("", "Let me think it through.\n\n")
            for c in "ab"
            for r in medmarks_shapes(list(LETTERS), [f"Option text {k} {c}" for k in range(1, 5)])
        )
    )
    n = len(replies)
    if bench == "careqa-mc":
        data = careqa_file(tmp_path, n)
    elif bench == "metamedqa":
        data = metamedqa_file(tmp_path, n)
    else:
        data = tmp_path / "SuperGPQA-all.jsonl"
        with open(data, "w", encoding="utf-8") as f:
            for i in range(n):
                options = [f"Option text {k} a" for k in range(1, 5)]
                row = {
                    "uuid": f"s{i}",
                    "question": f"Question s{i}?",
                    "options": options,
                    "answer": options[i % 4],
                    "answer_letter": "ABCD"[i % 4],
                    "discipline": "Medicine",
                    "field": "Clinical Medicine",
                    "subfield": "Internal Medicine",
                    "difficulty": "easy",
                    "is_calculation": False,
                }
                f.write(json.dumps(row) + "\n")
    samples = {s.id: s for s in BENCHMARKS.get(bench)().load(data)}
    _, lines = run_cli(tmp_path, bench, data, replies, "--protocol", "reference")
    assert len(lines) == n
    disagree = []
    for ln in lines:
        s = samples[ln["sample_id"]]
        parsed = boxed(ln["response"]) if fmt == "boxed" else ln["response"]
        want = mca(llm_answer=parsed, answer_letter=s.target, answer_text=s.choices[s.target])
        if float(want) != ln["score"]:
            disagree.append((ln["response"], ln["score"], want))
    report(f"{bench} reference (Medmarks {fmt} + multiple_choice_accuracy)", n, disagree)
