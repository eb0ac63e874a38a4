"""``graders.build``, ``spec_from_json`` and ``grader_from_fingerprint``: a stored spec back into the
same grader, or a one-line error that says what is wrong and what is accepted."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from grandrounds.core.errors import ConfigError, GrandroundsError
from grandrounds.core.hashing import canonical_json, to_jsonable
from grandrounds.core.records import Grade
from grandrounds.core.registry import GRADERS, Spec, UnknownComponent
from grandrounds.graders import build, grader_from_fingerprint, spec_from_json
from grandrounds.graders.base import Grader
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store


@dataclass(frozen=True)
class PanelParams:
    judges: tuple = ()
    weights: tuple = (1.0,)
    label: str = "x"


class PanelGrader(Grader):
    """A grader with tuple parameters, as a plugin might have."""

    name = "panel-probe"
    Params = PanelParams

    async def grade(self, sample, response, ctx):  # pragma: no cover - never graded here
        return Grade(sample_id=sample.id, value=None)


# ---- unknown grader and unknown parameters ---------------------------------------------------


def test_unknown_grader_name_is_refused_with_a_suggestion() -> None:
    with pytest.raises(UnknownComponent, match=r"unknown grader 'medcallc'; did you mean medcalc"):
        build(Spec("medcallc"))


def test_unknown_grader_name_from_a_fingerprint() -> None:
    with pytest.raises(UnknownComponent, match="unknown grader 'retired-grader'"):
        grader_from_fingerprint({"grader": {"name": "retired-grader", "args": {}}})


@pytest.mark.parametrize(
    "spec, named, accepted",
    [
        (
            Spec("healthbench", {"mode": "batched", "temperature": 0.0}),
            "temperature",
            "mode, protocol",
        ),
        (Spec("gaps", {"min_vaild": 2}), "min_vaild", "irrelevant, min_valid, protocol"),
        (Spec("llmeval-med", {"run": 3}), "run", "protocol, runs"),
        (
            Spec("mcq", {"lang": "zh"}),
            "lang",
            "answer_mode, language, loglik_labels, protocol, reference_reading, seed, shuffle_options",
        ),
        (Spec("rubric", {"template": "x", "judge": "y"}), "judge", "system, template"),
        (Spec("medcalc", {"tolerance": 0.05}), "tolerance", "protocol"),
    ],
)
def test_unknown_parameter_is_named_and_the_accepted_ones_listed(
    spec: Spec, named: str, accepted: str
) -> None:
    with pytest.raises(ConfigError) as e:
        build(spec)
    msg = str(e.value)
    assert msg == f"grader {spec.name!r} has no parameter {named} (accepted: {accepted})"
    assert "\n" not in msg


def test_several_unknown_parameters_are_all_named_sorted() -> None:
    with pytest.raises(
        ConfigError, match=r"has no parameter b_extra, z_extra \(accepted: mode, protocol\)"
    ):
        build(Spec("healthbench", {"z_extra": 1, "mode": "batched", "b_extra": 2}))


def test_config_errors_are_user_errors() -> None:
    """What the CLI turns into a one-line message (exit 2) rather than a traceback."""
    assert issubclass(ConfigError, GrandroundsError)
    assert issubclass(UnknownComponent, KeyError)


# ---- values refused by the Params themselves ---------------------------------------------------


@pytest.mark.parametrize("mode", ["batch", "per_criterion", "", "PER-CRITERION", 3])
def test_healthbench_mode_must_be_one_of_the_modes(mode) -> None:
    with pytest.raises(ConfigError) as e:
        build(Spec("healthbench", {"mode": mode}))
    assert repr(mode) in str(e.value) and "per-criterion, batched" in str(e.value)


@pytest.mark.parametrize(
    "mode, protocol",
    [("per-criterion", "reference"), ("per-criterion", "grandrounds"), ("batched", "grandrounds")],
)
def test_healthbench_modes_build(mode: str, protocol: str) -> None:
    g = build(Spec("healthbench", {"mode": mode, "protocol": protocol}))
    assert g.mode == mode and g.spec() == Spec("healthbench", {"mode": mode, "protocol": protocol})


def test_healthbench_batched_is_refused_under_the_reference_protocol() -> None:
    with pytest.raises(ConfigError, match="--protocol grandrounds"):
        build(Spec("healthbench", {"mode": "batched"}))


@pytest.mark.parametrize("min_valid", [0, -1, -5])
def test_gaps_min_valid_below_one_is_refused(min_valid: int) -> None:
    with pytest.raises(ConfigError, match="min_valid must be at least 1"):
        build(Spec("gaps", {"min_valid": min_valid}))


@pytest.mark.parametrize("strategy", ["strict", "Conservative", "mean", ""])
def test_gaps_unknown_voting_strategy_is_refused_listing_the_strategies(strategy: str) -> None:
    with pytest.raises(ConfigError) as e:
        build(Spec("gaps", {"irrelevant": strategy}))
    assert repr(strategy) in str(e.value)
    assert "conservative, majority, average" in str(e.value)


def test_gaps_non_numeric_min_valid_is_a_config_error_naming_the_grader() -> None:
    with pytest.raises(ConfigError, match=r"^grader 'gaps': "):
        build(Spec("gaps", {"min_valid": "two"}))


@pytest.mark.parametrize("runs", [0, -1])
def test_llmeval_runs_below_one_is_refused(runs: int) -> None:
    with pytest.raises(ConfigError, match=f"judge runs must be at least 1, got {runs}"):
        build(Spec("llmeval-med", {"runs": runs}))


@pytest.mark.parametrize("args", [{}, {"template": ""}, {"system": "You judge."}])
def test_rubric_grader_needs_a_template(args: dict) -> None:
    with pytest.raises(ConfigError, match="rubric grader needs a template"):
        build(Spec("rubric", args))


def test_rubric_grader_with_a_template_file_builds_and_uses_it(tmp_path: Path) -> None:
    tpl = tmp_path / "my_judge.txt"
    tpl.write_text("Judge {criterion} in {conversation}. Reply JSON.", encoding="utf-8")
    g = build(Spec("rubric", {"template": str(tpl), "system": "sys"}))
    assert g.template == tpl.read_text(encoding="utf-8")
    assert set(g.templates) == {"my_judge"}
    assert g.spec() == Spec("rubric", {"template": str(tpl), "system": "sys"})


@pytest.mark.parametrize("mode", ["essay", "Letter", ""])
def test_mcq_answer_mode_must_be_known(mode: str) -> None:
    with pytest.raises(ConfigError, match="answer mode"):
        build(Spec("mcq", {"answer_mode": mode}))


@pytest.mark.parametrize(
    "spec",
    [
        Spec("llmeval-med", {"runs": 2.5}),
        Spec("llmeval-med", {"runs": True}),
        Spec("gaps", {"min_valid": 1.5}),
    ],
)
def test_non_integer_counts_are_refused(spec: Spec) -> None:
    with pytest.raises(ConfigError):
        build(spec)


def test_rubric_grader_with_a_missing_template_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build(Spec("rubric", {"template": "no_such_packaged_template"}))


# ---- spec_from_json ---------------------------------------------------------------------------


def test_spec_from_json_turns_lists_back_into_tuples() -> None:
    spec = spec_from_json(
        {"name": "panel-probe", "args": {"judges": ["a", "b"], "weights": [0.5, 0.5], "label": "y"}}
    )
    assert spec == Spec("panel-probe", {"judges": ("a", "b"), "weights": (0.5, 0.5), "label": "y"})
    assert isinstance(spec.args["judges"], tuple)


def test_spec_from_json_keeps_scalars_and_none() -> None:
    spec = spec_from_json({"name": "gaps", "args": {"min_valid": 2, "irrelevant": None}})
    assert spec == Spec("gaps", {"min_valid": 2, "irrelevant": None})


@pytest.mark.parametrize(
    "stored",
    [{"name": "medcalc"}, {"name": "medcalc", "args": None}, {"name": "medcalc", "args": {}}],
)
def test_spec_from_json_without_args_has_none(stored: dict) -> None:
    assert spec_from_json(stored) == Spec("medcalc", {})


@pytest.mark.parametrize("stored", [{}, {"args": {}}, None, [], "healthbench", ["healthbench", {}]])
def test_spec_from_json_refuses_what_is_not_a_spec(stored) -> None:
    with pytest.raises(ConfigError, match="not a grader spec"):
        spec_from_json(stored)


def test_spec_from_json_does_not_change_what_it_was_given() -> None:
    stored = {"name": "panel-probe", "args": {"judges": ["a"]}}
    before = json.dumps(stored)
    spec_from_json(stored)
    assert json.dumps(stored) == before


def test_a_tuple_param_survives_canonical_json_and_rebuild() -> None:
    """Without the list -> tuple step the rebuilt spec would differ from the one stored."""
    with GRADERS.registered("panel-probe", PanelGrader):
        spec = build(Spec("panel-probe", {"judges": ("j1", "j2"), "weights": (2.0, 1.0)})).spec()
        stored = json.loads(
            canonical_json({"grader": {"name": spec.name, "args": to_jsonable(spec.args)}})
        )
        assert stored["grader"]["args"]["judges"] == ["j1", "j2"]  # JSON has no tuples
        rebuilt = grader_from_fingerprint(stored)
        assert type(rebuilt) is PanelGrader
        assert rebuilt.spec() == spec
        assert rebuilt.params == PanelParams(("j1", "j2"), (2.0, 1.0), "x")


# ---- grader_from_fingerprint ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fp", [{}, {"grader": None}, {"grader": {}}, {"judges": [], "templates": {}}]
)
def test_fingerprint_without_a_grader_spec_is_refused(fp: dict) -> None:
    with pytest.raises(ConfigError, match="not a grader spec"):
        grader_from_fingerprint(fp)


def test_fingerprint_with_an_unknown_parameter_is_refused_like_build() -> None:
    with pytest.raises(
        ConfigError,
        match=r"grader 'healthbench' has no parameter judge_model \(accepted: mode, protocol\)",
    ):
        grader_from_fingerprint(
            {"grader": {"name": "healthbench", "args": {"mode": "batched", "judge_model": "x"}}}
        )


def test_fingerprint_with_an_ill_typed_value_is_refused_like_build() -> None:
    with pytest.raises(ConfigError, match="min_valid must be at least 1"):
        grader_from_fingerprint(
            {"grader": {"name": "gaps", "args": {"min_valid": 0, "irrelevant": None}}}
        )


def test_the_grader_stored_by_a_real_run_is_rebuilt_from_the_store(tmp_path: Path) -> None:
    """A demo run in letter mode with a seeded shuffle: the grader regrade and reviews would rebuild
    from the stored fingerprint is the one the run graded with."""
    from grandrounds.benchmarks.base import RunOptions

    opts = RunOptions(answer_mode="letter", shuffle_options=True, seed=5)
    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/lp",
                    options=opts,
                    limit=3,
                    provider_options={
                        "script": lambda req: {"A": -0.1, "B": -2.0, "C": -3.0, "D": -4.0}
                    },
                ),
            )
        )
        [(run_id, fp, result)] = list(st.results())
        stored = st.grader_spec(fp)
    assert run_id == out.run.id
    assert stored is not None and stored["grader"]["name"] == "mcq"
    rebuilt = grader_from_fingerprint(stored)
    want = Spec(
        "mcq",
        {
            "answer_mode": "next-token",
            "shuffle_options": True,
            "seed": 5,
            "language": "en",
            "protocol": "reference",
            "reference_reading": "simple-evals",
            "loglik_labels": "letters",
        },
    )  # "letter" is stored by its current name
    assert rebuilt.spec() == want
    assert (
        grader_from_fingerprint(result["fingerprint"]).spec() == want
    )  # the result carries the same spec
