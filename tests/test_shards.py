"""Shards of a run on separate workers, their snapshots merged by content, then settled: the same
run id, 0 calls, and outputs byte-identical to one process's."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Sample
from grandrounds.run.shards import (
    Shard,
    balanced,
    group_key,
    parse_shard,
    select,
    shard_of,
    shared_limit,
)
from tests.conftest import offline_env, shared_file
from tests.test_resume_and_bad_input import ROOT

MEDQA = ("medqa", "phrases_no_exclude_test.jsonl")


def _env() -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "COLUMNS": "200",
        **offline_env(),
    }


def gr(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=timeout,
    )


def answer(body: dict) -> str:
    """A deterministic, varied reply: the letter picked by the prompt's length."""
    text = json.dumps(body.get("messages"))
    return "Answer: " + "ABCD"[len(text) % 4]


# ---- membership ---------------------------------------------------------------------------------
def _samples(n: int) -> list[Sample]:
    return [Sample(id=f"q{i}", benchmark="t", messages=(), target="A") for i in range(n)]


def _groups(samples: list[Sample]) -> list[list[tuple[int, Sample]]]:
    return [[(i, s)] for i, s in enumerate(samples)]


def test_membership_is_a_partition_independent_of_record_order():
    samples = _samples(200)
    parts = [
        {g[0][1].id for g in select(_groups(samples), "d" * 64, Shard(i, 4))} for i in range(4)
    ]
    assert sum(len(p) for p in parts) == 200 and set().union(*parts) == {s.id for s in samples}
    assert all(30 <= len(p) <= 70 for p in parts), [len(p) for p in parts]
    shuffled = list(reversed(samples))
    again = [
        {g[0][1].id for g in select(_groups(shuffled), "d" * 64, Shard(i, 4))} for i in range(4)
    ]
    assert again == parts
    # another dataset hash: another partition (membership follows the data, not the position)
    other = [
        {g[0][1].id for g in select(_groups(samples), "e" * 64, Shard(i, 4))} for i in range(4)
    ]
    assert other != parts


def test_a_dialogue_stays_together():
    turns = [
        Sample(id=f"d{d}-t{t}", benchmark="t", messages=(), target="", group=f"d{d}", turn=t)
        for d in range(20)
        for t in range(3)
    ]
    keys = {group_key([s]) for s in turns}
    assert len(keys) == 20
    for d in range(20):
        assert len({shard_of("x", group_key([s]), 3) for s in turns if s.group == f"d{d}"}) == 1


def test_cost_balanced_assignment_is_balanced_and_order_free():
    costs = [(f"s:{i}", float(1 + (i * 37) % 50)) for i in range(300)]
    a = balanced("d", costs, 4)
    b = balanced("d", list(reversed(costs)), 4)
    assert a == b
    loads = [sum(c for k, c in costs if a[k] == i) for i in range(4)]
    assert max(loads) / (sum(loads) / 4) < 1.01
    hashed = [sum(c for k, c in costs if shard_of("d", k, 4) == i) for i in range(4)]
    assert max(loads) <= max(hashed)


def test_parse_shard_forms_and_the_launchers_environment():
    assert parse_shard("2/4") == Shard(2, 4)
    assert parse_shard("0/3:cost") == Shard(0, 3, "cost")
    assert parse_shard(None) is None
    for bad in ("4/4", "-1/3", "x/3", "3", "1/0", "1/2:fast"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)
    slurm = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"}
    assert parse_shard("auto", slurm) == Shard(1, 3, source="SLURM_ARRAY_TASK_ID")
    assert parse_shard("auto", {"JOB_COMPLETION_INDEX": "2", "GRANDROUNDS_SHARDS": "8"}) == Shard(
        2, 8, source="JOB_COMPLETION_INDEX"
    )
    assert parse_shard("auto/5", {"JOB_COMPLETION_INDEX": "4"}).count == 5  # type: ignore[union-attr]
    assert parse_shard("auto", {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2"}) == Shard(
        1, 2, source="SKYPILOT_NODE_RANK"
    )
    with pytest.raises(ConfigError, match="names no shard count"):
        parse_shard("auto", {"JOB_COMPLETION_INDEX": "0"})
    with pytest.raises(ConfigError, match="no launcher"):
        parse_shard("auto", {})
    with pytest.raises(ConfigError, match="expected 0 <= index < count"):
        parse_shard("auto", {"SKYPILOT_NODE_RANK": "2", "SKYPILOT_NUM_NODES": "2"})


def test_limits_are_divided_among_shards():
    from grandrounds.run.limits import TokenLimits

    assert shared_limit(600, Shard(0, 4)) == 150
    assert shared_limit(3, Shard(0, 4)) == 1
    assert shared_limit("input=400000,output=80000", Shard(1, 4)) == TokenLimits(
        None, 100000, 20000
    )
    assert shared_limit(600, None) == 600


# ---- the whole flow on real MedQA -------------------------------------------------------------
def _run(data: Path, url: str, store: Path, *extra: str) -> subprocess.CompletedProcess:
    return gr(
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "40",
        "--model",
        "openai/m",
        "--base-url",
        url,
        "--store",
        str(store),
        *extra,
    )


def _run_id(stderr: str) -> str:
    return stderr.split(": run ", 1)[1].split()[0]


def test_four_shards_merge_and_settle_as_one_run(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    with LoopbackServer(answer) as srv:
        one = _run(data, srv.base_url, tmp_path / "one.db", "--out", str(tmp_path / "one"))
        assert one.returncode == 0, one.stderr
        assert srv.stats.requests == 40
        before = srv.stats.requests
        snaps = tmp_path / "snaps"
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "grandrounds",
                    "run",
                    "medqa",
                    "--data",
                    str(data),
                    "--limit",
                    "40",
                    "--model",
                    "openai/m",
                    "--base-url",
                    srv.base_url,
                    "--store",
                    str(tmp_path / f"w{i}" / "local.db"),
                    "--shard",
                    f"{i}/4",
                    "--snapshot-to",
                    str(snaps),
                    "--rpm",
                    "4000",
                ],
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
        assert "--rpm 4000 is shared by 4 shards: this one sends at most 1000" in outs[0][1]
        for i, (stdout, err) in enumerate(outs):  # a part says its counts, never a score
            assert f"shard {i}/4 asked " in err and "of the run's 40 samples (no score" in err
            assert "accuracy" not in stdout + err
        shard_requests = srv.stats.requests - before
        assert shard_requests == 40  # each question asked by exactly one shard
        snapshots = sorted(snaps.glob("*.db"))
        assert [p.name for p in snapshots] == [f"local.shard-{i}-of-4.db" for i in range(4)]
        counts = []
        for p in snapshots:
            with sqlite3.connect(p) as db:
                counts.append(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
                assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
                (state,) = db.execute("SELECT state FROM shards").fetchone()
                assert state == "done"
        assert sum(counts) == 40 and all(c > 0 for c in counts)
        assert {_run_id(o[1]) for o in outs} == {_run_id(one.stderr)}

        merged = tmp_path / "merged.db"
        m = gr("merge", *map(str, snapshots), "--into", str(merged))
        assert m.returncode == 0, m.stderr
        assert "40 calls" in m.stdout and "shard 3/4: " in m.stdout
        with sqlite3.connect(merged) as db:
            assert db.execute("SELECT COUNT(DISTINCT key) FROM calls").fetchone()[0] == 40
            assert db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0
        before = srv.stats.requests
        settle = _run(data, srv.base_url, merged, "--out", str(tmp_path / "merged"))
        assert settle.returncode == 0, settle.stderr
        assert srv.stats.requests == before  # settles with 0 calls
    assert _run_id(settle.stderr) == _run_id(one.stderr)
    for name in ("results.json", "samples.jsonl"):
        assert (tmp_path / "merged" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    # a merged store never lists a shard's partial result: only the settled whole
    with sqlite3.connect(merged) as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 1


def test_merge_refusals_one_line_each(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    snaps = tmp_path / "snaps"
    with LoopbackServer(answer) as srv:
        for i in (0, 1):
            r = _run(
                data,
                srv.base_url,
                tmp_path / f"w{i}.db",
                "--shard",
                f"{i}/3",
                "--snapshot-to",
                str(snaps),
            )
            assert r.returncode == 0, r.stderr
        other = _run(
            data,
            srv.base_url,
            tmp_path / "x.db",
            "--shard",
            "0/2",
            "--snapshot-to",
            str(snaps / "x"),
        )
        assert other.returncode == 0, other.stderr
        plan = tmp_path / "plan.json"
        p = gr(
            "plan",
            "medqa",
            "-m",
            "openai/m",
            "--data",
            str(data),
            "--limit",
            "40",
            "--base-url",
            srv.base_url,
            "--shards",
            "3",
            "--out",
            str(plan),
        )
        assert p.returncode == 0, p.stderr
    manifest = json.loads(plan.read_text())
    assert manifest["shards"] == 3 and manifest["runs"][0]["n_samples"] == 40
    assert manifest["runs"][0]["planned_calls"] == 40
    assert manifest["runs"][0]["run_id"] == _run_id(other.stderr)
    two = sorted(snaps.glob("*.db"))
    into = tmp_path / "m.db"
    missing = gr("merge", *map(str, two), "--into", str(into))
    assert missing.returncode == 2
    lines = [x for x in missing.stderr.splitlines() if x]
    assert lines == [
        f"refused: run {manifest['runs'][0]['run_id']}: shard 2/3 is missing (no store given holds it); "
        "pass --allow-missing to merge the rest and ask its calls when settling"
    ]
    assert not into.exists()  # nothing written on a refusal
    foreign = gr(
        "merge",
        *map(str, two),
        str(snaps / "x" / "x.shard-0-of-2.db"),
        "--into",
        str(into),
        "--plan",
        str(plan),
    )
    assert foreign.returncode == 2
    assert any(
        "cut into 2 parts, the plan into 3 (another plan)" in x for x in foreign.stderr.splitlines()
    )
    # another package version: a shard row edited as an older release would have written it
    old = tmp_path / "old.db"
    old.write_bytes(two[0].read_bytes())
    with sqlite3.connect(old) as db:
        db.execute("UPDATE shards SET package_version = '0.0.1'")
    ver = gr("merge", str(old), str(two[1]), "--into", str(into), "--allow-missing")
    assert ver.returncode == 2 and "shards written by grandrounds 0.0.1 and" in ver.stderr
    # an open batch
    opened = tmp_path / "open.db"
    opened.write_bytes(two[1].read_bytes())
    with sqlite3.connect(opened) as db:
        db.execute(
            "INSERT INTO batches (provider, endpoint, batch_id, state, keys_json, created_at, updated_at) "
            "VALUES ('openai', 'https://api.openai.com/v1', 'batch_abc', 'in_progress', '[]', 'now', 'now')"
        )
    ob = gr("merge", str(two[0]), str(opened), "--into", str(into), "--allow-missing")
    assert ob.returncode == 2
    assert (
        "refused: " in ob.stderr
        and "batch_abc" in ob.stderr
        and "--allow-open-batches" in ob.stderr
    )
    allowed = gr(
        "merge",
        str(two[0]),
        str(opened),
        "--into",
        str(into),
        "--allow-missing",
        "--allow-open-batches",
    )
    assert allowed.returncode == 0, allowed.stderr
    with sqlite3.connect(into) as db:
        assert db.execute("SELECT batch_id FROM batches").fetchall() == [("batch_abc",)]


def test_merge_keeps_the_first_of_two_successes_and_heals_errors(tmp_path):
    from grandrounds.store import Store

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for p in (a, b):
        with Store(p):
            pass
    row = "INSERT INTO calls (key, provider, model, purpose, request_json, text, error, created_at) VALUES (?,?,?,?,?,?,?,?)"
    with sqlite3.connect(a) as db:
        db.execute(row, ("k1", "openai", "m", "answer", "{}", "A", None, "t"))
        db.execute(row, ("k2", "openai", "m", "answer", "{}", None, "HTTP 500", "t"))
        db.execute(
            "INSERT INTO reviews (run_id, grader_fp, sample_id, reviewer, verdict, created_at) VALUES ('r','g','s','dr','met','t')"
        )
    with sqlite3.connect(b) as db:
        db.execute(row, ("k1", "openai", "m", "answer", "{}", "B", None, "t"))
        db.execute(row, ("k2", "openai", "m", "answer", "{}", "C", None, "t"))
        db.execute(row, ("k3", "openai", "m", "judge", "{}", "D", None, "t"))
        db.execute(
            "INSERT INTO reviews (run_id, grader_fp, sample_id, reviewer, verdict, created_at) VALUES ('r','g','s','dr','met','t')"
        )
        db.execute("INSERT INTO leases VALUES ('k9', 'other-host', 1e12)")
    into = tmp_path / "into.db"
    r = gr("merge", str(a), str(b), "--into", str(into))
    assert r.returncode == 0, r.stderr
    assert "1 key(s) with two different successes: the first merged is kept" in r.stdout
    assert "1 failed calls replaced by a success" in r.stdout
    with sqlite3.connect(into) as db:
        assert dict(db.execute("SELECT key, text FROM calls").fetchall()) == {
            "k1": "A",
            "k2": "C",
            "k3": "D",
        }
        assert db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0
    again = gr("merge", str(a), str(b), "--into", str(into))  # merging twice adds nothing
    assert again.returncode == 0 and "nothing new" in again.stdout


def test_killed_shard_resumes_from_its_snapshot_elsewhere(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    snaps = tmp_path / "snaps"
    with LoopbackServer(answer, latency=0.1) as srv:
        args = [
            sys.executable, "-m", "grandrounds", "run", "medqa", "--data", str(data), "--limit", "40",
            "--model", "openai/m", "--base-url", srv.base_url, "--shard", "0/2",
            "--snapshot-to", str(snaps), "--snapshot-every", "0.005", "--concurrency", "1",
        ]  # fmt: skip
        node_a = tmp_path / "a" / "local.db"
        proc = subprocess.Popen(
            [*args, "--store", str(node_a)],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        snap = snaps / "local.shard-0-of-2.db"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if snap.exists() and srv.stats.requests >= 8:
                with sqlite3.connect(snap) as db:
                    if db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] >= 3:
                        break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with sqlite3.connect(snap) as db:
            saved = db.execute("SELECT COUNT(*) FROM calls WHERE error IS NULL").fetchone()[0]
        assert saved >= 3
        asked_a = srv.stats.requests
        node_b = tmp_path / "b" / "local.db"  # another node: no local store, its snapshot restored
        r = subprocess.run(
            [*args, "--store", str(node_b)], env=_env(), capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr
        assert f"restored {node_b} from its snapshot" in r.stderr
        with sqlite3.connect(snap) as db:
            n_shard = db.execute("SELECT n_samples FROM shards").fetchone()[0]
            distinct = db.execute("SELECT COUNT(DISTINCT key) FROM calls").fetchone()[0]
        assert distinct == n_shard
        # what the snapshot held was not asked again: requests beyond the shard's are only calls
        # in flight when the first node died (sent, not yet stored)
        assert srv.stats.requests - asked_a == n_shard - saved


def _calls_made(stderr: str) -> int:
    line = next(x for x in stderr.splitlines() if "answers:" in x and "calls made" in x)
    return int(line.split("answers:")[1].split("calls made")[0].strip().replace(",", ""))


def test_two_processes_on_one_store_split_the_work(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    with LoopbackServer(answer, latency=0.1) as srv:
        args = [
            sys.executable, "-m", "grandrounds", "run", "medqa", "--data", str(data), "--limit", "80",
            "--model", "openai/m", "--base-url", srv.base_url, "--store", str(tmp_path / "s.db"),
            "--concurrency", "4",
        ]  # fmt: skip
        procs = [
            subprocess.Popen(
                args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
        made = [_calls_made(err) for _, err in outs]
        assert srv.stats.requests == 80 == sum(made)  # nothing paid twice
        assert min(made) >= 15, made  # both did a real share (before: 80 and 0)
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("SELECT COUNT(DISTINCT key) FROM calls").fetchone()[0] == 80
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0


def test_sigterm_snapshots_everything_and_a_requeued_shard_asks_only_the_rest(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    snaps = tmp_path / "snaps"
    with LoopbackServer(answer, latency=0.1) as srv:
        args = [
            sys.executable, "-m", "grandrounds", "run", "medqa", "--data", str(data), "--limit", "40",
            "--model", "openai/m", "--base-url", srv.base_url, "--shard", "1/2",
            "--snapshot-to", str(snaps), "--snapshot-every", "0", "--concurrency", "2",
        ]  # fmt: skip
        proc = subprocess.Popen(
            [*args, "--store", str(tmp_path / "a" / "l.db")],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while srv.stats.requests < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not (snaps / "l.shard-1-of-2.db").exists()  # --snapshot-every 0: only at the end
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err
        snap = snaps / "l.shard-1-of-2.db"
        with sqlite3.connect(snap) as db:
            kept = db.execute("SELECT COUNT(*) FROM calls WHERE error IS NULL").fetchone()[0]
            (state,) = db.execute("SELECT state FROM shards").fetchone()
        assert state == "running" and kept > 0
        asked = srv.stats.requests
        r = subprocess.run(
            [*args, "--store", str(tmp_path / "b" / "l.db")],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        with sqlite3.connect(snap) as db:
            n = db.execute("SELECT n_samples FROM shards").fetchone()[0]
            (state,) = db.execute("SELECT state FROM shards").fetchone()
        assert state == "done"
        # everything answered before SIGTERM was in the snapshot, so the requeued shard asked only
        # the rest; asked twice: only the calls in flight when SIGTERM came (cancelled, never stored)
        assert srv.stats.requests - asked == n - kept
        assert 0 <= asked - kept <= 2


def test_refusals_against_a_plan_name_the_dataset_and_the_plan(tmp_path):
    from grandrounds.store import RunRecord, Store
    from grandrounds.store.merge import refusals

    def shard_store(path: Path, run_id: str, dataset: str, i: int, n: int) -> Path:
        with Store(path) as st:
            st.ensure_run(
                RunRecord(
                    id=run_id,
                    benchmark="medqa",
                    benchmark_spec="medqa",
                    model="openai/m",
                    options={},
                    dataset_sha256=dataset,
                    package_version="1.0",
                    gen_params={},
                    data_source="/d",
                )
            )
            st.put_shard(run_id, "fp", i, n, "hash", 10, 10, "done", "1.0")
        return path

    plan = {
        "format": "grandrounds-plan/1",
        "package_version": "1.0",
        "shards": 2,
        "runs": [
            {"run_id": "r1", "benchmark": "medqa", "model": "openai/m", "dataset_sha256": "a" * 64}
        ],
    }
    good = [shard_store(tmp_path / f"g{i}.db", "r1", "a" * 64, i, 2) for i in range(2)]
    assert refusals(good, plan) == []
    other_data = shard_store(tmp_path / "d.db", "r2", "b" * 64, 0, 2)
    (line,) = [x for x in refusals([*good, other_data], plan) if "d.db" in x]
    assert line.endswith(f"another dataset ({'b' * 12}) than the plan's ({'a' * 12})")
    other_model = shard_store(tmp_path / "m.db", "r3", "a" * 64, 0, 2)
    with Store(other_model) as st:
        st.db.execute("UPDATE runs SET model = 'openai/other'")
    assert any(
        "a run the plan does not name (a shard of another plan)" in x
        for x in refusals([*good, other_model], plan)
    )
    assert refusals([good[0]], plan) == [
        "run r1 (medqa · openai/m): shard 1/2 is missing (no store given holds it); "
        "pass --allow-missing to merge the rest and ask its calls when settling"
    ]
    assert refusals([tmp_path / "nowhere.db"], None) == [
        f"{tmp_path / 'nowhere.db'}: no such store"
    ]


def test_snapshot_images_are_copied_by_hash_and_a_changed_file_is_refused(tmp_path):
    import hashlib

    from grandrounds.core.errors import StoreError
    from grandrounds.store import Store
    from grandrounds.store.images import ImageStore
    from grandrounds.store.snapshot import snapshot

    src = tmp_path / "a.db"
    with Store(src):
        pass
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    sha = hashlib.sha256(data).hexdigest()
    ImageStore.beside(src).put(sha, "image/png", data)
    snapshot(src, tmp_path / "snaps" / "a.db")
    assert ImageStore.beside(tmp_path / "snaps" / "a.db").get(sha, "image/png") == data
    bad = b"\x89PNG changed"
    other = hashlib.sha256(b"original").hexdigest()
    path = ImageStore.beside(src).path(other, "image/png")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bad)  # a file whose bytes are not its name's
    with pytest.raises(StoreError, match="does not match its hash"):
        snapshot(src, tmp_path / "snaps2" / "a.db")
    assert not (tmp_path / "snaps2" / "a.db").exists()


def test_a_merge_without_a_shard_settles_by_asking_only_that_shard(tmp_path):
    from grandrounds.testing import LoopbackServer

    data = shared_file(*MEDQA)
    snaps = tmp_path / "snaps"
    with LoopbackServer(answer) as srv:
        for i in (0, 2):
            r = _run(data, srv.base_url, tmp_path / f"w{i}.db", "--shard", f"{i}/3",
                     "--snapshot-to", str(snaps))  # fmt: skip
            assert r.returncode == 0, r.stderr
        asked = srv.stats.requests
        merged = tmp_path / "m.db"
        m = gr(
            "merge", *map(str, sorted(snaps.glob("*.db"))), "--into", str(merged), "--allow-missing"
        )
        assert m.returncode == 0, m.stderr
        settle = _run(data, srv.base_url, merged)
        assert settle.returncode == 0, settle.stderr
        missing = srv.stats.requests - asked
    assert asked + missing == 40 and missing > 0
    assert f"answers: {missing} calls made, {asked} from the store" in settle.stderr
