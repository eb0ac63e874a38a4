"""A run's parts resolved and checked before the first call (:func:`prepare` gives a :class:`Setup`):
the benchmark, grader, data, provider and the run's record with its id (:func:`_run_record`), and
the grading's fingerprint, what decides a grade besides the answer (:func:`grader_fingerprint`).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grandrounds
from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.benchmarks.readers.decoding import DATA_ENCODING
from grandrounds.core.hashing import (
    canonical_json,
    content_hash,
    dataclass_dict,
    text_hash,
    to_jsonable,
)
from grandrounds.core.records import GenParams, Sample
from grandrounds.graders.base import Grader
from grandrounds.graders.guard import fingerprint as guard_fingerprint
from grandrounds.providers.base import Provider
from grandrounds.run.config import (
    JudgeConfig,
    RunConfig,
    build_benchmark,
    check_judges,
    make_provider,
    protocol_record,
)
from grandrounds.run.samples import (
    DataWatch,
    consecutive_groups,
    group_samples,
    limited,
    read_samples,
    store_images,
)
from grandrounds.sources.protocols import system_text
from grandrounds.store import RunRecord, Store


def grader_fingerprint(
    bench: Benchmark,
    grader: Grader,
    options: RunOptions,
    judges: Sequence[JudgeConfig],
    dataset: str,
    protocol: Mapping[str, Any] | None = None,
    flagged: str = "keep",
    guard: JudgeConfig | None = None,
) -> dict[str, Any]:
    """What decides a grade besides the answer: shown on every result, hashed into its key.

    ``grader`` is the grader's spec (name and typed parameters), from which re-grading and
    clinician rescoring rebuild it. ``--flagged`` is in it when not ``keep`` (so the keys of
    gradings made before it existed stay).
    """
    spec = grader.spec()
    return (
        ({"flagged": flagged} if flagged != "keep" else {})
        | ({"guard": guard_fingerprint(guard.spec)} if guard is not None else {})
    ) | {
        "grader": {"name": spec.name, "args": to_jsonable(spec.args)},
        "templates": grader.template_hashes(),
        "judges": [{"model": j.spec, "params": to_jsonable(j.params)} for j in judges],
        "scoring": to_jsonable(options.extra),
        "benchmark": str(bench.spec()),
        "dataset_sha256": dataset,
        "protocol": dict(protocol)
        if protocol
        else protocol_record(bench.protocol(options), {}, {}),
    }


@dataclass(kw_only=True)
class Setup:
    """A run's parts, resolved and checked before the first call."""

    bench: Benchmark
    root: Path
    limit: int | None
    #: How many samples the run asks.
    n: int
    #: Every sample, where they are held (benchmarks read whole, and dialogues whose turns are
    #: apart in the stream); None where they are read again one at a time as the run goes
    #: (:meth:`Benchmark.iter_samples`), a dialogue's turns coming together.
    kept: list[Sample] | None
    dataset: str
    provider: Provider
    grader: Grader
    fingerprint: dict[str, Any]
    run: RunRecord
    #: The protocol's system message for answers, read once (it goes with every sample).
    system: str | None = None
    #: The data files as they were hashed: samples read again are checked against them.
    watch: DataWatch | None = None
    #: What the run says before it starts (a very large rubric), printed with its summary.
    notes: list[str] = field(default_factory=list)
    _repeats: frozenset[str] | None = field(default=None, repr=False)

    def samples(self) -> Iterator[Sample]:
        """The run's samples in order, read again from the data where they are not held (each
        handed on only while the files are as they were hashed)."""
        if self.kept is not None:
            return iter(self.kept)
        read = limited(self.bench.iter_samples(self.root), self.limit)
        return self.watch.watch(read) if self.watch is not None else read

    @property
    def ids(self) -> list[str]:
        """The run's sample ids, in order."""
        return [smp.id for smp in self.samples()]

    def repeats(self, cfg: RunConfig) -> frozenset[str]:
        """The ids of the single-turn items whose prompt an earlier item in data order already has
        (read once, on the first sampled ask). Under sampling each of them is asked apart (its id in
        its request's key, as the authors' loops ask every item); the first item of each prompt
        keeps the key it always had, so a sampled run's stored answers keep theirs."""
        if self._repeats is None:
            first: dict[str, str] = {}
            out = set()
            for smp in self.samples():
                if smp.group is not None:
                    continue  # a dialogue's turns differ by what was answered before
                prompt = self.bench.prompt(smp, cfg.options, ())
                text = text_hash(canonical_json([dataclass_dict(m) for m in prompt.messages]))
                if first.setdefault(text, smp.id) != smp.id:
                    out.add(smp.id)
            self._repeats = frozenset(out)
        return self._repeats

    def groups(self) -> Iterator[list[tuple[int, Sample]]]:
        """What one worker asks in order, each sample with its position: a sample alone, or the
        turns of one dialogue."""
        if self.kept is not None:
            at = {smp.id: i for i, smp in enumerate(self.kept)}
            return ([(at[smp.id], smp) for smp in group] for group in group_samples(self.kept))
        return consecutive_groups(self.samples(), self.root)


def prepare(store: Store, cfg: RunConfig) -> Setup:
    """Build and check everything; read the data (bad data fails here, before the store is touched)."""
    from grandrounds.sources.data import resolve

    bench = build_benchmark(cfg.benchmark, cfg.bench_params)
    grader = bench.grader(cfg.options, judged=bool(cfg.judges))
    check_judges(bench, grader, cfg.judges)
    root = resolve(bench, cfg.data)
    watch = DataWatch(
        bench.data_files(root)
    )  # before hashing: a rewrite while hashing or checking is seen
    dataset = bench.dataset_hash(root)
    notes: list[str] = []
    n, kept = read_samples(store, bench, root, cfg.limit, dataset, cfg.max_rubric_items, notes)
    watch.check()
    provider = make_provider(cfg.model, cfg.base_url, **cfg.provider_options)
    if (
        bench.has_images or bench.images_in_data
    ):  # every image checked against what the provider takes, and kept beside the store, before any call
        store_images(
            store,
            kept if kept is not None else limited(bench.iter_samples(root), cfg.limit),
            provider,
        )
    fp = grader_fingerprint(
        bench, grader, cfg.options, cfg.judges, dataset, cfg.protocol, cfg.flagged, cfg.guard
    )  # reads the official templates: fails before the run is recorded
    system = system_text(
        bench.protocol(cfg.options).answer
    )  # read before the run is recorded, like the templates
    run_rec = store.ensure_run(_run_record(bench, cfg, provider, dataset, root))
    return Setup(
        bench=bench,
        root=root,
        limit=cfg.limit,
        n=n,
        kept=kept,
        dataset=dataset,
        provider=provider,
        grader=grader,
        fingerprint=fp,
        run=run_rec,
        system=system,
        watch=watch,
        notes=notes,
    )


def _run_record(
    bench: Benchmark, cfg: RunConfig, provider: Provider, dataset: str, root: Path
) -> RunRecord:
    options = to_jsonable(replace(cfg.options, judge_mode="", judge_runs=None, max_reask=0))
    ident = {
        "benchmark": str(bench.spec()),
        "model": str(provider.spec),
        "base_url": provider.request_base_url(),
        "options": options,
        "gen": to_jsonable(cfg.gen or GenParams()),
        "dataset": dataset,
        "limit": cfg.limit,
    }
    # ``--encoding`` changes the text read from the same bytes: it names a run of its own, but only
    # when given, so the ids of runs that never set it stay what they were.
    encoding = (
        {"encoding": codecs.lookup(name).name} if (name := DATA_ENCODING.get()) else {}
    )  # cp1252 = CP1252 = windows-1252
    ident |= encoding
    # An agent benchmark's simulated patient is part of what the candidate met: a run with another
    # simulator model (or other simulator prompts) is another run. Only where one is used.
    simulator = simulator_identity(bench, cfg)
    ident |= simulator
    from grandrounds.providers.engines import engine_record

    return RunRecord(
        id=content_hash(ident)[:16],
        benchmark=bench.name,
        benchmark_spec=str(bench.spec()),
        model=str(provider.spec),
        options=options
        | {"bench_params": to_jsonable(bench.params), "limit": cfg.limit}
        | encoding
        | simulator
        | engine_record(provider),
        dataset_sha256=dataset,
        package_version=grandrounds.__version__,
        gen_params=to_jsonable(cfg.gen or GenParams()),
        data_source=str(root),
    )


def simulator_identity(bench: Benchmark, cfg: RunConfig) -> dict[str, Any]:
    """``{"simulator": {model, endpoint, prompts}}`` for a run whose environment asks a simulator model, else {}."""
    if not cfg.simulator or not bench.needs_simulator:
        return {}
    sim = make_provider(cfg.simulator, **cfg.simulator_options)
    return {
        "simulator": {
            "model": str(sim.spec),
            "base_url": sim.request_base_url(),
            "prompts": bench.simulator_templates(),
        }
    }
