"""``vllm/MODEL`` and ``sglang/MODEL``: the engine's server started, used, stopped, through the CLI.

tests/fake_engine.py stands in for both engines (their command lines, the OpenAI API, /version),
and can load slowly, never get ready, fail while loading, crash after N requests or ignore
SIGTERM. Every test checks that no engine process outlives the command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import offline_env, shared_file

ROOT = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).with_name("fake_engine.py")
EXE = f"executable={shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"


def env(**extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "COLUMNS": "200",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        **offline_env(),
        **extra,
    }


def gr(*args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env(**extra),
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def medqa(
    tmp_path: Path, model: str, *extra: str, limit: int = 6, store: str = "s.db"
) -> list[str]:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    return [
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        str(limit),
        "--model",
        model,
        "--model-opt",
        EXE,
        "--store",
        str(tmp_path / store),
        *extra,
    ]


def error_line(stderr: str) -> str:
    """The ``error: ...`` line (the progress bar may have printed before it)."""
    return next(line for line in stderr.splitlines() if line.startswith("error: "))


def record(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_vllm_starts_with_its_parallel_sizes_answers_and_stops(tmp_path):
    rec = tmp_path / "engine.json"
    r = gr(
        *medqa(
            tmp_path,
            "vllm/fake-model",
            "--model-opt",
            "tensor_parallel_size=2",
            "--model-opt",
            "pipeline_parallel_size=2",
            "--model-opt",
            "data_parallel_size=3",
            "--model-opt",
            "engine_args=--max-model-len 4096",
            "--engine-arg=--fake-start-delay=1.5",
            f"--engine-arg=--fake-record={rec}",
            "--out",
            str(tmp_path / "out"),
        )
    )
    assert r.returncode == 0, r.stderr
    state = record(rec)
    argv = state["argv"]
    assert argv[:2] == ["serve", "fake-model"]
    flags = " ".join(argv)
    assert "--tensor-parallel-size 2 --pipeline-parallel-size 2 --data-parallel-size 3" in flags
    assert flags.endswith(f"--max-model-len 4096 --fake-start-delay=1.5 --fake-record={rec}")
    assert state["chat_requests"] == 6
    assert state["sigterm"] == 1, (
        "stopped by SIGTERM at the end of the run, not left to the exit handler"
    )
    assert not alive(state["pid"])
    # the engine, its version and its output-affecting arguments (here --max-model-len; the fake
    # engine's own flags are not among them) are the endpoint identity of every stored call (no port in it)
    from grandrounds.providers.engines import output_args

    with sqlite3.connect(tmp_path / "s.db") as db:
        urls = {json.loads(x)["base_url"] for (x,) in db.execute("SELECT request_json FROM calls")}
    assert urls == {f"vllm 0.0.0+fake args:{output_args(['--max-model-len', '4096'])}"}
    usage = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]["extra"][
        "usage"
    ]
    assert usage["answers"]["calls"] == 6 and usage["answers"]["prompt_tokens"] > 0
    assert usage["answers"]["cost_usd"] is None and usage["answers"]["cost_note"].startswith(
        "local"
    )


def test_sglang_command_line(tmp_path):
    rec = tmp_path / "engine.json"
    r = gr(
        *medqa(
            tmp_path,
            "sglang/fake-model",
            "--model-opt",
            "tensor_parallel_size=2",
            "--model-opt",
            "data_parallel_size=2",
            f"--engine-arg=--fake-record={rec}",
        )
    )
    assert r.returncode == 0, r.stderr
    state = record(rec)
    assert state["engine"] == "sglang" and state["model"] == "fake-model"
    flags = " ".join(state["argv"])
    assert flags.startswith(
        "-m sglang.launch_server --model-path fake-model --host 127.0.0.1 --port "
    )
    assert "--tp 2 --dp 2" in flags and "--pp-size" not in flags
    assert state["chat_requests"] == 6 and not alive(state["pid"])


def test_readiness_timeout_names_the_engine_and_shows_its_output(tmp_path):
    rec = tmp_path / "engine.json"
    start = time.monotonic()
    r = gr(
        *medqa(
            tmp_path,
            "vllm/fake-model",
            "--model-opt",
            "ready_timeout=1.5",
            "--engine-arg=--fake-never-ready",
            f"--engine-arg=--fake-record={rec}",
        )
    )
    assert r.returncode == 2, r.stderr
    first = error_line(r.stderr)
    assert (
        first.startswith("error: vllm server for fake-model (port ")
        and "was not ready after 1.5 s" in first
    )
    assert "ready_timeout" in first and "still loading weights" in r.stderr
    log = re.search(r"last output of vllm \((.+?)\):", r.stderr).group(1)
    assert "still loading weights" in Path(log).read_text(), "the log named in the error is kept"
    Path(log).unlink()
    assert time.monotonic() - start < 30
    assert not alive(record(rec)["pid"])


def test_engine_failing_while_loading_gives_its_exit_code_and_last_lines(tmp_path):
    r = gr(*medqa(tmp_path, "vllm/fake-model", "--engine-arg=--fake-fail-start=3"))
    assert r.returncode == 2
    assert "exited with code 3 before it was ready" in r.stderr
    assert "CUDA out of memory while loading the weights" in r.stderr


def test_crash_mid_run_is_a_clear_error_and_the_run_resumes(tmp_path):
    rec1, rec2 = tmp_path / "first.json", tmp_path / "second.json"
    args = medqa(tmp_path, "vllm/fake-model", "--concurrency", "1", limit=10)
    r = gr(
        *args,
        "--engine-arg=--fake-crash-after=4",
        "--engine-arg=--fake-exit-code=7",
        f"--engine-arg=--fake-record={rec1}",
    )
    assert r.returncode == 2, r.stderr
    assert "error: vllm server for fake-model (port" in r.stderr
    assert (
        "exited with code 7 during the run" in r.stderr
        and "run the same command again to resume" in r.stderr
    )
    assert "fake engine crash after 4 requests" in r.stderr  # the engine's last output
    assert not alive(record(rec1)["pid"])
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("SELECT COUNT(*) FROM calls WHERE error IS NULL").fetchone()[0] == 4

    r = gr(*args, f"--engine-arg=--fake-record={rec2}", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert record(rec2)["chat_requests"] == 6, (
        "only the questions the crash left unanswered are asked"
    )
    assert "answers: 6 calls made, 4 from the store" in r.stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]["n"] == 10


def test_crash_with_many_calls_in_flight_starts_no_second_server(tmp_path):
    rec = tmp_path / "engine.json"
    r = gr(
        *medqa(tmp_path, "vllm/fake-model", "--concurrency", "8", limit=60),
        "--engine-arg=--fake-crash-after=10",
        "--engine-arg=--fake-exit-code=9",
        "--engine-arg=--fake-latency=0.05",
        f"--engine-arg=--fake-record={rec}",
    )
    assert r.returncode == 2
    assert "exited with code 9 during the run" in error_line(r.stderr)
    starts = Path(str(rec) + ".starts").read_text().split()
    assert len(starts) == 1 and not alive(int(starts[0]))


@pytest.mark.parametrize("when", ["running", "loading"])
def test_interrupt_stops_the_engine(tmp_path, when):
    rec = tmp_path / "engine.json"
    slow = (
        "--engine-arg=--fake-latency=0.3"
        if when == "running"
        else "--engine-arg=--fake-start-delay=60"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grandrounds",
            *medqa(tmp_path, "vllm/fake-model", "--concurrency", "2", limit=200),
            slow,
            f"--engine-arg=--fake-record={rec}",
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        wanted = (lambda s: s["chat_requests"] >= 3) if when == "running" else (lambda s: True)
        while time.monotonic() < deadline and not (rec.exists() and wanted(record(rec))):
            time.sleep(0.1)
        assert rec.exists() and wanted(record(rec))
        time.sleep(0.5 if when == "loading" else 0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    state = record(rec)
    assert state["sigterm"] == 1 and not alive(state["pid"])


def test_stop_escalates_to_sigkill_after_the_grace_period(tmp_path):
    rec = tmp_path / "engine.json"
    start = time.monotonic()
    r = gr(
        *medqa(
            tmp_path,
            "vllm/fake-model",
            "--model-opt",
            "stop_timeout=1",
            "--engine-arg=--fake-ignore-sigterm",
            f"--engine-arg=--fake-record={rec}",
            limit=2,
        )
    )
    assert r.returncode == 0, r.stderr
    state = record(rec)
    assert state["sigterm"] == 1 and not alive(state["pid"])
    assert time.monotonic() - start < 30


def test_a_server_of_another_version_than_recorded_is_refused(tmp_path):
    r = gr(*medqa(tmp_path, "vllm/fake-model", "--engine-arg=--fake-served-version=9.9.9", limit=2))
    assert r.returncode == 2
    assert "reports version 9.9.9, but 0.0.0+fake was recorded" in r.stderr


def test_engine_version_is_part_of_the_run_identity_and_a_dry_run_starts_nothing(tmp_path):
    rec = tmp_path / "engine.json"
    ids = []
    for version in ("0.9.1", "0.9.2"):
        out = tmp_path / version
        r = gr(
            *medqa(
                tmp_path,
                "vllm/fake-model",
                f"--engine-arg=--fake-record={rec}",
                "--dry-run",
                "--out",
                str(out),
            ),
            FAKE_ENGINE_VERSION=version,
        )
        assert r.returncode == 0, r.stderr
        plan = json.loads((out / "plan.json").read_text())
        assert plan["calls_to_make"] == 6 and plan["lines"][0]["cost_usd"] is None
        assert "cost local" in r.stdout
        ids.append(plan["run_id"])
    assert ids[0] != ids[1]
    assert not rec.exists(), "a dry run never starts the engine"


def test_missing_executable_is_a_one_line_error(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    r = gr(
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "vllm/m",
        "--model-opt",
        "executable=/nonexistent/vllm",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: vllm: executable '/nonexistent/vllm' not found: install vllm where it can use the GPUs, "
        "or name it with --model-opt executable=PATH"
    ]


@pytest.mark.parametrize("opt", ["tensor_parallel_size=0", "port=-1", "ready_timeout=0.0"])
def test_engine_options_are_checked_before_anything_starts(tmp_path, opt):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    r = gr(
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "vllm/m",
        "--model-opt",
        opt,
        "--store",
        str(tmp_path / "s.db"),
    )
    assert r.returncode == 2 and error_line(r.stderr).startswith(
        f"error: provider vllm: option {opt} is not at least"
    )


def test_a_later_run_in_the_same_process_starts_the_server_afresh(tmp_path):
    """A crash is the error of its run only: the next run (event loop) of the same command starts a new server."""
    import asyncio

    from grandrounds.core.records import Message, Request
    from grandrounds.providers.base import ModelSpec
    from grandrounds.providers.engine_server import EngineError
    from grandrounds.providers.engines import VLLMProvider

    rec = tmp_path / "engine.json"
    options = {
        "executable": EXE.split("=", 1)[1],
        "engine_args": f"--fake-crash-after=1 --fake-record={rec}",
    }
    req = Request(provider="vllm", model="fake-model", messages=(Message("user", "hello"),))

    async def one_run() -> tuple[str | None, str]:
        p = VLLMProvider(ModelSpec("vllm", "fake-model"), **options)
        try:
            first = await p.call(req)
            with pytest.raises(EngineError) as e:
                await p.call(req)
            return first.text, str(e.value)
        finally:
            await p.aclose()

    for _ in range(2):
        text, err = asyncio.run(one_run())
        assert text == "Answer: A" and "exited with code 1 during the run" in err
    starts = Path(str(rec) + ".starts").read_text().split()
    assert len(starts) == 2 and not any(alive(int(pid)) for pid in starts)


def test_engine_version_is_a_named_fingerprint_field_and_two_versions_are_ranked_apart(tmp_path):
    """Two runs of one model on vLLM 0.9.1 and 0.9.2: each result names its engine, the leaderboard
    ranks both in the same setting (the engine is what is measured, not the setting) without one
    hiding the other, and the report labels each with its engine."""
    for version in ("0.9.1", "0.9.2"):
        out = tmp_path / version
        r = gr(
            *medqa(tmp_path, "vllm/fake-model", "--out", str(out), limit=2),
            FAKE_ENGINE_VERSION=version,
        )
        assert r.returncode == 0, r.stderr
        fp = record(out / "results.json")["results"][0]["fingerprint"]
        assert fp["engine"] == {"name": "vllm", "version": version}
    with sqlite3.connect(tmp_path / "s.db") as db:
        stored = [
            json.loads(x)["engine"]
            for (x,) in db.execute("SELECT options_json FROM runs ORDER BY created_at")
        ]
    assert stored == [{"name": "vllm", "version": "0.9.1"}, {"name": "vllm", "version": "0.9.2"}]

    board = tmp_path / "board.json"
    r = gr("report", "--format", "json", "--out", str(board), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 0, r.stderr
    entries = record(board)["leaderboard"]
    assert [e["setting"] for e in entries] == [1, 1] and {e["model"] for e in entries} == {
        "vllm/fake-model"
    }
    assert sorted(e["flags"] for e in entries) == [
        f"served by vllm {version}: ranked apart from this model's runs on other engine versions"
        for version in ("0.9.1", "0.9.2")
    ]

    html = tmp_path / "report.html"
    r = gr("report", "--out", str(html), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 0, r.stderr
    page = html.read_text(encoding="utf-8")
    assert "vllm 0.9.1 · " in page and "vllm 0.9.2 · " in page
