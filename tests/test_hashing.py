"""Canonical JSON and content hashes: the cache keys and result fingerprints must be stable.

Expected hashes are recomputed with hashlib over text built independently (json.dumps with
sorted keys, dataclasses.asdict), never copied from a run of the code under test.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
import json
import types
from pathlib import Path

import numpy as np
import pytest

from grandrounds.core.hashing import (
    canonical_json,
    content_hash,
    file_sha256,
    text_hash,
    to_jsonable,
)
from grandrounds.core.records import (
    Criterion,
    GenParams,
    Grade,
    Message,
    Request,
    Sample,
    ToolSpec,
    Verdict,
    Vote,
    grade_from_json,
    sample_from_json,
)

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of b""
ABC_SHA256 = (
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2 example "abc"
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---- canonical JSON ---------------------------------------------------------------------------


def test_key_order_does_not_change_canonical_text_or_hash():
    a = {"model": "m", "temperature": 0.0, "messages": [{"role": "user", "content": "hi"}]}
    b = {"messages": [{"content": "hi", "role": "user"}], "temperature": 0.0, "model": "m"}
    assert canonical_json(a) == canonical_json(b)
    assert content_hash(a) == content_hash(b)


def test_canonical_json_is_sorted_and_compact():
    got = canonical_json({"b": 1, "a": [1, 2], "c": {"z": None, "y": True}})
    assert got == '{"a":[1,2],"b":1,"c":{"y":true,"z":null}}'
    assert " " not in canonical_json({"k": [1, 2, {"x": "y"}]})


def test_canonical_json_equals_json_dumps_sorted_compact_for_plain_values():
    value = {
        "q": "Which drug?",
        "options": {"B": "Protamine", "A": "Vitamin K"},
        "n": 3,
        "w": 0.25,
        "ok": False,
    }
    want = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == want
    assert content_hash(value) == sha(want)


def test_non_ascii_is_kept_raw_and_hashed_as_utf8():
    value = {"question": "患者，男，45岁。诊断？", "unit": "µmol/L"}
    text = canonical_json(value)
    assert "患者，男，45岁。诊断？" in text and "\\u" not in text
    assert content_hash(value) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_equal_content_with_different_unicode_forms_hashes_differently():
    # Canonical JSON does not normalise Unicode: "é" precomposed vs "e" + combining accent are different inputs.
    assert content_hash("caf\u00e9") != content_hash("cafe\u0301")


@pytest.mark.parametrize("nan", [float("nan"), np.float64("nan")])
def test_nan_becomes_null(nan):
    assert to_jsonable(nan) is None
    assert canonical_json({"score": nan, "xs": [1.0, nan]}) == '{"score":null,"xs":[1.0,null]}'
    assert content_hash({"score": nan}) == content_hash({"score": None})


def test_nan_output_is_valid_strict_json():
    text = canonical_json({"a": float("nan"), "b": [float("nan")]})

    def reject(name):
        raise ValueError(f"non-standard constant {name}")

    assert json.loads(text, parse_constant=reject) == {"a": None, "b": [None]}


def test_tuples_and_lists_hash_the_same():
    assert canonical_json((1, "a", (2, 3))) == canonical_json([1, "a", [2, 3]]) == '[1,"a",[2,3]]'
    assert content_hash({"stop": ("\n",)}) == content_hash({"stop": ["\n"]})


def test_list_order_matters():
    assert content_hash(["A", "B"]) != content_hash(["B", "A"])


def test_bool_is_not_confused_with_int():
    assert canonical_json(True) == "true"
    assert canonical_json([True, 1, False, 0]) == "[true,1,false,0]"
    assert content_hash({"json_object": True}) != content_hash({"json_object": 1})


def test_non_string_keys_are_stringified():
    assert canonical_json({1: "a", 2: "b"}) == '{"1":"a","2":"b"}'
    assert to_jsonable({3: [(1, 2)]}) == {"3": [[1, 2]]}


def test_none_and_empty_values_are_distinct():
    hashes = {content_hash(v) for v in (None, "", [], {}, 0, False)}
    assert len(hashes) == 6


def test_to_jsonable_is_idempotent():
    value = {"a": (1, 2.5, float("nan")), "b": {"c": [Message("user", "x")]}}
    once = to_jsonable(value)
    assert to_jsonable(once) == once
    assert canonical_json(once) == canonical_json(value)


# ---- records and other types --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Point:
    y: float
    x: float
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Point3(Point):
    z: float = 0.0


def test_dataclass_becomes_dict_of_its_fields():
    assert to_jsonable(Point(2.0, 1.0, ("a",))) == {"y": 2.0, "x": 1.0, "tags": ["a"]}
    assert content_hash(Point(2.0, 1.0)) == content_hash({"x": 1.0, "y": 2.0, "tags": []})


def test_dataclass_subclass_includes_inherited_fields():
    assert to_jsonable(Point3(1.0, 2.0, (), 3.0)) == {"y": 1.0, "x": 2.0, "tags": [], "z": 3.0}


def test_dataclass_non_field_attributes_are_not_hashed():
    req = Request(provider="openai", model="m", messages=(Message("user", "hi"),))
    before = content_hash(req)
    req.key()  # caches _canonical and _key in __dict__
    assert "_key" in req.__dict__
    assert content_hash(req) == before
    assert "_key" not in to_jsonable(req)


def test_request_key_is_sha256_of_independently_built_json():
    req = Request(
        provider="openai",
        model="gpt-x",
        messages=(Message("system", "Be brief."), Message("user", "Which organ pumps blood?")),
        params=GenParams(temperature=0.2, max_tokens=64, stop=("\n\n",)),
        kind="next_token",
        continuations=("A", "B"),
        base_url="http://127.0.0.1:8000/v1",
    )
    plain = dataclasses.asdict(req)
    # fields added after keys were first stored (tools, tool_choice, item) are left out while empty
    assert plain.pop("tools") == () and plain.pop("tool_choice") == "" and plain.pop("item") == ""
    want = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert req.canonical() == want
    assert req.key() == sha(want) == content_hash(req)
    # and written when set, so a request with tools has a key of its own
    tooled = dataclasses.replace(
        req, tools=(ToolSpec("calculator", "adds", {"type": "object"}),), tool_choice="auto"
    )
    plain_t = dataclasses.asdict(tooled)
    assert plain_t.pop("item") == ""
    assert tooled.canonical() == json.dumps(
        plain_t, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert tooled.key() != req.key()


@pytest.mark.parametrize(
    "change",
    [
        dict(model="other"),
        dict(provider="llamacpp"),
        dict(messages=(Message("user", "Which organ pumps blood? "),)),
        dict(params=GenParams(temperature=0.7)),
        dict(params=GenParams(seed=1)),
        dict(params=GenParams(max_tokens=1023)),
        dict(params=GenParams(stop=("\n",))),
        dict(purpose="judge"),
        dict(kind="loglikelihood"),
        dict(continuations=("A",)),
        dict(base_url="http://127.0.0.1:9/v1"),
        dict(attempt=1),
    ],
)
def test_every_request_field_changes_the_cache_key(change):
    base = Request(
        provider="openai", model="m", messages=(Message("user", "Which organ pumps blood?"),)
    )
    assert dataclasses.replace(base, **change).key() != base.key()


def test_equal_requests_built_separately_share_a_key():
    a = Request(
        provider="openai",
        model="m",
        messages=(Message("user", "q"),),
        params=GenParams(stop=("x",)),
    )
    b = Request(
        provider="openai",
        model="m",
        messages=(Message("user", "q"),),
        params=GenParams(stop=("x",)),
    )
    assert a is not b and a.key() == b.key()


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_str_and_int_enums_serialise_as_their_values():
    assert canonical_json({"c": Color.RED, "l": Level.HIGH}) == '{"c":"red","l":3}'
    assert content_hash(Color.RED) == content_hash("red")


def test_named_tuples_and_other_mappings():
    Pair = collections.namedtuple("Pair", "a b")
    assert to_jsonable(Pair(1, (2,))) == [1, [2]]
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    frozen = types.MappingProxyType({"b": 1, "a": 2})
    assert canonical_json(ordered) == canonical_json(frozen) == '{"a":2,"b":1}'


def test_numpy_float64_is_a_float():
    assert canonical_json({"x": np.float64(0.5)}) == '{"x":0.5}'


@pytest.mark.parametrize("value", [object(), {1, 2}, frozenset({"a"}), b"bytes"])
def test_values_without_a_stable_json_form_are_rejected_not_guessed(value):
    # A cache key built from repr() or set iteration order would differ between processes.
    with pytest.raises(TypeError):
        canonical_json({"v": value})


def test_sample_round_trips_through_to_jsonable():
    s = Sample(
        id="q-17",
        benchmark="medqa",
        messages=(Message("user", "A 23-year-old woman with dysuria..."),),
        target="A",
        choices={"A": "E. coli", "B": "Proteus"},
        rubric=(Criterion("c1", "Mentions hydration", 5.0, ("axis:completeness",)),),
        metadata={"meta_info": "step1", "year": 2020},
        group="g1",
        turn=2,
    )
    back = sample_from_json(json.loads(canonical_json(s)))
    assert back == s
    assert content_hash(back) == content_hash(s)


def test_grade_round_trips_through_to_jsonable():
    vote = Vote(
        judge="openai/j", status="met", score=4.0, raw="yes", attempts=2, keys=("k1", "k2"), run=1
    )
    g = Grade(
        sample_id="s1",
        value=0.5,
        extracted="B",
        verdicts=(Verdict("c1", "met", "ok", (vote,)),),
        details={"points": [1, 2]},
        judge_keys=("k1",),
        status="scored",
        votes=(vote,),
    )
    back = grade_from_json(json.loads(canonical_json(g)))
    assert back == g


# ---- text_hash / file_sha256 ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text,want",
    [("", EMPTY_SHA256), ("abc", ABC_SHA256)],
)
def test_text_hash_known_vectors(text, want):
    assert text_hash(text) == want


@pytest.mark.parametrize(
    "text", ["Which organ pumps blood?", "心脏", "line1\nline2\u2028", "\ufeffbom"]
)
def test_text_hash_is_sha256_of_utf8(text):
    assert text_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_content_hash_of_a_string_hashes_its_json_form():
    assert content_hash("abc") == sha('"abc"') != text_hash("abc")


def test_file_sha256_empty_file(tmp_path: Path):
    p = tmp_path / "empty.bin"
    p.write_bytes(b"")
    assert file_sha256(p) == EMPTY_SHA256


@pytest.mark.parametrize("size", [1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17])
def test_file_sha256_matches_hashlib_across_block_boundaries(tmp_path: Path, size: int):
    data = bytes((i * 31 + 7) % 256 for i in range(size))
    p = tmp_path / f"f{size}.bin"
    p.write_bytes(data)
    assert file_sha256(p) == hashlib.sha256(data).hexdigest()


def test_file_sha256_reads_bytes_not_text(tmp_path: Path):
    # CRLF and a BOM must be hashed as-is (the checksum of a downloaded file is of its bytes).
    data = "\ufeffid,question\r\n1,心脏\r\n".encode("utf-8")
    p = tmp_path / "f.csv"
    p.write_bytes(data)
    assert file_sha256(p) == hashlib.sha256(data).hexdigest()
    assert file_sha256(p) != text_hash(p.read_text(encoding="utf-8"))


def test_file_sha256_missing_file_raises(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "nope")
