"""Canonical JSON and content hashes: the keys of the cache and the fingerprints of results."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping


_SCALARS = (str, int, bool, type(None))
_EXACT_SCALARS = frozenset(_SCALARS)


def to_jsonable(obj: Any) -> Any:
    """Turn records (frozen dataclasses, tuples, mappings) into plain JSON values.

    Exact built-in types are dispatched on ``type(obj)`` first: this runs for every cache key
    and every stored record, so it is on the runner's hot path.
    """
    t = type(obj)
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


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...] | None:
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no spaces, so equal content always has equal text."""
    return json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
