"""canonical_json writes, through orjson, exactly the text the standard library writes.

Cache keys and fingerprints stored by earlier versions are sha256 of that text, so a single
character of difference would turn every stored call into a miss. The standard library's text
(``_stdlib_json``) is the definition; these tests compare the two on the values records hold and
on values chosen to trip orjson (floats it writes otherwise, non-string keys, big integers).
"""

from __future__ import annotations

import enum
import json
import math
import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from grandrounds.core.hashing import _orjson_text, _stdlib_json, canonical_json, content_hash
from grandrounds.core.records import Criterion, GenParams, Message, Request, Response, Sample, Usage


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclass(frozen=True)
class Nested:
    name: str
    values: tuple[Any, ...] = ()
    extra: Any = None
    table: dict[str, Any] = field(default_factory=dict)


def awkward_floats(rng: random.Random) -> list[float]:
    fixed = [
        0.0,
        -0.0,
        1.0,
        0.5,
        1e-4,
        9.99e-5,
        1e-5,
        1e-7,
        5e-324,
        1e15,
        1e16,
        1e21,
        1e22,
        1.7976931348623157e308,
        123456789012345.6,
        999999999999999.9,
        1e-300,
        math.inf,
        -math.inf,
        math.nan,
        0.1 + 0.2,
    ]
    drawn = [rng.choice([1, -1]) * 10 ** rng.uniform(-30, 30) for _ in range(300)]
    return fixed + drawn


def random_text(rng: random.Random) -> str:
    pools = [
        "abc xyz ",
        "".join(chr(c) for c in range(0, 0x20)) + '"\\/\x7f',
        "中文，“引号”、（括号）：；！？。",
        "\u2028\u2029\ufeff\u200b",
        "".join(chr(c) for c in range(0x1F600, 0x1F650)),
        "</script><b>&amp;</b>",
    ]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 40)))


def random_value(rng: random.Random, depth: int = 0) -> Any:
    floats = awkward_floats(rng)
    leaves = [
        lambda: rng.choice(floats),
        lambda: random_text(rng),
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.randint(-5, 5),
        lambda: rng.choice([True, False, None]),
        lambda: Colour.RED,
        lambda: Level.HIGH,
        lambda: np.float64(rng.choice(floats)),
    ]
    if depth >= 3 or rng.random() < 0.4:
        return rng.choice(leaves)()
    kind = rng.randrange(6)
    if kind == 0:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 1:
        return tuple(random_value(rng, depth + 1) for _ in range(rng.randint(0, 4)))
    if kind == 2:
        return {random_text(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if kind == 3:
        return MappingProxyType({random_text(rng): random_value(rng, depth + 1)})
    if kind == 4:
        return {rng.choice([1, 2.5, True, None, Colour.RED]): random_value(rng, depth + 1)}
    return Nested(
        random_text(rng),
        tuple(random_value(rng, depth + 1) for _ in range(2)),
        random_value(rng, depth + 1),
        {random_text(rng): random_value(rng, depth + 1)},
    )


def test_random_values_have_the_standard_librarys_text() -> None:
    rng = random.Random(20261123)
    for i in range(3000):
        value = random_value(rng)
        assert canonical_json(value) == _stdlib_json(value), f"value {i}: {value!r}"


def test_every_float_drawn_is_written_as_python_writes_it() -> None:
    rng = random.Random(7)
    for x in awkward_floats(rng) + [rng.uniform(-1e6, 1e6) for _ in range(2000)]:
        assert canonical_json({"x": x}) == _stdlib_json({"x": x}), repr(x)
        assert canonical_json(GenParams(temperature=x)) == _stdlib_json(GenParams(temperature=x)), (
            repr(x)
        )


def test_every_code_point_is_escaped_alike() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert canonical_json(Message("user", text)) == _stdlib_json(Message("user", text))


def test_requests_and_records_take_the_fast_path_and_keep_their_keys() -> None:
    request = Request(
        provider="openai",
        model="gpt-4.1",
        messages=(Message("system", "你是医生。"), Message("user", "Chest pain, 3 days?")),
        params=GenParams(temperature=0.7, max_tokens=2048, top_p=0.95, seed=0, stop=("\n\n",)),
        purpose="judge",
        base_url="http://127.0.0.1:8000/v1",
        attempt=1,
    )
    text = _orjson_text(request)
    assert text is not None, (
        "a typical request must be written by orjson (else the speed-up is gone)"
    )
    assert text == _stdlib_json(request)
    # The key is the hash of the standard library's text, as earlier versions stored it.
    expected = __import__("hashlib").sha256(_stdlib_json(request).encode("utf-8")).hexdigest()
    assert request.key() == expected
    sample = Sample(
        id="q1",
        benchmark="medqa",
        messages=(Message("user", "Which drug?"),),
        target="B",
        choices={"A": "x", "B": "y"},
        rubric=(Criterion("c1", "Mentions dose", -3.5, ("axis:accuracy",)),),
        metadata={"year": 2024, "w": 1e-9},
    )
    response = Response(
        key="k", text="B", scores={"A": -1.25e-06, "B": -0.5}, usage=Usage(10, 2), latency=0.001234
    )
    for record in (sample, response):
        assert canonical_json(record) == _stdlib_json(record)
        assert (
            content_hash(record)
            == __import__("hashlib").sha256(_stdlib_json(record).encode("utf-8")).hexdigest()
        )


def test_cached_attributes_of_a_request_are_not_written() -> None:
    request = Request(provider="openai", model="m", messages=(Message("user", "hi"),))
    first = request.canonical()
    request.key()  # caches _canonical and _key in the instance's __dict__
    assert canonical_json(request) == first == _stdlib_json(request)
    assert "_key" not in first and "_canonical" not in first


def test_values_orjson_cannot_write_alike_go_to_the_standard_library() -> None:
    for value in ({1: "a"}, {"x": math.inf}, {"x": 1e-7}, 2**80, {Colour.RED: 1}):
        assert _orjson_text(value) is None
        assert canonical_json(value) == _stdlib_json(value)
    # and what the standard library refuses is still refused
    for bad in ({"s": "\ud800"}, object()):
        try:
            expected: Any = _stdlib_json(bad).encode("utf-8")
        except (TypeError, UnicodeEncodeError) as err:
            expected = type(err)
        try:
            got: Any = canonical_json(bad).encode("utf-8")
        except (TypeError, UnicodeEncodeError) as err:
            got = type(err)
        assert got == expected
    assert json.loads(canonical_json({"b": 1, "a": [1.5, None]})) == {"a": [1.5, None], "b": 1}


def test_a_requests_own_text_is_the_standard_librarys_for_any_request() -> None:
    """Request.canonical writes its messages and parameters as dicts before orjson sees them; the
    text (and so every cache key) must stay the standard library's text of the record itself."""
    rng = random.Random(11)
    floats = awkward_floats(rng)
    for i in range(600):
        params = GenParams(
            temperature=rng.choice(floats),
            max_tokens=rng.randint(1, 2**40),
            top_p=rng.choice([None, *floats]),
            seed=rng.choice([None, 0, 7, -(2**70)]),
            stop=tuple(random_text(rng) for _ in range(rng.randint(0, 3))),
            json_object=rng.random() < 0.5,
        )
        messages = tuple(
            Message(rng.choice(["system", "user", "assistant"]), random_text(rng))
            for _ in range(rng.randint(0, 4))
        )
        request = Request(
            provider="openai",
            model=random_text(rng),
            messages=messages,
            params=params,
            purpose=rng.choice(["answer", "judge"]),
            kind=rng.choice(["chat", "next_token", "loglikelihood"]),
            continuations=tuple(random_text(rng) for _ in range(rng.randint(0, 3))),
            base_url=random_text(rng),
            attempt=rng.randint(0, 3),
        )
        assert request.canonical() == _stdlib_json(request), f"request {i}: {request!r}"
        assert (
            request.key()
            == __import__("hashlib").sha256(_stdlib_json(request).encode("utf-8")).hexdigest()
        )
