"""The multiple-choice layer: answer extraction, shuffling, prompts per mode, grading, aggregation."""

from __future__ import annotations

import asyncio

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.graders.choice_extract import extract_choice
from grandrounds.graders.mcq_grader import permutation, shuffle_choices, to_original
from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext
from grandrounds.records import Grade, Response, Sample
from tests.grading import grade_answer
from grandrounds.stats import wilson_ci

ABCD = "ABCD"
MEDQA_CHOICES = {
    "A": "Disclose the error to the patient and put it in the operative report",
    "B": "Tell the attending that he cannot fail to disclose this mistake",
    "C": "Report the physician to the ethics committee",
    "D": "Refuse to dictate the operative report",
}
YNM = {"A": "yes", "B": "no", "C": "maybe"}
ZH = {"A": "小叶型肺炎", "B": "浸润性肺结核", "C": "继发性肺结核", "D": "原发性肺结核", "E": "粟粒型肺结核"}

# (reply, letters, choices, multi, expected)
EXTRACTION_CASES = [
    ("The answer is (B)", ABCD, None, False, "B"),
    ("答案：B", ABCD, None, False, "B"),
    ("**B**", ABCD, None, False, "B"),
    ("b)", ABCD, None, False, "B"),
    ("Answer: b", ABCD, None, False, "B"),
    ("B", ABCD, None, False, "B"),
    ("(C).", ABCD, None, False, "C"),
    ("Ｂ", ABCD, None, False, "B"),
    ("答案：Ｄ。", "ABCDE", ZH, False, "D"),
    ("<think>The answer is A, surely.</think>\nThe answer is C.", ABCD, None, False, "C"),
    ("<think>long reasoning about B</think>D", ABCD, None, False, "D"),
    ("Let me reason. Option A is wrong because... Final answer: **D**", ABCD, None, False, "D"),
    ("**Answer:** C", ABCD, None, False, "C"),
    ("The correct option is A.", ABCD, None, False, "A"),
    ("Final answer: \\boxed{C}", ABCD, None, False, "C"),
    ("B. Tell the attending that he cannot fail to disclose this mistake", ABCD, MEDQA_CHOICES, False, "B"),
    ("Tell the attending that he cannot fail to disclose this mistake.", ABCD, MEDQA_CHOICES, False, "B"),
    ("The answer is: Report the physician to the ethics committee", ABCD, MEDQA_CHOICES, False, "C"),
    ("Yes.", "ABC", YNM, False, "A"),
    ("The answer is maybe, since the evidence is mixed.", "ABC", YNM, False, "C"),
    ("B\nBecause the tendon injury must be disclosed.", ABCD, None, False, "B"),
    ("本题选B，因为……", ABCD, None, False, "B"),
    ("答案是原发性肺结核", "ABCDE", ZH, False, "D"),
    ("正确选项为AC", "ABCDE", None, True, "AC"),
    ("答案：A、C、E", "ABCDE", None, True, "ACE"),
    ("答案应该是 D，B", "ABCDE", None, True, "BD"),
    ("The answers are A and C.", "ABCDE", None, True, "AC"),
    ("CA", "ABCDE", None, True, "AC"),
    ("Initially I thought the answer is A, but on reflection the answer is B.", ABCD, None, False, "B"),
    # negatives: no answer, out of range, ambiguous, or an article rather than a letter
    ("", ABCD, None, False, None),
    ("I don't know.", ABCD, None, False, None),
    ("The answer is E.", ABCD, None, False, None),
    ("The answer is a bit unclear from the vignette.", ABCD, None, False, None),
    ("It is either A or B.", ABCD, None, False, None),
    ("The answer is A or B.", ABCD, None, False, None),
    ("答案：AB", ABCD, None, False, None),
    ("A. is incorrect\nB. is correct\nC. is incorrect", ABCD, None, False, None),
    ("Both A and C look right", ABCD, None, False, None),
    ("The answer is CT imaging of the head.", ABCD, None, False, None),
    ("答案：G", "ABCDE", None, True, None),
    (None, ABCD, None, False, None),
]


@pytest.mark.parametrize(("reply", "letters", "choices", "multi", "expected"), EXTRACTION_CASES)
def test_extract_choice(reply, letters, choices, multi, expected):
    assert extract_choice(reply, list(letters), choices, multi) == expected


def test_extraction_table_is_big_enough():
    assert len(EXTRACTION_CASES) >= 25
    assert sum(1 for c in EXTRACTION_CASES if c[-1] is None) >= 8


# ---- shuffling ----------------------------------------------------------------------------


def _demo() -> tuple[DemoExam, list[Sample]]:
    bench = DemoExam()
    return bench, bench.load(bench.default_path())


def test_permutation_is_deterministic_and_a_permutation():
    p = permutation("sample-1", 5, seed=7)
    assert sorted(p) == list(range(5))
    assert permutation("sample-1", 5, seed=7) == p
    # different seeds / ids give different orders for at least some samples
    assert len({tuple(permutation(f"s{i}", 4, 0)) for i in range(30)}) > 5
    assert any(permutation(f"s{i}", 4, 0) != permutation(f"s{i}", 4, 1) for i in range(10))


def test_shuffle_remaps_target_and_keeps_option_texts():
    _, samples = _demo()
    moved = 0
    for s in samples:
        shown, perm = shuffle_choices(s, seed=3)
        assert sorted(perm) == sorted(s.choices)
        assert sorted(shown.choices.values()) == sorted(s.choices.values())
        assert shown.choices[shown.target] == s.choices[s.target]
        for displayed, original in zip("ABCD", perm):
            assert shown.choices[displayed] == s.choices[original]
        assert to_original(shown.target, perm) == s.target
        moved += shown.target != s.target
        assert shuffle_choices(s, seed=3) == (shown, perm)
    assert moved > 0


def test_shuffle_remaps_multi_answer_target():
    s = Sample("q9", "x", (), target="AC", choices=dict(zip("ABCDE", "vwxyz")), metadata={"multi": True})
    shown, perm = shuffle_choices(s, seed=1)
    assert sorted(shown.choices[ch] for ch in shown.target) == ["v", "x"]
    assert shown.target == "".join(sorted(shown.target))
    assert to_original(shown.target, perm) == "AC"


# ---- prompts ------------------------------------------------------------------------------


def test_prompt_modes():
    bench, samples = _demo()
    s = samples[0]
    gen = bench.prompt(s, RunOptions())
    assert gen.kind == "chat" and "A. Liver" in gen.messages[0].content and "Answer: X" in gen.messages[0].content
    let = bench.prompt(s, RunOptions(answer_mode="letter"))
    assert let.kind == "next_token" and let.continuations == tuple("ABCD")
    assert let.messages[0].content.endswith("Answer with the letter only.\nAnswer:")
    ll = bench.prompt(s, RunOptions(answer_mode="loglik"))
    assert ll.kind == "loglikelihood"
    assert ll.messages[0].content == "Question: Which organ produces insulin?\nAnswer:"
    assert ll.continuations == (" Liver", " Pancreas", " Spleen", " Kidney")
    with pytest.raises(ConfigError):
        bench.prompt(s, RunOptions(answer_mode="essay"))


def test_shuffled_prompt_shows_permuted_options():
    bench, samples = _demo()
    opts = RunOptions(answer_mode="letter", shuffle_options=True, seed=11)
    s = samples[0]
    shown, perm = shuffle_choices(s, 11)
    text = bench.prompt(s, opts).messages[0].content
    for letter, orig in zip("ABCD", perm):
        assert f"{letter}. {s.choices[orig]}" in text


class _Multi(MultipleChoiceBenchmark):
    name = "multi-test"
    language = "zh"

    def load(self, root):  # pragma: no cover - not used
        return []


def test_multi_answer_items_are_always_generated_in_chinese():
    bench = _Multi()
    s = bench.make_sample("1", "下列哪些属于…", dict(zip("ABCDE", "甲乙丙丁戊")), "ACE", multi=True)
    p = bench.prompt(s, RunOptions(answer_mode="letter"))
    assert p.kind == "chat" and "多项选择题" in p.messages[0].content and "A. 甲" in p.messages[0].content
    single = bench.make_sample("2", "下列哪项…", dict(zip("ABCD", "甲乙丙丁")), "B")
    p = bench.prompt(single, RunOptions(answer_mode="letter"))
    assert p.kind == "next_token" and p.messages[0].content.endswith("答案：")
    assert bench.prompt(single, RunOptions(answer_mode="loglik")).continuations == tuple("甲乙丙丁")


# ---- grading ------------------------------------------------------------------------------


def _grade(bench, sample, response, options=RunOptions()) -> Grade:
    return asyncio.run(bench.grader(options).grade(sample, response, GradeContext()))


def test_failed_call_is_unscored_never_wrong():
    bench, samples = _demo()
    g = grade_answer(bench.grader(RunOptions()), samples[0], Response(key="k", error="HTTP 500"))
    assert g.value is None and g.status == "answer_failed" and "HTTP 500" in g.error


def test_chat_grading_right_wrong_and_unextracted():
    bench, samples = _demo()
    s = samples[0]  # insulin -> B
    assert _grade(bench, s, Response(key="k", text="The answer is B.")).value == 1.0
    wrong = _grade(bench, s, Response(key="k", text="Answer: C"))
    assert wrong.value == 0.0 and wrong.extracted == "C" and not wrong.details.get("unextracted")
    lost = _grade(bench, s, Response(key="k", text="I would need more information."))
    assert lost.value == 0.0 and lost.extracted is None and lost.details["unextracted"] is True


def test_next_token_and_loglik_grading():
    bench, samples = _demo()
    s = samples[0]  # B = Pancreas
    opts = RunOptions(answer_mode="letter")
    g = _grade(bench, s, Response(key="k", scores={"A": -3.0, "B": -0.2, "C": -4.0, "D": -5.0}), opts)
    assert g.value == 1.0 and g.extracted == "B"
    # a letter missing from the provider's top log-probs counts as -inf, not as an error
    assert _grade(bench, s, Response(key="k", scores={"A": -1.0}), opts).extracted == "A"
    assert _grade(bench, s, Response(key="k", scores={}), opts).value is None
    ll = RunOptions(answer_mode="loglik")
    # raw sum favours the short " Liver"; per-character normalisation favours " Pancreas"
    scores = {" Liver": -6.0, " Pancreas": -8.0, " Spleen": -9.0, " Kidney": -9.5}
    g = _grade(bench, s, Response(key="k", scores=scores), ll)
    assert g.value == 0.0 and g.extracted == "A"
    assert g.details["acc_norm"] == 1.0 and g.details["extracted_norm"] == "B"


def test_grader_sees_the_prompt_permutation():
    bench, samples = _demo()
    opts = RunOptions(shuffle_options=True, seed=5)
    for s in samples:
        shown, perm = shuffle_choices(s, 5)
        g = _grade(bench, s, Response(key="k", text=f"Answer: {shown.target}"), opts)
        assert g.value == 1.0 and g.details["permutation"] == perm
        assert g.details["extracted_original"] == s.target
        # the original letter is wrong whenever the shuffle moved the key
        if shown.target != s.target:
            assert _grade(bench, s, Response(key="k", text=f"Answer: {s.target}"), opts).value == 0.0


# ---- aggregation --------------------------------------------------------------------------


def test_aggregate_accuracy_ci_breakdown_and_counts():
    bench, samples = _demo()
    grades = []
    for i, s in enumerate(samples):
        if i < 2:
            grades.append(Grade(s.id, None, error="timeout"))
        elif i < 9:
            grades.append(Grade(s.id, 1.0, extracted=s.target, details={"answer_mode": "generate"}))
        elif i < 11:
            grades.append(Grade(s.id, 0.0, details={"answer_mode": "generate", "unextracted": True}))
        else:
            grades.append(Grade(s.id, 0.0, extracted="A", details={"answer_mode": "generate"}))
    agg = bench.aggregate(samples, grades, RunOptions())
    assert agg.metric == "accuracy"
    assert agg.n == 10 and agg.n_unscored == 2
    assert agg.score == pytest.approx(0.7)
    assert agg.ci95 == wilson_ci(7, 10)
    assert agg.extra["n_unextracted"] == 2 and agg.extra["average"].startswith("micro")
    topics = agg.breakdown["meta_info"]
    assert sum(v.n + v.n_unscored for v in topics.values()) == 12
    phys = [s for s in samples if s.metadata["meta_info"] == "physiology"]
    scored_phys = [g for g, s in zip(grades, samples) if s in phys and g.value is not None]
    assert topics["physiology"].n == len(scored_phys)
    assert topics["physiology"].score == pytest.approx(sum(g.value for g in scored_phys) / len(scored_phys))


def test_aggregate_reports_acc_norm_and_rejects_unknown_ids():
    bench, samples = _demo()
    grades = [Grade(s.id, 1.0, details={"answer_mode": "loglik", "acc_norm": 0.0}) for s in samples[:4]]
    agg = bench.aggregate(samples, grades, RunOptions(answer_mode="loglik"))
    assert agg.score == 1.0 and agg.extra["acc_norm"] == 0.0 and agg.n == 4
    with pytest.raises(ValueError):
        bench.aggregate(samples, [Grade("nope", 1.0)], RunOptions())
    empty = bench.aggregate(samples, [], RunOptions())
    assert empty.score is None and empty.ci95 is None and empty.n == 0
