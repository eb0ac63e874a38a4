"""Hostile sizes and numbers in data files: an xlsx cell of many MB (deflate makes it a few KB)
refused at the CSV cell limit without being read into memory, a damaged worksheet a one-line
error, a one-line JSONL of many MB split in linear time, non-finite rubric points refused at
load, and a non-finite value an older version stored unable to break reads."""

from __future__ import annotations

import json
import math
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.healthbench import HealthBench
from grandrounds.benchmarks.readers import decoding
from grandrounds.benchmarks.readers.xlsx import cell_limit
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from tests.conftest import shared_file

NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
RNS = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
RUBRIC = '[{"claim": "mentions staging", "level": "A1", "type": "positive"}]'


def workbook(
    path: Path,
    question: bytes | int,
    inline: bool = False,
    dimension: bool | str = True,
    sheet_tail: bytes = b"",
) -> Path:
    """A GAPS-shaped workbook (question, rubrics) written by hand, its question cell ``question``
    (bytes, or a size in bytes of "A"s written a MiB at a time), as a shared string or inline."""
    parts = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
        "</Types>",
        "_rels/.rels": '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook {NS} {RNS}><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{REL}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{REL}/sharedStrings" Target="sharedStrings.xml"/></Relationships>',
    }

    def cell(f) -> None:
        if isinstance(question, bytes):
            f.write(question)
            return
        left = question
        while left:
            f.write(b"A" * min(left, 1 << 20))
            left -= min(left, 1 << 20)

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in parts.items():
            z.writestr(name, text)
        with z.open("xl/sharedStrings.xml", "w") as f:
            f.write(
                f'<?xml version="1.0"?><sst {NS}><si><t>question</t></si><si><t>rubrics</t></si><si><t>'.encode()
            )
            if not inline:
                cell(f)
            f.write(b"</t></si></sst>")
        with z.open("xl/worksheets/sheet1.xml", "w") as f:
            f.write(
                f'<?xml version="1.0"?><worksheet {NS}>'.encode()
                + (
                    f'<dimension ref="{dimension if isinstance(dimension, str) else "A1:B2"}"/>'.encode()
                    if dimension
                    else b""
                )
            )
            f.write(
                b'<sheetData><row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row><row r="2">'
            )
            if inline:
                f.write(b'<c r="A2" t="inlineStr"><is><t>')
                cell(f)
                f.write(b"</t></is></c>")
            else:
                f.write(b'<c r="A2" t="s"><v>2</v></c>')
            f.write(
                b'<c r="B2" t="inlineStr"><is><t>'
                + RUBRIC.replace('"', "&quot;").encode()
                + b"</t></is></c></row>"
            )
            f.write(sheet_tail + b"</sheetData></worksheet>")
    return path


def load_gaps(path: Path) -> list:
    return list(GAPS().iter_samples(path))


def one_line(err: DataError) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


# ---- xlsx: a huge cell -------------------------------------------------------------------------


@pytest.mark.parametrize("inline,dimension", [(False, True), (True, True), (True, False)])
def test_a_20_mb_xlsx_cell_is_refused_without_being_read_into_memory(tmp_path, inline, dimension):
    path = workbook(tmp_path / "big.xlsx", 20 << 20, inline=inline, dimension=dimension)
    assert path.stat().st_size < 100_000, "deflate squeezes 20 MB of one letter into a few KB"
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as e:
            load_gaps(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = one_line(e.value)
    assert (
        text.startswith(str(path))
        and f"longer than the limit of {cell_limit():,} characters (the CSV cell limit)" in text
    )
    assert ("sharedStrings.xml" if not inline else "sheet1.xml") in text
    if dimension:  # read as the rows are: the error names the row
        assert "sheet 'Sheet1' row 2" in text
    assert peak < 10 << 20, f"peak {peak / 2**20:.1f} MB of Python memory for a refused 20 MB cell"


@pytest.mark.parametrize("inline", [False, True])
def test_the_xlsx_cell_limit_is_the_csv_cell_limit(tmp_path, inline):
    limit = cell_limit()
    ok = load_gaps(workbook(tmp_path / "ok.xlsx", limit, inline=inline))
    assert len(ok) == 1 and len(ok[0].messages[0].content) == limit
    with pytest.raises(DataError, match="longer than the limit"):
        load_gaps(workbook(tmp_path / "over.xlsx", limit + 1, inline=inline))
    # rich-text runs are summed: two runs of half the limit and one more are one cell over it
    half = ("B" * (limit // 2)).encode()
    runs = b"x</t></r><r><t>".join([half, half]) + b"x"
    rich = workbook(tmp_path / "rich.xlsx", b"</t><r><t>" + runs + b"</t></r><t>", inline=inline)
    with pytest.raises(DataError, match="a cell is longer than the limit"):
        load_gaps(rich)


def test_the_real_gaps_workbook_still_reads(tmp_path):
    samples = load_gaps(shared_file("gaps", "GAPS-NSCLC-preview.xlsx"))
    assert len(samples) == 92


# ---- xlsx: a damaged worksheet -----------------------------------------------------------------


def test_a_worksheet_with_bad_xml_is_a_one_line_error_naming_file_sheet_and_row(tmp_path):
    path = workbook(
        tmp_path / "bad.xml.xlsx",
        b"What is the stage?",
        dimension="A1:B3",
        sheet_tail=b'<row r="3"><c r="A3"><v>1</v></c></rowx>',
    )
    with pytest.raises(DataError) as e:
        load_gaps(path)
    text = one_line(e.value)
    assert text.startswith(
        f"{path}, sheet 'Sheet1' row 3: damaged worksheet (ParseError: mismatched tag"
    )


def test_a_worksheet_damaged_in_the_archive_is_a_one_line_error(tmp_path):
    rubric = RUBRIC.replace('"', "&quot;")
    rows = "".join(
        f'<row r="{i}"><c r="A{i}" t="inlineStr"><is><t>question {i}</t></is></c>'
        f'<c r="B{i}" t="inlineStr"><is><t>{rubric}</t></is></c></row>'
        for i in range(3, 3000)
    )
    path = workbook(
        tmp_path / "crc.xlsx", b"What is the stage?", dimension="A1:B2999", sheet_tail=rows.encode()
    )
    data = bytearray(path.read_bytes())
    # the member's CRC-32 in the central directory (its header is 46 bytes before the name's last
    # copy; the CRC at offset 16): the data inflates, and the check at its end fails
    crc = data.rfind(b"xl/worksheets/sheet1.xml") - 46 + 16
    assert data[crc - 16 : crc - 12] == b"PK\x01\x02"
    data[crc : crc + 4] = bytes(b ^ 0xFF for b in data[crc : crc + 4])
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        load_gaps(path)
    text = one_line(e.value)
    assert (
        text.startswith(f"{path}, sheet 'Sheet1' row ")
        and "damaged worksheet (BadZipFile: Bad CRC-32" in text
    )


# ---- JSONL: one huge line ----------------------------------------------------------------------


def test_a_line_across_many_chunks_is_split_in_linear_time(tmp_path, monkeypatch):
    """With 64-byte chunks, a 2 MB line spans 32,768 of them: re-joining the line so far at every
    chunk copies about 34 GB (minutes); joining it once when it ends copies 2 MB."""
    monkeypatch.setattr(decoding, "CHUNK", 64)
    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"question": "' + b"a" * (2 << 20) + b'"}\n{"question": "b"}\n')
    start = time.perf_counter()
    lines = list(decoding.iter_lines(path))
    took = time.perf_counter() - start
    assert [(no, len(text)) for no, text in lines] == [(1, (2 << 20) + 16), (2, 17), (3, 0)]
    assert took < 3, f"{took:.1f} s to split one 2 MB line"


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_lines_are_the_same_whatever_the_chunk_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(decoding, "CHUNK", chunk)
    text = "\ufefffirst é line\n\nsecond\u2028still second\nthird 中文\n\nlast without newline"
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode("utf-8"))
    assert list(decoding.iter_lines(path)) == list(enumerate(text[1:].split("\n"), start=1))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"one\ntwo\nthr\xffee\n")
    with (
        decoding.data_encoding("utf-8"),
        pytest.raises(
            DataError, match=r"line 3: cannot decode as utf-8 \(byte 0xff at offset 11\)"
        ),
    ):
        list(decoding.iter_lines(bad))


# ---- non-finite rubric points ------------------------------------------------------------------


def healthbench_line(points: list) -> str:
    rubrics = ", ".join(
        f'{{"criterion": "c{i}", "points": {p}, "tags": []}}' for i, p in enumerate(points)
    )
    return f'{{"prompt_id": "p1", "prompt": [{{"role": "user", "content": "hi"}}], "rubrics": [{rubrics}]}}\n'


@pytest.mark.parametrize(
    "points,problem",
    [
        (["5", "NaN"], "rubric item 1 has points nan: points must be finite numbers"),
        (["Infinity", "5"], "rubric item 0 has points inf: points must be finite numbers"),
        (["-Infinity", "5"], "rubric item 0 has points -inf: points must be finite numbers"),
        (["1e400", "5"], "rubric item 0 has points inf: points must be finite numbers"),
        (["1e308", "1e308"], "rubric points are too large: their sum overflows to infinity"),
        (["-1e308", "-1e308", "3"], "rubric points are too large: their sum overflows to infinity"),
        (["1" + "0" * 400, "5"], "rubric item 0 has points 1000"),
    ],
)
def test_non_finite_rubric_points_are_refused_at_load(tmp_path, points, problem):
    path = tmp_path / "hb.jsonl"
    path.write_text(
        '{"prompt_id": "ok", "prompt": [{"role": "user", "content": "x"}], "rubrics": [{"criterion": "c", "points": 3}]}\n'
        + healthbench_line(points),
        encoding="utf-8",
    )
    with pytest.raises(DataError) as e:
        HealthBench().load(path)
    text = one_line(e.value)
    assert text.startswith(f"{path}, line 2: p1: ") and problem in text


def test_finite_points_still_load(tmp_path):
    path = tmp_path / "hb.jsonl"
    path.write_text(healthbench_line(["1e307", "-1e307", "2.5"]), encoding="utf-8")
    [s] = HealthBench().load(path)
    assert [c.points for c in s.rubric] == [1e307, -1e307, 2.5]


# ---- a non-finite value already in a store -----------------------------------------------------


def test_a_stored_non_finite_value_cannot_break_leaderboard_or_report(tmp_path):
    from tests.synthetic import SynthSpec, build_store

    db = tmp_path / "s.db"
    st = build_store(db, SynthSpec(n_samples=10, n_models=2))
    # as an older version wrote them: Infinity in a grade's JSON and value, NaN as a result's score
    run_id, sample_id, gj = st.db.execute(
        "SELECT run_id, sample_id, grade_json FROM grades ORDER BY run_id, sample_id LIMIT 1"
    ).fetchone()
    grade = json.loads(gj)
    grade["value"] = math.inf
    st.db.execute(
        "UPDATE grades SET grade_json = ?, value = ? WHERE run_id = ? AND sample_id = ?",
        (json.dumps(grade), math.inf, run_id, sample_id),
    )
    rid, rj = st.db.execute(
        "SELECT run_id, result_json FROM results ORDER BY run_id LIMIT 1"
    ).fetchone()
    result = json.loads(rj)
    result["score"], result["ci95"] = math.nan, [-math.inf, math.inf]
    st.db.execute("UPDATE results SET result_json = ? WHERE run_id = ?", (json.dumps(result), rid))
    if st.db.in_transaction:
        st.db.commit()
    st.close()
    runner = CliRunner()
    r = runner.invoke(app, ["leaderboard", "--store", str(db)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert not any(w in r.output.split() for w in ("nan", "inf", "-inf", "NaN", "Infinity"))
    for fmt in ("html", "json", "md", "csv"):
        out = tmp_path / f"report.{fmt}"
        r = runner.invoke(app, ["report", "--format", fmt, "--out", str(out), "--store", str(db)])
        assert r.exit_code == 0, r.output
        text = out.read_text(encoding="utf-8")
        for word in ("NaN", "Infinity", ">nan<", ">inf<", "[-inf, inf]", "| nan |"):
            assert word not in text, f"{word} in the {fmt} report"
    board = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["leaderboard"]
    unknown = [e for e in board if e.get("run_id") == rid or rid in json.dumps(e)]
    assert unknown and all(e["score"] is None for e in unknown), (
        "an unknown score is shown as unknown, never as a number"
    )
