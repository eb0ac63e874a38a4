"""In-flight leases: two processes running on one store never pay for the same call twice."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from grandrounds.core.records import GenParams, Message, Request, Response
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.base import ModelSpec
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import offline_env
from tests.test_resume_and_bad_input import ROOT


def req(base_url: str, text: str = "q") -> Request:
    return Request(
        provider="openai",
        model="m",
        messages=(Message("user", text),),
        params=GenParams(),
        base_url=base_url,
    )


def test_a_lease_held_by_one_handle_is_refused_to_another_until_the_outcome_lands(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    with Store(db) as a, Store(db) as b:
        r = req("http://h/v1")
        key = r.key()
        assert a.acquire_lease(key) and a.acquire_lease(key), (
            "a holder may take its own lease again"
        )
        assert not b.acquire_lease(key)
        with a.write_behind():
            a.put_call(r, Response(key=key, text="A"))
            a.release_lease(key)
            assert not b.acquire_lease(key), "nothing committed yet: the lease still stands"
            assert b.get_call(key) is None
        # one flush: the answer and the lease's end land together
        assert b.get_call(key).text == "A"
        assert b.db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0, (
            "the lease ended with the answer"
        )
        assert b.acquire_leases([key]) == {key: "stored"}, (
            "the answer is stored: nothing to lease, nothing to pay"
        )
        assert not b.acquire_lease(key)


def test_leases_for_many_keys_are_taken_in_one_transaction(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as a, Store(db) as b:
        reqs = [req("http://h/v1", f"q{i}") for i in range(700)]  # more than one statement's chunk
        keys = [r.key() for r in reqs]
        a.put_call(reqs[0], Response(key=keys[0], text="stored"))
        assert b.acquire_leases(keys[600:]) == dict.fromkeys(keys[600:], "ours")
        commits_before = a.db.total_changes
        statements: list[str] = []
        a.db.set_trace_callback(statements.append)
        states = a.acquire_leases(keys)
        a.db.set_trace_callback(None)
        assert [q for q in statements if q.split()[0] in ("BEGIN", "COMMIT")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
        assert states[keys[0]] == "stored"
        assert all(states[k] == "ours" for k in keys[1:600]) and all(
            states[k] == "held" for k in keys[600:]
        )
        assert a.db.total_changes - commits_before == 599, (
            "one row per lease taken, none for the others"
        )
        assert a.acquire_leases(keys[1:3]) == dict.fromkeys(keys[1:3], "ours"), (
            "a holder may take its own leases again"
        )
        b.release_all_leases()
        assert a.acquire_leases(keys[650:652]) == dict.fromkeys(keys[650:652], "ours"), (
            "released: free to take"
        )


def test_a_lease_whose_holder_died_or_expired_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    with Store(db) as st:
        st.db.execute(
            "INSERT INTO leases VALUES ('k1', ?, ?)",
            (f"{socket.gethostname()}:{dead}:x", time.time() + 3600),
        )
        st.db.execute("INSERT INTO leases VALUES ('k2', 'elsewhere:1:x', ?)", (time.time() - 1,))
        st.db.execute("INSERT INTO leases VALUES ('k3', 'elsewhere:1:x', ?)", (time.time() + 3600,))
        assert st.acquire_lease("k1"), "the holder's process is gone"
        assert st.acquire_lease("k2"), "the lease ran out"
        assert not st.acquire_lease("k3"), "a live lease on another host stands until it runs out"


def test_a_lease_left_by_a_closed_handle_of_this_process_is_taken_over(tmp_path: Path) -> None:
    """A release that failed (a full disk) leaves the lease behind; the next run in the same
    process must not wait for a holder that is gone."""
    db = tmp_path / "s.db"
    first = Store(db)
    assert first.acquire_lease("k")
    first.release_all_leases = lambda: None  # the release fails, as on a full disk
    first.close()
    with Store(db) as second:
        assert second.acquire_lease("k")


def test_leases_left_by_an_interrupted_handle_are_dropped_when_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = Store(db)
    assert st.acquire_lease("k")
    st.close()
    with Store(db) as other:
        assert other.acquire_lease("k")
        assert (
            other.db.execute(
                "SELECT COUNT(*) FROM leases WHERE owner != ?", (other.lease_owner,)
            ).fetchone()[0]
            == 0
        )


def test_two_executors_on_two_handles_make_one_call(tmp_path: Path) -> None:
    async def go(url: str) -> list[Response]:
        with Store(tmp_path / "s.db") as a, Store(tmp_path / "s.db") as b:
            cls = PROVIDERS.get("openai")
            ea = Executor(a, cls(ModelSpec("openai", "m", url), api_key="k"), retry=RetryPolicy(1))
            eb = Executor(b, cls(ModelSpec("openai", "m", url), api_key="k"), retry=RetryPolicy(1))
            ea.lease_poll = eb.lease_poll = 0.02
            out = await asyncio.gather(ea(req(url)), eb(req(url)))
            for e in (ea, eb):
                await e.provider.aclose()
            assert sorted((e.stats.made, e.stats.cached) for e in (ea, eb)) == [(0, 1), (1, 0)]
            return list(out)

    with LoopbackServer(lambda b: "Answer: C", latency=0.2) as srv:
        out = asyncio.run(go(srv.base_url))
        assert srv.stats.requests == 1
    assert [r.text for r in out] == ["Answer: C", "Answer: C"]


def test_two_grandrounds_processes_on_one_store_pay_for_each_call_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        **offline_env(),
    }
    with LoopbackServer(lambda b: "Answer: B", latency=0.4) as srv:
        cmd = [
            sys.executable,
            "-m",
            "grandrounds",
            "run",
            "demo",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
            "--concurrency",
            "3",
        ]
        procs = [
            subprocess.Popen(
                cmd + ["--out", str(tmp_path / f"o{i}")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        assert srv.stats.requests == 12, "each of the 12 questions asked once across both processes"
    scores = [
        json.loads((tmp_path / f"o{i}" / "results.json").read_text())["results"][0]["score"]
        for i in range(2)
    ]
    assert scores[0] == scores[1]
    made = [int(o[1].split("answers: ")[1].split(" calls made")[0]) for o in outs]
    assert sum(made) == 12 and all("from the store" in o[1] for o in outs)


def test_write_behind_checkpoints_the_log_in_a_thread_and_restores_sqlites_own_afterwards(
    tmp_path: Path,
) -> None:
    import threading

    db = tmp_path / "s.db"
    wal = tmp_path / "s.db-wal"
    with Store(db) as st:
        with st.write_behind(max_rows=50):
            assert st.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0, (
                "off on the writer's thread"
            )
            assert any(t.name == "grandrounds-checkpoint" for t in threading.enumerate())
            biggest = 0
            for i in range(3000):  # about 15 MB of calls, well past SQLite's 1,000-page checkpoint
                r = req("http://h/v1", f"q{i} " + "x" * 5000)
                st.put_call(r, Response(key=r.key(), text="A" * 100))
                if i % 100 == 99:
                    threading.Event().wait(
                        0.02
                    )  # let the checkpoint thread run, as a run's calls do
                    biggest = max(biggest, wal.stat().st_size)
        assert biggest < 10 * 2**20, (
            f"the log was checkpointed while written ({biggest:,} bytes at most)"
        )
        assert st.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 3000
        assert st.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000, (
            "SQLite's default again"
        )
        assert not any(t.name == "grandrounds-checkpoint" for t in threading.enumerate())


def test_a_flush_releases_its_calls_leases_together_and_a_failed_flush_keeps_both(
    tmp_path: Path, monkeypatch
) -> None:
    """Releases are buffered apart from the other writes (they commute with them) and run after
    them in the same transaction: a failed flush keeps calls and releases buffered, in order."""
    import sqlite3

    from grandrounds.store import connection

    db = tmp_path / "s.db"
    with Store(db) as st, Store(db) as other:
        reqs = [req("http://h/v1", f"q{i}") for i in range(40)]
        keys = [r.key() for r in reqs]
        assert set(st.acquire_leases(keys).values()) == {"ours"}
        with st.write_behind(max_rows=10_000, max_age=1000):
            for r, k in zip(reqs, keys):
                st.put_call(r, Response(key=k, text="A " + k[:6]))
                st.release_lease(k)
            real = connection.commit_groups
            statements: list[str] = []

            def full_disk_at_the_releases(db: sqlite3.Connection, groups: list) -> None:
                statements.extend(sql.split()[0] for sql, _ in groups)
                with connection.transaction(db):
                    for sql, rows in groups:
                        if sql.startswith("DELETE FROM leases"):
                            raise sqlite3.OperationalError("database or disk is full")
                        db.executemany(sql, rows)

            monkeypatch.setattr(connection, "commit_groups", full_disk_at_the_releases)
            try:
                st.flush()
            except Exception as e:
                assert "disk is full" in str(e)
            else:
                raise AssertionError("the flush should have failed")
            assert statements == ["INSERT", "DELETE"], (
                "the 40 calls in one statement, then the 40 releases in one"
            )
            assert other.get_call(keys[0]) is None and not other.acquire_lease(keys[0]), (
                "rolled back: calls and leases as before"
            )
            assert st.get_call(keys[0]).text == "A " + keys[0][:6], "still readable from the buffer"
            monkeypatch.setattr(connection, "commit_groups", real)
            st.flush()
        assert all(other.get_call(k).text == "A " + k[:6] for k in keys)
        assert other.db.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0, (
            "every lease released with its call"
        )
        assert set(other.acquire_leases(keys).values()) == {"stored"}
