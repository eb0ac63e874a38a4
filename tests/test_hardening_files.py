"""Files we write: temporaries made exclusively, planted links never written through, another
user's directory refused, a failed write leaving the previous file whole; and a data file rewritten
during a run stops it before answers to the new text are stored under the old file's hash."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.files import output_dir, staged
from grandrounds.run import samples as run_samples
from grandrounds.run.outputs import write_outputs
from grandrounds.run.samples import DataWatch
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file

ROOT = Path(__file__).resolve().parents[1]


def plant(directory: Path, names: list[str], outside: Path) -> dict[Path, Path]:
    """A link at each name in ``directory`` to its own file outside it; returns link -> target."""
    directory.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    links = {}
    for name in names:
        target = outside / f"victim-{name.strip('.')}"
        target.write_text("precious\n")
        (directory / name).symlink_to(target)
        links[directory / name] = target
    return links


def assert_untouched(links: dict[Path, Path]) -> None:
    for target in links.values():
        assert target.read_text() == "precious\n", f"{target} was written through a planted link"


def test_run_outputs_never_write_through_links_at_the_temporary_or_final_names(tmp_path):
    out = tmp_path / "out"
    links = plant(
        out,
        [".results.json.tmp", ".samples.jsonl.tmp", "results.json", "samples.jsonl"],
        tmp_path / "elsewhere",
    )
    write_outputs(out, [], iter([{"sample_id": "a"}]))
    assert_untouched(links)
    assert not (out / "results.json").is_symlink() and json.loads(
        (out / "results.json").read_text()
    ) == {"results": []}
    assert [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()] == [
        {"sample_id": "a"}
    ]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()], (
        "no temporary left behind"
    )


def test_a_failure_while_writing_leaves_the_earlier_outputs_and_no_temporary(tmp_path):
    out = tmp_path / "out"
    write_outputs(out, [], iter([{"sample_id": "old"}]))

    def broken():
        yield {"sample_id": "new"}
        raise OSError(28, "No space left on device")

    with pytest.raises(ConfigError, match="No space left on device; no file was replaced"):
        write_outputs(out, [], broken())
    assert [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()] == [
        {"sample_id": "old"}
    ]
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "samples.jsonl"]


def foreign(monkeypatch, path: Path) -> None:
    """Make ``path`` belong to another user: chown where we may (root), else pretend to be someone else."""
    if os.getuid() == 0:
        os.chown(path, 65534, -1)
    else:
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no uids on this platform")
def test_an_output_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    foreign(monkeypatch, theirs)
    with pytest.raises(ConfigError, match="belongs to another user"):
        write_outputs(theirs, [], iter([]))
    assert list(theirs.iterdir()) == []
    # a link of ours to their directory is theirs too
    link = tmp_path / "mine"
    link.symlink_to(theirs)
    with pytest.raises(ConfigError, match="belongs to another user"):
        output_dir(link)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no uids on this platform")
def test_report_refuses_another_users_directory_with_one_line(tmp_path, monkeypatch):
    store = demo_store(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    foreign(monkeypatch, theirs)
    r = (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grandrounds",
                "report",
                "-f",
                "md",
                "-o",
                str(theirs / "r.md"),
                "--store",
                str(store),
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
            timeout=120,
        )
        if os.getuid() == 0
        else None
    )
    if r is None:  # not root: the check runs in this process, where getuid is patched
        res = CliRunner().invoke(
            app, ["report", "-f", "md", "-o", str(theirs / "r.md"), "--store", str(store)]
        )
        code, err = res.exit_code, res.output
    else:
        code, err = r.returncode, r.stderr
    assert code == 2, err
    assert (
        "belongs to another user" in err
        and "Traceback" not in err
        and len(err.strip().splitlines()) == 1
    )
    assert list(theirs.iterdir()) == []


def demo_store(tmp_path: Path) -> Path:
    store = tmp_path / "s.db"
    r = CliRunner().invoke(
        app, ["run", "demo", "--model", "scripted/always-a", "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    return store


@pytest.mark.parametrize("fmt", ["md", "csv", "html"])
def test_report_does_not_write_through_links_at_its_file_or_side_files(tmp_path, fmt):
    store = demo_store(tmp_path)
    out = tmp_path / "rep"
    names = [
        f"report.{fmt}",
        *((f"report.samples.{fmt}", f"report.breakdowns.{fmt}") if fmt == "csv" else ()),
    ]
    links = plant(out, names, tmp_path / "elsewhere")
    r = CliRunner().invoke(
        app, ["report", "-f", fmt, "-o", str(out / f"report.{fmt}"), "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    assert_untouched(links)
    for name in names:
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0


@pytest.mark.parametrize("fmt", ["html", "md", "csv"])
def test_a_report_that_cannot_be_written_leaves_the_previous_one_intact(tmp_path, monkeypatch, fmt):
    """The new text cannot be written out (here: it cannot be encoded, after the file was opened):
    the report and its side files from before are as they were, and no temporary is left."""
    from grandrounds.reports import html, tabular

    store = demo_store(tmp_path)
    out = tmp_path / f"report.{fmt}"
    r = CliRunner().invoke(app, ["report", "-f", fmt, "-o", str(out), "--store", str(store)])
    assert r.exit_code == 0, r.output
    before = {p.name: p.read_bytes() for p in tmp_path.glob(f"report*.{fmt}")}
    assert len(before) == (3 if fmt == "csv" else 1) and all(before.values())
    unwritable = "\ud800"  # a lone surrogate: no UTF-8 for it
    if fmt == "html":
        real = html.render
        monkeypatch.setattr(html, "render", lambda *a, **k: real(*a, **k) + unwritable)
    elif fmt == "md":
        real_md = tabular._md
        monkeypatch.setattr(tabular, "_md", lambda *a, **k: real_md(*a, **k) + unwritable)
    else:  # the last side file fails, after the others were written
        real_csv = tabular.csv_cell
        monkeypatch.setattr(
            tabular,
            "csv_cell",
            lambda v: real_csv(v) + unwritable if v == "family" else real_csv(v),
        )
    r = CliRunner().invoke(app, ["report", "-f", fmt, "-o", str(out), "--store", str(store)])
    assert r.exit_code != 0 and "surrogate" in r.output, r.output
    assert {p.name: p.read_bytes() for p in tmp_path.glob(f"report*.{fmt}")} == before, (
        "the previous report is intact"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report")] == [], (
        "no temporary left behind"
    )


def test_dry_run_plan_json_does_not_write_through_a_link(tmp_path):
    out = tmp_path / "plan"
    links = plant(out, ["plan.json", ".plan.json.tmp"], tmp_path / "elsewhere")
    r = CliRunner().invoke(
        app,
        [
            "run",
            "demo",
            "--model",
            "scripted/always-a",
            "--dry-run",
            "--out",
            str(out),
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert_untouched(links)
    assert json.loads((out / "plan.json").read_text())["benchmark"] == "demo"


def test_staged_files_are_renamed_only_when_all_are_complete(tmp_path):
    (tmp_path / "a").write_text("old a")
    with pytest.raises(RuntimeError), staged() as files:
        with files.open(tmp_path / "a") as f:
            f.write("new a")
        with files.open(tmp_path / "b") as f:
            raise RuntimeError("failed half way")
    assert (tmp_path / "a").read_text() == "old a" and not (tmp_path / "b").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


# ---- a data file rewritten during a run ------------------------------------------------------------


def test_data_watch_sees_a_rewrite_of_the_same_size_and_names_the_file(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("abc\n")
    watch = DataWatch([f])
    watch.check()
    st = f.stat()
    f.write_text("xyz\n")  # same size
    os.utime(
        f, ns=(st.st_atime_ns, st.st_mtime_ns)
    )  # modification time set back: the change time still moves
    with pytest.raises(DataError, match="changed while the run was reading it") as e:
        watch.check("q7")
    assert str(e.value).startswith(f"{f}, sample 'q7': ")


def test_a_data_file_rewritten_during_a_streaming_run_stops_it_before_storing_new_text(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(
        run_samples, "KEEP_SAMPLES", 5
    )  # streamed: samples read again as the run asks
    data = tmp_path / "medqa.jsonl"
    lines = (
        shared_file("medqa", "phrases_no_exclude_test.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()[:60]
    )
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rewritten = [
        json.dumps(dict(json.loads(ln), question="REWRITTEN " + json.loads(ln)["question"]))
        for ln in lines
    ]
    asked: list[str] = []

    def rule(body):
        asked.append(body["messages"][-1]["content"])
        if len(asked) == 10:
            data.write_text(
                "\n".join(rewritten) + "\n", encoding="utf-8"
            )  # rewritten in place, mid-run
        return "Answer: A"

    store = tmp_path / "s.db"
    with LoopbackServer(rule) as srv:
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medqa",
                "--data",
                str(data),
                "--model",
                "openai/m",
                "--base-url",
                srv.base_url,
                "--concurrency",
                "1",
                "--store",
                str(store),
            ],
        )
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert (
        errors[0].startswith(f"error: {data}, sample ")
        and "changed while the run was reading it" in errors[0]
    )
    con = sqlite3.connect(store)
    try:
        stored = [row[0] for row in con.execute("SELECT sample_json FROM samples")]
        prompts = [row[0] for row in con.execute("SELECT request_json FROM calls")]
    finally:
        con.close()
    assert stored, "what was answered before the rewrite is kept"
    assert not any("REWRITTEN" in s for s in stored), (
        "no sample of the new text is stored under the old hash"
    )
    assert not any("REWRITTEN" in p for p in prompts), "no answer to the new text is stored"
    assert len(asked) < 60
