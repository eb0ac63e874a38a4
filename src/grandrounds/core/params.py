"""Declared options: what a benchmark or provider accepts, checked and coerced before a run starts.

Benchmarks declare their constructor parameters (``--param``) and scoring options (``--scoring``),
providers their model options (``--model-opt``, ``--threads``), each as a tuple of :class:`Param`.
A value typed on the command line arrives as a string and is coerced to the declared type; a key
nobody declared, a value of the wrong type or outside the declared choices is a one-line
:class:`ConfigError` naming the key and what is accepted, so a typo can never be recorded in a
run's spec or fingerprint while doing nothing.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import GenericAlias
from typing import Any

from grandrounds.core.errors import ConfigError

#: int, float, bool, str, ``list[str]``, or a class a value must be an instance of (e.g. Callable).
ParamType = type | GenericAlias

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True, kw_only=True)
class Param:
    """One option: its name, type, default, allowed values and a one-line help text.

    ``choices`` restricts the value (each element, for ``list[str]``); ``minimum`` bounds a number.
    A default of None means "not set" and None is then accepted as a value.
    """

    name: str
    type: ParamType
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None

    def type_name(self) -> str:
        """The type as shown in help and errors (``int``, ``list[str]``, ``Callable``)."""
        return str(self.type) if isinstance(self.type, GenericAlias) else self.type.__name__

    def describe(self) -> str:
        """``name: type = default (a|b) - help`` for listings."""
        allowed = f" ({'|'.join(map(str, self.choices))})" if self.choices else ""
        everything = isinstance(self.default, (list, tuple)) and list(self.default) == list(
            self.choices or ()
        )
        default = (
            "" if self.default is None else " = all" if everything else f" = {_show(self.default)}"
        )
        return f"{self.name}: {self.type_name()}{default}{allowed}" + (
            f" - {self.help}" if self.help else ""
        )


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the closest candidate, or "" when nothing is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def check_values(
    declared: Sequence[Param], given: Mapping[str, Any], owner: str, flag: str
) -> dict[str, Any]:
    """The ``given`` values coerced to their declared types; unknown keys and bad values are refused.

    ``owner`` names who takes the options (``pubmedqa``, ``provider openai``) and ``flag`` how a
    user sets them (``--param``), so the error says exactly what to fix.
    """
    by_name = {p.name: p for p in declared}
    out: dict[str, Any] = {}
    for key, value in given.items():
        param = by_name.get(key)
        if param is None:
            raise _unknown(key, declared, owner, flag)
        out[key] = coerce(param, value, f"{owner}: {flag} {key}")
    return out


def declared_value(
    declared: Sequence[Param], given: Mapping[str, Any], name: str, what: str
) -> Any:
    """The value of declared option ``name``: as ``given``, else its declared default."""
    if name in given:
        return given[name]
    for p in declared:
        if p.name == name:
            return p.default
    raise KeyError(f"{what} {name!r} is not declared")


def without_defaults(declared: Sequence[Param], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` minus those equal to their declared default: setting a default changes nothing recorded."""
    by_name = {p.name: p for p in declared}
    return {k: v for k, v in values.items() if k not in by_name or not is_default(by_name[k], v)}


def is_default(param: Param, value: Any) -> bool:
    """True when ``value`` equals the declared default (a list equals a tuple with the same items)."""
    if isinstance(value, (list, tuple)) and isinstance(param.default, (list, tuple)):
        return list(value) == list(param.default)
    return bool(value == param.default) and type(value) is type(param.default)


def coerce(param: Param, value: Any, where: str) -> Any:
    """``value`` as the declared type, within choices and minimum; ConfigError otherwise.

    Strings from the command line are parsed: ``"3"`` -> 3, ``"true"`` -> True, ``"a,b"`` or
    ``'["a","b"]'`` -> ["a", "b"]. Values already of the right type pass through.
    """
    if value is None and param.default is None:
        return None
    converted = _convert(param, value, where)
    _check_range(param, converted, where)
    return converted


def _convert(param: Param, value: Any, where: str) -> Any:
    kind = param.type
    if kind == list[str]:
        return _to_str_list(value, where)
    converter = _CONVERTERS.get(kind) if isinstance(kind, type) else None
    if converter is not None:
        return converter(value, where)
    if isinstance(kind, type) and isinstance(value, kind):
        return value
    raise _bad(where, value, f"a {param.type_name()}")


def _check_range(param: Param, value: Any, where: str) -> None:
    items = value if isinstance(value, list) else [value]
    if param.choices is not None:
        for item in items:
            if item not in param.choices:
                hint = (
                    did_you_mean(item, [str(c) for c in param.choices])
                    if isinstance(item, str)
                    else ""
                )
                raise _bad(where, item, f"one of {', '.join(map(str, param.choices))}", hint)
    if param.minimum is not None and value < param.minimum:
        raise _bad(where, value, f"at least {_show(param.minimum)}")


def _to_int(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise _bad(where, value, "an integer")


def _to_float(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise _bad(where, value, "a number")


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise _bad(where, value, "true or false")


def _to_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    raise _bad(where, value, "a string")


def _to_str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise _bad(where, value, 'a list such as a,b or ["a","b"]') from None
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _bad(where, value, "a list of strings")


_CONVERTERS: dict[type, Callable[[Any, str], Any]] = {
    int: _to_int,
    float: _to_float,
    bool: _to_bool,
    str: _to_str,
}


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _bad(where: str, value: Any, wanted: str, hint: str = "") -> ConfigError:
    return ConfigError(f"{where}={value!r} is not {wanted}{hint}")


def _unknown(key: str, declared: Sequence[Param], owner: str, flag: str) -> ConfigError:
    names = [p.name for p in declared]
    if not names:
        return ConfigError(f"{owner}: unknown {flag} {key!r} (it accepts none)")
    return ConfigError(
        f"{owner}: unknown {flag} {key!r}{did_you_mean(key, names)} (accepted: {', '.join(names)})"
    )
