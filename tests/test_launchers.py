"""Launchers on real engines: the files `grandrounds slurm`, `kube` and `skypilot` write, read back
structurally; a Slurm job array on a real single-node cluster (slurmctld and slurmd on localhost)
and shards mapped over a real local Ray cluster, each ending in the merged, settled run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grandrounds.cli.cluster import kube_manifest, skypilot_task, slurm_files
from tests.conftest import _missing, shared_file
from tests.test_resume_and_bad_input import ROOT
from tests.test_shards import _env, _run_id, answer, gr

MEDQA = ("medqa", "phrases_no_exclude_test.jsonl")
RUN = ["run", "medqa", "--limit", "30", "-m", "openai/m"]


def test_slurm_scripts_are_a_requeued_array_then_an_afterok_settle(tmp_path):
    files = slurm_files(
        ["run", "medqa", "-m", "openai/m", "--base-url", "http://node:8000/v1"],
        8,
        3,
        "/shared/snaps",
        "/shared/merged.db",
        "/shared/out",
        partition="gpu",
        time_limit="04:00:00",
    )
    shards = files["shards.sbatch"].splitlines()
    assert shards[0] == "#!/bin/bash"
    for line in (
        "#SBATCH --array=0-7%3",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:TERM@120",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=04:00:00",
    ):
        assert line in shards
    worker = shards[-1]
    assert worker.startswith(
        "exec grandrounds run medqa -m openai/m --base-url http://node:8000/v1"
    )
    assert "--shard auto" in worker and "--snapshot-to /shared/snaps" in worker
    assert '--store "${GRANDROUNDS_LOCAL:-/tmp}/shard-${SLURM_ARRAY_TASK_ID}.db"' in worker
    settle = files["settle.sbatch"]
    assert "grandrounds merge /shared/snaps/*.db --into /shared/merged.db" in settle
    assert "--store /shared/merged.db --out /shared/out" in settle and "--shard" not in settle
    assert 'sbatch --parsable --dependency=afterok:"${jid%%;*}" settle.sbatch' in files["submit.sh"]
    for text in files.values():  # each is a shell script bash can parse
        path = tmp_path / "x.sh"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_kubernetes_indexed_job_and_skypilot_task(tmp_path):
    run = ["run", "healthbench", "-m", "openai/m", "--model-opt", "endpoint_id=ward llm"]
    r = gr(
        "kube", "--shards", "6", "--parallel", "2", "--image", "ghcr.io/team/gr:1",
        "--claim", "snaps", "--dest", str(tmp_path / "job.yaml"), "--", *run,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = yaml.safe_load((tmp_path / "job.yaml").read_text())
    assert job == kube_manifest(run, 6, 2, "ghcr.io/team/gr:1", "snaps", "grandrounds-shards")
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 6
    assert spec["parallelism"] == 2
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert {"name": "GRANDROUNDS_SHARDS", "value": "6"} in c["env"]
    shell = c["command"][2]
    assert "--shard auto" in shell and "'endpoint_id=ward llm'" in shell
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["snapshots"]["persistentVolumeClaim"]["claimName"] == "snaps"
    assert f"--snapshot-to {mounts['snapshots']}" in shell
    # the pod's environment as Kubernetes sets it gives the shard
    from grandrounds.run.shards import parse_shard

    assert (
        str(parse_shard("auto", {"JOB_COMPLETION_INDEX": "5", "GRANDROUNDS_SHARDS": "6"})) == "5/6"
    )

    r = gr(
        "skypilot", "--shards", "4", "--bucket", "s3://team/snaps", "--accelerators", "A100:1",
        "--dest", str(tmp_path / "task.yaml"), "--", *run,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    task = yaml.safe_load((tmp_path / "task.yaml").read_text())
    assert task == skypilot_task(run, 4, "s3://team/snaps", "A100:1")
    assert task["num_nodes"] == 4 and task["resources"] == {"accelerators": "A100:1"}
    assert task["file_mounts"]["/snapshots"] == {"source": "s3://team/snaps", "mode": "MOUNT"}
    assert "--shard auto" in task["run"] and "--snapshot-to /snapshots" in task["run"]
    assert str(parse_shard("auto", {"SKYPILOT_NODE_RANK": "3", "SKYPILOT_NUM_NODES": "4"})) == "3/4"


# ---- a real single-node Slurm cluster -----------------------------------------------------------
def _cannot_run_slurm() -> str | None:
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(b) is None]
    if missing:
        return f"Slurm is not installed here ({', '.join(missing)} missing: apt-get install -y slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd runs jobs as their users)"
    return None


def _skip_or_fail(why: str) -> None:
    """Skip with the reason, or fail under CI=true (which installs the engines)."""
    _missing(why)


@pytest.fixture
def slurm_cluster(tmp_path):
    why = _cannot_run_slurm()
    if why:
        _skip_or_fail(why)
    d = tmp_path / "slurm"
    script = ROOT / "scripts" / "ci" / "slurm.sh"
    try:
        r = subprocess.run(
            ["bash", str(script), "start", str(d)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        subprocess.run(["bash", str(script), "stop", str(d)], timeout=60)
        _skip_or_fail("the local Slurm cluster did not start within 120 s")
    if r.returncode != 0:
        _skip_or_fail(f"the local Slurm cluster did not start: {r.stderr.strip()[-300:]}")
    try:
        yield d / "slurm.conf"
    finally:
        subprocess.run(["bash", str(script), "stop", str(d)], timeout=60)


def _wrapper(tmp_path: Path) -> Path:
    """A `grandrounds` on PATH for the jobs (this checkout, this interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "grandrounds"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m grandrounds "$@"\n')
    exe.chmod(0o755)
    return bin_dir


@pytest.mark.slurm
def test_a_real_slurm_job_array_merges_and_settles(slurm_cluster, tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    with LoopbackServer(answer) as srv:
        run = [*RUN, "--data", str(data), "--base-url", srv.base_url]
        one = gr(*run, "--store", str(tmp_path / "one.db"), "--out", str(tmp_path / "one"))
        assert one.returncode == 0, one.stderr
        before = srv.stats.requests
        dest, snaps, merged, out = (tmp_path / n for n in ("jobs", "snaps", "merged.db", "out"))
        g = gr(
            "slurm", "--shards", "3", "--parallel", "2", "--snapshot-to", str(snaps),
            "--store", str(merged), "--out", str(out), "--dest", str(dest), "--", *run,
        )  # fmt: skip
        assert g.returncode == 0, g.stderr
        env = _env() | {
            "SLURM_CONF": str(slurm_cluster),
            "PATH": f"{_wrapper(tmp_path)}:/usr/bin:/bin",
            "GRANDROUNDS_LOCAL": str(tmp_path / "local"),
        }
        (tmp_path / "local").mkdir()
        sub = subprocess.run(
            ["bash", str(dest / "submit.sh")], env=env, capture_output=True, text=True, timeout=60
        )
        assert sub.returncode == 0, sub.stderr
        settle_id = sub.stdout.split()[-1]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            q = subprocess.run(
                ["squeue", "-h", "-j", settle_id], env=env, capture_output=True, text=True
            )
            if q.returncode == 0 and not q.stdout.strip() and (out / "results.json").exists():
                break
            time.sleep(1)
        logs = {p.name: p.read_text() for p in dest.glob("*.out")}
        assert (out / "results.json").exists(), logs
        assert srv.stats.requests - before == 30  # each question asked by one array task
    assert sorted(p.name for p in snaps.glob("*.db")) == [
        f"shard-{i}.shard-{i}-of-3.db" for i in range(3)
    ]
    settle_log = logs["grandrounds-settle.out"]
    assert "0 calls made, 30 from the store" in settle_log
    assert _run_id(settle_log) == _run_id(one.stderr)
    for name in ("results.json", "samples.jsonl"):
        assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


# ---- a real local Ray cluster -------------------------------------------------------------------
@pytest.mark.ray
def test_shards_mapped_over_a_local_ray_cluster(tmp_path):
    try:
        import ray
    except ImportError:
        _skip_or_fail("ray is not installed (pip install 'grandrounds[ray]')")
    from grandrounds.cli.ray_driver import run_shards
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with LoopbackServer(answer) as srv:
        run = [*RUN, "--data", str(data), "--base-url", srv.base_url]
        one = gr(*run, "--store", str(tmp_path / "one.db"), "--out", str(tmp_path / "one"))
        assert one.returncode == 0, one.stderr
        before = srv.stats.requests
        snaps = tmp_path / "snaps"
        old = dict(os.environ)
        os.environ.update(
            {
                k: v
                for k, v in _env().items()
                if k in ("PYTHONPATH", "GRANDROUNDS_REFERENCE", "HOME")
            }
        )
        try:
            codes = run_shards(
                run,
                4,
                snaps,
                init={
                    "num_cpus": 2,
                    "_temp_dir": str(Path("/tmp") / f"ray-{os.getpid()}"),
                    "include_dashboard": False,
                    "log_to_driver": False,
                },
            )
        finally:
            os.environ.clear()
            os.environ.update(old)
            shutil.rmtree(Path("/tmp") / f"ray-{os.getpid()}", ignore_errors=True)
        assert codes == [0, 0, 0, 0]
        assert srv.stats.requests - before == 30
        merged = tmp_path / "merged.db"
        m = gr("merge", *map(str, sorted(snaps.glob("*.db"))), "--into", str(merged))
        assert m.returncode == 0, m.stderr
        settle = gr(*run, "--store", str(merged), "--out", str(tmp_path / "merged"))
        assert settle.returncode == 0, settle.stderr
        assert srv.stats.requests - before == 30 and "0 calls made" in settle.stderr
    assert _run_id(settle.stderr) == _run_id(one.stderr)
    for name in ("results.json", "samples.jsonl"):
        assert (tmp_path / "merged" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert not ray.is_initialized()
    assert json.loads((tmp_path / "merged" / "results.json").read_text())["results"][0]["n"] == 30
