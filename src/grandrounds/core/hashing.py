"""Canonical JSON and content hashes: the keys of the cache and the fingerprints of results."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

_SCALARS = (str, int, bool, type(None))
_EXACT_SCALARS = frozenset(_SCALARS)


def to_jsonable(obj: Any) -> Any:
    """Turn records (frozen dataclasses, tuples, mappings) into plain JSON values.

    Exact built-in types are dispatched on ``type(obj)`` first: this runs for every cache key
    and every stored record, so it is on the runner's hot path.
    """
    t: type = type(obj)
    if t in _EXACT_SCALARS:
        return obj
    if t is float:
        return None if obj != obj else obj  # NaN has no JSON form
    if t is dict:
        return {k if type(k) is str else str(k): to_jsonable(v) for k, v in obj.items()}
    if t is tuple or t is list:
        return [to_jsonable(v) for v in obj]
    names = _field_names(t)
    if names is not None:
        omit = _omitted_when_empty(t)
        if omit:
            return {n: to_jsonable(v) for n in names if (v := getattr(obj, n)) or n not in omit}
        return {n: to_jsonable(getattr(obj, n)) for n in names}
    # subclasses of the built-ins: str/int enums, numpy floats, named tuples, other mappings
    if isinstance(obj, _SCALARS):
        return obj
    if isinstance(obj, float):
        return None if obj != obj else obj
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's fields as JSON writes them: every field but those marked
    ``metadata={"json": False}`` (bytes that travel beside a record, never in its key)."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("json", True))


@functools.cache
def _omitted_when_empty(cls: type) -> frozenset[str]:
    """Fields marked ``metadata={"omit_empty": True}``: left out of JSON while empty (falsy), so
    records written before such a field existed keep their text and their keys."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get("omit_empty"))


def dataclass_dict(obj: Any) -> dict[str, Any] | None:
    """A dataclass instance's fields as a dict (what canonical JSON writes for it), None for
    anything else."""
    t: type = type(obj)
    names = _field_names(t)
    if names is None:
        return None
    omit = _omitted_when_empty(t)
    if omit:
        return {n: v for n in names if (v := getattr(obj, n)) or n not in omit}
    return {n: getattr(obj, n) for n in names}


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no spaces, so equal content always has equal text.

    The text is that of ``json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``: cache keys and fingerprints stored by earlier versions stay valid.
    orjson writes it about ten times faster, and does so whenever its text is certain to be the
    same (:func:`_orjson_text`); otherwise the standard library writes it.
    """
    fast = _orjson_text(obj)
    if fast is not None:
        return fast
    return _stdlib_json(obj)


def _stdlib_json(obj: Any) -> str:
    return escape_surrogates(
        json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )


#: A UTF-16 surrogate code point: in a Python string only where text held a lone one (a reply's
#: ``"yes\ud800"``), which has no UTF-8 form.
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON ``text`` with each lone surrogate written as its ``\\uXXXX`` escape: the same JSON
    value (``json.loads`` gives back the same string), now with a UTF-8 form a store, a file and a
    hash can take. Text without one (every ordinary text) is returned as it is, so no stored key
    moves."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _NotExact(Exception):
    """orjson's text would differ from the standard library's for this value."""


#: Sorted keys; dataclasses go through :func:`_orjson_default` (orjson's own dataclass path would
#: also write attributes cached in an instance's ``__dict__``).
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def _orjson_text(obj: Any) -> str | None:
    """``obj``'s canonical JSON written by orjson, or None where its text could differ.

    The two writers agree, character for character, on strings (every code point; lone
    surrogates make both fail and are left to the standard library), integers up to 64 bits,
    booleans, null, sorted string keys and compact separators. They differ on floats: orjson
    writes ``1e-7`` and ``0.00001`` where Python writes ``1e-07`` and ``1e-05``, and ``null`` for
    infinities that Python writes as ``Infinity``. So every float is checked against Python's
    own text (:func:`_same_float`) and any doubt (a float, a non-string key, an integer orjson
    refuses, a type it does not know) sends the value to the standard library.
    """
    try:
        _check_floats(obj)
        return orjson.dumps(obj, default=_orjson_default, option=_ORJSON_OPTIONS).decode("utf-8")
    except (_NotExact, TypeError, orjson.JSONEncodeError):
        return None


def _same_float(x: float) -> bool:
    """True when orjson and ``json.dumps`` write ``x`` alike (NaN is null for both: to_jsonable maps it so)."""
    if x != x:
        return True
    return orjson.dumps(x) == json.dumps(x).encode("ascii")


#: Values orjson and the standard library always write alike, and that hold nothing to look into.
_PLAIN = frozenset({str, int, bool, type(None)})


def _check_floats(value: Any) -> None:
    """Raise _NotExact for a float in ``value`` that orjson would write differently, or a dict key
    that is not a plain string.

    Looks through lists, tuples and dicts; a dataclass's fields are looked through when orjson
    asks for them (:func:`_orjson_default`). On every cache key's path, so plain values are
    skipped without a call.
    """
    t = type(value)
    if t is float:
        if not (value == 0.0 or 1e-4 <= abs(value) < 1e15 or _same_float(value)):
            raise _NotExact
    elif t is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise _NotExact  # to_jsonable writes str(key), which orjson need not match
            if type(v) not in _PLAIN:
                _check_floats(v)
    elif t is list or t is tuple:
        for v in value:
            if type(v) not in _PLAIN:
                _check_floats(v)


def _orjson_default(obj: Any) -> Any:
    """What orjson does not write itself, as :func:`to_jsonable` has it: a dataclass as its
    fields, a mapping as a dict, a float subclass as a float, a tuple subclass as a list."""
    fields = dataclass_dict(obj)
    if fields is not None:
        _check_floats(fields)
        return fields
    if isinstance(obj, float):
        _check_floats(float(obj))
        return None if obj != obj else float(obj)
    if isinstance(obj, (list, tuple)):
        items = list(obj)
        _check_floats(items)
        return items
    if isinstance(obj, Mapping):
        pairs = dict(obj)
        _check_floats(pairs)
        return pairs
    raise _NotExact


def content_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
