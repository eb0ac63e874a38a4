"""Text from servers and data files reaches the terminal and the report files as written: no escape
sequence (screen clear, title, OSC 52 clipboard, OSC 8 link) and no Rich markup comes alive."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.display import SafeConsole, safe_text, styled
from grandrounds.core.registry import BENCHMARKS
from grandrounds.reports.tabular import csv_cell, md_cell
from grandrounds.testing import Fault, LoopbackServer, last_user_text
from grandrounds.testing.batch import BatchServer
from tests.rubric_bench.triage import TriageRubric

PKG = Path(__file__).resolve().parents[1] / "src" / "grandrounds"

CLEAR, TITLE = "\x1b[2J\x1b[H", "\x1b]0;owned\x07"
CLIPBOARD = "\x1b]52;c;ZWNobyBvd25lZA==\x07"
LINK = "\x1b]8;;https://evil.example/\x07here\x1b]8;;\x07"
C1 = "\x9b31m\x85"  # an 8-bit CSI and NEL
MARKUP = "[link=https://evil.example/]click[/link][bold]B[/bold]"
HOSTILE = CLEAR + TITLE + CLIPBOARD + LINK + C1 + "\x7f" + MARKUP
#: Every control character that may not reach a terminal: C0 but tab and newline, DEL, C1.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_safe_text_escapes_every_control_character_and_keeps_tab_and_newline():
    for code in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]:
        shown = safe_text(f"a{chr(code)}b")
        assert shown == f"a\\x{code:02x}b" and not CONTROL.search(shown)
    assert safe_text("tab\there\nnext\r\nline") == "tab\there\nnext\nline"
    assert (
        safe_text("plain [bold] é 中") == "plain [bold] é 中"
    )  # text without controls is untouched


def test_safe_console_shows_markup_and_escapes_as_text_in_lines_tables_and_rich_text():
    out = io.StringIO()
    con = SafeConsole(file=out, force_terminal=True, color_system="truecolor", width=400)
    t = Table(title=HOSTILE)
    t.add_column(HOSTILE)
    t.add_row(HOSTILE)
    con.print(t)
    con.print(HOSTILE)
    con.print(styled(HOSTILE, "dim"))
    from rich.text import Text

    con.print(
        Text(HOSTILE)
    )  # rich text built without safe_text: the console escapes it as it draws
    got = out.getvalue()
    assert "\x1b]" not in got and "\x07" not in got, (
        "no OSC sequence (title, clipboard, link) from the data"
    )
    assert (
        "\x1b[2J" not in got
        and "\x1b[H" not in got
        and "\x9b" not in got
        and "\x85" not in got
        and "\x7f" not in got
    )
    assert got.count("[link=https://evil.example/]click[/link]") >= 5, "markup shows as typed"
    assert got.count("\\x1b]52;c;") >= 5, "the escape sequence shows escaped"


def test_report_cells_escape_controls_and_neutralise_formulas():
    assert not CONTROL.search(csv_cell(HOSTILE)) and not CONTROL.search(md_cell(HOSTILE))
    assert csv_cell('=HYPERLINK("https://evil.example")') == '\'=HYPERLINK("https://evil.example")'
    assert csv_cell("\x1b[2J=1+1").startswith("\\x1b")


# ---- the real commands ------------------------------------------------------------------------------

ROWS = [
    {
        "id": "t1" + HOSTILE,
        "question": "Chest pain radiating to the left arm.",
        "urgency": "emergency" + HOSTILE,
        "rubric": [
            {"text": "Advises calling emergency services now", "points": 8},
            {"text": "Mentions aspirin", "points": 3},
        ],
    },
    {
        "id": "t2" + HOSTILE,
        "question": "Mild sore throat for two days.",
        "urgency": "routine",
        "rubric": [{"text": "Recommends rest and fluids", "points": 4}],
    },
]


def candidate(body: dict) -> object:
    """Answers the chest pain question; the other gets a 400 whose error body is hostile."""
    if "sore throat" in last_user_text(body):
        return Fault(
            "400", body={"error": {"message": MARKUP + CLEAR + TITLE + LINK}}
        )  # a summary shows its first 80 characters
    return "advice"


def judge(body: dict) -> str:
    return json.dumps(
        {"explanation": "judged " + HOSTILE, "criteria_met": "emergency" in last_user_text(body)}
    )


def assert_inert(text: str, what: str) -> None:
    assert not CONTROL.search(text), (
        f"{what}: a control character reached the output: {CONTROL.findall(text)[:5]}"
    )


def test_hostile_ids_tags_and_error_bodies_print_inert_in_every_command(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    data = tmp_path / "triage.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    store = tmp_path / "s.db"
    runner = CliRunner()
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(candidate) as cand,
        LoopbackServer(judge) as jud,
    ):
        r = runner.invoke(
            app,
            [
                "run",
                "triage-rubric",
                "--data",
                str(data),
                "--model",
                "openai/cand",
                "--base-url",
                cand.base_url,
                "--judge",
                f"openai/judge@{jud.base_url}",
                "--store",
                str(store),
            ],
        )
        assert r.exit_code in (0, 3), r.output
        assert_inert(r.output, "run")
        assert "[link=https://evil.example/]" in r.output, (
            "the error body's markup shows as text in the failure summary"
        )
        assert "\\x1b[2J" in r.output, "the escape sequence shows escaped"

        for args in (["leaderboard"], ["runs"], ["review-queue", "--share", "1"]):
            r = runner.invoke(app, [*args, "--store", str(store)])
            assert r.exit_code == 0, (args, r.output)
            assert_inert(r.output, args[0])
        assert "[link=https://evil.example/]" in r.output and "\\x1b]0;owned" in r.output, (
            "review-queue shows the sample id as text"
        )

        for fmt in ("md", "csv"):
            out = tmp_path / f"report.{fmt}"
            r = runner.invoke(app, ["report", "-f", fmt, "-o", str(out), "--store", str(store)])
            assert r.exit_code == 0, r.output
            for f in tmp_path.glob(f"report*.{fmt}"):
                assert_inert(f.read_text(encoding="utf-8"), f.name)
        samples = list(csv.DictReader((tmp_path / "report.samples.csv").open(encoding="utf-8")))
        assert any("\\x1b[2J" in row["sample_id"] for row in samples), (
            "the id is kept, escaped, not dropped"
        )


def test_a_hostile_error_body_is_inert_on_a_colour_terminal(tmp_path, monkeypatch):
    """On a terminal Rich writes its own colours; the data still adds no sequence and no link."""
    from grandrounds.cli import common, main, reports, results, running

    for mod in (
        common,
        main,
        reports,
        results,
        running,
    ):  # the commands' consoles, as on a colour terminal
        for name in ("console", "err_console"):
            if hasattr(mod, name):
                monkeypatch.setattr(
                    mod,
                    name,
                    SafeConsole(
                        force_terminal=True,
                        color_system="standard",
                        width=300,
                        stderr=name == "err_console",
                    ),
                )
    data = tmp_path / "triage.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    store = tmp_path / "s.db"
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(candidate) as cand,
        LoopbackServer(judge) as jud,
    ):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "triage-rubric",
                "--data",
                str(data),
                "--model",
                "openai/cand",
                "--base-url",
                cand.base_url,
                "--judge",
                f"openai/judge@{jud.base_url}",
                "--store",
                str(store),
            ],
        )
        assert r.exit_code in (0, 3), r.output
        r2 = CliRunner().invoke(app, ["review-queue", "--share", "1", "--store", str(store)])
    for out in (r.output, r2.output):
        assert "\x1b[" in out, "the console does colour here (else this test proves nothing)"
        assert (
            "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out and "\x9b" not in out
        )


class HostileIdBatches(BatchServer):
    """A batch API whose batch ids carry escape sequences and markup."""

    def _new_batch(self, wire, custom_ids, bodies):
        batch = super()._new_batch(wire, custom_ids, bodies)
        hostile = batch.id + "\x1b]0;owned\x07\x1b[2J[link=https://evil.example/]b[/link]"
        with self._lock:
            self._batches[hostile] = self._batches.pop(batch.id)
            batch.id = hostile
        return batch


def test_hostile_batch_ids_print_inert(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "0.05")
    monkeypatch.setenv("GRANDROUNDS_BATCH_WINDOW", "0.1")
    data = tmp_path / "triage.jsonl"
    rows = [dict(r, id=f"t{i}", urgency="u") for i, r in enumerate(ROWS)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        HostileIdBatches(lambda b: "advice") as cand,
        LoopbackServer(judge) as jud,
    ):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "triage-rubric",
                "--data",
                str(data),
                "--model",
                "openai/cand",
                "--base-url",
                cand.openai_url,
                "--judge",
                f"openai/judge@{jud.base_url}",
                "--store",
                str(tmp_path / "s.db"),
                "--batch",
                "answers",
            ],
        )
    assert r.exit_code in (0, 3), (
        r.output
    )  # the id may not survive the URL path: a batch not reachable is an outcome, not a crash
    assert "batch_000" in r.output, "the batch id is printed (else this test proves nothing)"
    assert_inert(r.output, "run --batch")
    assert "[link=https://evil.example/]b[/link]" in r.output


@pytest.mark.parametrize(
    "path",
    # every command module (a new one is checked the day it is added), and what prints for them
    sorted(str(p.relative_to(PKG)) for p in (PKG / "cli").glob("*.py"))
    + ["run/progress.py", "run/plan.py"],
)
def test_commands_print_only_through_safe_consoles(path):
    """No command module makes a plain Rich console or reads markup: a new print cannot forget."""
    src = (PKG / path).read_text(encoding="utf-8")
    assert not re.search(r"(?<!Safe)Console\(", src), f"{path} makes a console that reads markup"
    assert "markup=True" not in src and "from_markup" not in src
