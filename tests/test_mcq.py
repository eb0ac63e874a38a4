"""The multiple-choice layer: answer extraction, shuffling, prompts per mode, grading, aggregation."""

from __future__ import annotations

import asyncio

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.graders.choice_extract import extract_choice
from grandrounds.graders.mcq_grader import permutation, shuffle_choices, to_original
from grandrounds.scoring.stats import wilson_ci
from tests.grading import grade_answer

ABCD = "ABCD"
MEDQA_CHOICES = {
    "A": "Disclose the error to the patient and put it in the operative report",
    "B": "Tell the attending that he cannot fail to disclose this mistake",
    "C": "Report the physician to the ethics committee",
    "D": "Refuse to dictate the operative report",
}
YNM = {"A": "yes", "B": "no", "C": "maybe"}
ZH = {
    "A": "小叶型肺炎",
    "B": "浸润性肺结核",
    "C": "继发性肺结核",
    "D": "原发性肺结核",
    "E": "粟粒型肺结核",
}

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
    (
        "B. Tell the attending that he cannot fail to disclose this mistake",
        ABCD,
        MEDQA_CHOICES,
        False,
        "B",
    ),
    (
        "Tell the attending that he cannot fail to disclose this mistake.",
        ABCD,
        MEDQA_CHOICES,
        False,
        "B",
    ),
    (
        "The answer is: Report the physician to the ethics committee",
        ABCD,
        MEDQA_CHOICES,
        False,
        "C",
    ),
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
    (
        "Initially I thought the answer is A, but on reflection the answer is B.",
        ABCD,
        None,
        False,
        "B",
    ),
    # precedence: a stated answer beats an "answer:" quoted inside the discussion; a restatement revises
    ("Answer: A ... Why not B? Because answer: B would cause bleeding.", ABCD, None, False, "A"),
    ("Answer: A\n\nWhy not B? Because answer: B would cause bleeding.", ABCD, None, False, "A"),
    ("The answer is A. Why not B? The answer: B would cause bleeding.", ABCD, None, False, "A"),
    ("Answer: A\nAnswer: B would cause bleeding, so no.", ABCD, None, False, "A"),
    ("Answer: A\n\nWait. Actually the answer is B.", ABCD, None, False, "B"),
    ("Answer: A\n...\nFinal answer: C", ABCD, None, False, "C"),
    (
        "Answer: B. Tell the attending that he cannot fail to disclose this mistake\nanswer: D is wrong",
        ABCD,
        MEDQA_CHOICES,
        False,
        "B",
    ),
    ("1. **Answer:** C\n2. Some say the answer: A is tempting.", ABCD, None, False, "C"),
    ("答案：B\n解析：有人认为答案是C，但不对。", ABCD, None, False, "B"),
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
    s = Sample(
        id="q9",
        benchmark="x",
        messages=(),
        target="AC",
        choices=dict(zip("ABCDE", "vwxyz")),
        metadata={"multi": True},
    )
    shown, perm = shuffle_choices(s, seed=1)
    assert sorted(shown.choices[ch] for ch in shown.target) == ["v", "x"]
    assert shown.target == "".join(sorted(shown.target))
    assert to_original(shown.target, perm) == "AC"


# ---- prompts ------------------------------------------------------------------------------


def test_prompt_modes():
    bench, samples = _demo()
    s = samples[0]
    gen = bench.prompt(s, RunOptions(protocol="grandrounds"))
    assert (
        gen.kind == "chat"
        and "A. Liver" in gen.messages[0].content
        and "Answer: X" in gen.messages[0].content
    )
    ref = (
        bench.prompt(s, RunOptions()).messages[0].content
    )  # simple-evals' prompt under the reference protocol
    assert ref.startswith("Answer the following multiple choice question.") and ref.endswith(
        "A) Liver\nB) Pancreas\nC) Spleen\nD) Kidney"
    )
    let = bench.prompt(s, RunOptions(answer_mode="next-token"))
    assert let.kind == "next_token" and let.continuations == tuple("ABCD")
    assert let.messages[0].content.endswith("Answer with the letter only.\nAnswer:")
    ll = bench.prompt(s, RunOptions(answer_mode="text-loglik"))
    assert ll.kind == "loglikelihood"
    assert ll.messages[0].content == "Question: Which organ produces insulin?\nAnswer:"
    assert ll.continuations == (" Liver", " Pancreas", " Spleen", " Kidney")
    lm = bench.prompt(s, RunOptions(answer_mode="letter-loglik"))  # lm-eval medqa_4options
    assert lm.kind == "loglikelihood" and lm.continuations == (" A", " B", " C", " D")
    assert lm.messages == (
        Message(
            "user",
            "Question: Which organ produces insulin?\nA. Liver\nB. Pancreas\nC. Spleen\nD. Kidney\nAnswer:",
        ),
    )
    # the earlier names still work, as aliases
    assert (
        bench.prompt(s, RunOptions(answer_mode="letter")) == let
        and bench.prompt(s, RunOptions(answer_mode="loglik")) == ll
    )
    assert bench.check_options(RunOptions(answer_mode="letter")).answer_mode == "next-token"
    assert bench.check_options(RunOptions(answer_mode="loglik")).answer_mode == "text-loglik"
    with pytest.raises(ConfigError):
        bench.prompt(s, RunOptions(answer_mode="essay"))


def test_shuffled_prompt_shows_permuted_options():
    bench, samples = _demo()
    opts = RunOptions(answer_mode="next-token", shuffle_options=True, seed=11)
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
    p = bench.prompt(s, RunOptions(answer_mode="next-token", protocol="grandrounds"))
    assert (
        p.kind == "chat"
        and "多项选择题" in p.messages[0].content
        and "A. 甲" in p.messages[0].content
    )
    single = bench.make_sample("2", "下列哪项…", dict(zip("ABCD", "甲乙丙丁")), "B")
    p = bench.prompt(single, RunOptions(answer_mode="next-token"))
    assert p.kind == "next_token" and p.messages[0].content.endswith("答案：")
    assert bench.prompt(single, RunOptions(answer_mode="text-loglik")).continuations == tuple(
        "甲乙丙丁"
    )


# ---- grading ------------------------------------------------------------------------------


def _grade(bench, sample, response, options=RunOptions()) -> Grade:
    return asyncio.run(bench.grader(options).grade(sample, response, GradeContext()))


def test_failed_call_is_unscored_never_wrong():
    bench, samples = _demo()
    g = grade_answer(bench.grader(RunOptions()), samples[0], Response(key="k", error="HTTP 500"))
    assert g.value is None and g.status == "answer_failed" and "HTTP 500" in g.error


def test_chat_grading_right_wrong_and_unextracted(official_reference):  # simple-evals' reader
    bench, samples = _demo()
    s = samples[0]  # insulin -> B
    ours = RunOptions(protocol="grandrounds")
    right = _grade(bench, s, Response(key="k", text="The answer is B."), ours)
    assert right.value == 1.0 and right.details["protocol"] == "grandrounds"
    # simple-evals reads only "Answer: X": the reference figure of the same reply is 0
    assert right.details["other_value"] == 0.0 and right.details["other_extracted"] is None
    wrong = _grade(bench, s, Response(key="k", text="Answer: C"), ours)
    assert wrong.value == 0.0 and wrong.extracted == "C" and not wrong.details.get("unextracted")
    lost = _grade(bench, s, Response(key="k", text="I would need more information."), ours)
    assert lost.value == 0.0 and lost.extracted is None and lost.details["unextracted"] is True


def test_chat_grading_under_the_reference_protocol_reads_like_simple_evals():
    bench, samples = _demo()
    s = samples[0]  # insulin -> B
    # the example: simple-evals takes the first "Answer:" (A); ours too, by its precedence
    g = _grade(
        bench,
        s,
        Response(key="k", text="Answer: A ... Why not B? Because answer: B would cause bleeding."),
    )
    assert g.value == 0.0 and g.extracted == "A" and g.details["other_extracted"] == "A"
    # "Answer: b": simple-evals extracts "b" and compares it with "B" (wrong); ours reads B
    low = _grade(bench, s, Response(key="k", text="Answer: b"))
    assert low.value == 0.0 and low.extracted == "b" and low.details["other_value"] == 1.0
    boxed = _grade(bench, s, Response(key="k", text="**Answer:** $\\boxed{B}$"))
    assert boxed.value == 1.0 and boxed.details["protocol"] == "reference"
    none = _grade(bench, s, Response(key="k", text="The answer is B."))
    assert none.value == 0.0 and none.details["unextracted"] and none.details["other_value"] == 1.0


def test_next_token_and_loglik_grading():
    bench, samples = _demo()
    s = samples[0]  # B = Pancreas
    opts = RunOptions(answer_mode="next-token")
    g = _grade(
        bench, s, Response(key="k", scores={"A": -3.0, "B": -0.2, "C": -4.0, "D": -5.0}), opts
    )
    assert g.value == 1.0 and g.extracted == "B"
    # a letter missing from the provider's top log-probs counts as -inf, not as an error
    assert _grade(bench, s, Response(key="k", scores={"A": -1.0}), opts).extracted == "A"
    assert _grade(bench, s, Response(key="k", scores={}), opts).value is None
    ll = RunOptions(answer_mode="text-loglik")
    # raw sum favours the short " Liver"; per-character normalisation (lm-eval: by len of the option
    # text, without the leading space) favours " Pancreas"
    scores = {" Liver": -6.0, " Pancreas": -8.0, " Spleen": -9.0, " Kidney": -9.5}
    g = _grade(bench, s, Response(key="k", scores=scores), ll)
    assert g.value == 0.0 and g.extracted == "A"
    assert g.details["acc_norm"] == 1.0 and g.details["extracted_norm"] == "B"
    # by option length (lm-eval) -8.0/8 (Pancreas) beats -5.05/5 (Liver); by continuation length it would not
    # (-8.0/9 < -5.05/6)
    close = _grade(
        bench,
        s,
        Response(
            key="k", scores={" Liver": -5.05, " Pancreas": -8.0, " Spleen": -20.0, " Kidney": -20.0}
        ),
        ll,
    )
    assert close.details["extracted_norm"] == "B"
    lm = RunOptions(answer_mode="letter-loglik")
    g = _grade(
        bench, s, Response(key="k", scores={" A": -2.0, " B": -0.5, " C": -3.0, " D": -4.0}), lm
    )
    assert (
        g.value == 1.0
        and g.extracted == "B"
        and g.details["acc_norm"] == 1.0
        and g.details["other_value"] == 1.0
    )
    assert (
        _grade(bench, s, Response(key="k", scores={"A": -0.1}), lm).status == "unreadable"
    )  # no " A".." D" scores


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
            assert (
                _grade(bench, s, Response(key="k", text=f"Answer: {s.target}"), opts).value == 0.0
            )


# ---- aggregation --------------------------------------------------------------------------


def test_aggregate_accuracy_ci_breakdown_and_counts():
    bench, samples = _demo()
    grades = []
    for i, s in enumerate(samples):
        if i < 2:
            grades.append(Grade(sample_id=s.id, value=None, error="timeout"))
        elif i < 9:
            grades.append(
                Grade(
                    sample_id=s.id,
                    value=1.0,
                    extracted=s.target,
                    details={"answer_mode": "generate"},
                )
            )
        elif i < 11:
            grades.append(
                Grade(
                    sample_id=s.id,
                    value=0.0,
                    details={"answer_mode": "generate", "unextracted": True},
                )
            )
        else:
            grades.append(
                Grade(sample_id=s.id, value=0.0, extracted="A", details={"answer_mode": "generate"})
            )
    agg = bench.aggregate(samples, grades, RunOptions(protocol="grandrounds"))
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
    assert topics["physiology"].score == pytest.approx(
        sum(g.value for g in scored_phys) / len(scored_phys)
    )


def test_aggregate_reports_acc_norm_and_rejects_unknown_ids():
    bench, samples = _demo()
    grades = [
        Grade(sample_id=s.id, value=1.0, details={"answer_mode": "text-loglik", "acc_norm": 0.0})
        for s in samples[:4]
    ]
    agg = bench.aggregate(samples, grades, RunOptions(answer_mode="loglik", protocol="grandrounds"))
    assert agg.score == 1.0 and agg.extra["acc_norm"] == 0.0 and agg.n == 4
    with pytest.raises(ValueError):
        bench.aggregate(samples, [Grade(sample_id="nope", value=1.0)], RunOptions())
    empty = bench.aggregate(samples, [], RunOptions())
    assert empty.score is None and empty.ci95 is None and empty.n == 0


def test_aggregate_under_both_protocols_counts_failures_its_own_way():
    bench, samples = _demo()
    grades = [Grade(sample_id=samples[0].id, value=None, status="answer_failed", error="timeout")]
    for i, s in enumerate(samples[1:], 1):
        # the reference reading is right on 1..8, ours on 1..10
        grades.append(
            Grade(
                sample_id=s.id,
                value=1.0 if i <= 8 else 0.0,
                details={"protocol": "reference", "other_value": 1.0 if i <= 10 else 0.0},
            )
        )
    ref = bench.aggregate(samples, grades, RunOptions())
    assert (
        ref.score == pytest.approx(8 / 12) and ref.n == 12 and ref.n_unscored == 0
    )  # the failed call counts wrong
    assert ref.extra["n_unscored_counted_wrong"] == 1
    other = ref.extra["other_protocol"]
    assert (
        other["protocol"] == "grandrounds"
        and other["score"] == pytest.approx(10 / 11)
        and other["differs"]
    )
    ours = bench.aggregate(samples, grades, RunOptions(protocol="grandrounds"))
    assert ours.score == pytest.approx(10 / 11) and ours.n == 11 and ours.n_unscored == 1
    assert ours.extra["other_protocol"]["score"] == pytest.approx(8 / 12)
    # grades made before the other reading existed: the other figure is unknown, never guessed
    old = [Grade(sample_id=s.id, value=1.0) for s in samples]
    assert (
        bench.aggregate(samples, old, RunOptions(protocol="grandrounds")).extra["other_protocol"][
            "score"
        ]
        is None
    )
