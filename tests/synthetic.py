"""A synthetic store for tests and benchmarks: N samples x M models with rubric verdicts.

Written through the real Store API (inside one transaction for speed), so the viewer and
reports read exactly what a run would have stored. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from grandrounds.core.hashing import content_hash
from grandrounds.core.records import (
    Cell,
    Criterion,
    GenParams,
    Grade,
    Message,
    Request,
    Response,
    Result,
    Sample,
    Verdict,
    Vote,
)
from grandrounds.scoring.stats import mean_ci
from grandrounds.store import RunRecord, Store

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> & "quoted"'
AXES = (
    "accuracy",
    "completeness",
    "communication_quality",
    "context_awareness",
    "instruction_following",
)
THEMES = ("emergency_referrals", "hedging", "global_health", "context_seeking", "communication")
WORDS = [
    "patient",
    "fever",
    "chest",
    "pain",
    "dose",
    "insulin",
    "sepsis",
    "referral",
    "history",
    "allergy",
    "pregnancy",
    "renal",
    "hepatic",
    "cough",
    "rash",
]
ZH = ["患者", "发热", "胸痛", "剂量", "胰岛素", "脓毒症", "转诊", "病史", "过敏", "妊娠"]


@dataclass(frozen=True)
class SynthSpec:
    n_samples: int = 100
    n_models: int = 3
    n_criteria: int = 6
    benchmark: str = "healthbench"
    seed: int = 0
    answer_words: int = 120
    xss: bool = True  # model 0's answer to sample 0 and one judge explanation carry an XSS payload
    panel: bool = True  # two-judge votes, some disagreeing


def _text(rng: random.Random, n: int, zh: bool = False) -> str:
    pool = ZH if zh else WORDS
    return ("" if zh else " ").join(rng.choice(pool) for _ in range(n))


def make_samples(spec: SynthSpec) -> list[Sample]:
    rng = random.Random(spec.seed)
    out = []
    for i in range(spec.n_samples):
        zh = i % 7 == 3
        q = f"Question {i}: " + _text(rng, 40, zh) + ("？" if zh else "?")
        rubric = tuple(
            Criterion(
                f"c{j}",
                f"Criterion {j} of sample {i}: mentions {rng.choice(WORDS)}",
                float(rng.choice([5, 3, 2, -3])),
                (f"axis:{AXES[j % len(AXES)]}",),
            )
            for j in range(spec.n_criteria)
        )
        out.append(
            Sample(
                id=f"s{i}",
                benchmark=spec.benchmark,
                messages=(Message("user", q),),
                rubric=rubric,
                metadata={"theme": THEMES[i % len(THEMES)]},
            )
        )
    return out


def model_name(m: int) -> str:
    return f"scripted/model-{m:02d}"


def build_store(path: Path | str, spec: SynthSpec = SynthSpec()) -> Store:
    """Fill a store at ``path`` and return it open. Model m meets criteria with rate 0.35 + 0.05 m."""
    store = Store(path)
    samples = make_samples(spec)
    dataset = content_hash(["synthetic", spec.benchmark, spec.n_samples, spec.seed])
    store.put_samples(spec.benchmark, dataset, samples)
    judges = ["scripted/judge-a", "scripted/judge-b"] if spec.panel else ["scripted/judge-a"]
    fp_spec = {
        "grader": {"name": "healthbench", "args": {}},
        "templates": {"t": "0" * 16},
        "judges": [{"model": j, "params": {}} for j in judges],
        "scoring": {},
        "benchmark": spec.benchmark,
        "dataset_sha256": dataset,
    }
    fp = content_hash(fp_spec)
    store.put_grader(fp, fp_spec)
    rng = random.Random(spec.seed + 1)
    db = store.db
    for m in range(spec.n_models):
        run = store.ensure_run(
            RunRecord(
                id=f"run{m:02d}",
                benchmark=spec.benchmark,
                benchmark_spec=spec.benchmark,
                model=model_name(m),
                options={"answer_mode": "generate"},
                dataset_sha256=dataset,
                package_version="0.1.0",
                gen_params={},
                data_source="synthetic",
            )
        )
        rate = 0.35 + 0.05 * m
        db.execute("BEGIN")
        values = []
        for i, s in enumerate(samples):
            text = f"Model {m} answer to {s.id}. " + _text(rng, spec.answer_words, i % 7 == 3)
            if spec.xss and m == 0 and i == 0:
                text = "Answer with markup " + XSS
            req = Request(
                provider="scripted",
                model=f"model-{m:02d}",
                messages=s.messages,
                params=GenParams(),
                purpose="answer",
            )
            key = content_hash([run.id, s.id])
            store.put_call(req, Response(key=key, text=text))
            store.put_answer(
                run.id,
                s.id,
                key,
                {"messages": [{"role": "user", "content": s.messages[0].content}]},
            )
            verdicts = []
            for c in s.rubric:
                met = rng.random() < (rate if c.points > 0 else 1 - rate)
                status = "met" if met else "unmet"
                votes = (status, status)
                if spec.panel and rng.random() < 0.05:
                    votes = (status, "unmet" if met else "met")
                if rng.random() < 0.02:
                    status, votes = "unknown", ("unknown",) * len(votes)
                expl = f"The response {'does' if met else 'does not'} address {c.text.split(': ')[-1]}."
                if spec.xss and m == 1 and i == 0 and c.id == "c0":
                    expl = "Judge says " + XSS
                verdicts.append(
                    Verdict(
                        c.id,
                        status,
                        expl,
                        votes=tuple(Vote(judge=j, status=v) for j, v in zip(judges, votes)),
                    )
                )  # type: ignore[arg-type]
            known = [(c, v) for c, v in zip(s.rubric, verdicts) if v.status != "unknown"]
            possible = sum(c.points for c, _ in known if c.points > 0)
            value = (
                max(0.0, min(1.0, sum(c.points for c, v in known if v.status == "met") / possible))
                if possible
                else None
            )
            if value is not None:
                values.append(value)
            store.put_grade(
                run.id, fp, Grade(sample_id=s.id, value=value, verdicts=tuple(verdicts))
            )
        db.execute("COMMIT")
        store.put_result(run.id, fp, _result(spec, samples, run, m, values, fp_spec))
    return store


def _result(
    spec: SynthSpec,
    samples: list[Sample],
    run: RunRecord,
    m: int,
    values: list[float],
    fp_spec: dict,
) -> Result:
    rate = 0.35 + 0.05 * m
    axes = {
        a: Cell(score=round(min(1.0, rate + 0.04 * (k - 2)), 4), n=len(samples))
        for k, a in enumerate(AXES)
    }
    themes = {t: Cell(score=round(rate, 4), n=len(samples) // len(THEMES)) for t in THEMES}
    return Result(
        benchmark=spec.benchmark,
        model=run.model,
        judge="scripted/judge-a",
        metric="overall_score (clipped mean, 0-1)",
        score=sum(values) / len(values) if values else None,
        ci95=mean_ci(values),
        n=len(values),
        n_unscored=len(samples) - len(values),
        breakdown={"axis": axes, "theme": themes},
        fingerprint=fp_spec | {"model": run.model, "answer_mode": "generate", "run_id": run.id},
    )


def scripted_mcq_runs(
    store: Store, data: Path, accuracies: dict[str, float], limit: int | None = None
) -> dict[str, float]:
    """Run MedQA (real format) through the real runner with scripted models of known accuracy.

    Model ``name`` answers question i correctly iff (i * 37 % 100) < 100 * accuracy, so over
    many questions the accuracies are as given and the correct sets are nested (paired).
    Returns the exact accuracy each model gets on the questions run.
    """
    import asyncio

    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.run.config import RunConfig, build_benchmark
    from grandrounds.run.runner import run

    bench = build_benchmark("medqa", {})
    samples = bench.load(data)[:limit] if limit else bench.load(data)
    key_of = {
        bench.prompt(s, RunOptions()).messages[-1].content: (i, str(s.target))
        for i, s in enumerate(samples)
    }
    exact = {}
    for name, acc in accuracies.items():

        def script(req: Request, acc: float = acc) -> str:
            i, key = key_of[req.messages[-1].content]
            wrong = next(x for x in "ABCD" if x != key)
            return f"Answer: {key if (i * 37 % 100) < 100 * acc else wrong}"  # read alike under both protocols

        asyncio.run(
            run(
                store,
                RunConfig(
                    benchmark="medqa",
                    model=f"scripted/{name}",
                    data=data,
                    limit=limit,
                    provider_options={"script": script},
                ),
            )
        )
        exact[name] = sum(1 for i in range(len(samples)) if (i * 37 % 100) < 100 * acc) / len(
            samples
        )
    return exact
