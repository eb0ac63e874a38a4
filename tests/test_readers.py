"""Benchmark file readers and the data source: encodings, line numbers, required columns, the cache.

The readers live in ``grandrounds.benchmarks.readers`` (decoding, lines, json_docs,
json_object_arrays, records). Files are written by the
tests themselves in the shapes real benchmark files take (HealthBench JSONL with raw U+2028,
CMB's GB18030 JSON, MedCalc-Bench CSV with a BOM and quoted multi-line notes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from grandrounds.benchmarks.base import RemoteFile, read_text
from grandrounds.benchmarks.readers import decoding, json_docs, json_object_arrays
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.benchmarks.readers.lines import read_csv, read_jsonl
from grandrounds.benchmarks.readers.records import check_unique_ids, require_fields
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.sources.data import cache_dir, fetch, resolve

RECORDS = [
    {
        "question": "Which organ pumps blood?",
        "options": {"A": "liver", "B": "heart"},
        "answer_idx": "B",
    },
    {
        "question": "First-line for anaphylaxis?",
        "options": {"A": "IM epinephrine", "B": "antihistamine"},
        "answer_idx": "A",
    },
    {
        "question": "患者，男，45岁，发热3天。最可能的诊断？",
        "options": {"A": "肺炎", "B": "胃炎"},
        "answer_idx": "A",
    },
]


def write_jsonl(path: Path, records, encoding="utf-8", newline="\n", bom=False) -> Path:
    text = newline.join(json.dumps(r, ensure_ascii=False) for r in records) + newline
    data = text.encode(encoding)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return path


# ---- read_jsonl --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoding,newline,bom",
    [
        ("utf-8", "\n", False),
        ("utf-8", "\r\n", False),
        ("utf-8", "\n", True),
        ("gb18030", "\n", False),
        ("gb18030", "\r\n", False),
    ],
    ids=["utf8", "crlf", "bom", "gb18030", "gb18030-crlf"],
)
def test_read_jsonl_round_trips_in_every_supported_encoding(tmp_path, encoding, newline, bom):
    path = write_jsonl(tmp_path / "d.jsonl", RECORDS, encoding, newline, bom)
    got = read_jsonl(path)
    assert [no for no, _ in got] == [1, 2, 3]
    assert [obj for _, obj in got] == RECORDS


def test_read_jsonl_keeps_physical_line_numbers_across_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [
        "",
        json.dumps(RECORDS[0]),
        "   ",
        "",
        json.dumps(RECORDS[1]),
        "\t",
        json.dumps(RECORDS[2]),
        "",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")
    got = read_jsonl(path)
    assert [no for no, _ in got] == [2, 5, 7]
    assert [obj["answer_idx"] for _, obj in got] == ["B", "A", "A"]


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_read_jsonl_does_not_split_at_unicode_line_separators_inside_strings(tmp_path, sep):
    records = [
        {"prompt": [{"role": "user", "content": f"first line{sep}second line"}], "rubrics": []},
        {"prompt": [{"role": "user", "content": "plain"}], "rubrics": []},
    ]
    path = write_jsonl(tmp_path / "hb.jsonl", records)
    assert sep.encode("utf-8") in path.read_bytes(), (
        "the separator must be raw in the file for this test"
    )
    got = read_jsonl(path)
    assert len(got) == 2
    assert got[0][1]["prompt"][0]["content"] == f"first line{sep}second line"
    assert got[1][0] == 2


def test_read_jsonl_invalid_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps(RECORDS[0])
        + "\n\n"
        + '{"question": "truncated", "opt'
        + "\n"
        + json.dumps(RECORDS[1])
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(DataError) as e:
        read_jsonl(path)
    assert e.value.path == str(path)
    assert e.value.where == 3
    assert str(e.value).startswith(f"{path}, line 3: invalid JSON")
    assert "column" in str(e.value)


def test_read_jsonl_truncated_last_line_without_newline(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps(RECORDS[1])[:20], encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_jsonl(path)
    assert e.value.where == 2


@pytest.mark.parametrize(
    "line,kind",
    [
        ("[1, 2, 3]", "list"),
        ('"a string"', "str"),
        ("42", "int"),
        ("null", "NoneType"),
        ("true", "bool"),
    ],
)
def test_read_jsonl_line_that_is_not_an_object(tmp_path, line, kind):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_jsonl(path)
    assert e.value.where == 2
    assert f"expected a JSON object, got {kind}" in str(e.value)


def test_read_jsonl_only_blank_lines(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n\t\n", encoding="utf-8")
    with pytest.raises(DataError, match="no records") as e:
        read_jsonl(path)
    assert e.value.where is None


def test_read_jsonl_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="file is empty"):
        read_jsonl(empty)
    with pytest.raises(DataError, match="file not found") as e:
        read_jsonl(tmp_path / "nope.jsonl")
    assert e.value.path == str(tmp_path / "nope.jsonl")


def test_read_jsonl_undecodable_bytes_name_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        json.dumps(RECORDS[0]).encode()
        + b"\n"
        + json.dumps(RECORDS[1]).encode()
        + b"\n"
        + b'{"q": "\xff\xfe"}\n'
    )
    with pytest.raises(DataError, match="cannot decode") as e:
        read_jsonl(path)
    assert e.value.where == 3


# ---- read_text ---------------------------------------------------------------------------------


def test_read_text_strips_a_utf8_bom(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfid,question\n")
    assert read_text(path) == "id,question\n"


def test_read_text_utf16_is_an_error_not_mojibake(tmp_path):
    path = tmp_path / "u16.csv"
    path.write_bytes("id,question\n1,心脏\n".encode("utf-16"))
    with pytest.raises(DataError, match="cannot decode"):
        read_text(path)


def test_read_text_prefers_utf8_for_text_valid_in_both(tmp_path):
    # "心脏" in UTF-8 is also a valid (different) GB18030 byte sequence: UTF-8 must win.
    data = "心脏".encode()
    assert data.decode("gb18030") != "心脏"
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    assert read_text(path) == "心脏"


def test_read_text_latin1_file_is_not_silently_read_as_gb18030(tmp_path):
    # Windows-1252 "Ménière" is a valid GB18030 byte sequence ("M閚i鑢e"): it must be refused, not misread.
    path = tmp_path / "latin1.csv"
    path.write_bytes("id,term\n1,Ménière disease\n2,crème\n".encode("cp1252"))
    with pytest.raises(DataError) as e:
        read_text(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}, line 2: cannot decode as UTF-8 (byte 0xe9 at offset 11)")
    assert "--encoding" in msg and "GB18030 would be a guess" in msg
    assert read_text(path, "cp1252") == "id,term\n1,Ménière disease\n2,crème\n"


def test_read_text_named_encoding_is_strict_and_names_the_line(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes("id,q\n1,心脏\n".encode())
    with pytest.raises(
        DataError, match=r"line 2: cannot decode as ascii \(byte 0xe5 at offset 7\)"
    ):
        read_text(path, "ascii")
    with decoding.data_encoding("gb18030"):  # what --encoding sets for the whole command
        assert read_text(path) == "id,q\n1,心脏\n".encode().decode("gb18030")
    assert read_text(path) == "id,q\n1,心脏\n"  # the block's encoding does not outlive it


# ---- read_json ---------------------------------------------------------------------------------


def test_read_json_whole_file_gb18030_with_chinese(tmp_path):
    doc = [
        {
            "id": 1,
            "question": "下列哪项是心力衰竭的典型体征？",
            "option": {"A": "奔马律", "B": "杵状指"},
            "answer": "A",
        }
    ]
    path = tmp_path / "cmb.json"
    path.write_bytes(json.dumps(doc, ensure_ascii=False, indent=2).encode("gb18030"))
    assert read_json(path) == doc


def test_read_json_with_bom(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": [1, 2]}).encode())
    assert read_json(path) == {"a": [1, 2]}


def test_read_json_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"id": 1},\n  {"id": 2},\n  {"id": 3,,}\n]\n', encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_json(path)
    assert e.value.where == 4
    assert str(e.value).startswith(f"{path}, line 4: invalid JSON")


def test_read_json_accepts_any_top_level_value(tmp_path):
    path = tmp_path / "n.json"
    path.write_text("  [1, 2.5, null]  \n", encoding="utf-8")
    assert read_json(path) == [1, 2.5, None]


# ---- read_csv ----------------------------------------------------------------------------------


def test_read_csv_with_bom_crlf_and_quoted_multiline_fields(tmp_path):
    text = (
        "Row Number,Patient Note,Ground Truth Answer\r\n"
        '1,"A 65-year-old man, 80 kg.\r\nCreatinine 1.2 mg/dL.",66.7\r\n'
        '2,"She said ""no pain"".",12\r\n'
    )
    path = tmp_path / "medcalc.csv"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    rows = list(read_csv(path, ["Row Number", "Patient Note", "Ground Truth Answer"]))
    assert [r["Row Number"] for r in rows] == ["1", "2"]
    assert rows[0]["Patient Note"] == "A 65-year-old man, 80 kg.\r\nCreatinine 1.2 mg/dL."
    assert rows[1]["Patient Note"] == 'She said "no pain".'
    assert rows[1]["Ground Truth Answer"] == "12"


def test_read_csv_gb18030(tmp_path):
    path = tmp_path / "zh.csv"
    path.write_bytes("编号,问题,答案\n1,发热的常见原因？,感染\n".encode("gb18030"))
    rows = list(read_csv(path, ["编号", "答案"]))
    assert rows == [{"编号": "1", "问题": "发热的常见原因？", "答案": "感染"}]


def test_read_csv_missing_columns_are_all_named_on_line_one(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("Text ID,Text\n1,note\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_csv(path, ["Text ID", "Error Flag", "Text", "Corrected Sentence"])
    assert e.value.where == 1
    assert str(e.value) == f"{path}, line 1: missing columns: Error Flag, Corrected Sentence"


def test_read_csv_column_names_are_exact(tmp_path):
    # A near-miss (case, trailing space) is still missing: the reader does not guess.
    path = tmp_path / "m.csv"
    path.write_text("text id,Text \n1,x\n", encoding="utf-8")
    with pytest.raises(DataError, match="missing columns: Text ID, Text$"):
        read_csv(path, ["Text ID", "Text"])


def test_read_csv_header_only_has_no_rows(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a,b\n", encoding="utf-8")
    assert list(read_csv(path, ["a", "b"])) == []


def test_read_csv_without_required_columns_returns_all_rows(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("x,y\n1,2\n3,4\n", encoding="utf-8")
    assert [dict(r) for r in read_csv(path, [])] == [{"x": "1", "y": "2"}, {"x": "3", "y": "4"}]


# ---- require_fields / check_unique_ids ---------------------------------------------------------


@pytest.mark.parametrize(
    "record,message",
    [
        ({"answer": "A"}, "missing field 'question'"),
        ({"question": None, "answer": "A"}, "field 'question' is empty"),
        ({"question": "   \n", "answer": "A"}, "field 'question' is empty"),
        ({"question": "Q?", "answer": ""}, "field 'answer' is empty"),
    ],
)
def test_require_fields_errors(tmp_path, record, message):
    path = tmp_path / "d.jsonl"
    with pytest.raises(DataError) as e:
        require_fields(path, 12, record, ["question", "answer"])
    assert e.value.where == 12
    assert str(e.value) == f"{path}, line 12: {message}"


@pytest.mark.parametrize("value", [0, False, [], {}, "x"])
def test_require_fields_only_none_and_blank_strings_are_empty(tmp_path, value):
    require_fields(tmp_path / "d", 1, {"v": value}, ["v"])


def test_require_fields_nonempty_false_allows_empty_values(tmp_path):
    require_fields(tmp_path / "d", 1, {"a": None, "b": ""}, ["a", "b"], nonempty=False)
    with pytest.raises(DataError, match="missing field 'c'"):
        require_fields(tmp_path / "d", 1, {"a": None}, ["a", "c"], nonempty=False)


def test_require_fields_with_a_record_id(tmp_path):
    with pytest.raises(DataError) as e:
        require_fields(tmp_path / "cmb.json", "record 'q-7'", {}, ["question"])
    assert str(e.value) == f"{tmp_path / 'cmb.json'}, record 'q-7': missing field 'question'"


def test_check_unique_ids(tmp_path):
    check_unique_ids(tmp_path / "d", ["a", "b", "c"])
    check_unique_ids(tmp_path / "d", [])
    with pytest.raises(DataError) as e:
        check_unique_ids(tmp_path / "d", (i for i in ["q1", "q2", "q3", "q2", "q1"]))
    assert e.value.where == "record 'q2'"
    assert "duplicate id" in str(e.value)


# ---- ijson and json agree on escaped surrogates; json's decoder a value at a time ----------------------

# Escaped surrogates: pairs (one character), lone halves (json keeps them, ijson's C backend would
# give "?"), and the text of an escaped backslash that looks like an escape.
SURROGATE_DOCS = {
    "pair": r'["\ud83d\ude00", "\uD83D\uDE00 x"]',
    "lone_high": r'["a", "x\ud800y", "b"]',
    "lone_low": r'["a", "\udc00", "b"]',
    "lone_high_in_last_item": r'["a", {"k": "\udbff"}]',
    "high_high_low": r'["\ud800\ud800\udc00"]',
    "low_then_high": r'["\udc00\ud800"]',
    "high_then_escaped_backslash_text": r'["\ud800\\udc00"]',
    "escaped_backslash_then_lone_low": r'["\\ud800\udc00"]',
    "escaped_backslash_text_only": r'["\\ud800", "\\\\\ud83d\ude00"]',
    "key": r'{"\ud800": 1}',
}


@pytest.mark.parametrize("read", [5, 1, 11, 12, 13, 1 << 16])
@pytest.mark.parametrize("name", sorted(SURROGATE_DOCS))
def test_the_ijson_path_reads_escaped_surrogates_as_json_does(tmp_path, monkeypatch, name, read):
    monkeypatch.setattr(json_docs, "JSON_READ", read)  # escapes and pairs cut across reads
    text = SURROGATE_DOCS[name]
    path = tmp_path / f"{name}.json"
    path.write_text(("\n" * (read % 7)) + text, encoding="utf-8")
    want = json.loads(text)
    if isinstance(want, dict):
        assert list(json_docs.iter_json_object(path, "x")) == list(want.items())
    else:
        assert list(json_docs.iter_json_array(path, "x")) == list(enumerate(want))


def test_only_a_lone_surrogate_sends_the_document_to_json(tmp_path, monkeypatch):
    whole: list[str] = []
    real = json_docs.read_json
    monkeypatch.setattr(json_docs, "read_json", lambda path: whole.append(path.stem) or real(path))
    monkeypatch.setattr(json_docs, "JSON_READ", 5)
    for name, text in SURROGATE_DOCS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        list(
            json_docs.iter_json_object(path, "x")
            if text.startswith("{")
            else json_docs.iter_json_array(path, "x")
        )
    # a pair stays with ijson; the escaped-backslash texts are false alarms json reads right
    assert sorted(set(SURROGATE_DOCS) - set(whole)) == ["pair"]


def test_records_before_a_lone_surrogate_come_from_ijson_and_the_rest_from_json(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(json_docs, "JSON_READ", 64)
    items = [{"n": i, "q": "发热" * 20} for i in range(50)] + [{"n": 50, "q": "\ud800"}]
    path = tmp_path / "late.json"
    path.write_text(json.dumps(items), encoding="utf-8")  # ASCII: the surrogate written as \ud800
    got = json_docs.iter_json_array(path, "x")
    assert next(got) == (0, items[0])
    assert [item for _, item in got] == items[1:]


OBJECT_OF_ARRAYS = {
    "nan_and_big_numbers": '{"a": [1, NaN, -Infinity, 12345678901234567890123, 1.5e-7, 2E+3], "b": []}',
    "nested": '{"a": [[1, [2]], {"x": {"y": [null, true, false]}}], "b": {"not": "an array"}, "c": "text"}',
    "pretty_crlf_bom": "\ufeff"
    + json.dumps({"k": [{"q": "Ménière\u2028发热", "n": 1}], "e": []}, indent=4).replace(
        "\n", "\r\n"
    ),
    "surrogates": r'{"a": ["\ud800", "\ud83d\ude00", "\\"]}',
    "empty": "{}",
}


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
@pytest.mark.parametrize("name", sorted(OBJECT_OF_ARRAYS))
def test_iter_json_object_arrays_equals_json(tmp_path, monkeypatch, name, chunk):
    monkeypatch.setattr(json_object_arrays, "CHUNK", chunk)
    path = tmp_path / f"{name}.json"
    path.write_text(OBJECT_OF_ARRAYS[name], encoding="utf-8")
    got = [
        (k, list(v) if isinstance(v, json_object_arrays.JsonArray) else v)
        for k, v in json_object_arrays.iter_json_object_arrays(path, "x")
    ]
    want = [
        (k, list(enumerate(v)) if isinstance(v, list) else v) for k, v in read_json(path).items()
    ]
    assert repr(got) == repr(want)  # repr: NaN is never equal to itself


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2,]}',
        '{"a": [1] x',
        '{"a": [1]} extra',
        '{"a": [1',
        '{"a" [1]}',
        "{1: [2]}",
        "  ",
    ],
)
def test_iter_json_object_arrays_fails_with_read_jsons_error(tmp_path, monkeypatch, text):
    monkeypatch.setattr(json_object_arrays, "CHUNK", 3)
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as whole:
        read_json(path)
    with pytest.raises(DataError) as streamed:
        for _, value in json_object_arrays.iter_json_object_arrays(path, "x"):
            list(value) if isinstance(value, json_object_arrays.JsonArray) else None
    assert str(streamed.value) == str(whole.value)


def test_iter_json_object_arrays_decodes_as_read_text_does(tmp_path, monkeypatch):
    monkeypatch.setattr(json_object_arrays, "CHUNK", 5)
    doc = {"发热": [{"q": "咳嗽？"}, 2]}
    zh = tmp_path / "zh.json"
    zh.write_bytes(json.dumps(doc, ensure_ascii=False).encode("gb18030"))  # not UTF-8: read whole
    u16 = tmp_path / "u16.json"
    u16.write_bytes(json.dumps(doc, ensure_ascii=False).encode("utf-16"))
    with decoding.data_encoding("utf-16"):
        got16 = [(k, list(v)) for k, v in json_object_arrays.iter_json_object_arrays(u16, "x")]
    assert (
        [(k, list(v)) for k, v in json_object_arrays.iter_json_object_arrays(zh, "x")]
        == got16
        == [("发热", [(0, {"q": "咳嗽？"}), (1, 2)])]
    )
    arr = tmp_path / "arr.json"
    arr.write_text("[1]", encoding="utf-8")
    with pytest.raises(DataError, match="expected an object"):
        list(json_object_arrays.iter_json_object_arrays(arr, "expected an object"))


# ---- datasource: cache directory, local paths, file:// downloads ---------------------------------


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "my-cache"))
    assert cache_dir() == tmp_path / "my-cache"


def test_cache_dir_default_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("GRANDROUNDS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "grandrounds"


def test_cache_dir_empty_environment_value_means_default(monkeypatch, tmp_path):
    monkeypatch.setenv("GRANDROUNDS_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "grandrounds"


def served_file(tmp_path: Path, data: bytes, name: str = "data.jsonl") -> tuple[str, str]:
    src = tmp_path / "origin"
    src.mkdir(exist_ok=True)
    (src / name).write_bytes(data)
    return (src / name).as_uri(), hashlib.sha256(data).hexdigest()


def test_fetch_file_url_with_checksum(tmp_path):
    data = write_jsonl(tmp_path / "x.jsonl", RECORDS).read_bytes()
    url, sha = served_file(tmp_path, data)
    got = fetch(RemoteFile(url, "medqa.jsonl", sha), tmp_path / "cache")
    assert got == tmp_path / "cache" / "medqa.jsonl"
    assert got.read_bytes() == data
    assert [o for _, o in read_jsonl(got)] == RECORDS
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["medqa.jsonl"]


def test_fetch_checksum_failure_is_clear_and_caches_nothing(tmp_path):
    url, real_sha = served_file(tmp_path, b'{"question": "tampered"}\n')
    wrong = hashlib.sha256(b"the published file").hexdigest()
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        fetch(RemoteFile(url, "d.jsonl", wrong), cache)
    msg = str(e.value)
    assert msg.startswith(url)
    assert "checksum mismatch" in msg and wrong in msg and real_sha in msg
    assert list(cache.iterdir()) == [], "neither the file nor a partial download is left"


def test_fetch_replaces_a_cached_file_with_the_wrong_checksum(tmp_path):
    good = b'{"id": 1}\n'
    url, sha = served_file(tmp_path, good)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "d.jsonl").write_bytes(b'{"id": "stale"}\n')
    assert fetch(RemoteFile(url, "d.jsonl", sha), cache).read_bytes() == good


def test_fetch_trusts_an_existing_file_when_no_checksum_is_published(tmp_path):
    url, _ = served_file(tmp_path, b"new content\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "d.jsonl").write_bytes(b"old content\n")
    assert fetch(RemoteFile(url, "d.jsonl", None), cache).read_bytes() == b"old content\n"


def test_fetch_uses_cache_without_reading_the_source(tmp_path):
    data = b'{"id": 1}\n'
    url, sha = served_file(tmp_path, data)
    rf = RemoteFile(url, "d.jsonl", sha)
    fetch(rf, tmp_path / "cache")
    (tmp_path / "origin" / "data.jsonl").unlink()  # the source is gone: only the cache can answer
    assert fetch(rf, tmp_path / "cache").read_bytes() == data


def test_fetch_missing_source_is_a_data_error_suggesting_data(tmp_path):
    url = (tmp_path / "origin" / "absent.jsonl").as_uri()
    with pytest.raises(DataError, match="--data PATH") as e:
        fetch(RemoteFile(url, "absent.jsonl", None), tmp_path / "cache")
    assert str(e.value).startswith(url)
    assert not (tmp_path / "cache" / "absent.jsonl").exists()


def test_resolve_prefers_a_local_data_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    local = write_jsonl(tmp_path / "mine.jsonl", RECORDS)
    bench = SimpleNamespace(
        name="medqa", remote_files=(RemoteFile((tmp_path / "nowhere").as_uri(), "x", None),)
    )
    assert resolve(bench, local) == local
    assert not (tmp_path / "cache").exists(), "nothing was downloaded"


def test_resolve_local_directory_is_returned_as_is(tmp_path):
    bench = SimpleNamespace(name="medqa", remote_files=())
    assert resolve(bench, tmp_path) == tmp_path


def test_resolve_missing_local_path_is_a_data_error(tmp_path):
    bench = SimpleNamespace(name="medqa", remote_files=())
    with pytest.raises(DataError, match="not found") as e:
        resolve(bench, tmp_path / "missing.jsonl")
    assert e.value.path == str(tmp_path / "missing.jsonl")


def test_resolve_uses_a_packaged_default_path(tmp_path):
    packaged = write_jsonl(tmp_path / "demo.jsonl", RECORDS)
    bench = SimpleNamespace(name="demo", remote_files=(), default_path=lambda: str(packaged))
    assert resolve(bench, None) == packaged


def test_resolve_downloads_every_remote_file_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    url1, sha1 = served_file(tmp_path, b'{"split": "dev"}\n', "dev.jsonl")
    url2, sha2 = served_file(tmp_path, b'{"split": "test"}\n', "test.jsonl")
    bench = SimpleNamespace(
        name="pubmedqa",
        remote_files=(RemoteFile(url1, "dev.jsonl", sha1), RemoteFile(url2, "test.jsonl", sha2)),
        default_path=lambda: None,  # no packaged data
    )
    root = resolve(bench, None)
    assert root == tmp_path / "cache" / "pubmedqa"
    assert sorted(p.name for p in root.iterdir()) == ["dev.jsonl", "test.jsonl"]
    assert read_jsonl(root / "test.jsonl")[0][1] == {"split": "test"}


def test_resolve_without_any_source_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    bench = SimpleNamespace(name="private-exam", remote_files=(), default_path=lambda: None)
    with pytest.raises(ConfigError, match="--data PATH"):
        resolve(bench, None)
