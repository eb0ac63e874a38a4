"""Shards over a Ray cluster: one Ray task per shard, each running a grandrounds worker process
(``run ... --shard i/N``) with its own store on the node's disk and its snapshots in a shared
folder. Ray only places the processes; the harness is never run inside Ray (``ray`` is an
optional extra: ``pip install grandrounds[ray]``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from grandrounds.core.errors import ConfigError


def shard_argv(
    run_args: list[str], index: int, count: int, store: Path, snapshot_to: Path
) -> list[str]:
    """The worker's command line (this interpreter's ``-m grandrounds``)."""
    args = list(run_args)
    if args and args[0] == "run":
        args = args[1:]
    return [
        sys.executable,
        "-m",
        "grandrounds",
        "run",
        *args,
        "--shard",
        f"{index}/{count}",
        "--store",
        str(store),
        "--snapshot-to",
        str(snapshot_to),
    ]


def _run_shard(run_args: list[str], index: int, count: int, snapshot_to: str) -> tuple[int, str]:
    """Run one worker, its store in a folder of the node it runs on; (exit code, the end of its
    error output)."""
    store = Path(tempfile.mkdtemp(prefix="grandrounds-shard-")) / "shard.db"
    argv = shard_argv(run_args, index, count, store, Path(snapshot_to))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stderr[-2000:]


def run_shards(
    run_args: list[str],
    count: int,
    snapshot_to: Path,
    address: str | None = None,
    init: dict[str, Any] | None = None,
) -> list[int]:
    """Map the ``count`` shards of ``run_args`` over Ray and wait for them; their exit codes.
    ``init``: keyword arguments for ``ray.init`` (a test's temporary folders)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "grandrounds ray needs the ray package: pip install 'grandrounds[ray]'"
        ) from None
    snapshot_to.mkdir(parents=True, exist_ok=True)
    started = False
    if not ray.is_initialized():
        ray.init(address=address, **(init or {}))
        started = True
    try:
        task = ray.remote(num_cpus=0)(_run_shard)
        refs = [task.remote(run_args, i, count, str(snapshot_to)) for i in range(count)]
        results = ray.get(refs)
    finally:
        if started:
            ray.shutdown()
    for i, (code, err) in enumerate(results):
        if code:
            sys.stderr.write(f"shard {i}/{count} exited {code}: {err.strip().splitlines()[-1:]}\n")
    return [code for code, _ in results]
