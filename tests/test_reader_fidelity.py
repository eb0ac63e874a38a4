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
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.headqa import HeadQA
from grandrounds.cli.main import app
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from tests.conftest import shared_file
from tests.official import load_official

FOUR_LETTERS = "ABCD"
PAIRS = [(a, b) for a in range(4) for b in range(4) if a != b]  # 12 ordered option pairs


def run_cli(
    tmp_path: Path,
    bench: str,
    data: Path,
    replies: Sequence[str],
    *extra: str,
    judge: Sequence[str] | None = None,
    codes: tuple[int, ...] = (0,),
) -> tuple[dict, list[dict]]:
    """``grandrounds run`` with a model giving ``replies`` in turn (and a judge giving ``judge`` in
    turn): results.json's result and every line of samples.jsonl. ``codes``: the exit codes allowed
    (3: a run most of whose answers are unscored, which the shapes may be on purpose)."""
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
    assert r.exit_code in codes, (r.output, r.exception)
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
            pair = (FOUR_LETTERS[a], FOUR_LETTERS[b])
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
            options = {k: f"option {k} of item {i}" for k in FOUR_LETTERS}
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
            for r in medmarks_shapes(
                list(FOUR_LETTERS), [f"Option text {k} {c}" for k in range(1, 5)]
            )
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


# ---- MedHallu: the last \boxed{} (verifiers v0.1.7.post0 extract_boxed_answer) ---------------------

MEDHALLU_SHAPES = (
    "\\boxed{{{a}}}",
    "\\boxed{{{a}}} no wait \\boxed{{{b}}}",
    "<think>\\boxed{{{a}}}</think>\\boxed{{{b}}}",
    "Judgement: {a}",
    "{a}",
    "\\boxed{{ {a} }}",
    "The answer is \\boxed{{{a}}}.",
    "\\boxed{{\\text{{{a}}}}}",
    "First \\boxed{{{a}}}, then \\boxed{{{b}",
    "\\boxed{{{a}}}\n\nHmm, \\boxed{{{b}}}?",
    "I cannot tell ({a} or {b}).",
    "\\boxed{{{a}{b}}}",
)


def test_medhallu_reads_the_last_boxed_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    boxed = load_official(
        "verifiers/verifiers/utils/data_utils.py", ["extract_boxed_answer"]
    ).extract_boxed_answer
    replies = list(
        dict.fromkeys(
            lead + t.format(a=a, b=b)
            for lead in ("", "Reasoning first.\n")
            for t in MEDHALLU_SHAPES
            for a in "012"
            for b in "012x"
        )
    )
    folder = shared_file("medhallu", "MedHallu_pqa_labeled", "train").parent
    _, lines = run_cli(
        tmp_path,
        "medhallu",
        folder,
        replies,
        "--protocol",
        "reference",
        "--limit",
        "400",
        codes=(0, 3),
    )
    disagree = []
    for ln in lines:
        pred = boxed(ln["response"])  # postprocess.py keeps it only when it is exactly 0, 1 or 2
        want = pred if pred in ("0", "1", "2") else None
        if ln["details"]["prediction"] != want:
            disagree.append((ln["response"], ln["details"]["prediction"], want))
    report("MedHallu reference (last \\boxed{})", len(lines), disagree)


# ---- Med-HALT: clean_output as it runs (its regex fallback), reasoning_fake_eval's rule -----------


def test_med_halt_reads_cop_as_clean_output_does_through_the_cli(tmp_path: Path) -> None:
    evaluate = load_whole("medhalt/evaluate.py", {"FullDataEval": object})
    full = load_official("medhalt/medhalt/eval/eval_full.py", ["FullDataEval"], {"tqdm": list})
    shapes = []
    for cop in ("I do not know", "Fiction", "Aspirin", "none of the above", "2"):
        for other in ("Acknowledge it", "Surgery", "I don't know"):
            shapes += [
                f"{{'cop': '{cop}', 'cop_index': 5, 'why_correct': 'x'}}",
                f"{{'cop': '{cop}, but {other}', 'cop_index': 3}}",
                f"{{'cop': '{other}'}} {{'cop': '{cop}'}}",
                f"Here's my answer: {{'cop': '{cop}', 'cop_index': 1}}",
                f'{{"cop": "{cop}", "cop_index": "4"}}',
                f"{{'cop': '{cop}', 'cop_index': 2}} Stop Here {{'cop': '{other}'}}",
                f"The answer is {cop}.",
                f"{{'cop' : \"{cop}\" , 'why': '{other}'}}",
                f"{{'cop': '{cop}'s {other}', 'cop_index': 0}}",
                f"{{'cop_index': 5, 'cop': '{cop}'",
                f"```\n{{'cop': '{cop}'}}\n```",
                f"{{\\'cop\\': \\'{cop}\\', \\'cop_index\\': 1}}",
                f"{{'why_correct': '{other}', 'cop': '{cop}'}}",
                f"{{'cop': {cop!r}}}\n{{'cop': '{other}', 'cop_index': 9}}",
            ]
    replies = list(dict.fromkeys(lead + r for lead in ("", "Sure.\n") for r in shapes))
    data = shared_file("med-halt", "reasoning_fake.csv").parent
    _, lines = run_cli(
        tmp_path, "med-halt", data, replies, "--protocol", "reference", "--limit", str(len(replies))
    )

    class Eval:  # FullDataEval's own reasoning_fake_eval over one sample
        correct_score, incorrect_score = 1, -0.25
        read_json = staticmethod(lambda samples: samples)
        create_dataframe = full.FullDataEval.create_dataframe
        handle_exceptions = full.FullDataEval.handle_exceptions
        calculate_score = full.FullDataEval.calculate_score

    disagree = []
    for ln in lines:
        sample = {"id": ln["sample_id"], "gpt_output": evaluate.clean_output(0, ln["response"])}
        ev = Eval()
        ev.all_files = {"fake": [sample]}  # type: ignore[attr-defined]
        df = full.FullDataEval.reasoning_fake_eval(ev, "fake", "reasoning_fake")
        want = 1.0 if int(df["correct"][0]) else 0.0 if int(df["wrong"][0]) else None
        if ln["score"] != want:
            disagree.append((ln["response"], ln["score"], want))
    report("Med-HALT reference (clean_output, reasoning_fake_eval)", len(lines), disagree)


# ---- SCT-Public: SCTParser on the chat completion it is given ------------------------------------


def test_sct_public_reads_as_sctparser_through_the_cli(tmp_path: Path) -> None:
    sct = load_official(
        "medmarks-envs-23fa6c5/environments/sctpublic/sctpublic/sctpublic.py",
        ["SCTParser"],
        {"vf": SimpleNamespace(Parser=object)},
    )
    parser = sct.SCTParser()
    shapes = []
    for r in ("+2", "+1", "0", "-1", "-2", "1", "2", "−1"):
        shapes += [
            f"Rating: {r}",
            f"Rating: \n\n{r}",
            f"Reasoning.\nRating: {r}",
            f"**Rating:** {r}",
            f"rating: {r}",
            f"Rating: {r} (I considered 0)",
            f"Rating:{r}",
            f"Rating: {r}\nRating: +1",
            f"Rating:  {r}",
            f"Rating: '{r}'",
            f"Rating: \t{r}",
            f'Rating: "{r}"',
            f"Rating: {r}.",
            f"The rating is {r}.",
        ]
    replies = list(
        dict.fromkeys(lead + r for lead in ("", "Weighing the new finding.\n") for r in shapes)
    )
    data = shared_file("sct-public", "sct_cleaned_full.csv").parent
    lines: list[dict] = []
    for part in range(0, len(replies), 174):  # 174 items a run
        d = tmp_path / f"part{part}"
        d.mkdir()
        lines += run_cli(
            d, "sct-public", data, replies[part : part + 174], "--protocol", "reference"
        )[1]
    disagree = []
    for ln in lines:
        got = parser.parse_answer([{"role": "assistant", "content": ln["response"]}])
        want = None if got is None else int(got)
        if ln["details"]["rating"] != want:
            disagree.append((ln["response"], ln["details"]["rating"], want))
    report("SCT-Public reference (SCTParser)", len(lines), disagree)


# ---- KorMedMCQA: lm-eval's chat path (stop[:4]) and ExtractChoiceFilter --------------------------


def test_kormedmcqa_reads_as_lm_eval_chat_path_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from tests.conftest import reference_file

    utils = load_official(
        "lm-eval/lm_eval/tasks/kormedmcqa/utils.py", ["CHOICE_PATTERNS", "extract_choice"]
    )
    mutils = load_official(
        "lm-eval/lm_eval/models/utils.py", ["handle_stop_sequences", "postprocess_generated_text"]
    )
    api = load_official(
        "lm-eval/lm_eval/models/openai_completions.py",
        ["LocalChatCompletion"],
        {
            "LocalCompletionsAPI": object,
            "handle_stop_sequences": mutils.handle_stop_sequences,
            "register_model": lambda *names: lambda cls: cls,
        },
    )

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    template = reference_file("lm-eval", "lm_eval", "tasks", "kormedmcqa", "_template_yaml")
    until = yaml.load(template.read_text(encoding="utf-8"), Loader=Loader)["generation_kwargs"][
        "until"
    ]  # noqa: S506
    payload = api.LocalChatCompletion._create_payload(
        SimpleNamespace(model="m", _max_gen_toks=256),
        [{"role": "user", "content": "q"}],
        gen_kwargs={"until": list(until)},
    )
    shapes = []
    for a, b in PAIRS:
        la, lb = "ABCDE"[a], "ABCDE"[b + 1 if b + 1 != a else 4]
        shapes += [
            f"정답: {la}",
            f"정답은 {la}입니다",
            f"{la}\n\n정답: {lb}",
            f"정답: {la}\n\n그러나 {lb}. 도 가능",
            f"{la}. 설명 {lb}",
            f"Q: {lb}\n정답: {la}",
            f"{la}</s>{lb}",
            f"{la}<|im_end|>정답: {lb}",
            f"설명\n\n{lb}가 아니라 {la}",
            f"정답은 {la}\n\n정답은 {lb}",
            f"{lb} 말고 {la}\n\n",
            f"답 {la}\n\n\n{lb}",
            f"({la})\n\n({lb})",
            f"정답 {la} 또는 {lb}",
            f"{la}\n\n",
            f"The answer is {la}\n\nnot {lb}",
            f"정답：{la}",
            f"{la} {lb}",
        ]
    replies = list(dict.fromkeys(lead + r for lead in ("", "풀이: ") for r in shapes))
    per_exam = len(replies) // 4 + 1
    for exam in ("doctor", "nurse", "pharm", "dentist"):
        (tmp_path / "kor" / exam).mkdir(parents=True)
        rows = [
            {
                "subject": exam,
                "year": 2023,
                "period": 1,
                "q_number": i,
                "question": f"{exam} 문제 {i}?",
                **{k: f"{exam} 선택지 {k}{i}" for k in "ABCDE"},
                "answer": 1 + i % 5,
                "cot": "",
            }
            for i in range(per_exam)
        ]
        pq.write_table(
            pa.Table.from_pylist(rows), tmp_path / "kor" / exam / "test-00000-of-00001.parquet"
        )
    _, lines = run_cli(tmp_path, "kormedmcqa", tmp_path / "kor", replies, "--protocol", "reference")
    disagree = []
    for ln in lines:
        text = mutils.postprocess_generated_text(ln["response"], payload["stop"], None)
        want = utils.extract_choice(text) or None
        if ln["extracted"] != want:
            disagree.append((ln["response"], ln["extracted"], want))
    report("KorMedMCQA reference (stop[:4], ExtractChoiceFilter)", len(lines), disagree)


# ---- MedicationQA / MedDialog: Medmarks' judge reading and figure ------------------------------------

JUDGE_SHAPES = (
    '{{"accuracy": {{"score": {a}}}, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}}',
    'Draft: {{"accuracy": {{"score": 1}}, "completeness": {{"score": 1}}, "clarity": {{"score": 1}}}}\n'
    'Final: {{"accuracy": {{"score": {a}}}, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}}',
    '{{"accuracy": {{"score": {a}}}, "completeness": {{"score": {b}}}}}',
    '{{"accuracy": null, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}}',
    '{{"accuracy": {{"score": "{a}"}}, "completeness": {{"score": " {b} "}}, "clarity": {{"score": {c}}}}}',
    '{{"accuracy": {a}, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}}',
    '```json\n{{"accuracy": {{"score": {a}, "explanation": "ok"}}, "completeness": {{"score": {b}}}, '
    '"clarity": {{"score": {c}}}}}\n```',
    '{{"accuracy": {{"score": {a}}}, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}} '
    "(scores in {{braces}})",
    '{{"accuracy": {{"score": true}}, "completeness": {{"score": {b}}}, "clarity": {{"score": {c}}}}}',
    "no JSON at all: {a}/{b}/{c}",
)


def test_medicationqa_judge_reading_and_medmarks_figure_through_the_cli(tmp_path: Path) -> None:
    env = load_official(
        "medmarks-envs/environments/medicationqa/medicationqa/medicationqa.py",
        ["JUDGE_DIMENSIONS", "_coerce_score", "_compute_normalized_reward"],
    )
    base = load_official(
        "verifiers/verifiers/parsers/parser.py", ["Parser"], {"Messages": Any, "ChatMessage": Any}
    ).Parser
    jp = load_whole(
        "medmarks-envs/REDACTED_verifiers/parsers/json_parser.py",
        {"Parser": base, "Messages": Any, "ChatMessage": Any},
    )
    parser = jp.JSONParser(fields=list(env.JUDGE_DIMENSIONS))

    def medmarks(reply: str) -> float:
        parsed = parser.parse(reply, strip=True)
        if parsed is None:
            parsed = {d: {"score": None} for d in env.JUDGE_DIMENSIONS}
        try:
            return env._compute_normalized_reward(parsed)
        except Exception:  # verifiers' rubric scores a raising reward function 0
            return 0.0

    verdicts = list(
        dict.fromkeys(
            t.format(a=a, b=b, c=c)
            for t in JUDGE_SHAPES
            for a, b, c in (
                (5, 4, 3),
                (1, 2, 5),
                (3, 3, 0),
                (4, 4, 4),
                (2, 5, 1),
                (6, -1, 3),
                (2.5, 3.5, 4.5),
                (1, 1, 2),
            )
        )
    )
    verdicts = [v + suffix for suffix in ("", "\n", "\nThanks.") for v in verdicts]
    data = shared_file("medicationqa", "MedInfo2019-QA-Medications.xlsx")
    _, lines = run_cli(
        tmp_path,
        "medicationqa",
        data,
        ["Ask your pharmacist."],
        "--protocol",
        "reference",
        "--limit",
        str(len(verdicts) + 10),
        judge=verdicts,
        codes=(0, 3),
    )
    disagree, scored = [], 0
    for ln in lines:
        if not ln["votes"]:
            continue  # no reference answer in the file: not judged
        raw = ln["votes"][0]["raw"]
        scored += 1
        if ln["details"]["medmarks_value"] != pytest.approx(medmarks(raw)):
            disagree.append((raw, ln["details"]["medmarks_value"], medmarks(raw)))
    report(
        "MedicationQA Medmarks figure (JSONParser, _compute_normalized_reward)", scored, disagree
    )


def test_metamedqa_reference_prompts_equal_medmarks_build_prompt(tmp_path: Path) -> None:
    """Every item of a 300-row file, empty option letters included ("E. None"), against the official
    ``_build_prompt`` on the same row."""
    import pyarrow.parquet as pq

    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.benchmarks.metamedqa import MetaMedQA

    official = load_official("medmarks-envs/environments/metamedqa/metamedqa.py", ["_build_prompt"])
    path = metamedqa_file(tmp_path, 300)
    rows = pq.read_table(path).to_pylist()
    bench = MetaMedQA()
    samples = bench.load(path)
    differ = [
        s.id
        for s, row in zip(samples, rows)
        if bench.prompt(s, RunOptions()).messages[-1].content
        != official._build_prompt(row["question"], row["options"])
    ]
    print(f"MetaMedQA: {len(samples) - len(differ)} of {len(samples)} prompts equal Medmarks'")
    assert len(samples) == 300 and not differ
