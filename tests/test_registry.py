"""The component registry: lazy imports, did-you-mean, scoped registration, plugins by entry point,
and every built-in benchmark's grader spec resolving to a registered, rebuildable grader."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import fields
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import Grade
from grandrounds.core.registry import (
    BENCHMARKS,
    GRADERS,
    PROVIDERS,
    Registry,
    Spec,
    UnknownComponent,
)
from grandrounds.graders import base as graders_base
from grandrounds.graders import grader_from_fingerprint
from grandrounds.graders.base import Grader, NoParams

ROOT = Path(__file__).resolve().parents[1]

#: Every benchmark that ships with the package, as the README and ``grandrounds list`` name them.
BUILTIN_BENCHMARKS = {
    "demo",
    "medqa",
    "medmcqa",
    "pubmedqa",
    "mmlu-medical",
    "cmb",
    "healthbench",
    "healthbench-hard",
    "healthbench-consensus",
    "medeqbench",
    "llmeval-med",
    "gaps",
    "medcalc-bench",
    "medec",
    "medbench",
}
BUILTIN_GRADERS = {
    "mcq",
    "medcalc",
    "medec",
    "medbench",
    "healthbench",
    "medeq",
    "gaps",
    "llmeval-med",
    "rubric",
}
BUILTIN_PROVIDERS = {"openai", "llamacpp", "scripted"}


class FakeGrader(Grader):
    name = "fake"

    async def grade(self, sample, response, ctx):  # pragma: no cover - never graded here
        return Grade(sample_id=sample.id, value=1.0)


class OtherFakeGrader(FakeGrader):
    name = "other-fake"


def write_module(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


@pytest.fixture
def lazy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A module on sys.path that nobody has imported yet, holding one class ``Thing``."""
    name = f"gr_lazy_probe_{uuid.uuid4().hex[:10]}"
    write_module(
        tmp_path,
        name,
        """
        class Thing:
            kind = "probe"
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


# ---- lazy import -----------------------------------------------------------------------------


def test_get_imports_the_module_only_when_asked(lazy_module: str) -> None:
    reg: Registry = Registry(
        "widget", {"probe": f"{lazy_module}:Thing"}, "grandrounds.test-widgets-none"
    )
    assert lazy_module not in sys.modules
    assert reg.names() == ["probe"]  # listing does not import either
    assert lazy_module not in sys.modules
    cls = reg.get("probe")
    assert lazy_module in sys.modules
    assert cls is sys.modules[lazy_module].Thing and cls.kind == "probe"
    # The class is kept: a second get does not import again, even if the module was dropped.
    del sys.modules[lazy_module]
    assert reg.get("probe") is cls
    assert lazy_module not in sys.modules


def test_a_broken_path_fails_only_for_its_own_name(lazy_module: str) -> None:
    reg: Registry = Registry(
        "widget",
        {"good": f"{lazy_module}:Thing", "bad": "gr_no_such_module_x9:Nope"},
        "grandrounds.none",
    )
    assert reg.names() == ["bad", "good"]
    with pytest.raises(ModuleNotFoundError):
        reg.get("bad")
    assert reg.get("good").kind == "probe"


def test_importing_the_registry_imports_no_component() -> None:
    """Listing every name reads the packages' tables, never a module a table names."""
    code = (
        "import sys\n"
        "from grandrounds.core.registry import BENCHMARKS, GRADERS, PROVIDERS\n"
        "names = BENCHMARKS.names() + GRADERS.names() + PROVIDERS.names()\n"
        "paths = {**BENCHMARKS._paths, **GRADERS._paths, **PROVIDERS._paths}.values()\n"
        "components = {p.partition(':')[0] for p in paths}\n"
        "loaded = sorted(m for m in sys.modules if m in components)\n"
        "print(len(names), loaded)\n"
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    count, loaded = r.stdout.strip().split(" ", 1)
    assert int(count) >= len(BUILTIN_BENCHMARKS) + len(BUILTIN_GRADERS) + len(BUILTIN_PROVIDERS)
    assert loaded == "[]"


def test_names_include_every_builtin() -> None:
    assert set(BENCHMARKS.names()) >= BUILTIN_BENCHMARKS
    assert set(GRADERS.names()) >= BUILTIN_GRADERS
    assert set(PROVIDERS.names()) >= BUILTIN_PROVIDERS
    for reg in (BENCHMARKS, GRADERS, PROVIDERS):
        assert reg.names() == sorted(set(reg.names())), "sorted, no repeats"


def test_every_builtin_resolves_to_a_class_named_like_its_entry() -> None:
    for name in BUILTIN_BENCHMARKS:
        assert BENCHMARKS.get(name).name == name
    for name in BUILTIN_GRADERS:
        cls = GRADERS.get(name)
        assert issubclass(cls, Grader) and cls.name == name
    for name in BUILTIN_PROVIDERS:
        assert isinstance(PROVIDERS.get(name), type)


# ---- unknown names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reg, typo, meant",
    [
        (GRADERS, "helthbench", "healthbench"),
        (GRADERS, "llmeval_med", "llmeval-med"),
        (BENCHMARKS, "medmcq", "medmcqa"),
        (BENCHMARKS, "healthbench-hrd", "healthbench-hard"),
        (PROVIDERS, "scriptd", "scripted"),
    ],
)
def test_a_near_name_gets_a_did_you_mean(reg: Registry, typo: str, meant: str) -> None:
    with pytest.raises(UnknownComponent) as e:
        reg.get(typo)
    msg = str(e.value)
    assert msg.startswith(f"unknown {reg.kind} {typo!r}; did you mean ")
    suggestions = msg.split("did you mean ", 1)[1].split("?", 1)[0].split(", ")
    assert meant in suggestions and len(suggestions) <= 3


def test_a_far_name_lists_what_is_known_without_guessing() -> None:
    with pytest.raises(UnknownComponent) as e:
        GRADERS.get("zzzzqqqq")
    msg = str(e.value)
    assert "did you mean" not in msg
    known = msg.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == GRADERS.names()


def test_unknown_component_is_a_key_error_with_a_plain_message() -> None:
    with pytest.raises(KeyError) as e:
        PROVIDERS.get("nope-provider")
    assert str(e.value).startswith("unknown provider 'nope-provider'")  # not KeyError's quoted repr
    assert not str(e.value).startswith('"')


# ---- registered(): scoped registration -------------------------------------------------------


def test_registered_adds_a_name_for_the_block_only() -> None:
    assert "fake" not in GRADERS.names()
    with GRADERS.registered("fake", FakeGrader):
        assert GRADERS.get("fake") is FakeGrader
        assert "fake" in GRADERS.names()
        assert graders_base.build(Spec("fake")).spec() == Spec("fake", {})
    assert "fake" not in GRADERS.names()
    with pytest.raises(UnknownComponent):
        GRADERS.get("fake")


def test_registered_restores_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), GRADERS.registered("fake", FakeGrader):
        assert GRADERS.get("fake") is FakeGrader
        raise RuntimeError("boom")
    assert "fake" not in GRADERS.names()
    with pytest.raises(UnknownComponent):
        GRADERS.get("fake")


def test_registered_over_a_loaded_builtin_restores_the_builtin() -> None:
    from grandrounds.graders.mcq_grader import MCQGrader

    assert GRADERS.get("mcq") is MCQGrader
    with GRADERS.registered("mcq", FakeGrader):
        assert GRADERS.get("mcq") is FakeGrader
        assert type(graders_base.build(Spec("mcq"))) is FakeGrader
    assert GRADERS.get("mcq") is MCQGrader
    assert type(graders_base.build(Spec("mcq"))) is MCQGrader


def test_registered_over_a_builtin_never_loaded_falls_back_to_the_lazy_path(
    lazy_module: str,
) -> None:
    reg: Registry = Registry("widget", {"probe": f"{lazy_module}:Thing"}, "grandrounds.none")
    with reg.registered("probe", FakeGrader):
        assert reg.get("probe") is FakeGrader
        assert lazy_module not in sys.modules
    assert reg.get("probe").kind == "probe"  # the built-in path, imported now
    assert lazy_module in sys.modules


def test_registered_raises_restore_even_over_an_existing_name() -> None:
    with GRADERS.registered("fake", FakeGrader):
        with pytest.raises(ValueError), GRADERS.registered("fake", OtherFakeGrader):
            assert GRADERS.get("fake") is OtherFakeGrader
            raise ValueError("inner")
        assert (
            GRADERS.get("fake") is FakeGrader
        )  # the outer meaning, not none and not the inner one
    assert "fake" not in GRADERS.names()


def test_registered_nests_and_unwinds_in_order() -> None:
    from grandrounds.graders.medcalc_grader import MedCalcGrader

    with GRADERS.registered("medcalc", FakeGrader):
        with GRADERS.registered("medcalc", OtherFakeGrader):
            assert GRADERS.get("medcalc") is OtherFakeGrader
        assert GRADERS.get("medcalc") is FakeGrader
    assert GRADERS.get("medcalc") is MedCalcGrader


# ---- every benchmark's grader is registered and rebuildable -----------------------------------


def fingerprint_round_trip(spec: Spec) -> Spec:
    """The spec as the runner stores it in a fingerprint (JSON), rebuilt the way regrade does."""
    stored = json.loads(json.dumps({"grader": {"name": spec.name, "args": to_jsonable(spec.args)}}))
    return grader_from_fingerprint(stored).spec()


@pytest.mark.parametrize("bench_name", sorted(BUILTIN_BENCHMARKS))
def test_each_builtin_benchmark_names_a_registered_grader_that_round_trips(bench_name: str) -> None:
    assert bench_name in BENCHMARKS.names()
    bench = BENCHMARKS.get(bench_name)()
    spec = bench.grader_spec(RunOptions())
    assert spec.name in GRADERS.names()
    cls = GRADERS.get(spec.name)
    grader = graders_base.build(spec)
    assert type(grader) is cls
    assert grader.spec() == spec
    # Every Params field is in the spec, so the spec says everything the grader was built with.
    assert set(spec.args) == {f.name for f in fields(cls.Params)}
    assert fingerprint_round_trip(spec) == spec
    assert type(bench.grader(RunOptions())) is cls


def test_every_registered_benchmark_builds_with_defaults() -> None:
    """Plugins included: whatever BENCHMARKS lists must give a grader GRADERS knows."""
    for name in BENCHMARKS.names():
        bench = BENCHMARKS.get(name)()
        spec = bench.grader_spec(RunOptions())
        assert graders_base.build(spec).spec() == spec, name


@pytest.mark.parametrize("bench_name", ["healthbench", "healthbench-hard", "healthbench-consensus"])
def test_healthbench_batched_mode_is_in_the_spec_and_survives_a_rebuild(bench_name: str) -> None:
    bench = BENCHMARKS.get(bench_name)()
    opts = bench.check_options(
        RunOptions(judge_mode="batched", protocol="grandrounds")
    )  # batched is ours
    spec = bench.grader_spec(opts)
    assert spec == Spec("healthbench", {"mode": "batched", "protocol": "grandrounds"})
    grader = graders_base.build(spec)
    assert grader.mode == "batched" and set(grader.templates) == {"healthbench_batched"}
    assert fingerprint_round_trip(spec) == spec
    default = bench.grader_spec(bench.check_options(RunOptions()))
    assert default == Spec("healthbench", {"mode": "per-criterion", "protocol": "reference"})
    assert graders_base.build(default).template_hashes() != grader.template_hashes()


@pytest.mark.parametrize(
    "judge_runs, bench_param, want", [(None, None, 3), (5, None, 5), (None, 4, 4), (1, 4, 1)]
)
def test_llmeval_judge_runs_reach_the_grader(
    judge_runs: int | None, bench_param: int | None, want: int
) -> None:
    bench = BENCHMARKS.get("llmeval-med")(
        **({"judge_runs": bench_param} if bench_param is not None else {})
    )
    spec = bench.grader_spec(bench.check_options(RunOptions(judge_runs=judge_runs)))
    assert spec == Spec("llmeval-med", {"runs": want, "protocol": "reference"})
    grader = graders_base.build(spec)
    assert grader.runs == want and grader.spec() == spec
    assert fingerprint_round_trip(spec) == spec


@pytest.mark.parametrize(
    "extra, min_valid, irrelevant",
    [
        ({}, 2, None),
        ({"gaps_min_valid": "1"}, 1, None),
        ({"gaps_min_valid": "3", "gaps_irrelevant": "conservative"}, 3, "conservative"),
        ({"gaps_irrelevant": "majority"}, 2, "majority"),
        ({"gaps_irrelevant": "average"}, 2, "average"),
    ],
)
def test_gaps_scoring_options_reach_the_grader(
    extra: dict, min_valid: int, irrelevant: str | None
) -> None:
    bench = BENCHMARKS.get("gaps")()
    spec = bench.grader_spec(bench.check_options(RunOptions(extra=extra)))
    assert spec == Spec(
        "gaps", {"min_valid": min_valid, "irrelevant": irrelevant, "protocol": "reference"}
    )
    grader = graders_base.build(spec)
    assert grader.spec() == spec
    assert grader.min_judges == min_valid
    want_templates = {"positive", "negative"} | (
        {"irrelevant_extract", "irrelevant_grade"} if irrelevant else set()
    )
    assert set(grader.template_hashes()) == want_templates  # official prompts (reference) or ours
    assert fingerprint_round_trip(spec) == spec


@pytest.mark.parametrize(
    "bench_name, options, language",
    [
        ("demo", RunOptions(answer_mode="letter", shuffle_options=True, seed=7), "en"),
        ("medqa", RunOptions(answer_mode="loglik", seed=3), "en"),
        ("cmb", RunOptions(shuffle_options=True, seed=11), "zh"),
    ],
)
def test_exam_options_reach_the_mcq_grader(
    bench_name: str, options: RunOptions, language: str
) -> None:
    bench = BENCHMARKS.get(bench_name)()
    checked = bench.check_options(options)
    spec = bench.grader_spec(checked)
    want = {
        "answer_mode": {"letter": "next-token", "loglik": "text-loglik"}.get(
            options.answer_mode, options.answer_mode
        ),
        "shuffle_options": options.shuffle_options,
        "seed": options.seed,
        "language": language,
        "protocol": "reference",
        "reference_reading": "cmb" if bench_name == "cmb" else "simple-evals",
        "loglik_labels": "letters",
    }
    assert spec == Spec("mcq", want)
    assert graders_base.build(spec).spec() == spec
    assert fingerprint_round_trip(spec) == spec


def test_graders_without_parameters_have_empty_specs() -> None:
    for name in ("medbench",):  # medcalc, medec, medeq: their Params carry the protocol
        cls = GRADERS.get(name)
        assert cls.Params is NoParams
        assert graders_base.build(Spec(name)).spec() == Spec(name, {})


# ---- plugins through entry points --------------------------------------------------------------

PLUGIN_MODULE = """
    from dataclasses import dataclass

    from grandrounds.graders.base import Grader
    from grandrounds.core.records import Grade


    @dataclass(frozen=True)
    class KeywordParams:
        words: tuple = ()


    class KeywordGrader(Grader):
        \"\"\"1.0 when the answer holds any of the words.\"\"\"

        name = "keyword-plugin"
        Params = KeywordParams

        async def grade(self, sample, response, ctx):
            text = (response.text or "").lower()
            return Grade(sample_id=sample.id, value=float(any(w in text for w in self.params.words)))
"""


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An installed-looking distribution (``*.dist-info`` with entry points) on sys.path.

    It declares a new grader ``keyword-plugin`` and tries to take the built-in name ``mcq``.
    """
    mod = f"gr_plugin_probe_{uuid.uuid4().hex[:10]}"
    write_module(tmp_path, mod, PLUGIN_MODULE)
    dist = tmp_path / "gr_plugin_probe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: gr-plugin-probe\nVersion: 0.1\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        f"[grandrounds.graders]\nkeyword-plugin = {mod}:KeywordGrader\nmcq = {mod}:KeywordGrader\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import entry_points

    if not any(ep.name == "keyword-plugin" for ep in entry_points(group="grandrounds.graders")):
        pytest.skip(
            "importlib.metadata does not see a dist-info added to sys.path in this interpreter"
        )
    yield mod
    sys.modules.pop(mod, None)


def test_a_plugin_grader_is_found_through_its_entry_point(plugin_dist: str) -> None:
    reg: Registry = Registry(
        "grader", {"mcq": "grandrounds.graders.mcq_grader:MCQGrader"}, "grandrounds.graders"
    )
    assert "keyword-plugin" in reg.names()
    assert plugin_dist not in sys.modules, (
        "a plugin is imported only when asked for, like a built-in"
    )
    cls = reg.get("keyword-plugin")
    assert cls.__module__ == plugin_dist and cls.name == "keyword-plugin"
    # A plugin cannot take over a built-in name.
    assert reg.get("mcq").__name__ == "MCQGrader"


def test_a_plugin_grader_builds_grades_and_round_trips_through_the_global_registry(
    plugin_dist: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from grandrounds.core.records import Message, Response, Sample
    from grandrounds.graders.base import GradeContext

    # Let GRADERS scan again (it may have scanned before the plugin existed); restored afterwards.
    monkeypatch.setattr(GRADERS, "_paths", dict(GRADERS._paths))
    monkeypatch.setattr(GRADERS, "_loaded", dict(GRADERS._loaded))
    monkeypatch.setattr(GRADERS, "_plugins_scanned", False)
    assert "keyword-plugin" in GRADERS.names()
    spec = Spec("keyword-plugin", {"words": ("fever", "rash")})
    grader = graders_base.build(spec)
    sample = Sample(id="s1", benchmark="x", messages=(Message("user", "q"),))
    hit = asyncio.run(
        grader.grade(sample, Response(key="k", text="Watch the FEVER."), GradeContext())
    )
    miss = asyncio.run(
        grader.grade(sample, Response(key="k", text="Nothing relevant."), GradeContext())
    )
    assert (hit.value, miss.value) == (1.0, 0.0)
    # Stored as JSON (the tuple becomes a list) and rebuilt: the same spec, tuple and all.
    assert fingerprint_round_trip(spec) == spec
    assert GRADERS.get("mcq").__name__ == "MCQGrader"
    from grandrounds.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"has no parameter word \(accepted: words\)"):
        graders_base.build(Spec("keyword-plugin", {"word": ("x",)}))


def test_a_built_in_name_is_found_without_reading_installed_plugins(monkeypatch):
    """Reading every installed package's entry points takes a noticeable part of a run's start-up;
    a built-in name (which a plugin cannot take over) does not need it, an unknown name does."""
    from grandrounds.core import registry as reg

    scans: list[str] = []

    def entry_points(group: str):
        scans.append(group)
        return []

    monkeypatch.setattr(reg, "entry_points", entry_points)
    fresh = reg.Registry(
        "benchmark", {"demo": "grandrounds.benchmarks.demo:DemoExam"}, "grandrounds.benchmarks"
    )
    assert fresh.get("demo").__name__ == "DemoExam"
    assert scans == []
    with pytest.raises(reg.UnknownComponent, match="unknown benchmark 'demox'; did you mean demo"):
        fresh.get("demox")
    assert scans == ["grandrounds.benchmarks"]
