"""The engine (vLLM/SGLang name and version) in result fingerprints: what the leaderboard, compare
and labels make of it."""

from __future__ import annotations

from grandrounds.analyses.leaderboard import (
    COMPARABLE_FIELDS,
    ResultRow,
    comparability,
    fingerprint_diff,
    leaderboard,
    run_label,
)

SETTING = {
    "benchmark": "medqa",
    "dataset_sha256": "d" * 64,
    "grader": {"name": "choice"},
    "judges": [],
    "answer_mode": "generate",
    "protocol": {"name": "reference", "deviations": {}},
    "limit": None,
}


def row(
    model: str, run_id: str, score: float, engine: dict | None = None, ci=(0.4, 0.9)
) -> ResultRow:
    fp = SETTING | {"model": model, "run_id": run_id} | ({"engine": engine} if engine else {})
    return ResultRow(
        run_id=run_id,
        grader_fp="g" + run_id,
        benchmark="medqa",
        model=model,
        metric="accuracy",
        score=score,
        ci95=ci,
        n=50,
        n_unscored=0,
        coverage=1.0,
        fingerprint=fp,
    )


def test_engine_is_not_a_setting_field_so_engine_and_api_models_share_a_column():
    assert "engine" not in COMPARABLE_FIELDS
    vllm = row("vllm/qwen", "r1", 0.6, {"name": "vllm", "version": "0.9.1"}).fingerprint
    api = row("openai/gpt", "r2", 0.7).fingerprint
    assert comparability(vllm) == comparability(api) and fingerprint_diff(vllm, api) == []


def test_two_engine_versions_of_one_model_are_two_entries_never_one_model_rerun():
    rows = [
        row("vllm/qwen", "r1", 0.60, {"name": "vllm", "version": "0.9.1"}),
        row("vllm/qwen", "r2", 0.64, {"name": "vllm", "version": "0.9.2"}),
        row(
            "vllm/qwen", "r3", 0.66, {"name": "vllm", "version": "0.9.2"}
        ),  # a re-run on 0.9.2: supersedes r2
        row("openai/gpt", "r4", 0.80),
    ]
    [board] = leaderboard(rows)
    assert board.settings == 1
    by_run = {e.row.run_id: e for e in board.entries}
    assert sorted(by_run) == ["r1", "r3", "r4"]
    assert [e.row.run_id for e in sorted(board.entries, key=lambda e: e.rank)] == ["r4", "r3", "r1"]
    assert (
        "served by vllm 0.9.1: ranked apart from this model's runs on other engine versions"
        in by_run["r1"].flags
    )
    assert (
        "served by vllm 0.9.2: ranked apart from this model's runs on other engine versions"
        in by_run["r3"].flags
    )
    assert (
        "latest complete of 2 runs of this model in this setting (1 not ranked)"
        in by_run["r3"].flags
    )
    assert not any("engine" in f for f in by_run["r4"].flags), (
        "another model: nothing to tell apart"
    )


def test_one_engine_version_needs_no_flag_and_labels_name_the_engine():
    [board] = leaderboard(
        [
            row("vllm/qwen", "r1", 0.6, {"name": "vllm", "version": "0.9.1"}),
            row("openai/gpt", "r2", 0.7),
        ]
    )
    assert all(not any("engine" in f for f in e.flags) for e in board.entries)
    fp = row("vllm/qwen", "abcdef123456", 0.6, {"name": "sglang", "version": "0.4.6"}).fingerprint
    assert run_label(fp) == "vllm/qwen · sglang 0.4.6 · generate · reference · abcdef12"
    assert (
        run_label(row("openai/gpt", "abcdef123456", 0.7).fingerprint)
        == "openai/gpt · generate · reference · abcdef12"
    )
