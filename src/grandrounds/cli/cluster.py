"""Past one machine: ``plan`` (the coordinator's manifest), ``merge`` (workers' snapshots into one
store), the launchers' files (``slurm``, ``kube``, ``skypilot``) and ``ray`` (shards mapped over a
Ray cluster), and what ``run --shard`` / ``--snapshot-to`` do around a run."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from grandrounds.cli.common import console, err_console, user_errors
from grandrounds.core.display import safe_text

#: Exit code of a refused merge.
REFUSED = 2
MANIFEST_FORMAT = "grandrounds-plan/1"


# ---- run --shard / --snapshot-to --------------------------------------------------------------
def apply_shard(cfg: Any, shard_text: str | None) -> Any:
    """``cfg`` with its shard parsed (``--shard``) and its per-minute limits divided among the
    shards, each division said on the terminal (N workers would otherwise send N times the limit)."""
    from grandrounds.run.shards import parse_shard, shared_limit

    shard = parse_shard(shard_text)
    if shard is None:
        return cfg
    changes: dict[str, Any] = {"shard": shard}
    for name in ("rpm", "tpm", "judge_rpm", "judge_tpm"):
        value = getattr(cfg, name)
        if value is not None and shard.count > 1:
            changes[name] = shared_limit(value, shard)
            err_console.print(
                f"--{name.replace('_', '-')} {value} is shared by {shard.count} shards: "
                f"this one sends at most {changes[name]} a minute",
                style="yellow",
                markup=False,
            )
    err_console.print(
        f"shard {shard} ({shard.assign}, from {shard.source}): only this shard's samples are asked; "
        "merge the snapshots and run the same command without --shard to settle the run",
        style="dim",
        markup=False,
    )
    return replace(cfg, **changes)


def with_options(judges: tuple[Any, ...], options: dict[str, Any]) -> tuple[Any, ...]:
    """Judges with ``--judge-opt`` options added (checked against each judge's provider)."""
    from grandrounds.providers.base import check_model

    if not options:
        return judges
    return tuple(replace(j, options=check_model(j.spec, {**j.options, **options})) for j in judges)


def shard_line(result: Any) -> str:
    """What a shard says at its end in place of a score (a part is not a result)."""
    extra = result.extra
    return (
        f"{safe_text(result.benchmark)} · {safe_text(result.model)}: shard {extra['shard']} asked "
        f"{int(extra.get('n_shard', 0)):,} of the run's {int(extra.get('n_run', 0)):,} samples "
        "(no score: a part of the run; merge the shards and settle)"
    )


def snapshot_file(store_file: Path, snapshot_dir: Path, shard: Any) -> Path:
    """Where a worker's snapshots go: ``DIR/<store stem>[.shard-I-of-N].db``."""
    suffix = f".shard-{shard.index}-of-{shard.count}" if shard is not None else ""
    return snapshot_dir / f"{store_file.stem}{suffix}.db"


@contextmanager
def snapshots(
    store_file: Path, snapshot_dir: Path | None, every_minutes: float, shard: Any
) -> Iterator[None]:
    """Restore a missing store from its snapshot, then snapshot it every ``every_minutes`` and at
    the end (also on Ctrl-C, SIGTERM or an error)."""
    if snapshot_dir is None:
        yield
        return
    from grandrounds.store.snapshot import Snapshots, restore

    dest = snapshot_file(store_file, snapshot_dir, shard)
    if restore(dest, store_file):
        err_console.print(f"restored {store_file} from its snapshot {dest}", markup=False)
    snaps = Snapshots(store_file, dest, every_minutes * 60)
    try:
        with snaps:
            yield
    finally:
        for e in snaps.errors:
            err_console.print(f"snapshot failed: {safe_text(e)}", style="red", markup=False)
        if snaps.taken:
            err_console.print(f"snapshot: {dest}", style="dim", markup=False)


# ---- plan -------------------------------------------------------------------------------------
def plan_runs(cfgs: list[Any], shards: int, assign: str) -> dict[str, Any]:
    """The coordinator's manifest: each run's id, dataset hash, samples and planned calls, and N."""
    import grandrounds
    from grandrounds.run.plan import plan

    runs = []
    for cfg in cfgs:
        p = plan(None, cfg)
        runs.append(
            {
                "run_id": p.run_id,
                "benchmark": p.benchmark,
                "model": cfg.model,
                "dataset_sha256": _dataset_of(cfg),
                "n_samples": p.n_samples,
                "planned_calls": p.to_make,
            }
        )
    return {
        "format": MANIFEST_FORMAT,
        "package_version": grandrounds.__version__,
        "shards": shards,
        "assign": assign,
        "runs": runs,
    }


def _dataset_of(cfg: Any) -> str:
    from grandrounds.run.config import build_benchmark, check_run
    from grandrounds.sources.data import resolve

    cfg = check_run(cfg)
    bench = build_benchmark(cfg.benchmark, cfg.bench_params)
    return bench.dataset_hash(resolve(bench, cfg.data))


def read_manifest(path: Path) -> dict[str, Any]:
    from grandrounds.core.errors import ConfigError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--plan {path}: not a readable plan ({e})") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ConfigError(
            f"--plan {path}: not a plan written by `grandrounds plan` ({MANIFEST_FORMAT})"
        )
    return data


# ---- launchers ----------------------------------------------------------------------------------
def worker_command(run_args: list[str], store: str, snapshot_dir: str, shard: str) -> str:
    """The shell command one worker runs: the user's ``run`` with its shard, store and snapshots.
    ``store`` is shell text as given (it may name the node's variables, quoted by the caller)."""
    args = list(run_args)
    if args and args[0] == "run":
        args = args[1:]
    return (
        shlex.join(["grandrounds", "run", *args, "--shard", shard])
        + f" --store {store} --snapshot-to {shlex.quote(snapshot_dir)}"
    )


def settle_command(run_args: list[str], store: str, snapshot_dir: str, out: str) -> str:
    args = list(run_args)
    if args and args[0] == "run":
        args = args[1:]
    merge = f"grandrounds merge {shlex.quote(snapshot_dir)}/*.db --into {shlex.quote(store)}"
    settle = shlex.join(["grandrounds", "run", *args, "--store", store, "--out", out])
    return f"{merge}\n{settle}"


def slurm_files(
    run_args: list[str],
    shards: int,
    parallel: int,
    snapshot_dir: str,
    store: str,
    out: str,
    partition: str | None = None,
    time_limit: str | None = None,
    extra: list[str] | None = None,
    grace: int = 120,
) -> dict[str, str]:
    """``shards.sbatch`` (a job array, one task per shard, requeued on preemption, SIGTERM
    ``grace`` s before the end so the worker snapshots), ``settle.sbatch`` (merge and settle) and
    ``submit.sh`` (the array, then the settle job ``--dependency=afterok`` on it)."""
    head = ["#!/bin/bash"]
    opts = [f"#SBATCH --partition={partition}"] if partition else []
    if time_limit:
        opts.append(f"#SBATCH --time={time_limit}")
    opts += [f"#SBATCH {x}" for x in (extra or [])]
    worker = worker_command(
        run_args,
        '"${GRANDROUNDS_LOCAL:-/tmp}/shard-${SLURM_ARRAY_TASK_ID}.db"',
        snapshot_dir,
        "auto",
    )
    shards_sh = "\n".join(
        [
            *head,
            "#SBATCH --job-name=grandrounds-shards",
            f"#SBATCH --array=0-{shards - 1}%{parallel}",
            "#SBATCH --requeue",
            f"#SBATCH --signal=B:TERM@{grace}",
            "#SBATCH --output=grandrounds-shard-%a.out",
            *opts,
            "set -euo pipefail",
            "# SIGTERM from --signal (or a preemption) reaches grandrounds itself: it snapshots and stops;",
            "# a requeued task restores its store from the snapshot and goes on.",
            f"exec {worker}",
            "",
        ]
    )
    settle_sh = "\n".join(
        [
            *head,
            "#SBATCH --job-name=grandrounds-settle",
            "#SBATCH --output=grandrounds-settle.out",
            *opts,
            "set -euo pipefail",
            settle_command(run_args, store, snapshot_dir, out),
            "",
        ]
    )
    submit = "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            "jid=$(sbatch --parsable shards.sbatch)",
            'sbatch --parsable --dependency=afterok:"${jid%%;*}" settle.sbatch',
            "",
        ]
    )
    return {"shards.sbatch": shards_sh, "settle.sbatch": settle_sh, "submit.sh": submit}


def kube_manifest(
    run_args: list[str], shards: int, parallel: int, image: str, claim: str, name: str
) -> dict[str, Any]:
    """A Kubernetes Indexed Job: ``shards`` completions, ``parallel`` at once, each pod's
    ``JOB_COMPLETION_INDEX`` its shard (the count in ``GRANDROUNDS_SHARDS``), its store on the
    pod's disk and its snapshots on the claim mounted at /snapshots."""
    worker = worker_command(run_args, "/work/shard.db", "/snapshots", "auto")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": parallel,
            "backoffLimitPerIndex": 3,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 120,
                    "containers": [
                        {
                            "name": "shard",
                            "image": image,
                            "command": ["/bin/sh", "-c", f"exec {worker}"],
                            "env": [{"name": "GRANDROUNDS_SHARDS", "value": str(shards)}],
                            "volumeMounts": [
                                {"name": "snapshots", "mountPath": "/snapshots"},
                                {"name": "work", "mountPath": "/work"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "snapshots", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "work", "emptyDir": {}},
                    ],
                }
            },
        },
    }


def skypilot_task(
    run_args: list[str], shards: int, bucket: str, accelerators: str | None
) -> dict[str, Any]:
    """A SkyPilot task: ``shards`` nodes, each ``SKYPILOT_NODE_RANK`` its shard, snapshots in
    ``bucket`` mounted at /snapshots."""
    worker = worker_command(run_args, "$HOME/shard.db", "/snapshots", "auto")
    task: dict[str, Any] = {
        "name": "grandrounds-shards",
        "num_nodes": shards,
        "file_mounts": {"/snapshots": {"source": bucket, "mode": "MOUNT"}},
        "setup": "pip install grandrounds",
        "run": worker + "\n",
    }
    if accelerators:
        task["resources"] = {"accelerators": accelerators}
    return task


def _write_files(out_dir: Path, files: dict[str, str]) -> None:
    from grandrounds.core.files import output_dir, write_text

    output_dir(out_dir)
    for name, text in files.items():
        write_text(out_dir / name, text)
        if name.endswith((".sh", ".sbatch")):
            (out_dir / name).chmod(0o755)
        console.print(f"wrote {out_dir / name}", markup=False, highlight=False)


# ---- commands -------------------------------------------------------------------------------------
def merge(
    snapshots: list[Path] = typer.Argument(..., help="stores to merge (workers' snapshots)"),
    into: Path = typer.Option(..., "--into", help="the store they are merged into"),
    plan: Path | None = typer.Option(
        None,
        "--plan",
        help="the manifest `grandrounds plan` wrote: refuses shards of another plan",
    ),
    allow_missing: bool = typer.Option(
        False,
        "--allow-missing",
        help="merge although a shard is missing (its calls are asked when settling)",
    ),
    allow_open_batches: bool = typer.Option(
        False, "--allow-open-batches", help="merge stores with batches not yet collected"
    ),
) -> None:
    """Merge stores by content into one (calls by key, images by hash, reviews once; leases
    never); refuses a missing shard, a shard of another plan, version or dataset, and open
    batches. Then the ordinary `run` on the merged store settles the run."""
    from grandrounds.store.merge import merge_stores, refusals

    with user_errors():
        manifest = read_manifest(plan) if plan is not None else None
        sources = [p for p in snapshots if p.resolve() != into.resolve()]
        why = refusals(sources, manifest, allow_missing, allow_open_batches)
        if why:
            for line in why:
                sys.stderr.write(f"refused: {safe_text(line)}\n")
            raise typer.Exit(REFUSED)
        report = merge_stores(into, sources)
    _print_merge(report, sources, into)


def _print_merge(report: Any, sources: list[Path], into: Path) -> None:
    """What a merge did, its conflicts, and the shards the merged store holds."""
    from grandrounds.store import Store
    from grandrounds.store.merge import describe

    for line in describe(report, sources):
        console.print(line, markup=False, highlight=False)
    if report.conflicts:
        console.print(
            f"{len(report.conflicts)} key(s) with two different successes: the first merged is kept",
            style="yellow",
            markup=False,
        )
        for key, purpose, model in report.conflicts[:10]:
            console.print(
                f"  {key[:16]} {purpose} {safe_text(model)}", markup=False, highlight=False
            )
    with Store(into, readonly=True) as st:
        rows = st.shard_rows()
    for r in rows:
        console.print(
            f"  run {r.run_id} shard {r.shard}/{r.n_shards}: {r.n_graded}/{r.n_samples} graded, {r.state}",
            markup=False,
            highlight=False,
        )


def plan_command(
    benchmarks: list[str] = typer.Argument(..., help="benchmark names"),
    model: list[str] = typer.Option(..., "--model", "-m", help="PROVIDER/MODEL; repeatable"),
    shards: int = typer.Option(
        ..., "--shards", min=1, help="N: how many parts each run is cut into"
    ),
    out: Path = typer.Option(Path("plan.json"), "--out", help="the manifest written"),
    data: Path | None = typer.Option(None, "--data", help="data file or folder (one benchmark)"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="the first N questions"),
    base_url: str = typer.Option("", "--base-url", help="the models' endpoint, as run takes it"),
    judge: list[str] = typer.Option([], "--judge", help="a judge, as run takes it; repeatable"),
    simulator: str = typer.Option(
        "", "--simulator", help="the model playing an agent benchmark's patient"
    ),
    param: list[str] = typer.Option([], "--param", help="KEY=VALUE benchmark parameter"),
    model_opt: list[str] = typer.Option([], "--model-opt", help="KEY=VALUE provider option"),
    assign: str = typer.Option("hash", "--assign", help="hash | cost"),
) -> None:
    """The coordinator's manifest: each run's id, dataset hash, samples and planned calls, and
    the number of shards; `merge --plan` checks shards against it."""
    from grandrounds.cli.common import judge_configs, parse_params
    from grandrounds.core.files import write_text
    from grandrounds.run.config import RunConfig

    with user_errors():
        cfgs = [
            RunConfig(
                benchmark=b,
                model=m,
                data=data,
                limit=limit,
                base_url=base_url,
                simulator=simulator,
                judges=judge_configs(judge, "", False),
                bench_params=parse_params(param),
                provider_options=parse_params(model_opt, "--model-opt"),
            )
            for b in benchmarks
            for m in model
        ]
        manifest = plan_runs(cfgs, shards, assign)
        write_text(out, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    for r in manifest["runs"]:
        console.print(
            f"{r['benchmark']} · {r['model']}: run {r['run_id']}, {r['n_samples']:,} samples, "
            f"{r['planned_calls']:,} calls planned, {shards} shards",
            markup=False,
            highlight=False,
        )
    console.print(f"wrote {out}", markup=False, highlight=False)


def slurm(
    ctx: typer.Context,
    shards: int = typer.Option(..., "--shards", min=1, help="how many shards"),
    parallel: int = typer.Option(0, "--parallel", min=0, help="tasks at once (%K; 0: all)"),
    snapshot_to: str = typer.Option(..., "--snapshot-to", help="shared folder for snapshots"),
    store: str = typer.Option("grandrounds.db", "--store", help="the merged store"),
    out: str = typer.Option("results", "--out", help="the settled run's outputs"),
    dest: Path = typer.Option(Path("slurm"), "--dest", help="folder the scripts are written to"),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition"),
    time_limit: str | None = typer.Option(None, "--time", help="Slurm time limit per task"),
) -> None:
    """Write Slurm job-array scripts for the `run ...` given after `--`: shards.sbatch,
    settle.sbatch, submit.sh."""
    files = slurm_files(
        list(ctx.args),
        shards,
        parallel or shards,
        snapshot_to,
        store,
        out,
        partition,
        time_limit,
    )
    _write_files(dest, files)


def kube(
    ctx: typer.Context,
    shards: int = typer.Option(..., "--shards", min=1, help="how many shards"),
    parallel: int = typer.Option(0, "--parallel", min=0, help="pods at once (0: all)"),
    image: str = typer.Option(..., "--image", help="container image with grandrounds"),
    claim: str = typer.Option(..., "--claim", help="PersistentVolumeClaim for snapshots"),
    name: str = typer.Option("grandrounds-shards", "--name", help="the Job's name"),
    dest: Path = typer.Option(Path("job.yaml"), "--dest", help="the manifest written"),
) -> None:
    """Write a Kubernetes Indexed Job for the `run ...` given after `--`."""
    import yaml

    doc = kube_manifest(list(ctx.args), shards, parallel or shards, image, claim, name)
    _write_files(dest.parent, {dest.name: yaml.safe_dump(doc, sort_keys=False)})


def skypilot(
    ctx: typer.Context,
    shards: int = typer.Option(..., "--shards", min=1, help="how many shards"),
    bucket: str = typer.Option(..., "--bucket", help="e.g. s3://team-evals/snapshots"),
    accelerators: str | None = typer.Option(
        None, "--accelerators", help="SkyPilot accelerators, e.g. A100:1"
    ),
    dest: Path = typer.Option(Path("task.yaml"), "--dest", help="the task file written"),
) -> None:
    """Write a SkyPilot task for the `run ...` given after `--`."""
    import yaml

    doc = skypilot_task(list(ctx.args), shards, bucket, accelerators)
    _write_files(dest.parent, {dest.name: yaml.safe_dump(doc, sort_keys=False)})


def ray_command(
    ctx: typer.Context,
    shards: int = typer.Option(..., "--shards", min=1, help="how many shards"),
    snapshot_to: Path = typer.Option(..., "--snapshot-to", help="shared folder for snapshots"),
    into: Path = typer.Option(..., "--into", help="the merged store"),
    address: str | None = typer.Option(None, "--address", help="Ray cluster (default: ray.init's)"),
) -> None:
    """Run the `run ...` given after `--` as SHARDS tasks over a Ray cluster (each a
    grandrounds process with its own store), then merge their snapshots into --into."""
    from grandrounds.cli.ray_driver import run_shards

    with user_errors():
        codes = run_shards(list(ctx.args), shards, snapshot_to, address)
    for i, code in enumerate(codes):
        console.print(f"shard {i}/{shards}: exit {code}", markup=False, highlight=False)
    if any(codes):
        sys.stderr.write("some shards failed: run the same command again to redo them\n")
        raise typer.Exit(1)
    merge(sorted(snapshot_to.glob("*.db")), into, None, False, False)


_PASS_ON = {"allow_extra_args": True, "ignore_unknown_options": True}


def register(app: typer.Typer, store_path: Callable[[Path | None], Path], StoreOpt: Any) -> None:
    """Add ``plan``, ``merge``, ``slurm``, ``kube``, ``skypilot`` and ``ray`` to ``app``."""
    app.command("merge")(merge)
    app.command("plan")(plan_command)
    app.command("slurm", context_settings=_PASS_ON)(slurm)
    app.command("kube", context_settings=_PASS_ON)(kube)
    app.command("skypilot", context_settings=_PASS_ON)(skypilot)
    app.command("ray", context_settings=_PASS_ON)(ray_command)
