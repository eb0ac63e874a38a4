"""The checks on an exam record's options (benchmarks/readers/exam_options.py), written once and used
by every exam that reads the formats: a real record passes unchanged; each fault is one line naming
the file, the record and what was wrong; and MedQA, MedAgentsBench and MMLU-Pro, which share the
MedQA JSON Lines format, refuse the same fault with the same words."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.medagentsbench import MedAgentsBench
from grandrounds.benchmarks.medqa import MedQA, iter_medqa_format
from grandrounds.benchmarks.mmlu_pro import MMLUProHealth
from grandrounds.benchmarks.readers.exam_options import (
    check_options,
    medqa_format_options,
    numbered_key,
    options_from_list,
)
from grandrounds.core.choices import LETTERS, lettered, lettered_in_order
from grandrounds.core.errors import DataError
from tests.conftest import medqa_records, shared_file, write_jsonl

TEN = {k: f"option {k}" for k in LETTERS}


def test_the_letters_and_their_helpers() -> None:
    assert LETTERS == "ABCDEFGHIJ"
    assert lettered(["x", "y", "z"]) == {"A": "x", "B": "y", "C": "z"}
    assert lettered_in_order("ABC") and lettered_in_order(["A", "B"])
    assert not lettered_in_order("ACB") and not lettered_in_order("BC")
    assert not lettered_in_order(["AB", "C"]) and not lettered_in_order(["A", 2])


def test_real_medqa_records_pass_as_they_are_and_key_order_does_not_matter() -> None:
    path = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    for no, rec in enumerate(medqa_records(50), 1):
        options, key = medqa_format_options(path, no, rec)
        assert options == rec["options"] and list(options) == ["A", "B", "C", "D"]
        assert key == rec["answer_idx"] and options[key] == rec["answer"]
        backwards = rec | {"options": dict(reversed(list(rec["options"].items())))}
        assert medqa_format_options(path, no, backwards) == (options, key)


def test_real_mmlu_pro_and_medagentsbench_records_pass() -> None:
    files = [
        shared_file("mmlu-pro-health", "test.jsonl"),
        shared_file("medagentsbench", "data", "medqa", "test_hard.jsonl"),
        shared_file("medagentsbench", "data", "mmlu-pro", "test_hard.jsonl"),
    ]
    sizes = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                rec = json.loads(line)
                options, key = medqa_format_options(path, no, rec)
                assert list(options) == sorted(rec["options"]) and key == rec["answer_idx"]
                sizes.add(len(options))
    assert min(sizes) >= 2 and max(sizes) == 10  # MMLU-Pro goes up to J


def _set(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.__setitem__(field, value)


#: A fault planted in a real MedQA record -> the words of its one-line error.
FAULTS = [
    (_set("options", ["a", "b"]), "field 'options' must map 2 to 10 letters to option texts"),
    (_set("options", {"A": "only"}), "field 'options' must map 2 to 10 letters to option texts"),
    (
        _set("options", TEN | {"K": "eleventh"}),
        "field 'options' must map 2 to 10 letters to option texts",
    ),
    (
        _set("options", {"A": "x", "B": "y", "D": "z"}),
        "options must be non-empty texts under letters A.. (got 'ABD')",
    ),
    (
        _set("options", {"A": "x", "B": "  ", "C": "z"}),
        "options must be non-empty texts under letters A.. (got 'ABC')",
    ),
    (
        _set("options", {"A": "x", "B": 7, "C": "z"}),
        "options must be non-empty texts under letters A.. (got 'ABC')",
    ),
    (_set("answer_idx", "E"), "answer_idx 'E' is not one of the options ABCD"),
    (_set("answer_idx", "AB"), "answer_idx 'AB' is not one of the options ABCD"),
    (_set("answer", "something else"), "answer text disagrees with answer_idx"),
]


@pytest.mark.parametrize("fault, words", FAULTS, ids=[w for _, w in FAULTS])
def test_each_fault_is_one_line_naming_file_record_and_fault(
    tmp_path: Path, fault: Callable[[dict[str, Any]], None], words: str
) -> None:
    rows = medqa_records(3)
    fault(rows[1])
    path = write_jsonl(tmp_path / "phrases_no_exclude_test.jsonl", rows)
    with pytest.raises(DataError) as e:
        list(iter_medqa_format(MedQA(), path))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}, line 2: ") and words in msg


@pytest.mark.parametrize("fault, words", FAULTS, ids=[w for _, w in FAULTS])
def test_medqa_medagentsbench_and_mmlu_pro_refuse_a_fault_alike(
    tmp_path: Path, fault: Callable[[dict[str, Any]], None], words: str
) -> None:
    rec = medqa_records(1)[0] | {"realidx": 7, "category": "health", "src": "ori_mmlu-virology"}
    fault(rec)
    medqa = write_jsonl(tmp_path / "medqa" / "phrases_no_exclude_test.jsonl", [rec])
    agents = write_jsonl(tmp_path / "agents" / "medqa" / "test_hard.jsonl", [rec])
    pro = write_jsonl(tmp_path / "pro" / "test.jsonl", [rec])
    problems = []
    for path, read in [
        (medqa, lambda: MedQA().load(medqa.parent)),
        (agents, lambda: MedAgentsBench(sources="medqa").load(agents.parent.parent)),
        (pro, lambda: MMLUProHealth(shots=0).load(pro.parent)),
    ]:
        with pytest.raises(DataError) as e:
            read()
        assert e.value.path == str(path) and e.value.where == 1
        problems.append(e.value.problem)
    assert len(set(problems)) == 1 and words in problems[0]


def test_mmlu_pro_still_refuses_its_padding(tmp_path: Path) -> None:
    rec = {
        "realidx": 1,
        "question": "Which nerve?",
        "options": {"A": "Ulnar", "B": "N/A", "C": "Radial"},
        "answer_idx": "A",
        "answer": "Ulnar",
        "category": "health",
        "src": "ori_mmlu-anatomy",
    }
    write_jsonl(tmp_path / "test.jsonl", [rec])
    with pytest.raises(DataError, match=r"test\.jsonl, line 1: an option text is N/A"):
        MMLUProHealth(shots=0).load(tmp_path)


@pytest.mark.parametrize(
    "options, key, field, words",
    [
        ({"A": "x"}, "A", "key", "options must be two or more, lettered A.. in order (got 'A')"),
        ({"A": "x", "C": "y"}, "A", "key", "lettered A.. in order (got 'AC')"),
        ({"B": "x", "A": "y"}, "A", "key", "lettered A.. in order (got 'BA')"),
        ({"A": "x", "B": ""}, "A", "key", "an option text is empty"),
        ({"A": "x", "B": "y"}, "C", "label", "label 'C' is not one of the options AB"),
        ({"A": "x", "B": "y"}, ["A"], "answer_idx", "answer_idx ['A'] is not one of the options"),
    ],
)
def test_check_options(options: dict[str, str], key: Any, field: str, words: str) -> None:
    check_options(Path("f.jsonl"), 3, {"A": "x", "B": "y"}, "B", field)  # a good one passes
    with pytest.raises(DataError) as e:
        check_options(Path("f.jsonl"), 3, options, key, field)
    assert str(e.value).startswith("f.jsonl, line 3: ") and words in str(e.value)


def test_options_from_list() -> None:
    assert options_from_list(Path("f"), "row 2", ["x", "y"]) == {"A": "x", "B": "y"}
    assert list(options_from_list(Path("f"), 1, [str(i) for i in range(10)])) == list(LETTERS)
    for bad, words in [
        ("x, y", "field 'options' must be a list of 2 to 10 option texts"),
        (["x"], "must be a list of 2 to 10"),
        ([str(i) for i in range(11)], "must be a list of 2 to 10"),
        (["x", " "], "an option text is empty or not text"),
        (["x", None], "an option text is empty or not text"),
    ]:
        with pytest.raises(DataError, match=rf"^f, row 2: .*{words}"):
            options_from_list(Path("f"), "row 2", bad)


def test_numbered_key() -> None:
    """An option named by its 1-based number (MedMCQA's and CareQA's ``cop``, KorMedMCQA's
    ``answer``): an integer or its digits, the letter returned."""
    assert [numbered_key(Path("f"), 1, "cop", v, 4) for v in (1, "2", " 3 ", 4)] == list("ABCD")
    assert numbered_key(Path("f"), 1, "answer", 5, 5) == "E"
    for bad in (0, 5, "5", True, 2.0, "2.0", "", None, "B", -1):
        with pytest.raises(DataError) as e:
            numbered_key(Path("f"), "record 7", "cop", bad, 4)
        assert str(e.value) == (
            f"f, record 7: 'cop' must name an option by its number 1 to 4, got {bad!r}"
        )
