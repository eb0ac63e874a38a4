"""Loaders that read CSV files and JSON documents a record at a time.

Each benchmark's ``iter_samples`` must give exactly the samples its former whole-file path gave:
the whole-file readers (``read_csv``, ``read_json``, ``read_text``) are still here, so every test
below builds the former path from them and the benchmark's own record -> Sample code, and compares
it with the streaming one on the real files in ../shared/data. The readers are checked against the
whole-file ones on awkward files (quoted line breaks, lone CRs, a BOM, other encodings, records
cut across read chunks), and their errors against the whole-file errors.
"""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
import zipfile
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks import medbullets as mb
from grandrounds.benchmarks import mmlu_medical
from grandrounds.benchmarks.cmb import CMB
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.benchmarks.medcalc import COLUMNS as MEDCALC_COLUMNS
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.benchmarks.medec import COLUMNS as MEDEC_COLUMNS
from grandrounds.benchmarks.medec import MEDEC
from grandrounds.benchmarks.medeqbench import MedEQBench
from grandrounds.benchmarks.mmlu_medical import MMLUMedical
from grandrounds.benchmarks.pubmedqa import PubMedQA
from grandrounds.benchmarks.readers import decoding, json_docs
from grandrounds.benchmarks.readers.decoding import data_encoding, read_text
from grandrounds.benchmarks.readers.json_docs import iter_json_array, iter_json_object, read_json
from grandrounds.benchmarks.readers.lines import iter_csv, iter_csv_rows, read_csv
from grandrounds.core.errors import DataError
from tests.conftest import shared_file


@pytest.fixture
def small_chunks(monkeypatch):
    """Read files 7 bytes at a time (JSON 5), so lines, records and multi-byte characters fall across reads."""
    monkeypatch.setattr(decoding, "CHUNK", 7)
    monkeypatch.setattr(json_docs, "JSON_READ", 5)


def error_of(fn) -> str:
    with pytest.raises(DataError) as e:
        fn()
    return str(e.value)


# ---- the CSV reader -------------------------------------------------------------------------------

AWKWARD_CSV = {
    # CRLF ends, a quoted cell holding CRLF, a blank line, a long row (extra cells) and a short one
    "crlf": 'a,b\r\n1,"x\r\ny"\r\n\r\n2,3,4\r\n5\r\n',
    # old Mac line ends (lone CR), one inside quotes
    "cr": 'a,b\r1,2\r3,"4\r5"\r',
    # a BOM, no final line end, an accented letter, a quoted cell holding blank lines
    "bom": '\ufeffa,b\n1,"é\n\n"\n2,last',
    # a first line that is blank: DictReader takes it as an empty header
    "blank_header": "\n1,2\n",
    # a cell of two quotes only, an embedded quote
    "quotes": 'a,b\n"",x""y\n"say ""hi""",z\n',
}


@pytest.mark.parametrize("name", sorted(AWKWARD_CSV))
def test_iter_csv_gives_read_csvs_rows_across_read_chunks(tmp_path, small_chunks, name):
    path = tmp_path / f"{name}.csv"
    path.write_bytes(AWKWARD_CSV[name].encode("utf-8"))
    streamed = list(iter_csv(path, []))
    assert [row for _, row in streamed] == [dict(r) for r in read_csv(path, [])]
    assert iter_csv(path, []).fieldnames == read_csv(path, []).fieldnames
    assert [row for _, row in iter_csv_rows(path)] == [
        r for r in csv.reader(io.StringIO(read_text(path), newline="")) if r
    ]


def test_iter_csv_names_the_line_each_row_starts_on(tmp_path, small_chunks):
    path = tmp_path / "lines.csv"
    path.write_bytes(AWKWARD_CSV["crlf"].encode("utf-8"))
    # header line 1; row 1 on lines 2-3; line 4 blank; rows on lines 5 and 6
    assert [line for line, _ in iter_csv(path, [])] == [2, 5, 6]
    assert list(iter_csv(path, []))[1][1] == {
        "a": "2",
        "b": "3",
        None: ["4"],
    }  # cells beyond the header, as DictReader
    assert list(iter_csv(path, []))[2][1] == {"a": "5", "b": None}  # missing cells
    cr = tmp_path / "cr.csv"
    cr.write_bytes(AWKWARD_CSV["cr"].encode("utf-8"))
    assert [line for line, _ in iter_csv(cr, [])] == [2, 3]


def test_iter_csv_rows_equal_read_csv_on_every_real_csv_file():
    for folder, name in [
        ("medcalc-bench", "test_data.csv"),
        ("medbullets", "medbullets_op4.csv"),
        ("medbullets", "medbullets_op5.csv"),
        ("medec", "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"),
        ("medec", "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv"),
        ("medeqbench", "med_eq.csv"),
        ("medeqbench", "examples.csv"),
        ("mmlu-medical", "anatomy_test.csv"),
    ]:
        path = shared_file(folder, name)
        streamed = list(iter_csv(path, []))
        assert [row for _, row in streamed] == [dict(r) for r in read_csv(path, [])], name
        # each row's line is where it starts: the text from that line on parses to that row first
        lines = read_text(path).split("\n")
        for line, row in streamed[:: max(1, len(streamed) // 25)]:
            rest = "\n".join(lines[line - 1 : line + 200])
            assert next(csv.reader(io.StringIO(rest, newline=""))) == [
                v for k, v in row.items() if k is not None
            ], (name, line)


def test_iter_csv_header_errors_are_read_csvs(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("Text ID,Text\n1,note\n", encoding="utf-8")
    columns = ["Text ID", "Error Flag", "Text", "Corrected Sentence"]
    assert (
        error_of(lambda: iter_csv(path, columns))
        == error_of(lambda: read_csv(path, columns))
        == f"{path}, line 1: missing columns: Error Flag, Corrected Sentence"
    )
    wide = tmp_path / "h.csv"
    wide.write_text("a," + "h" * 200_000 + "\n1,2\n", encoding="utf-8")
    assert error_of(lambda: iter_csv(wide, ["a"])) == error_of(lambda: read_csv(wide, ["a"]))
    empty = tmp_path / "e.csv"
    empty.write_bytes(b"")
    assert error_of(lambda: iter_csv(empty, ["a"])) == error_of(lambda: read_csv(empty, ["a"]))


def test_a_malformed_record_is_named_by_the_line_it_starts_on(tmp_path):
    # the record starts on line 4 and its third line holds a cell over the CSV field limit
    path = tmp_path / "long.csv"
    path.write_text(
        'a,b\n1,2\n3,4\n5,"first\nsecond\n' + "x" * 200_000 + '"\n6,7\n', encoding="utf-8"
    )
    rows = iter_csv(path, ["a", "b"])
    assert [next(rows)[0], next(rows)[0]] == [2, 3]  # the rows before it come out first
    limit = f"a cell is longer than the CSV reader's limit of {csv.field_size_limit():,} characters"
    assert error_of(lambda: next(rows)) == f"{path}, line 4: {limit}"
    assert (
        error_of(lambda: list(read_csv(path, ["a", "b"]))) == f"{path}, line 6: {limit}"
    )  # where it noticed
    assert error_of(lambda: list(iter_csv_rows(path))) == f"{path}, line 4: {limit}"


def test_iter_csv_decodes_as_iter_lines_does(tmp_path, small_chunks):
    zh = tmp_path / "zh.csv"
    zh.write_bytes(
        '编号,问题,答案\n1,"发热的\n常见原因？",感染\n'.encode("gb18030")
    )  # not UTF-8: confidently Chinese
    assert [row for _, row in iter_csv(zh, ["编号"])] == [dict(r) for r in read_csv(zh, ["编号"])]
    assert [row["问题"] for _, row in iter_csv(zh, [])] == ["发热的\n常见原因？"]
    latin = tmp_path / "latin.csv"
    latin.write_bytes("a,b\n1,Ménière\n2,Sjögren\n".encode("cp1252"))
    assert error_of(lambda: list(iter_csv(latin, []))) == error_of(lambda: read_csv(latin, []))
    with data_encoding("cp1252"):
        assert [row["b"] for _, row in iter_csv(latin, [])] == ["Ménière", "Sjögren"]
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"a,b\n1,x\n2,y\n3,z\n4,\xff\n")
    with data_encoding("utf-8"):
        rows = iter_csv(bad, ["a"])
        assert next(rows) == (2, {"a": "1", "b": "x"})
        assert (
            error_of(lambda: list(rows))
            == error_of(lambda: read_csv(bad, ["a"]))
            == f"{bad}, line 5: cannot decode as utf-8 (byte 0xff at offset 18)"
        )


# ---- the JSON document readers --------------------------------------------------------------------


def test_json_readers_equal_json_load_on_the_real_documents():
    for folder, name in [("cmb", "CMB-test-choice-answer.json"), ("cmb", "CMB-test-qa.json")]:
        path = shared_file(folder, name)
        assert list(iter_json_array(path, "array")) == list(enumerate(read_json(path)))
    for folder, name in [
        ("pubmedqa", "ori_pqal.json"),
        ("pubmedqa", "test_ground_truth.json"),
        ("llmeval-med", "dataset.json"),
    ]:  # dataset.json writes NaN: read whole by json
        path = shared_file(folder, name)
        assert list(iter_json_object(path, "object")) == list(read_json(path).items())


JSON_DOCS = {
    "bom_and_multibyte": '\ufeff[{"q": "发热的常见原因", "n": 1.5}, {"q": "Ménière"}, 3]',
    "crlf_pretty": json.dumps([{"a": [1, {"b": None}]}, {"c": "x\u2028y"}], indent=4).replace(
        "\n", "\r\n"
    ),
    "numbers_only_json_reads": '[{"a": 1}, {"a": NaN}, {"a": 10000000000000000000000}, {"a": 1e400}]',
    "escapes": r'["\ud83d\ude00 \u00e9 \\ \/ \t", "\u0041"]',
    "empty": "[]",
}


@pytest.mark.parametrize("name", sorted(JSON_DOCS))
def test_iter_json_array_equals_json_across_read_chunks(tmp_path, small_chunks, name):
    path = tmp_path / f"{name}.json"
    path.write_text(JSON_DOCS[name], encoding="utf-8")
    got = list(iter_json_array(path, "expected an array"))
    want = list(enumerate(read_json(path)))
    assert repr(got) == repr(want)  # repr: NaN is not equal to itself


def test_a_document_ijson_reads_is_never_read_whole(tmp_path, small_chunks, monkeypatch):
    whole: list[Path] = []
    monkeypatch.setattr(
        json_docs, "read_json", lambda path: whole.append(path) or json.loads(read_text(path))
    )
    for name, text in JSON_DOCS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        list(iter_json_array(path, "expected an array"))
    assert [p.stem for p in whole] == [
        "numbers_only_json_reads"
    ]  # NaN and the like: json's to read
    with data_encoding("utf-16"):
        path = tmp_path / "u16.json"
        path.write_bytes(JSON_DOCS["bom_and_multibyte"].encode("utf-16"))
        assert list(iter_json_array(path, "x"))[:2] == [
            (0, {"q": "发热的常见原因", "n": 1.5}),
            (1, {"q": "Ménière"}),
        ]
    assert len(whole) == 1


def test_iter_json_object_equals_json(tmp_path, small_chunks):
    path = tmp_path / "o.json"
    doc = {"12": {"QUESTION": "Q?", "CONTEXTS": ["a", "b"]}, "34": {"QUESTION": "É?", "n": -0.0}}
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    assert list(iter_json_object(path, "object")) == list(doc.items())
    twice = tmp_path / "twice.json"
    twice.write_text('{"1": "a", "2": "b", "1": "c"}', encoding="utf-8")
    assert list(iter_json_object(twice, "object")) == [
        ("1", "a"),
        ("2", "b"),
        ("1", "c"),
    ]  # said so: callers check


@pytest.mark.parametrize(
    "text",
    [
        '[{"a": 1},\n {"b": 2},\n oops]',
        "[1, 2] trailing",
        '[{"a": 1}, {"b": ',
        "  ",
        '["a\x00b"]',
        "[1,]",
    ],
)
def test_invalid_json_fails_with_read_jsons_error(tmp_path, small_chunks, text):
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    assert error_of(lambda: list(iter_json_array(path, "expected an array"))) == error_of(
        lambda: read_json(path)
    )


def test_records_before_a_syntax_error_come_out_first(tmp_path, small_chunks):
    path = tmp_path / "late.json"
    path.write_text('[{"a": 1},\n {"a": 2},\n {"a": 3}, oops]', encoding="utf-8")
    items = iter_json_array(path, "expected an array")
    assert next(items) == (0, {"a": 1})
    assert (
        error_of(lambda: list(items))
        == f"{path}, line 3: invalid JSON (Expecting value at column 12)"
    )


def test_a_top_level_of_the_other_kind_is_the_callers_error(tmp_path):
    path = tmp_path / "o.json"
    path.write_text('{"a": [1]}', encoding="utf-8")
    assert (
        error_of(lambda: list(iter_json_array(path, "expected a JSON array of questions")))
        == f"{path}: expected a JSON array of questions"
    )
    arr = tmp_path / "a.json"
    arr.write_text("[1]", encoding="utf-8")
    assert (
        error_of(lambda: list(iter_json_object(arr, "expected an object")))
        == f"{arr}: expected an object"
    )


def test_json_readers_decode_as_read_text_does(tmp_path, small_chunks):
    zh = tmp_path / "zh.json"
    zh.write_bytes(
        json.dumps([{"q": "发热的常见原因？"}, {"q": "咳嗽"}], ensure_ascii=False).encode("gb18030")
    )
    assert list(iter_json_array(zh, "x")) == list(enumerate(read_json(zh)))
    u16 = tmp_path / "u16.json"
    u16.write_bytes(json.dumps([{"q": "发热"}, 2], ensure_ascii=False).encode("utf-16"))
    with data_encoding("utf-16"):
        assert list(iter_json_array(u16, "x")) == [(0, {"q": "发热"}), (1, 2)]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'[1,\n2,\n"\xff"]')
    with data_encoding("utf-8"):
        assert (
            error_of(lambda: list(iter_json_array(bad, "x")))
            == error_of(lambda: read_json(bad))
            == f"{bad}, line 3: cannot decode as utf-8 (byte 0xff at offset 8)"
        )
    assert error_of(lambda: list(iter_json_array(bad, "x"))) == error_of(lambda: read_json(bad))


# ---- each benchmark: iter_samples == the former whole-file path on the real data ---------------------


def assert_streams_the_same(bench, root: Path, former: list) -> None:
    streamed = bench.iter_samples(root)
    first = next(streamed)
    assert [first, *streamed] == former and former
    assert bench.load(root) == former


def test_medcalc_bench_streams_the_same_samples():
    path = shared_file("medcalc-bench", "test_data.csv")
    bench = MedCalcBench()
    assert_streams_the_same(
        bench, path.parent, [bench._row(path, row) for row in read_csv(path, MEDCALC_COLUMNS)]
    )


@pytest.mark.parametrize("n", [4, 5])
def test_medbullets_streams_the_same_samples(n):
    path = shared_file("medbullets", f"medbullets_op{n}.csv")
    bench = mb.MedBullets(options=n)
    former = [bench._sample(path, 0, dict(row)) for row in read_csv(path, ())]
    assert_streams_the_same(bench, path.parent, former)


@pytest.mark.parametrize("split", ["test", "validation", "both"])
def test_medec_streams_the_same_samples(split):
    folder = shared_file("medec", "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv").parent
    bench = MEDEC(split=split)
    former = []
    for path in bench.data_files(folder):
        name = "validation" if "Validation" in path.name else "test"
        reader = read_csv(path, MEDEC_COLUMNS)
        former += [
            bench._row(path, reader.line_num, row, name)
            for row in reader
            if not all(not (v or "").strip() for v in row.values())
        ]
    assert_streams_the_same(bench, folder, former)


@pytest.mark.parametrize("subset", ["med_eq", "examples"])
def test_medeqbench_streams_the_same_samples(subset):
    path = shared_file("medeqbench", f"{subset}.csv")
    bench = MedEQBench(subset=subset)
    rows = [
        r
        for r in read_csv(path, ("id", "question", "rubrics"))
        if any((v or "").strip() for v in r.values())
    ]
    assert_streams_the_same(
        bench, path.parent, [bench._sample(path, "", r["id"].strip(), r) for r in rows]
    )


def former_subject_csv(path: Path) -> list[tuple[int, list[str]]]:
    """mmlu_medical's former reader: the whole file through csv.reader, CRLF in cells folded."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    return [(0, [c.replace("\r\n", "\n") for c in row]) for row in reader if row]


def test_mmlu_medical_streams_the_same_samples(monkeypatch):
    folder = shared_file("mmlu-medical", "anatomy_test.csv").parent
    bench = MMLUMedical()
    streamed = list(bench.iter_samples(folder))
    monkeypatch.setattr(mmlu_medical, "read_subject_csv", former_subject_csv)
    former = bench.load(folder)
    assert streamed == former and len(former) == 1089
    assert any("\n" in s.metadata["question"] for s in former)  # quoted line breaks, read through


def former_cmb(bench: CMB, folder: Path, questions: list[dict]) -> list:
    """CMB's former join: the whole key as a dict by id (the last entry wins), then every question."""
    key_path = folder / "CMB-test-choice-answer.json"
    answers = {str(r["id"]): r for r in read_json(key_path)}
    q_path = folder / "CMB-test-choice-question-merge.json"
    return [
        bench._sample(q_path, key_path, str(q["id"]), q, answers[str(q["id"])]) for q in questions
    ]


def cmb_folder(tmp_path: Path, questions: list[dict], key: list[dict] | None = None) -> Path:
    folder = tmp_path / "cmb"
    folder.mkdir(exist_ok=True)
    if key is None:
        shutil.copy(shared_file("cmb", "CMB-test-choice-answer.json"), folder)
    else:
        (folder / "CMB-test-choice-answer.json").write_text(
            json.dumps(key, ensure_ascii=False), encoding="utf-8"
        )
    text = json.dumps(questions, ensure_ascii=False, indent=4).replace("\n", "\r\n")
    (folder / "CMB-test-choice-question-merge.json").write_text(text, encoding="utf-8")
    return folder


def cmb_question(rec: dict) -> dict:
    letters = "ABCDEF" if "F" in rec["answer"] else "ABCDE"
    return {
        "id": rec["id"],
        "question": f"第{rec['id']}题：哪一项正确？",
        "question_type": rec["question_type"],
        "option": {ch: f"选项{ch}-{rec['id']}" for ch in letters},
    }


def test_cmb_streams_the_same_samples_in_any_question_order(tmp_path):
    key = read_json(shared_file("cmb", "CMB-test-choice-answer.json"))
    questions = [
        cmb_question(r) for r in key
    ]  # the release has no question file here: one per key entry
    for order in ("key", "shuffled"):
        if order == "shuffled":
            random.Random(11).shuffle(questions)
        folder = cmb_folder(tmp_path, questions)
        bench = CMB()
        assert_streams_the_same(bench, folder, former_cmb(bench, folder, questions))
    q = folder / "CMB-test-choice-question-merge.json"
    with zipfile.ZipFile(folder / "CMB.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(q, "CMB-Exam/CMB-test/CMB-test-choice-question-merge.json")
    q.unlink()
    assert list(CMB().iter_samples(folder)) == former_cmb(CMB(), folder, questions)


def test_cmb_reads_the_key_alongside_the_questions(tmp_path):
    key = read_json(shared_file("cmb", "CMB-test-choice-answer.json"))[:60]
    broken = [*key[:50], "not an entry", *key[50:]]
    folder = cmb_folder(tmp_path, [cmb_question(r) for r in key], broken)
    # ten questions read ten key entries: the broken one (#50) is never reached
    assert [s.id for s in islice(CMB().iter_samples(folder), 10)] == [
        str(r["id"]) for r in key[:10]
    ]
    key_path = folder / "CMB-test-choice-answer.json"
    assert (
        error_of(lambda: CMB().load(folder))
        == f"{key_path}, record #50: not an object with an 'id'"
    )
    # an id twice in the key, before or after the questions asking for it: the whole-file join kept
    # the last one silently; here it is an error
    for dup in ([*key[:10], key[3], *key[10:]], [*key, key[3]]):
        twice = cmb_folder(tmp_path, [cmb_question(r) for r in key], dup)
        assert (
            error_of(lambda: CMB().load(twice))
            == f"{key_path}, id {key[3]['id']}: appears twice in the answer key"
        )
    # a question the key lacks, a question twice, an empty question array
    lone = cmb_folder(
        tmp_path, [cmb_question(r) for r in key[:3]] + [cmb_question(key[0] | {"id": 999999})], key
    )
    assert error_of(lambda: CMB().load(lone)).endswith(
        "id 999999: question has no entry in the answer key CMB-test-choice-answer.json"
    )
    again = cmb_folder(tmp_path, [cmb_question(r) for r in (key[0], key[1], key[0])], key)
    assert error_of(lambda: CMB().load(again)).endswith(f"record '{key[0]['id']}': duplicate id")
    none = cmb_folder(tmp_path, [], key)
    assert error_of(lambda: CMB().load(none)).endswith(
        "CMB-test-choice-question-merge.json: expected a non-empty JSON array of questions"
    )
    nokey = cmb_folder(tmp_path, [cmb_question(key[0])], [])
    assert (
        error_of(lambda: CMB().load(nokey))
        == f"{key_path}: expected a non-empty JSON array of answers"
    )


@pytest.mark.parametrize("split", ["test", "all"])
def test_pubmedqa_streams_the_same_samples(split):
    ori = shared_file("pubmedqa", "ori_pqal.json")
    bench = PubMedQA(split=split)
    data = read_json(ori)
    wanted = (
        {p: r["final_decision"] for p, r in data.items()}
        if split == "all"
        else read_json(ori.parent / "test_ground_truth.json")
    )
    key = ori if split == "all" else ori.parent / "test_ground_truth.json"
    assert_streams_the_same(
        bench,
        ori.parent,
        [bench._sample(ori, key, p, label, data[p]) for p, label in wanted.items()],
    )


def test_pubmedqa_all_refuses_a_pmid_written_twice(tmp_path):
    rec = {"QUESTION": "Q?", "CONTEXTS": ["c"], "final_decision": "yes"}
    path = tmp_path / "ori_pqal.json"
    path.write_text('{"1": %s, "2": %s, "1": %s}' % ((json.dumps(rec),) * 3), encoding="utf-8")
    assert (
        error_of(lambda: PubMedQA(split="all").load(tmp_path))
        == f"{path}, PMID 1: appears twice in the object"
    )


def test_medbench_streams_its_files_in_order(tmp_path):
    def line(i: int, source: str) -> str:
        return json.dumps(
            {"question": f"问题{i}", "answer": "", "other": {"id": i % 3, "source": source}},
            ensure_ascii=False,
        )

    (tmp_path / "a.jsonl").write_text(
        "\n".join(line(i, "A") for i in range(4)) + "\n", encoding="utf-8"
    )
    (tmp_path / "b.jsonl").write_text(
        line(0, "B") + "\n\n" + line(1, "B") + "\n{broken\n", encoding="utf-8"
    )
    streamed = MedBench().iter_samples(tmp_path)
    assert [s.id for s in islice(streamed, 6)] == [
        "A/0/0",
        "A/1/1",
        "A/2/2",
        "A/0/3",
        "B/0/0",
        "B/1/1",
    ]
    assert (
        error_of(lambda: list(streamed))
        == f"{tmp_path / 'b.jsonl'}, line 4: invalid JSON (Expecting property name enclosed in double quotes at column 2)"
    )


# ---- streaming: a record past the limit is never read ------------------------------------------------


def medcalc_rows(path: Path, n: int, bad_from: int) -> Path:
    src = next(iter(read_csv(shared_file("medcalc-bench", "test_data.csv"), MEDCALC_COLUMNS)))
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(src))
        w.writeheader()
        for i in range(1, n + 1):
            w.writerow(
                src
                | {
                    "Row Number": str(i),
                    "Calculator ID": "x" if i >= bad_from else src["Calculator ID"],
                }
            )
    return path


def test_a_bad_row_past_the_rows_asked_for_is_not_read(tmp_path):
    path = medcalc_rows(tmp_path / "test_data.csv", 8, bad_from=6)
    bench = MedCalcBench()
    assert [s.id for s in islice(bench.iter_samples(path), 5)] == ["1", "2", "3", "4", "5"]
    assert (
        error_of(lambda: bench.load(path))
        == f"{path}, Row Number 6: Calculator ID 'x' is not an integer"
    )


def test_errors_name_the_line_a_multiline_row_starts_on(tmp_path):
    cells: dict[str, Any] = dict.fromkeys(MEDEC_COLUMNS, "")
    good = cells | {
        "Text ID": "ms-1",
        "Sentences": "0 One.\n1 Two.\n2 Three.",
        "Error Flag": "0",
        "Error Sentence ID": "-1",
        "Corrected Sentence": "NA",
    }
    path = tmp_path / "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(MEDEC_COLUMNS), lineterminator="\r\n")
        w.writeheader()
        w.writerow(good)
        w.writerow(good | {"Text ID": "ms-2", "Error Flag": "yes"})  # lines 5-7
    assert (
        error_of(lambda: MEDEC().load(path))
        == f"{path}, line 5 (ms-2): Error Flag 'yes' is not a number"
    )
    q = tmp_path / "med_eq.csv"
    q.write_text('id,question,rubrics\n1,"多行\n问题",\n', encoding="utf-8")
    assert (
        error_of(lambda: MedEQBench().load(q))
        == f"{q}, row id 1 (line 2): id, question and rubrics must all be non-empty"
    )
