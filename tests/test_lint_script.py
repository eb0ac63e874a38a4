"""scripts/lint.sh: runs every gate, names each that failed, exits non-zero when any did; prefers
the project's .venv tools to those on PATH. (The tools are stand-ins here: what the gates find is
the tools' business, and CI runs the real ones over the tree.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lint.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def fake_tool(folder: Path, name: str, fails: set[str]) -> None:
    """A ``name`` that logs its arguments and fails for the sub-commands in ``fails``."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "{folder.name}/{name} $*" >> "$LOG"\n'
        f'case "{name} $1" in\n'
        + "".join(f'  "{f}"*) exit 1 ;;\n' for f in sorted(fails))
        + "esac\nexit 0\n",
        encoding="utf-8",
    )
    tool.chmod(0o755)


def run_lint(tmp_path: Path, fails: set[str], venv: bool) -> tuple[int, str, list[str]]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "lint.sh")
    tools = repo / ".venv" / "bin" if venv else tmp_path / "path"
    for name in ("ruff", "mypy"):
        fake_tool(tools, name, fails)
    log = tmp_path / "log"
    env = {
        "PATH": f"{tmp_path / 'path'}:/usr/bin:/bin",
        "LOG": str(log),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "lint.sh")], env=env, capture_output=True, text=True
    )
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done.returncode, done.stderr, calls


def test_clean_gates_pass_and_each_runs_once(tmp_path: Path) -> None:
    code, err, calls = run_lint(tmp_path, set(), venv=True)
    assert code == 0, err
    assert calls == [
        "bin/ruff format --check src tests bench scripts",
        "bin/ruff check src tests bench scripts",
        "bin/mypy ",
    ]
    assert "clean" in err


@pytest.mark.parametrize(
    "fails, named",
    [
        ({"ruff format"}, ["ruff format --check"]),
        ({"ruff check"}, ["ruff check"]),
        ({"mypy"}, ["mypy"]),
        ({"ruff format", "mypy"}, ["ruff format --check", "mypy"]),
    ],
)
def test_a_failing_gate_fails_the_script_and_is_named(
    tmp_path: Path, fails: set[str], named: list[str]
) -> None:
    code, err, calls = run_lint(tmp_path, fails, venv=True)
    assert code == 1
    assert [
        line.removeprefix("lint: FAILED: ") for line in err.splitlines() if "FAILED" in line
    ] == named
    assert len(calls) == 3, "the gates after a failing one still run"


def test_tools_on_path_when_there_is_no_venv(tmp_path: Path) -> None:
    code, err, calls = run_lint(tmp_path, set(), venv=False)
    assert code == 0, err
    assert [c.split()[0] for c in calls] == ["path/ruff", "path/ruff", "path/mypy"]


def test_a_missing_tool_fails_naming_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "lint.sh")
    bare = tmp_path / "bare"  # a PATH with the shell's helpers and no tools
    bare.mkdir()
    (bare / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    done = subprocess.run(
        [shutil.which("bash") or "bash", str(repo / "scripts" / "lint.sh")],
        env={"PATH": str(bare)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "ruff is not installed" in done.stderr and "mypy is not installed" in done.stderr
