"""Shared fixtures. Tests that need ../shared/data skip where it is absent, but fail under CI=true."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A suite started in the background by a non-interactive shell (`pytest ... &`) has Ctrl-C
# ignored, and so would every `grandrounds` it starts: Python leaves an inherited SIG_IGN alone,
# and the tests that interrupt a run with SIGINT would watch it run on. The suite takes Ctrl-C
# as usual instead, so its children start with the default disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
SHARED_DATA = Path(os.environ.get("GRANDROUNDS_SHARED_DATA", ROOT.parent / "shared" / "data"))


def shared_file(*parts: str) -> Path:
    """Path to a real benchmark file in ../shared/data; skip (or fail under CI) when missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        msg = f"real benchmark data not found at {path} (../shared/data is beside the project only in CI and dev)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture
def shared_data():
    return shared_file


SHARED_REFERENCE = Path(
    os.environ.get("GRANDROUNDS_SHARED_REFERENCE", ROOT.parent / "shared" / "reference")
)


def _missing(msg: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


#: Reference folders a copy of ../shared/reference may not hold: the verifiers release Medmarks'
#: environments run (v0.1.7.post0: its boxed prompt, XML parser and extract_boxed_answer), which a
#: run fetches from its pinned URL. Tests that need it skip with the reason where it is absent,
#: CI included.
OPTIONAL_REFERENCE = frozenset({"verifiers"})


def reference_file(*parts: str) -> Path:
    """Path to an official file in ../shared/reference; skip (or fail under CI) when missing."""
    path = SHARED_REFERENCE.joinpath(*parts)
    if not path.exists() and parts and parts[0] in OPTIONAL_REFERENCE:
        pytest.skip(
            f"{path} is not among the reference files here (the verifiers release Medmarks runs; "
            "a run fetches it from its pinned URL)"
        )
    if not path.exists():
        _missing(
            f"official reference files not found at {path} (../shared/reference is beside the project only in CI and dev)"
        )
    return path


@pytest.fixture(autouse=True, scope="session")
def _offline_reference(tmp_path_factory):
    """Runs read official prompt text from ../shared/reference (never the network) and cache into a temp dir.

    Session-wide, so module-scoped fixtures that run benchmarks see it too."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        # tests never leave the machine: a file that is not cached, bundled or at hand in the
        # reference folder is refused at once (loopback mirrors still serve the download tests)
        monkeypatch.setenv("GRANDROUNDS_OFFLINE", "1")
        if SHARED_REFERENCE.is_dir():
            monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(SHARED_REFERENCE))
        else:
            monkeypatch.delenv("GRANDROUNDS_REFERENCE", raising=False)
        if "GRANDROUNDS_CACHE" not in os.environ:
            monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        yield


@pytest.fixture
def official_reference() -> Path:
    """The reference folder, for tests that need official prompt text (skip/fail like the data tests)."""
    return reference_file("SOURCES.tsv").parent


def offline_env() -> dict[str, str]:
    """The variables a grandrounds subprocess needs to read official text offline (set by the autouse fixture)."""
    return {
        k: os.environ[k]
        for k in ("GRANDROUNDS_REFERENCE", "GRANDROUNDS_CACHE", "GRANDROUNDS_OFFLINE")
        if k in os.environ
    }


@pytest.fixture(autouse=True)
def _command_source_options_end_with_the_test() -> Iterator[None]:
    """A command's --mirror/--bundle options hold for that command; one process runs many commands
    here, so they are dropped after each test as a new command would drop them."""
    yield
    from grandrounds.sources import mirrors

    mirrors.set_overrides({})


def require_bwrap() -> None:
    """Skip (or fail under CI, which installs bubblewrap) where bubblewrap cannot start a sandbox."""
    from grandrounds.benchmarks.agent_envs.sandbox import SandboxUnavailable, check

    try:
        check()
    except SandboxUnavailable as e:
        _missing(f"the bubblewrap sandbox cannot start here: {e}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``bwrap`` run model code under bubblewrap: skipped, with the reason, where it
    cannot start (failed under CI=true)."""
    if item.get_closest_marker("bwrap"):
        require_bwrap()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """Where ../shared/reference is absent (a user's own clone) and not under CI, a test that
    failed only because a run wanted an official file it would have read there (and tests never
    download) is reported skipped with that reason, not failed."""
    from grandrounds.sources.downloads import OFFLINE_REFUSALS

    before = len(OFFLINE_REFUSALS)
    outcome = yield
    report = outcome.get_result()
    said = str(report.longrepr)
    if (
        report.failed
        and not SHARED_REFERENCE.is_dir()
        and os.environ.get("CI", "").lower() != "true"
        and (
            len(OFFLINE_REFUSALS) > before  # refused in this process
            or "GRANDROUNDS_OFFLINE is set" in said  # or in a command the test started
            or "raw.githubusercontent.com/" in said
        )
    ):
        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            item.location[1] or 0,
            f"Skipped: needs official files from ../shared/reference ({SHARED_REFERENCE} is absent) "
            "and tests never download",
        )


def medqa_records(n: int) -> list[dict[str, Any]]:
    """The first ``n`` records of the real MedQA test file."""
    path = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]], encoding: str = "utf-8") -> Path:
    """``rows`` as a JSON Lines file in ``encoding`` (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(encoding)
    )
    return path


@pytest.fixture
def medqa_store(tmp_path: Path) -> Path:
    """A store holding one finished run of ``scripted/cand`` (always "Answer: A") on three real
    MedQA questions."""
    from grandrounds.run.config import RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store

    data = write_jsonl(tmp_path / "mq" / "phrases_no_exclude_test.jsonl", medqa_records(3))
    with Store(tmp_path / "s.db") as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/cand",
                    data=data,
                    provider_options={"script": lambda req: "Answer: A"},
                ),
            )
        )
    return tmp_path / "s.db"
