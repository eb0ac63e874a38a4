"""benchmarks/readers/xlsx.py: cell values identical to openpyxl's read-only mode, the shared-strings table read
only as far as the rows need, and nothing left open (spill file, archive) after close.

Workbooks are written part by part here (a few XML files in a zip), so the table can hold what
openpyxl cannot write: rich-text runs with phonetic runs, ``_x005F_`` escapes, a table shorter
than the cells ask for.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import zipfile
from itertools import islice
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import openpyxl
import pytest

from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.readers import xlsx as xlsx_stream
from grandrounds.benchmarks.readers.xlsx import SharedStrings, SharedStringsError, open_xlsx
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import canonical_json

MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"


# -- a small xlsx writer -------------------------------------------------------------------------


def col(n: int) -> str:
    s = ""
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(65 + r) + s
    return s


def cell_xml(ref: str, v: Any) -> str:
    """One ``<c>``: ("s", i) shared string i, ("inline", xml) an inline string, ("b", 0/1),
    ("date", serial) a number in the date style; an int/float a number."""
    if isinstance(v, tuple):
        kind, x = v
        if kind == "s":
            return f'<c r="{ref}" t="s"><v>{x}</v></c>'
        if kind == "inline":
            return f'<c r="{ref}" t="inlineStr"><is>{x}</is></c>'
        if kind == "b":
            return f'<c r="{ref}" t="b"><v>{x}</v></c>'
        if kind == "date":
            return f'<c r="{ref}" s="1"><v>{x}</v></c>'
        raise ValueError(kind)
    return f'<c r="{ref}"><v>{v}</v></c>'


def sheet_xml(rows: dict[int, list[Any]]) -> str:
    """Rows by number (gaps are blank rows); None in a row is a missing (empty) cell."""
    body = "".join(
        f'<row r="{r}">'
        + "".join(cell_xml(f"{col(c)}{r}", v) for c, v in enumerate(cells, 1) if v is not None)
        + "</row>"
        for r, cells in sorted(rows.items())
    )
    width = max((len(c) for c in rows.values()), default=1)
    dim = f'<dimension ref="A1:{col(width)}{max(rows, default=1)}"/>'
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<worksheet xmlns="{MAIN}">{dim}<sheetData>{body}</sheetData></worksheet>'


def write_xlsx(
    path: Path, sheets: list[tuple[str, dict[int, list[Any]]]], sst: list[str] | None
) -> Path:
    """A workbook of ``sheets`` (name, rows); ``sst`` the ``<si>`` bodies of its shared-strings
    table (None: no table). Style 1 is the built-in date format 14 (m/d/yyyy)."""
    parts = {
        "_rels/.rels": f'<Relationships xmlns="{PKG_REL}"><Relationship Id="rId1" Type="{REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<workbook xmlns="{MAIN}" xmlns:r="{REL}"><sheets>'
        + "".join(
            f'<sheet name="{escape(n)}" sheetId="{i}" r:id="rId{i}"/>'
            for i, (n, _) in enumerate(sheets, 1)
        )
        + "</sheets></workbook>",
        "xl/styles.xml": f'<styleSheet xmlns="{MAIN}"><fonts count="1"><font><sz val="11"/></font></fonts>'
        '<fills count="1"><fill><patternFill patternType="none"/></fill></fills>'
        '<borders count="1"><border/></borders><cellStyleXfs count="1"><xf/></cellStyleXfs>'
        '<cellXfs count="2"><xf numFmtId="0"/><xf numFmtId="14" applyNumberFormat="1"/></cellXfs>'
        '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles></styleSheet>',
    }
    rels = [
        f'<Relationship Id="rId{i}" Type="{REL}/worksheet" Target="worksheets/sheet{i}.xml"/>'
        for i in range(1, len(sheets) + 1)
    ]
    types = [
        f'<Override PartName="/xl/workbook.xml" ContentType="{CT}.sheet.main+xml"/>',
        f'<Override PartName="/xl/styles.xml" ContentType="{CT}.styles+xml"/>',
    ]
    for i, (_, rows) in enumerate(sheets, 1):
        parts[f"xl/worksheets/sheet{i}.xml"] = sheet_xml(rows)
        types.append(
            f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="{CT}.worksheet+xml"/>'
        )
    if sst is not None:
        parts["xl/sharedStrings.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<sst xmlns="{MAIN}" count="{len(sst)}" uniqueCount="{len(sst)}">'
            + "".join(f"<si>{s}</si>" for s in sst)
            + "</sst>"
        )
        rels.append(
            f'<Relationship Id="rIdS" Type="{REL}/sharedStrings" Target="sharedStrings.xml"/>'
        )
        types.append(
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{CT}.sharedStrings+xml"/>'
        )
    rels.append(f'<Relationship Id="rIdY" Type="{REL}/styles" Target="styles.xml"/>')
    parts["xl/_rels/workbook.xml.rels"] = (
        f'<Relationships xmlns="{PKG_REL}">' + "".join(rels) + "</Relationships>"
    )
    parts["[Content_Types].xml"] = (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>' + "".join(types) + "</Types>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in parts.items():
            z.writestr(name, text)
    return path


def t(text: str) -> str:
    return f'<t xml:space="preserve">{escape(text)}</t>'


class Table:
    """Shared strings numbered in order of first use, as Excel numbers them."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> tuple[str, int]:
        return ("s", self.index.setdefault(text, len(self.index)))

    def sst(self) -> list[str]:
        return [t(s) for s in self.index]


def plain_rows(path: Path) -> list[tuple[str, list[tuple[Any, ...]]]]:
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        return [(ws.title, list(ws.iter_rows(values_only=True))) for ws in wb.worksheets]
    finally:
        wb.close()


def streamed_rows(path: Path) -> list[tuple[str, list[tuple[Any, ...]]]]:
    with open_xlsx(path) as book:
        assert book.streaming
        return [(ws.title, list(ws.iter_rows(values_only=True))) for ws in book.workbook.worksheets]


def open_files() -> set[str]:
    """What this process has open (Linux): the targets of /proc/self/fd."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd to see which files are open")
    out = set()
    for fd in fds.iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            pass  # the listing's own descriptor, closed already
    return out


def spill_files(files: set[str]) -> set[str]:
    """Temporary files deleted while open: the spill file (TemporaryFile unlinks it at once)."""
    tmp = os.path.realpath(tempfile.gettempdir())
    return {f for f in files if f.startswith(tmp) and f.endswith("(deleted)")}


# -- identical values ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["GAPS-NSCLC-preview.xlsx", "community_contributions.xlsx"])
def test_real_gaps_files_read_cell_for_cell_as_openpyxl_reads_them(shared_data, name):
    path = shared_data("gaps", name)
    plain = plain_rows(path)
    assert sum(len(rows) for _, rows in plain) > 5  # the files have rows to compare
    assert streamed_rows(path) == plain


@pytest.mark.parametrize("name", ["GAPS-NSCLC-preview.xlsx", "community_contributions.xlsx"])
def test_real_gaps_samples_are_unchanged(shared_data, name):
    path = shared_data("gaps", name)
    got = list(GAPS().iter_samples(path))
    expected = openpyxl_samples(path)
    assert len(got) == {"GAPS-NSCLC-preview.xlsx": 92, "community_contributions.xlsx": 5}[name]
    assert got == expected
    assert [canonical_json(s) for s in got] == [
        canonical_json(s) for s in expected
    ]  # what a store hashes


def mixed_workbook(path: Path) -> Path:
    tab = Table()
    tab("header")  # 0
    sst = (
        tab.sst()
        + [
            '<r><rPr><b/></rPr><t>Hello</t></r><r><t xml:space="preserve"> world</t></r>'
            '<rPh sb="0" eb="1"><t>ハロー</t></rPh><phoneticPr fontId="1"/>',  # 1: runs joined, phonetic left out
            '<t>東京</t><rPh sb="0" eb="2"><t>トウキョウ</t></rPh>',  # 2: plain text with a phonetic run
            "<t>line_x005F_x000D_end</t>",  # 3: escaped escape
            "<t></t>",  # 4: empty text
            "<t>a &amp; b &lt;c&gt;</t>",  # 5
        ]
    )
    sheets = [
        (
            "First",
            {
                1: [("s", 0), ("s", 1), ("s", 2)],
                2: [1, 2.5, ("b", 1), ("b", 0), ("date", 45292)],
                3: [("s", 3), None, ("s", 4), None, ("s", 5)],
                6: [
                    None,
                    ("inline", "<t>inline text</t>"),
                    ("inline", "<r><t>in</t></r><r><t>line runs</t></r>"),
                ],
                7: [-3, "1E3", ("s", 1)],
            },
        ),
        ("Second", {2: [("s", 5), 7]}),
        ("Empty", {}),
    ]
    return write_xlsx(path, sheets, sst)


def test_generated_workbook_values_equal_openpyxl_and_are_what_the_cells_hold(tmp_path):
    path = mixed_workbook(tmp_path / "mixed.xlsx")
    plain = plain_rows(path)
    assert streamed_rows(path) == plain
    first = dict(plain)["First"]
    assert first[0] == ("header", "Hello world", "東京", None, None)
    assert first[1] == (1, 2.5, True, False, dt.datetime(2024, 1, 1))
    assert first[2] == ("line_x000D_end", None, "", None, "a & b <c>")
    assert first[3] == first[4] == (None,) * 5  # blank rows 4 and 5
    assert first[5] == (None, "inline text", "inline runs", None, None)
    assert first[6] == (-3, 1000.0, "Hello world", None, None)
    assert dict(plain)["Second"] == [(None, None), ("a & b <c>", 7)]


def test_a_workbook_without_a_table_reads_as_openpyxl_reads_it(tmp_path):
    path = write_xlsx(tmp_path / "inline.xlsx", [("S", {1: [("inline", "<t>q</t>"), 5]})], None)
    with open_xlsx(path) as book:
        assert book.streaming and book.strings is None
        assert list(book.workbook.worksheets[0].iter_rows(values_only=True)) == [("q", 5)]
    assert plain_rows(path) == [("S", [("q", 5)])]


# -- read only as far as asked, nothing left open ------------------------------------------------


def long_workbook(path: Path, rows: int) -> tuple[Path, int]:
    """``rows`` data rows under a header of 3 texts, two new texts per row: returns the table size."""
    tab = Table()
    data = {1: [tab("id"), tab("text"), tab("note")]}
    for r in range(2, rows + 2):
        data[r] = [r, tab(f"question {r} " + "词" * 50), tab(f"note {r}")]
    write_xlsx(path, [("Sheet1", data)], tab.sst())
    return path, len(tab.index)


def test_reading_the_first_rows_parses_only_the_start_of_the_table(tmp_path):
    path, size = long_workbook(tmp_path / "long.xlsx", 3000)
    before = open_files()
    book = open_xlsx(path)
    assert (
        isinstance(book.strings, SharedStrings) and book.strings.parsed == 0
    )  # nothing read on opening
    rows = list(islice(book.workbook.worksheets[0].iter_rows(values_only=True), 10))
    assert rows[9] == (10, "question 10 " + "词" * 50, "note 10")
    assert book.strings.parsed == 3 + 2 * 9  # the header's 3 and the 9 rows' 2 each
    assert size == 6003
    opened = open_files() - before
    assert (
        spill_files(opened) and str(path) in opened
    )  # the spill file and the archive, open while read
    assert book.strings[3] == "question 2 " + "词" * 50  # read back from the spill file
    book.close()
    assert book.strings.closed and open_files() - before == set()
    with pytest.raises(SharedStringsError, match="closed"):
        book.strings[5000]


def test_memory_stays_flat_whatever_the_table_size(tmp_path):
    """Every row read, the whole table parsed: Python holds neither its texts nor its parsed
    entries (they are in the spill file), where openpyxl's list holds them all."""
    import tracemalloc

    path, size = long_workbook(tmp_path / "long.xlsx", 10000)
    as_str = sum(
        sys.getsizeof(f"question {r} " + "词" * 50) + sys.getsizeof(f"note {r}")
        for r in range(2, 10002)
    )
    assert as_str > 2_000_000  # what openpyxl's list of the table's texts holds
    tracemalloc.start()
    try:
        with open_xlsx(path) as book:
            opened = tracemalloc.get_traced_memory()[0]
            assert sum(1 for _ in book.workbook.worksheets[0].iter_rows(values_only=True)) == 10001
            assert book.strings is not None and book.strings.parsed == size
            held = tracemalloc.get_traced_memory()[0] - opened
    finally:
        tracemalloc.stop()
    assert (
        held < 600_000 < as_str / 3
    )  # the offsets array (8 bytes an entry, 160 kB) and small change


def test_len_and_iteration_read_the_whole_table(tmp_path):
    path, size = long_workbook(tmp_path / "long.xlsx", 200)
    with open_xlsx(path) as book:
        assert book.strings is not None
        assert len(book.strings) == size == book.strings.parsed
        assert list(book.strings)[:3] == ["id", "text", "note"]
        assert book.strings[size - 1] == "note 201"


def test_closing_the_workbook_closes_the_table_too(tmp_path):
    path, _ = long_workbook(tmp_path / "long.xlsx", 50)
    before = open_files()
    book = open_xlsx(path)
    next(book.workbook.worksheets[0].iter_rows(values_only=True))
    book.workbook.close()  # openpyxl's own close, as a caller of the workbook would call it
    assert book.strings is not None and book.strings.closed
    assert open_files() - before == set()


def gaps_workbook(path: Path, n: int, bad_row: int | None = None) -> Path:
    """A GAPS sheet of ``n`` questions in a shared-strings table; ``bad_row``'s rubric cell
    refers past the table's end."""
    tab = Table()
    rows = {1: [tab(h) for h in ("index", "question", "分类", "rubrics", "m1_answer")]}
    for i in range(1, n + 1):
        rubric = [
            {
                "id": k,
                "claim": f"要点{k}（问题{i}）",
                "level": lv,
                "type": "negative" if lv[0] == "S" else "positive",
                **({"desc": f"说明{k}"} if k == 1 else {}),
            }
            for k, lv in enumerate(("A1", "A2", "S1"), 1)
        ]
        question = f"问题{i}：非小细胞肺癌如何治疗？" + (
            " " if i == 2 else ""
        )  # row 3's cell has trailing space
        rows[i + 1] = [
            i,
            tab(question),
            tab("治疗" if i % 2 else "诊断"),
            tab(json.dumps(rubric, ensure_ascii=False)),
            tab(f"答案{i}") if i != 3 else None,
        ]
    if bad_row is not None:
        rows[bad_row][3] = ("s", 10**6)
    return write_xlsx(path, [("Sheet1", rows)], tab.sst())


def openpyxl_samples(path: Path) -> list[Any]:
    """GAPS's samples from the rows openpyxl's plain read-only mode gives (the reading before)."""
    bench = GAPS()
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        for ws in wb.worksheets:
            rows = ws.iter_rows(values_only=True)
            header = [str(h).strip() if h is not None else "" for h in next(rows, ())]
            if "question" in header and "rubrics" in header:
                return list(bench._rows(path, ws.title, header, rows, "rubrics"))
    finally:
        wb.close()
    raise AssertionError("no GAPS sheet")


def test_gaps_samples_are_the_ones_openpyxl_gave(tmp_path):
    path = gaps_workbook(tmp_path / "GAPS-NSCLC-preview.xlsx", 40)
    got = list(GAPS().iter_samples(path))
    expected = openpyxl_samples(path)
    assert len(got) == 40 and got == expected
    assert [canonical_json(s) for s in got] == [canonical_json(s) for s in expected]
    s2 = got[1]
    assert (s2.id, s2.metadata["row"], s2.metadata["category"]) == ("nsclc/2", 3, "诊断")
    assert s2.metadata["question_cell"].endswith("？ ") and s2.messages[0].content.endswith("？")
    assert [c.id for c in s2.rubric] == ["1", "2", "3"] and s2.metadata["rubric_desc"] == {
        "1": "说明1"
    }
    assert "m1_answer" not in got[2].metadata["reference_answers"]


def test_stopping_gaps_early_parses_a_prefix_and_leaves_nothing_open(tmp_path, monkeypatch):
    path = gaps_workbook(tmp_path / "GAPS-NSCLC-preview.xlsx", 2000)
    tables: list[SharedStrings] = []
    real_open = xlsx_stream.open_xlsx

    def spy(p: Any) -> Any:
        book = real_open(p)
        tables.append(book.strings)
        return book

    monkeypatch.setattr(xlsx_stream, "open_xlsx", spy)
    before = open_files()
    samples = GAPS().iter_samples(path)
    assert [s.id for s in islice(samples, 10)] == [f"nsclc/{i}" for i in range(1, 11)]
    assert spill_files(open_files() - before)
    # the header's 5, then per row a question, a rubric, an answer, and the 2 categories once
    assert tables[0].parsed == 5 + 10 * 3 + 2 - 1  # row 3 has no answer cell
    samples.close()  # what --limit does
    assert tables[0].closed and open_files() - before == set()


def test_a_table_index_past_the_end_is_a_clear_error(tmp_path):
    path = gaps_workbook(tmp_path / "GAPS-NSCLC-preview.xlsx", 6, bad_row=5)
    before = open_files()
    samples = GAPS().iter_samples(path)
    with pytest.raises(DataError) as e:
        list(samples)
    msg = str(e.value)
    assert str(path) in msg and "sheet 'Sheet1' row 5" in msg
    assert (
        "xl/sharedStrings.xml" in msg
        and "shared string 1000000" in msg
        and "only 24 entries" in msg
    )
    assert open_files() - before == set()  # the failed read closed the table and the archive

    with open_xlsx(path) as book:
        assert book.strings is not None
        with pytest.raises(SharedStringsError, match=r"only 24 entries \(0\.\.23\)") as e2:
            book.strings[25]
        assert e2.value.filename == str(path)
        with pytest.raises(SharedStringsError, match="cannot be negative"):
            book.strings[-1]


def test_a_broken_table_is_a_clear_error_at_the_row_that_needs_it(tmp_path):
    path = write_xlsx(
        tmp_path / "GAPS-NSCLC-preview.xlsx",
        [("Sheet1", {1: [("s", 0), ("s", 1)], 2: [("s", 2), ("s", 3)]})],
        ["<t>question</t>", "<t>rubrics</t>", "<t>ok</t><unclosed>"],
    )
    with pytest.raises(
        DataError,
        match=r"sheet 'Sheet1' row 2: xl/sharedStrings.xml: cannot read entry 2 .*ParseError",
    ):
        list(GAPS().iter_samples(path))


# -- another openpyxl: the plain reading -----------------------------------------------------------


def test_falls_back_to_plain_openpyxl_when_its_internals_differ(tmp_path, monkeypatch):
    path = mixed_workbook(tmp_path / "mixed.xlsx")
    plain = plain_rows(path)
    monkeypatch.setattr(xlsx_stream, "_expected_internals", lambda: False)
    with open_xlsx(path) as book:
        assert not book.streaming and book.strings is None
        assert [
            (ws.title, list(ws.iter_rows(values_only=True))) for ws in book.workbook.worksheets
        ] == plain


def test_falls_back_when_the_table_does_not_reach_the_sheets(tmp_path, monkeypatch):
    """A version that hands its sheets a table of its own (not the one read_strings set)."""
    from openpyxl.reader.excel import ExcelReader

    path = mixed_workbook(tmp_path / "mixed.xlsx")
    plain = plain_rows(path)
    real_read = ExcelReader.read

    def read(self: Any) -> None:
        real_read(self)
        if (
            type(self) is not ExcelReader
        ):  # the streamed attempt only; the plain reading is left alone
            for ws in self.wb._sheets:
                ws._shared_strings = ["other"]

    monkeypatch.setattr(ExcelReader, "read", read)
    before = open_files()
    book = open_xlsx(path)
    assert not book.streaming and book.strings is None
    assert [
        (ws.title, list(ws.iter_rows(values_only=True))) for ws in book.workbook.worksheets
    ] == plain
    book.close()
    assert open_files() - before == set()  # the streamed attempt's table and archive were closed
