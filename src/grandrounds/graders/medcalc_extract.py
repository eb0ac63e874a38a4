"""Reading a calculator value out of a MedCalc-Bench reply, pure. Two readings, one per protocol.

``reference`` (:func:`official_reading`): what ncbi-nlp/MedCalc-Bench reads, step for step.
llm_inference.py collapses every whitespace run of the reply to one space; run.py extract_answer
then takes the last ``answer": ... }`` field (case of the A free; a placeholder from the prompt
counts as none) and, by calculator id:

- dates (13, 68): a M/D/YYYY date at the start of the field, else nothing;
- gestational age (69): the official (weeks, days) pattern; a field without one makes the
  official call raise (the row is then wrong), brackets and quotes are dropped before reading;
- integers: "N out of", then a comma list of numbers (read as its *length*), then the last number;
- decimals: ``str(expression)`` evaluated (after the official text substitutions and bracket
  repair, by our own restricted evaluator, see :func:`official_expression`), then a number before
  "mL/min/1.73", then the last number before "%" divided by 100, then the last number.

``grandrounds`` (:func:`answer_text` then :func:`parse_value`), in this order of precedence:

1. the answer field of the *last* JSON object that has one (any nesting, key case free), read
   with raw control characters (a raw newline inside the thinking string, as real models write
   it) taken as spaces and curly quotes folded; else the last ``"answer": value`` pair read by
   pattern (unescaped quotes in the thinking); else the last "answer: ..." / "answer is ..." line;
   else a short bare reply (40 characters or fewer);
2. in that text, full-width forms fold to ASCII (not NFKC: "m²" keeps its superscript, so
   "mL/min/1.73 m²" is no number 2), and numbers that belong to a unit ("/1.73 m²", "10^9",
   "m2", "CHA2DS2") are not values;
3. dates: M/D/YYYY, M-D-YYYY, YYYY-MM-DD or a month name, the last one; gestational age: a
   (weeks, days) pair whose parts are separated, else "N weeks" or "N days" alone;
4. numbers: a literal ``str(expression)`` (the prompt's placeholder written out) is evaluated
   as arithmetic; numbers in a date beside the value are ignored; then "N out of", else the last
   number written with "%" (read as the percent it says, *not* divided by 100: the percentage
   calculators' truths, FENa and Framingham, are stated in percent), else the last number outside
   a parenthetical aside; "1,234" is one number; a bare list of numbers ("3, 4, 5") is
   ambiguous and read as nothing.

Both return None / "N/A" for what cannot be read, never a guess.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np

from grandrounds.core.textutil import strip_reasoning
from grandrounds.scoring.medcalc import (
    DATE_CALCULATORS,
    DECIMAL_CALCULATORS,
    GESTATIONAL_CALCULATORS,
    INTEGER_CALCULATORS,
    OFFICIAL_WEEKS_DAYS,
    Kind,
    py_number,
)

# ---- reference: the official reading ----------------------------------------------------------

NOT_FOUND = "Not Found"
#: What extract_answer reads as no value: the answer placeholders of the official prompts.
PLACEHOLDERS = frozenset(
    {
        "str(short_and_direct_answer_of_the_question)",
        "str(value which is the answer to the question)",
        "X.XX",
    }
)
NA = "N/A"
_WHITESPACE = re.compile(r"\s+")
_FIELD = re.compile(r'[Aa]nswer":\s*(.*?)\}')
_DATE_AT_START = re.compile(r"^(0?[1-9]|1[0-2])/(0?[1-9]|[12][0-9]|3[01])/(\d{4})")
_OUT_OF_OFFICIAL = re.compile(r"(\d+) out of")
_COMMA_LIST = re.compile(r"-?\d+(?:, ?-?\d+)+")
_NUMBER_OFFICIAL = re.compile(r"-?\d+(?:\.\d+)?")
_EXPRESSION = re.compile(r"str\((.*)\)")
_EGFR_UNIT = re.compile(r"(-?\d+(?:\.\d+)?)\s*mL/min/1.73")  # "." is any character there too
_PERCENT_OFFICIAL = re.compile(r"(-?\d+(?:\.\d+)?)%")
#: run.py's text substitutions before it evaluates a ``str(...)`` answer, in its order.
_EXPRESSION_EDITS = (
    ("^", "**"),
    ("is odd", "% 2 == 1"),
    ("is even", "% 2 == 0"),
    ("sqrt", "math.sqrt"),
    (".math", ""),
    ("weight", ""),
    ("height", ""),
    ("mg/dl", ""),
    ("g/dl", ""),
    ("mmol/L", ""),
    ("kg", ""),
    ("g", ""),
    ("mEq/L", ""),
)


@dataclass(frozen=True)
class OfficialReading:
    """What the official extraction makes of a reply.

    ``field`` is the answer field it reads ("Not Found" if none); ``answer`` the value string it
    passes on ("N/A" when it reads no value); None with ``error`` when the official call raises
    (the row is then "Incorrect" there).
    """

    field: str
    answer: str | None
    error: str | None = None

    @property
    def unextractable(self) -> bool:
        return self.answer is None or self.answer == NA


def official_reading(reply: str, calculator_id: int) -> OfficialReading:
    """llm_inference.py's whitespace collapse, then run.py extract_answer (see the module docstring)."""
    text = _WHITESPACE.sub(" ", reply)
    fields = _FIELD.findall(text)
    field = fields[-1].strip().strip('"') if fields else NOT_FOUND
    if field in PLACEHOLDERS:
        field = NOT_FOUND
    try:
        return OfficialReading(field, _official_value(field, calculator_id))
    except (ValueError, OverflowError, LookupError) as e:
        return OfficialReading(field, None, f"{type(e).__name__}: {e}")


def _official_value(field: str, cid: int) -> str:
    if cid in DATE_CALCULATORS:
        m = _DATE_AT_START.search(field)
        return f"{int(m.group(1)):02}/{int(m.group(2)):02}/{m.group(3)}" if m else NA
    if cid in GESTATIONAL_CALCULATORS:
        if OFFICIAL_WEEKS_DAYS.search(field) is None:
            raise LookupError(
                "no (weeks, days) pair in the answer field (the official call raises)"
            )
        flat = field.replace("[", "(").replace("]", ")").replace("'", "").replace('"', "")
        m = OFFICIAL_WEEKS_DAYS.search(flat)
        return f"({m.group(1)}, {m.group(3)})" if m else NA
    if cid in INTEGER_CALCULATORS:
        if m := _OUT_OF_OFFICIAL.search(field):
            return m.group(1)
        if m := _COMMA_LIST.search(field):
            return str(len(m.group(0).split(",")))
        numbers = _NUMBER_OFFICIAL.findall(field)
        return numbers[-1] if numbers else NA
    if cid in DECIMAL_CALCULATORS:
        value: Any
        if m := _EXPRESSION.search(field):
            value = official_expression(m.group(1))
        elif m := _EGFR_UNIT.search(field):
            value = py_number(m.group(1))
        elif percents := _PERCENT_OFFICIAL.findall(field):
            value = py_number(percents[-1]) / 100
        elif numbers := _NUMBER_OFFICIAL.findall(field):
            value = py_number(numbers[-1])
        else:
            return NA
        return NA if value is None else str(value)
    raise LookupError(f"calculator {cid} is in none of the official lists")


def official_expression(expression: str) -> Any:
    """The value run.py gets by evaluating a ``str(...)`` answer, or None where it gets "N/A".

    The official edits are applied (``^`` -> ``**``, "sqrt" -> ``math.sqrt``, unit words and every
    "g" removed, a ``#`` comment cut, unbalanced brackets closed), then the expression is evaluated
    by a restricted evaluator of our own: numbers, arithmetic, comparisons, ``min pow round abs int
    float``, ``math.*`` and common ``np.*`` functions, as the official namespace offers. What it
    does not evaluate (string arithmetic, lambdas, rarer numpy functions, powers too large to hold)
    is None; the benchmark's docstring lists that exception.
    """
    for old, new in _EXPRESSION_EDITS:
        expression = expression.replace(old, new)
    expression = expression.split("#")[0]
    opened, closed = expression.count("("), expression.count(")")
    expression = (
        expression + ")" * (opened - closed)
        if opened > closed
        else "(" * (closed - opened) + expression
    )
    try:
        return _evaluate(ast.parse(expression.lstrip(" \t"), mode="eval").body)
    except Exception:  # noqa: BLE001  (whatever fails there is "N/A", as the official try/except has it)
        return None


def evaluate_arithmetic(expression: str) -> Any:
    """``expression`` evaluated by the restricted evaluator below, as written (no official edits);
    ValueError, with the reason, for anything it does not evaluate (the calculator tool's errors)."""
    try:
        value = _evaluate(ast.parse(expression.strip(), mode="eval").body)
    except SyntaxError as e:
        raise ValueError(f"not an expression: {e.msg}") from None
    except (KeyError, TypeError, ZeroDivisionError, OverflowError, ArithmeticError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None
    return value


_FUNCTIONS: dict[str, Any] = {
    "min": min,
    "pow": pow,
    "round": round,
    "abs": abs,
    "int": int,
    "float": float,
}
_MODULES: dict[str, Any] = {"math": math, "np": np, "numpy": np}
_NUMPY = frozenset(
    {
        "sqrt",
        "exp",
        "log",
        "log10",
        "log2",
        "power",
        "abs",
        "absolute",
        "round",
        "around",
        "floor",
        "ceil",
        "minimum",
        "maximum",
        "min",
        "max",
        "pi",
        "e",
        "square",
        "cbrt",
        "float64",
        "trunc",
    }
)
_MATH_REFUSED = frozenset(
    {"factorial", "comb", "perm", "prod"}
)  # unbounded work on large arguments
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_NUMBER_TYPES = (int, float, complex, np.number, np.bool_)


def _evaluate(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _FUNCTIONS:
            return _FUNCTIONS[node.id]
        return _MODULES[node.id]  # KeyError for any other name, as eval's NameError
    if isinstance(node, ast.Attribute):
        base = _evaluate(node.value)
        in_math = base is math and not node.attr.startswith("_") and node.attr not in _MATH_REFUSED
        ok = in_math or (base is np and node.attr in _NUMPY)
        if not ok:
            raise ValueError(f"attribute {node.attr} is not evaluated")
        return getattr(base, node.attr)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_number(_evaluate(node.operand)))
    if isinstance(node, ast.BinOp):
        left, right = _number(_evaluate(node.left)), _number(_evaluate(node.right))
        _check_size(type(node.op), left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.BoolOp):
        value: Any = None
        for part in node.values:
            value = _evaluate(part)
            if bool(value) == isinstance(node.op, ast.Or):
                break
        return value
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body) if _evaluate(node.test) else _evaluate(node.orelse)
    if isinstance(node, ast.Call):
        func = _evaluate(node.func)
        args = [_evaluate(a) for a in node.args if not isinstance(a, ast.Starred)]
        if len(args) != len(node.args) or any(k.arg is None for k in node.keywords):
            raise ValueError("starred arguments are not evaluated")
        kwargs = {k.arg: _evaluate(k.value) for k in node.keywords if k.arg}
        if func in (pow, math.pow, np.power) and len(args) >= 2:
            _check_size(ast.Pow, args[0], args[1])
        return func(*args, **kwargs)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e) for e in node.elts)
    raise ValueError(f"{type(node).__name__} is not evaluated")


def _number(value: Any) -> Any:
    if isinstance(value, (bool, _NUMBER_TYPES)):
        return value
    raise ValueError(f"arithmetic on {type(value).__name__} is not evaluated")


def _check_size(op: type, left: Any, right: Any) -> None:
    """Refuse integer arithmetic whose result could not be held (the official eval would hang)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    if op is ast.Pow and abs(left) > 1 and right > 10_000:
        raise ValueError("power too large to evaluate")
    if op is ast.LShift and right > 100_000:
        raise ValueError("shift too large to evaluate")
    if op is ast.Mult and left.bit_length() + right.bit_length() > 1_000_000:
        raise ValueError("product too large to evaluate")


# ---- grandrounds: our reading -----------------------------------------------------------------

#: Full-width ASCII forms, the ideographic space and the minus sign, one character for one.
_FOLD = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20, 0x2212: 0x2D}
_QUOTES = {0x201C: 0x22, 0x201D: 0x22}
_CONTROL = re.compile(r"[\x00-\x1f]")
_ANSWER_PAIR = re.compile(
    r'"answer"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(str\([^}]*\)|[^,}\]\s][^,}\]]*))', re.I
)
_ANSWER_LINE = re.compile(r"\banswer\s*(?:is\s*[:：]?|[:：])\s*(.+)", re.I)
_UNIT_NUMBERS = re.compile(
    r"(?:/|\bper)\s*1\.73\s*m(?:²|\^?2)?"  # "/1.73 m²", "per 1.73m2"
    r"|[×x*]\s*10\s*(?:\^\s*[-+]?\d+|[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)|\b10\s*\^\s*[-+]?\d+",  # "x 10^9", "×10⁹"
    re.I,
)
_NUM = r"(?<![\w/^.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d^]|\.\d|,\d{3}\b)"
_NUMBER = re.compile(_NUM)
_PERCENT = re.compile(rf"({_NUM})\s*%")
_BARE_LIST = re.compile(rf"[\[(]?\s*{_NUM}(?:\s*(?:,|;|\band\b)\s*{_NUM})+\s*[\])]?\s*\.?")
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_OUT_OF = re.compile(rf"({_NUM})\s+out\s+of\b", re.I)
_STR_CALL = re.compile(r"str\((.*)\)", re.S)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)\.?"
)
_DATES: tuple[
    tuple[re.Pattern[str], tuple[int, int, int]], ...
] = (  # pattern, group of (year, month, day)
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), (1, 2, 3)),
    (re.compile(r"\b(\d{1,2})[/.-](\d{1,2})[/.-](\d{4})\b"), (3, 1, 2)),
    (re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), (3, 1, 2)),
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I),
        (3, 2, 1),
    ),
)
_WEEKS_DAYS = re.compile(
    r"""(\d+)\s*(?:weeks?|wks?|w)?["']?(?:\s*,|\s+and|\s*\+|\s)\s*["']?(\d+)\s*(?:days?|d)?\b""",
    re.I,
)
_WEEKS_ONLY = re.compile(r"(\d+)\s*(?:weeks?|wks?)\b", re.I)
_DAYS_ONLY = re.compile(r"(\d+)\s*days?\b", re.I)


def fold(text: str) -> str:
    """Full-width forms to ASCII and the minus sign to "-", one character for one (not NFKC)."""
    return text.translate(_FOLD)


def answer_text(reply: str | None) -> str | None:
    """The answer part of a reply (precedence in the module docstring); None when there is nothing to read."""
    if not reply:
        return None
    body = fold(strip_reasoning(reply))
    flat = _CONTROL.sub(" ", body)  # a raw newline inside a JSON string is read as a space
    found = _last_answer_field(flat)
    if found is None:
        pairs = _ANSWER_PAIR.findall(flat.translate(_QUOTES))
        if pairs:
            quoted, bare = pairs[-1]
            found = _unescape(quoted) if quoted or not bare else bare
    if found is None:
        lines = _ANSWER_LINE.findall(body)
        found = lines[-1] if lines else (body if len(body.strip()) <= 40 else None)
    if found is None:
        return None
    found = found.strip()
    return found or None


def _last_answer_field(text: str) -> str | None:
    """The answer of the last JSON object (by position) holding one, the text read as is and with curly quotes folded."""
    best: tuple[int, str] | None = None
    decoder = json.JSONDecoder()
    for variant in dict.fromkeys((text, text.translate(_QUOTES))):
        i = variant.find("{")
        while i >= 0:
            try:
                obj, end = decoder.raw_decode(variant, i)
            except ValueError:
                i = variant.find("{", i + 1)
                continue
            value = _answer_in(obj)
            if value is not None and (best is None or i >= best[0]):
                best = (i, value)
            i = variant.find("{", end)
    return best[1] if best else None


def _answer_in(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and k.strip().lower() == "answer" and v not in (None, ""):
                return ", ".join(map(str, v)) if isinstance(v, list) else str(v)
        for v in obj.values():
            if (inner := _answer_in(v)) is not None:
                return inner
    return None


def _unescape(s: str) -> str:
    try:
        return json.loads(f'"{s}"')
    except ValueError:
        return s


def parse_value(text: str | None, kind: Kind) -> Any:
    """A comparable value from answer text: date, (weeks, days), or float; None if absent or ambiguous."""
    if text is None:
        return None
    text = fold(text)
    if kind == "date":
        return _last_date(text)
    if kind == "gestational_age":
        if m := _WEEKS_DAYS.search(text):
            return int(m.group(1)), int(m.group(2))
        weeks, days = _WEEKS_ONLY.search(text), _DAYS_ONLY.search(text)
        if weeks and not days:
            return int(weeks.group(1)), 0
        if days and not weeks:
            return 0, int(days.group(1))
        return None
    if m := _STR_CALL.fullmatch(text.strip()):  # the prompt's str(...) written literally
        text = m.group(1)
        if (value := _arithmetic(text)) is not None:
            return value
    text = _UNIT_NUMBERS.sub(" ", text)
    for pattern, _ in _DATES:  # a date beside a value is no value
        text = pattern.sub(" ", text)
    if m := _OUT_OF.search(text):  # "3 out of 5 criteria"
        return _float(m.group(1))
    if _BARE_LIST.fullmatch(text.strip()):
        return None  # "3, 4, 5": which one?
    if percents := _PERCENT.findall(text):
        return _float(percents[-1])
    outside = _ASIDE.sub(" ", text)
    numbers = _NUMBER.findall(outside) or _NUMBER.findall(text)
    return _float(numbers[-1]) if numbers else None


def _arithmetic(text: str) -> float | None:
    """A plain arithmetic expression's value (the restricted evaluator, "^" as power), else None."""
    try:
        value = _evaluate(ast.parse(text.replace("^", "**").strip(), mode="eval").body)
    except Exception:  # noqa: BLE001  (not arithmetic: read as text)
        return None
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _float(s: str) -> float:
    return float(s.replace(",", ""))


def _last_date(text: str) -> date | None:
    found: list[tuple[int, date]] = []
    for pattern, (y, m, d) in _DATES:
        for hit in pattern.finditer(text):
            month = hit.group(m)
            month_no = int(month) if month.isdigit() else _MONTHS[month.lower()[:3]]
            try:
                found.append((hit.start(), date(int(hit.group(y)), month_no, int(hit.group(d)))))
            except ValueError:
                continue
    return max(found, key=lambda t: t[0])[1] if found else None


def parse_ground_truth(raw: str, kind: Kind) -> Any:
    """The file's ground truth as a value, or None if it does not parse for that kind."""
    if kind == "integer":
        try:
            return int(raw.strip())
        except ValueError:
            return None
    return parse_value(raw, kind)
