"""What a run is asked to do, and the checks it passes before anything is loaded: the run's
configuration (:class:`RunConfig`, its judges' :class:`JudgeConfig`), :func:`check_run` (every
option declared, typed and used), the protocol's settings and deviations, and the benchmark,
provider and judge panel a configuration names (:func:`build_benchmark`, :func:`make_provider`,
:func:`check_judges`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams
from grandrounds.core.registry import BENCHMARKS, PROVIDERS
from grandrounds.graders.base import Grader
from grandrounds.graders.flags import check_mode as check_flag_mode
from grandrounds.providers.base import ModelSpec, Provider, check_model, split_endpoint
from grandrounds.run.batches.executor import BatchSettings
from grandrounds.run.executor import RetryPolicy
from grandrounds.run.limits import TokenLimits, check_rpm, check_tpm
from grandrounds.sources.protocols import Protocol as Preset
from grandrounds.sources.protocols import resolve_generation


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    """A judge: its model spec, endpoint and generation parameters.

    ``params`` None means the protocol's judge settings (with the run's judge overrides);
    ``json_object`` asks the judge for a JSON object whatever the protocol.
    """

    spec: str
    base_url: str = field(default="", repr=False)  # may carry credentials: never shown
    params: GenParams | None = None
    json_object: bool = False
    #: Provider options of the judge's own provider (the run's ``--timeout`` lands here).
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class RunConfig:
    """Everything a run needs; the parts that change outputs go into run id and fingerprint."""

    benchmark: str
    model: str
    bench_params: dict[str, Any] = field(default_factory=dict)
    data: Path | None = None
    base_url: str = ""
    options: RunOptions = RunOptions()
    #: Candidate generation parameters; None = the protocol's, with ``gen_overrides`` applied.
    gen: GenParams | None = None
    #: Explicit flags over the protocol's settings (temperature, max_tokens, top_p; None = not given).
    gen_overrides: Mapping[str, Any] = field(default_factory=dict)
    judge_overrides: Mapping[str, Any] = field(default_factory=dict)
    judges: tuple[JudgeConfig, ...] = ()
    concurrency: int | None = None
    judge_concurrency: int | None = None
    #: Call starts per minute on the candidate's endpoint (``--rpm``); not part of run id or fingerprint.
    rpm: int | None = None
    #: Call starts per minute of each judge's model at its endpoint (``--judge-rpm``); the candidate's own model there takes the lower.
    judge_rpm: int | None = None
    #: Tokens of call starts per minute on the candidate's endpoint (``--tpm``); not part of run id or fingerprint.
    tpm: int | str | TokenLimits | None = None
    #: Tokens of call starts per minute of each judge's model at its endpoint (``--judge-tpm``); the candidate's own model there takes the lower.
    judge_tpm: int | str | TokenLimits | None = None
    #: Seconds a call may take once sent (for providers with a ``timeout`` option: answers and judges).
    timeout: float | None = None
    limit: int | None = None
    retry: RetryPolicy = RetryPolicy()
    provider_options: dict[str, Any] = field(default_factory=dict)
    #: The protocol as the run uses it (preset, deviations), filled by :func:`check_run`.
    protocol: Mapping[str, Any] = field(default_factory=dict)
    #: Answers and/or judge calls sent through batch APIs (``--batch``); None = every call live.
    batch: BatchSettings | None = None
    #: What an answer that addresses the grader counts for (``--flagged``: keep, exclude, score-zero).
    flagged: str = "keep"
    #: A model asked whether each answer addresses its grader (``--guard``); its yes flags the answer.
    guard: JudgeConfig | None = None
    #: Rubric items one sample may have (each is a judge call per judge); more is refused (``--max-rubric-items``).
    max_rubric_items: int = 10_000
    #: The model that plays an agent benchmark's simulated patient (``--simulator``, ``PROVIDER/MODEL[@URL]``).
    simulator: str = ""
    #: Provider options of the simulator's provider (the run's ``--timeout`` lands here).
    simulator_options: Mapping[str, Any] = field(default_factory=dict)
    #: The part of the run this worker asks (``--shard``; run.shards.Shard); never in the run id.
    shard: Any = None


def check_run(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its benchmark parameters, run options and model options checked and normalised.

    The one check a run goes through before it loads data or makes a call: every value the user
    set is one the benchmark and the provider declare, of the declared type, or a one-line
    ConfigError says which is wrong and what is accepted. Options the benchmark does not use
    are reset, so they never reach its spec, fingerprint or run id.
    """
    check_rpm(cfg.rpm, "--rpm")
    check_rpm(cfg.judge_rpm, "--judge-rpm")
    check_tpm(cfg.tpm, "--tpm")
    check_tpm(cfg.judge_tpm, "--judge-tpm")
    check_flag_mode(cfg.flagged)
    bench = BENCHMARKS.get(cfg.benchmark)(**cfg.bench_params)
    options = bench.check_options(cfg.options)
    check_sees_images(bench, cfg.model, cfg.provider_options)
    provider_options = check_model(
        cfg.model,
        timeout_option(cfg.model, cfg.timeout) | dict(cfg.provider_options),
        bench.request_kind(options),
    )
    proto = bench.protocol(options)
    gen, deviations = resolve_generation(proto.answer, cfg.gen, cfg.gen_overrides, options.seed)
    judge_specs = cfg.judges
    if not judge_specs and bench.needs_judge and proto.judge_models:
        judge_specs = tuple(
            JudgeConfig(spec=s, base_url=u) for s, u in map(split_endpoint, proto.judge_models)
        )  # the judge(s) the official protocol names
    judge_specs = with_timeout(judge_specs, cfg.timeout)
    judges, judge_deviations = resolve_judges(proto, judge_specs, cfg.judge_overrides, options.seed)
    info = protocol_record(proto, deviations, judge_deviations)
    check_agent(bench, cfg, provider_options)
    sim_options = (
        timeout_option(cfg.simulator, cfg.timeout) | dict(cfg.simulator_options)
        if cfg.simulator
        else {}
    )
    return replace(
        cfg,
        bench_params=dict(bench.params),
        options=options,
        provider_options=provider_options,
        gen=gen,
        judges=judges,
        protocol=info,
        simulator_options=sim_options,
    )


def check_agent(bench: Benchmark, cfg: RunConfig, provider_options: Mapping[str, Any]) -> None:
    """An agent benchmark's checks before anything runs: native tool calls need a provider that
    sends tools (never emulated), a simulated patient needs ``--simulator``, episodes are asked
    live (each step waits on the one before, which a batch API cannot do), a tool's sandbox must
    start (``preflight``); other benchmarks refuse ``--simulator``."""
    episodic = bench.episodic
    if not episodic:
        if cfg.simulator:
            raise ConfigError(
                f"{bench.name} has no simulated participants: --simulator is not used"
            )
        return
    spec = ModelSpec.parse(split_endpoint(cfg.model)[0])
    if bench.param("actions") == "native" and not PROVIDERS.get(spec.provider).supports_tools:
        raise ConfigError(
            f"{cfg.model} cannot send tools, and --param actions=native asks for native tool calls "
            f"(use openai/, anthropic/, vllm/ or sglang/, or --param actions=text)"
        )
    if bench.needs_simulator and not cfg.simulator:
        raise ConfigError(
            f"{bench.name}'s patient is played by a model: pass --simulator PROVIDER/MODEL"
        )
    if not bench.needs_simulator and cfg.simulator:
        raise ConfigError(f"{bench.name} has no simulated participants: --simulator is not used")
    if cfg.batch is not None:
        raise ConfigError(
            f"{bench.name} is an agent benchmark: its steps are asked one after another, not through --batch"
        )
    bench.preflight()  # a tool's sandbox that cannot start: refused before any call
    if cfg.simulator:
        check_model(
            cfg.simulator,
            timeout_option(cfg.simulator, cfg.timeout) | dict(cfg.simulator_options),
            "chat",
        )


def check_sees_images(bench: Benchmark, spec_text: str, options: Mapping[str, Any]) -> None:
    """A benchmark asked with images refuses, before anything is loaded, a provider that cannot send them."""
    spec = ModelSpec.parse(split_endpoint(spec_text)[0])
    if bench.has_images and not PROVIDERS.get(spec.provider).sees_images_with(options):
        raise ConfigError(
            f"{spec_text} cannot send images, and {bench.name} asks every question with its image "
            "(use openai/, anthropic/, vllm/ or sglang/ with a vision model, or llamacpp/ with --model-opt mmproj=PATH)"
        )


def timeout_option(spec_text: str, timeout: float | None) -> dict[str, Any]:
    """``{"timeout": t}`` where ``spec_text``'s provider takes a timeout (HTTP providers), else nothing."""
    if timeout is None:
        return {}
    spec = ModelSpec.parse(split_endpoint(spec_text)[0])
    declared = {p.name for p in PROVIDERS.get(spec.provider).model_options}
    return {"timeout": timeout} if "timeout" in declared else {}


def with_timeout(judges: Sequence[JudgeConfig], timeout: float | None) -> tuple[JudgeConfig, ...]:
    """Judges whose provider takes a timeout get the run's ``--timeout``."""
    return tuple(
        replace(j, options=timeout_option(j.spec, timeout) | dict(j.options)) for j in judges
    )


def resolve_judges(
    proto: Preset, judges: Sequence[JudgeConfig], overrides: Mapping[str, Any], seed: int | None
) -> tuple[tuple[JudgeConfig, ...], dict[str, Any]]:
    """Each judge with its generation parameters settled (the protocol's unless given), and the
    deviations. A judge named twice (same model at the same endpoint) is refused: it would be one
    judge counted twice in the panel's vote."""
    out, deviations = [], {}
    seen: set[tuple[str, str]] = set()
    for j in judges:
        who = (j.spec, j.base_url)
        if who in seen:
            raise ConfigError(
                f"--judge {j.spec}{'@' + j.base_url if j.base_url else ''} is named twice: a panel needs "
                "distinct judges (one judge twice would be counted as two votes)"
            )
        seen.add(who)
        params, dev = resolve_generation(proto.judge, j.params, overrides, seed)
        if j.json_object and not params.json_object:
            params = replace(params, json_object=True)
            dev = dev | {"json_object": {"preset": False, "used": True}}
        out.append(replace(j, params=params))
        if dev:
            deviations[j.spec] = dev
    return tuple(out), deviations


def protocol_record(
    proto: Preset, answer_deviations: Mapping[str, Any], judge_deviations: Mapping[str, Any]
) -> dict[str, Any]:
    """What a fingerprint records of the protocol: the preset's settings and every deviation from them."""
    deviations = {
        k: v
        for k, v in (("answer", dict(answer_deviations)), ("judges", dict(judge_deviations)))
        if v
    }
    return proto.describe() | {"deviations": deviations}


def make_provider(spec_text: str, base_url: str = "", **options: Any) -> Provider:
    spec = ModelSpec.parse(*split_endpoint(spec_text, base_url))
    return PROVIDERS.get(spec.provider)(spec, **options)


def build_benchmark(name: str, params: dict[str, Any]) -> Benchmark:
    return BENCHMARKS.get(name)(**params)


def check_judges(bench: Benchmark, grader: Grader, judges: Sequence[JudgeConfig]) -> None:
    """Refuse, before any call, a panel the grader cannot use or cannot decide with."""
    if judges and not grader.judged:
        raise ConfigError(f"{bench.name} is not graded by an LLM judge: --judge is not used")
    if len(judges) < grader.min_judges:
        if not judges:
            raise ConfigError(
                f"{bench.name} is graded by an LLM judge: pass --judge PROVIDER/MODEL"
            )
        raise ConfigError(
            f"{bench.name} needs at least {grader.min_judges} judges to decide a vote, got {len(judges)} "
            "(repeat --judge for a panel)"
        )
