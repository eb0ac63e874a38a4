"""The throughput bench script runs and its figures are consistent (not its speed: that is measured, not tested)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str) -> list[dict[str, str]]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "throughput.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = (
        lines[1].replace("cpu ms/call", "cpu_ms/call").replace("server ms/call", "server_ms/call")
    )
    header = (
        header.replace("wall s", "wall_s")
        .replace("ideal s", "ideal_s")
        .replace("server late ms", "server_late_ms")
    )
    names = header.split()
    return [dict(zip(names, line.split())) for line in lines[2:]]


@pytest.mark.parametrize("server", ["fixed", "loopback"])
def test_throughput_bench_reports_every_call_and_never_beats_the_latency(server):
    rows = run_bench(
        "--calls", "120", "--latency", "0.02", "--concurrency", "16", "--server", server
    )
    assert [r["transport"] for r in rows] == ["aiohttp"]
    for r in rows:
        assert int(r["calls"]) == 120
        assert (
            float(r["accuracy"]) == 1.0
        )  # the server answers B, the key of every synthetic question
        assert float(r["ideal_s"]) == pytest.approx(120 * 0.02 / 16, abs=0.01)
        # 120 calls in rounds of 16 cannot finish before 8 latencies: the server really waits
        assert float(r["wall_s"]) >= 8 * 0.02
        assert float(r["cpu_ms/call"]) > 0
        if server == "fixed":
            assert 0 <= float(r["server_late_ms"]) < 20
        else:
            assert r["server_late_ms"] == "n/a"
