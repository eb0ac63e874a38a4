"""strip_reasoning and normalize_width on the reply shapes real models produce."""

from __future__ import annotations

import pytest

from grandrounds.core.textutil import normalize_width, strip_reasoning

# ---- strip_reasoning ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply,want",
    [
        # plain replies are only trimmed
        ("Answer: B", "Answer: B"),
        ("  \n Answer: B \n\n", "Answer: B"),
        ("", ""),
        ("I think B is right", "I think B is right"),  # the word "think" is not a tag
        # <think> ... </think>
        ("<think>The stem says fever and dysuria.</think>Answer: C", "Answer: C"),
        (
            "<think>\nline 1 about A\nline 2 about B\n</think>\n\nThe answer is D.",
            "The answer is D.",
        ),
        ("<THINK>upper-case tag</THINK>D", "D"),
        ("<Think>Mixed case</tHiNk> E", "E"),
        ("<think></think>A", "A"),
        ("<think>first</think>The answer <think>second</think>is C", "The answer is C"),
        ("Prefix. <think>middle</think> Suffix.", "Prefix.  Suffix."),
        # reasoning whose opening tag the chat template swallowed: everything up to the last </think>
        ("The patient is 45... so option B</think>Final answer: A", "Final answer: A"),
        ("draft</think>second draft</think>  C  ", "C"),
        # ByteDance Seed
        ("<seed:think>Consider renal function.</seed:think>The answer is B", "The answer is B"),
        ("<SEED:THINK>x</SEED:THINK>B", "B"),
        # gpt-oss harmony rendered as text
        (
            "analysisThe user asks about heparin reversal.assistantfinalB. Protamine sulfate",
            "B. Protamine sulfate",
        ),
        ("analysis firstassistantfinal draftassistantfinal D", "D"),
        # hunyuan answer wrapper
        ("<answer>C</answer>", "C"),
        ("<answer>\n  D \n</answer>", "D"),
        ("<think>long reasoning</think>\n<answer>B</answer>", "B"),
        ("Some preface <answer>first</answer> and <answer>second</answer>", "first"),
        # Chinese replies
        ("<think>先看题干，患者发热。</think>正确选项为 D", "正确选项为 D"),
        ("<think>逐条看</think>\n诊断：肺炎", "诊断：肺炎"),
    ],
)
def test_strip_reasoning(reply, want):
    assert strip_reasoning(reply) == want


def test_answer_inside_reasoning_is_not_taken_as_the_answer():
    reply = "<think>Maybe <answer>A</answer>? No.</think><answer>B</answer>"
    assert strip_reasoning(reply) == "B"


def test_think_then_gpt_oss_final_marker():
    reply = "<think>a</think>analysis: weigh options.assistantfinal The answer is E."
    assert strip_reasoning(reply) == "The answer is E."


def test_reasoning_spanning_many_lines_with_json_inside():
    reasoning = "\n".join(
        f'step {i}: {{"criteria_met": {str(i % 2 == 0).lower()}}}' for i in range(50)
    )
    reply = f'<think>{reasoning}</think>\n```json\n{{"criteria_met": false}}\n```'
    out = strip_reasoning(reply)
    assert out == '```json\n{"criteria_met": false}\n```'
    assert "step" not in out


def test_think_blocks_are_removed_non_greedily():
    # A greedy match would swallow the text between two blocks.
    reply = "<think>a</think>KEEP<think>b</think>"
    assert strip_reasoning(reply) == "KEEP"


def test_strip_reasoning_is_idempotent_on_its_output():
    for reply in [
        "<think>x</think>Answer: A",
        "x</think>B",
        "<answer>C</answer>",
        "analysisassistantfinalD",
    ]:
        once = strip_reasoning(reply)
        assert strip_reasoning(once) == once


def test_unclosed_think_block_is_all_reasoning():
    """A reply cut off while reasoning (max_tokens reached) has no answer: nothing is read out of the trace."""
    reply = "<think>The stem suggests pyelonephritis, so the answer is A, but wait"
    assert strip_reasoning(reply) == ""
    assert strip_reasoning("Answer: C <think>on second thought B") == "Answer: C"


# ---- normalize_width ---------------------------------------------------------------------------


def test_every_fullwidth_ascii_character_folds_to_ascii():
    # U+FF01..U+FF5E are the full-width forms of U+0021..U+007E, at a fixed offset of 0xFEE0.
    full = "".join(chr(c) for c in range(0xFF01, 0xFF5F))
    half = "".join(chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F))
    assert len(full) == 94
    assert normalize_width(full) == half


@pytest.mark.parametrize(
    "text,want",
    [
        ("答案：Ｃ", "答案:C"),
        ("（Ａ）阿司匹林", "(A)阿司匹林"),
        ("１２３．５ mg", "123.5 mg"),
        ("０.９％氯化钠", "0.9%氯化钠"),
        ("Ａ，Ｂ；Ｃ！Ｄ？", "A,B;C!D?"),
        ("ａｂｃ", "abc"),
        ("选项\u3000Ｂ", "选项 B"),  # ideographic space becomes a plain space
        ("［５］分", "[5]分"),
        ('｛"得分"：５｝', '{"得分":5}'),
    ],
)
def test_normalize_width_folds_fullwidth_punctuation_digits_and_letters(text, want):
    assert normalize_width(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "患者，男".replace("，", "。"),  # 。 ideographic full stop has no half-width form
        "、",  # ideographic comma
        "【诊断】",  # lenticular brackets
        "“引号”",  # curly quotes
        "《指南》",
        "Plain ASCII: (A) 1.5 mg/kg, 2-3 times a day!",
        "肺炎链球菌",
    ],
)
def test_normalize_width_leaves_ascii_hanzi_and_cjk_only_punctuation(text):
    assert normalize_width(text) == text


@pytest.mark.parametrize(
    "text,want",
    [
        ("m²", "m2"),  # superscripts lose their position: NFKC, not just width folding
        ("①", "1"),
        ("ﬁbrosis", "fibrosis"),  # ligature
        ("ｶﾘｳﾑ", "カリウム"),  # half-width katakana widen
    ],
)
def test_normalize_width_applies_full_nfkc(text, want):
    assert normalize_width(text) == want


def test_normalize_width_is_idempotent():
    text = "答案：（Ｂ）１２．５ｍｇ，【注】。"
    once = normalize_width(text)
    assert normalize_width(once) == once


def test_normalize_width_then_strip_reasoning_on_a_fullwidth_reply():
    reply = "<think>先算体表面积</think>答案：１．７３"
    assert normalize_width(strip_reasoning(reply)) == "答案:1.73"


def test_text_without_tags_or_markers_is_only_stripped() -> None:
    """strip_reasoning returns a reply with no "<" and no gpt-oss marker stripped and otherwise
    unchanged (it does not run its patterns on it); the rest still goes through them."""
    for text in [
        '  {"criteria_met": true}\n',
        "plain answer B",
        "",
        "think> not a tag",
        "答案：B。",
    ]:
        assert strip_reasoning(text) == text.strip()
    assert strip_reasoning("x <think>why</think> B") == "x  B"
    assert strip_reasoning("analysis: hmm assistantfinal B") == "B"
