"""Official prompt text, read at run time out of the benchmark authors' own files at pinned commits.

grandrounds does not carry the official templates: each benchmark names the upstream file a
template lives in (repository, commit, path, sha256), and the text is read out of that file when
a run needs it, with ``ast`` for Python sources (constants, implicit concatenations, f-strings)
and YAML for lm-evaluation-harness task files.

A file is pinned one way: its repository at one commit is declared once (:class:`UpstreamRepo`,
here when several modules read it, else beside its only reader) and the file is
``REPO.file(path, sha256)``.

Where the file comes from, first hit wins:

1. ``$GRANDROUNDS_REFERENCE``: a directory laid out as ``<folder>/<path in the repository>``, for tests and air-gapped machines;
2. the download cache (``<cache>/reference/<folder>/<path>``), filled from
   ``https://raw.githubusercontent.com/<repository>/<commit>/<path>`` (a Hugging Face dataset's
   file, ``hub="huggingface"``: ``https://huggingface.co/datasets/<repository>/resolve/<revision>/<path>``,
   through ``HF_ENDPOINT``).

Either way the file must hash to its pinned sha256, or the run stops with an error naming it. A
file whose sha256 could not be pinned (``sha256=None``) has the sha256 of its first download
recorded beside it and every later use compared with that record (:mod:`grandrounds.sources.downloads`).
A download that fails is remembered for the rest of the process (per URL): later reads of the
file raise the same error at once instead of trying the network again for every grade.
"""

from __future__ import annotations

import ast
import functools
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import file_sha256, text_hash
from grandrounds.sources.downloads import RemoteFile, cache_dir, fetch
from grandrounds.sources.mirrors import HUGGING_FACE, bundle_root, bundled_file

#: Environment variable naming a local reference folder (``<folder>/<path>`` layout).
REFERENCE_ENV = "GRANDROUNDS_REFERENCE"


@dataclass(frozen=True, kw_only=True)
class UpstreamFile:
    """One file of a benchmark's official code at a pinned commit.

    ``folder`` is its directory in a reference folder (``$GRANDROUNDS_REFERENCE``) and the cache.
    """

    folder: str
    repo: str
    commit: str
    path: str
    sha256: str | None
    #: Where the repository lives: ``github`` (raw.githubusercontent.com) or ``huggingface`` (a
    #: dataset repository on the Hugging Face hub).
    hub: str = "github"

    @property
    def url(self) -> str:
        if self.hub == "huggingface":
            return f"{HUGGING_FACE}/datasets/{self.repo}/resolve/{self.commit}/{self.path}"
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    def describe(self) -> dict[str, str]:
        """What a fingerprint records about the file (a sha256 not pinned: empty)."""
        return {
            "repo": self.repo,
            "commit": self.commit,
            "path": self.path,
            "sha256": self.sha256 or "",
        }


@dataclass(frozen=True)
class UpstreamRepo:
    """A repository at one pinned commit (a Hugging Face dataset's: at one revision), named once
    for every file read out of it: ``REPO.file(path, sha256)`` is the one way to pin an upstream
    file, and ``REPO.url(path)`` the address of a data file of the same repository and commit.

    ``folder`` is the repository's directory in a reference folder and the cache.
    """

    folder: str
    repo: str
    commit: str
    #: ``github`` or ``huggingface`` (see :attr:`UpstreamFile.hub`).
    hub: str = "github"

    def file(self, path: str, sha256: str | None) -> UpstreamFile:
        """The file at ``path`` in the repository, pinned by its sha256 (None: not known ahead of a
        first download, whose sha256 is then recorded and held to)."""
        return UpstreamFile(
            folder=self.folder,
            repo=self.repo,
            commit=self.commit,
            path=path,
            sha256=sha256,
            hub=self.hub,
        )

    def url(self, path: str) -> str:
        """Where ``path`` is downloaded from at the pinned commit (what ``file(path, ...).url`` is)."""
        return self.file(path, None).url

    @property
    def short(self) -> str:
        """``owner/name@abcdef0``: the pin as a source line names it."""
        return f"{self.repo}@{self.commit[:7]}"


#: openai/simple-evals at the commit every simple-evals file is read from (HealthBench's grader
#: and sampler, the multiple-choice prompt and answer regexes).
SIMPLE_EVALS = UpstreamRepo(
    "simple-evals", "openai/simple-evals", "ee3b0318d8d1d9d72755a4120879be65f7c07e9e"
)
#: PrimeIntellect-ai/verifiers at its v0.1.7.post0 release: the newest that Medmarks' environments
#: accept (``verifiers<0.1.8``); its boxed system prompt, ``extract_boxed_answer`` and XML parser.
VERIFIERS = UpstreamRepo(
    "verifiers", "PrimeIntellect-ai/verifiers", "e87964f92cdc72c6cf0eb3e1721077c7fa2f7ee3"
)
#: FreedomIntelligence/CMB at the commit its prompt, answer matching and scoring are read from.
CMB = UpstreamRepo("cmb", "FreedomIntelligence/CMB", "6c8ece46097dae736c6805dd3b831e1a38c08971")
#: Medmarks' environments (tmabraham/med-lm-envs) at the commit every benchmark that follows
#: Medmarks reads its environment from (exams, MedHallu, CareQA open, MedicationQA, MedDialog).
MEDMARKS = UpstreamRepo(
    "medmarks-envs", "tmabraham/med-lm-envs", "7ee045209857f85e909670bcab4a5b7260eafe92"
)
#: lm-evaluation-harness at the commit every exam's task files are read from.
LM_EVAL = UpstreamRepo(
    "lm-eval", "EleutherAI/lm-evaluation-harness", "4e7e0d47f33bc71070c1d38394bafbb52b117163"
)
#: MMLU-Pro's evaluation script (its prompt and answer reading).
MMLU_PRO = UpstreamRepo(
    "mmlu-pro", "TIGER-AI-Lab/MMLU-Pro", "f418b116db00b065c2aea046518d8fcf74d39872"
)
#: M-ARC (MedARC-QA): its copy of MMLU-Pro's script, and its questions.
M_ARC = UpstreamRepo("m-arc", "dbernardo05/medARC-QA", "4e64daab5c884b0754f8cbd42fc8f22d05436369")
#: CMMLU: its answer extraction, and its subjects' questions.
CMMLU = UpstreamRepo("cmmlu", "haonan-li/CMMLU", "d6e7b716d8ac694f38969a6c0407437d1fded799")
#: C-Eval's evaluators (prompt and answer reading).
CEVAL = UpstreamRepo("ceval", "hkust-nlp/ceval", "cba65ae93bcf189149ced9f66ae0c958201faed9")
#: CMExam: its prompt templates, answer reading and questions.
CMEXAM = UpstreamRepo("cmexam", "williamliujl/CMExam", "fadb22c89beb1b7115dc36460ba792eb96b7b972")
#: MedAgentsBench, the authors' repository (gersteinlab/medagents-benchmark): its baseline code
#: (MedAgentsBench's chain-of-thought prompt) and its copy of MMLU-Pro's health questions.
MEDAGENTSBENCH = UpstreamRepo(
    "medagentsbench", "gersteinlab/medagents-benchmark", "f5e50b69be8ef617a6de613cc8035929448e2b3b"
)
#: MedAgentsBench's data as its fork xk-huang/medagents-benchmark holds it (every subset's test
#: file, MedXpertQA's among them): data only, no file of it is read as reference text.
MEDAGENTSBENCH_DATA = UpstreamRepo(
    "medagentsbench-data",
    "xk-huang/medagents-benchmark",
    "36ee14d7835142e346cb376ab7330246f86742cb",
)


def reference_root() -> Path | None:
    value = os.environ.get(REFERENCE_ENV)
    return Path(value) if value else None


def local_path(f: UpstreamFile) -> Path:
    """A verified local copy of ``f``: from the reference folder, else the cache (downloading it)."""
    root = reference_root()
    if root is not None:
        candidate = root / f.folder / f.path
        if candidate.is_file():
            got = file_sha256(candidate)
            if f.sha256 is not None and got != f.sha256:
                raise DataError(
                    candidate,
                    None,
                    f"does not match the pinned upstream file {f.url} (sha256 {got}, expected {f.sha256})",
                )
            return candidate
    bundle = bundle_root()
    if bundle is not None:  # a bundle is read as it is: never a download
        return bundled_file(bundle, bundle_path(f), f.sha256)
    dest = cache_dir() / "reference" / f.folder / Path(f.path).parent
    remote = RemoteFile(f.url, Path(f.path).name, f.sha256)
    with _fetch_lock(f.url):  # one download per URL at a time; the others wait for its outcome
        failed = _failed.get(f.url)
        if failed is not None:
            cached = dest / remote.filename
            if (
                cached.is_file() and f.sha256 is not None and file_sha256(cached) == f.sha256
            ):  # put there since (another process)
                return cached
            if "GRANDROUNDS_OFFLINE is set" in failed.problem:
                from grandrounds.sources.downloads import OFFLINE_REFUSALS

                OFFLINE_REFUSALS.append(f.url)  # refused again, without asking
            raise type(failed)(
                failed.path,
                failed.where,
                failed.problem + " (failed earlier in this process; not tried again)",
            )
        try:
            return fetch(remote, dest)
        except DataError as e:
            hint = (
                f"; or set {REFERENCE_ENV} to a folder holding {f.folder}/{f.path}; "
                "or run with --protocol grandrounds, which needs no official file"
            )
            err = type(e)(
                e.path,
                e.where,
                e.problem.replace("; pass --data PATH to use a local copy", "") + hint,
            )
            _failed[f.url] = err
            raise err from None


def bundle_path(f: UpstreamFile) -> str:
    """Where ``f`` lives in a bundle (and in the cache, under its root): ``reference/<folder>/<path>``."""
    return f"reference/{f.folder}/{f.path}"


#: URL -> the error of its failed download, for the rest of the process (see :func:`local_path`).
_failed: dict[str, DataError] = {}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _fetch_lock(url: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(url, threading.Lock())


def forget_failed_downloads() -> None:
    """Let every upstream file whose download failed be tried again (e.g. once the network is back)."""
    _failed.clear()


@functools.lru_cache(maxsize=64)
def _source(f: UpstreamFile) -> str:
    return local_path(f).read_text(encoding="utf-8")


def _parse(f: UpstreamFile) -> ast.Module:
    """The file's syntax tree (warnings about the upstream code's own style, e.g. escapes, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(_source(f), filename=f.path)


def read_text(f: UpstreamFile) -> str:
    """The whole text of ``f`` (verified against its sha256)."""
    return _source(f)


@dataclass(frozen=True)
class UpstreamText:
    """A template read out of an upstream file.

    ``parts`` alternate literal text and placeholders: a plain string constant is one literal;
    an f-string keeps each ``{expression}`` as a placeholder named by the expression's source
    (``{question}``, ``{row['Question']}``), to be filled by :meth:`render`.
    """

    source: UpstreamFile
    name: str
    parts: tuple[str | Field, ...]

    @property
    def text(self) -> str:
        """The literal text with placeholders shown as ``{expression}``."""
        return "".join(p if isinstance(p, str) else "{" + p.expr + "}" for p in self.parts)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.expr for p in self.parts if isinstance(p, Field)))

    def render(self, values: Mapping[str, Any] | None = None, **kw: Any) -> str:
        """The text with every placeholder filled from ``values`` (keyed by expression source)."""
        vals = {**(values or {}), **kw}
        missing = [f for f in self.fields if f not in vals]
        if missing:
            raise ConfigError(
                f"template {self.name} from {self.source.url} needs values for {', '.join(missing)}"
            )
        return "".join(p if isinstance(p, str) else str(vals[p.expr]) for p in self.parts)

    def fingerprint(self) -> dict[str, str]:
        """What a result records: the file (repository, commit, path, sha256) and the template's own hash."""
        return self.source.describe() | {"name": self.name, "text_sha256": text_hash(self.text)}


@dataclass(frozen=True)
class Field:
    expr: str


@dataclass(frozen=True)
class TextRef:
    """A lazy reference to a string in an upstream file, read only when a run needs it.

    Benchmarks declare these at class level (importing a benchmark never reads or downloads anything).
    """

    source: UpstreamFile
    name: str
    within: str | None = None

    def load(self) -> UpstreamText:
        return python_string(self.source, self.name, within=self.within)

    def describe(self) -> dict[str, str]:
        return self.source.describe() | {
            "name": self.name if self.within is None else f"{self.within}.{self.name}"
        }


def python_string(f: UpstreamFile, name: str, *, within: str | None = None) -> UpstreamText:
    """The string assigned to ``name`` in ``f`` (at module level, or inside the function or class ``within``).

    Accepts a string constant, an implicit concatenation of constants, an f-string, a ``+`` of
    those, or any of them with ``.strip()``; the first assignment found wins. Anything else is an error naming the file.
    """
    tree = _parse(f)
    scope: list[ast.stmt] = tree.body
    if within is not None:
        scope_node = _named(tree, within, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scope_node is None:
            raise DataError(f.url, None, f"no function or class {within!r} in the upstream file")
        scope = scope_node.body
    for node in _walk_statements(scope):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and t.id == name and value is not None:
                return UpstreamText(
                    f,
                    name if within is None else f"{within}.{name}",
                    tuple(_merge(_string_parts(f, value))),
                )
    where = f" in {within}" if within else ""
    raise DataError(f.url, None, f"no string assigned to {name!r}{where} in the upstream file")


def python_dict_string(
    f: UpstreamFile, dict_name: str, key: str, *, within: str | None = None
) -> UpstreamText:
    """The string under ``key`` of the dict literal assigned to ``dict_name`` (``{"key": "..."}``)."""
    tree = _parse(f)
    nodes = list(ast.walk(tree))
    if within is not None:
        scope = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == within
            ),
            None,
        )
        if scope is None:
            raise DataError(f.url, None, f"no function or class {within!r} in the upstream file")
        nodes = list(ast.walk(scope))
    for node in nodes:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == dict_name for t in node.targets
        ):
            if isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and k.value == key:
                        return UpstreamText(
                            f, f"{dict_name}[{key!r}]", tuple(_merge(_string_parts(f, v)))
                        )
    raise DataError(f.url, None, f"no entry {key!r} in a dict {dict_name!r} in the upstream file")


def python_returned_string(f: UpstreamFile, within: str) -> UpstreamText:
    """The string the function ``within`` returns (``return f\"\"\"...\"\"\"``): its first ``return`` of a string.

    For templates built by a function instead of assigned to a name; accepts the same string forms
    as :func:`python_string`.
    """
    func = _function(
        f, _parse(f), within
    )  # a dotted name for a method: ScenarioNEJM.examiner_information
    for node in _walk_statements(func.body):
        if isinstance(node, ast.Return) and node.value is not None:
            try:
                return UpstreamText(f, f"{within}()", tuple(_merge(_string_parts(f, node.value))))
            except DataError:
                continue  # a return of something else (a call, a variable): look further
    raise DataError(
        f.url, None, f"function {within!r} returns no string literal in the upstream file"
    )


def yaml_value(f: UpstreamFile, key: str) -> Any:
    """The value of top-level ``key`` in the YAML file ``f`` (lm-evaluation-harness task files).

    lm-eval task files use a ``!function`` tag for hooks; it is read as the hook's dotted name.
    """
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def hook(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        assert isinstance(node, yaml.ScalarNode)  # ``!function name``: a scalar
        return {"!function": loader.construct_scalar(node)}

    _Loader.add_constructor("!function", hook)
    data = yaml.load(_source(f), Loader=_Loader)  # noqa: S506  (SafeLoader subclass)
    if not isinstance(data, dict) or key not in data:
        raise DataError(f.url, None, f"no key {key!r} in the upstream YAML file")
    return data[key]


def _walk_statements(body: list[ast.stmt]):
    """Statements of ``body`` in source order, descending into compound statements (if/for/with/try)."""
    for node in body:
        yield node
        for attr in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, attr, None)
            if isinstance(inner, list) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                yield from _walk_statements(
                    [n for n in inner if isinstance(n, ast.stmt)]
                    + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                )


def _string_parts(f: UpstreamFile, node: ast.expr) -> list[str | Field]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[str | Field] = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                if v.conversion != -1 or v.format_spec is not None:
                    raise DataError(
                        f.url,
                        getattr(v, "lineno", None),
                        "f-string placeholder with a conversion or format spec is not supported",
                    )
                out.append(Field(ast.unparse(v.value)))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # '"Question: " + doc["question"] + "\\n"': a non-literal operand is a placeholder named by its
        # source, as in an f-string; the chain must hold at least one literal to be a template
        operands = _add_operands(node)
        out = [
            p
            for o in operands
            for p in (_string_parts(f, o) if _is_template(o) else [Field(ast.unparse(o))])
        ]
        if not any(isinstance(p, str) for p in out):
            raise DataError(
                f.url,
                getattr(node, "lineno", None),
                "expected a string literal, found a sum of expressions",
            )
        return out
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and _is_template(node.func.value)
        and not any(isinstance(a, ast.Starred) for a in node.args)
        and all(k.arg is not None for k in node.keywords)
    ):  # '"Abstract: {}\\nQuestion: {}".format(ctxs, doc["QUESTION"])': each {} names its argument's source
        return _format_parts(f, node)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("strip", "lstrip", "rstrip")
        and not node.args
        and not node.keywords
    ):  # '"""...""".strip()': whitespace off the literal ends, as Python would at run time
        parts = _merge(_string_parts(f, node.func.value))
        if parts and isinstance(parts[0], str) and node.func.attr in ("strip", "lstrip"):
            parts[0] = parts[0].lstrip()
        if parts and isinstance(parts[-1], str) and node.func.attr in ("strip", "rstrip"):
            parts[-1] = parts[-1].rstrip()
        return parts
    raise DataError(
        f.url,
        getattr(node, "lineno", None),
        f"expected a string literal, found {type(node).__name__}",
    )


def _merge(parts: list[str | Field]) -> list[str | Field]:
    out: list[str | Field] = []
    for p in parts:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out


def _add_operands(node: ast.expr) -> list[ast.expr]:
    """The operands of a left-nested ``a + b + c`` chain, in order."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _add_operands(node.left) + _add_operands(node.right)
    return [node]


def _is_template(node: ast.expr) -> bool:
    """True for the string forms :func:`_string_parts` reads itself (literals, f-strings, their methods)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("strip", "lstrip", "rstrip", "format") and _is_template(
            node.func.value
        )
    return False


def _format_parts(f: UpstreamFile, call: ast.Call) -> list[str | Field]:
    """``"...{}...".format(a, b)`` as parts: literal text, and a placeholder per replacement field named
    by the source of the argument it takes (positional ``{}``/``{0}`` or keyword ``{name}``)."""
    import string

    assert isinstance(
        call.func, ast.Attribute
    )  # a ``<template>.format(...)`` call, as the caller checked
    literal = _merge(_string_parts(f, call.func.value))
    if len(literal) != 1 or not isinstance(literal[0], str):
        raise DataError(
            f.url, call.lineno, ".format() on a template with placeholders is not supported"
        )
    args = [ast.unparse(a) for a in call.args]
    kwargs = {k.arg: ast.unparse(k.value) for k in call.keywords}
    out: list[str | Field] = []
    auto = 0
    for text, name, spec, conv in string.Formatter().parse(literal[0]):
        out.append(text)
        if name is None:
            continue
        if spec or conv:
            raise DataError(
                f.url, call.lineno, "format field with a conversion or format spec is not supported"
            )
        if name == "":
            name, auto = str(auto), auto + 1
        try:
            out.append(Field(args[int(name)] if name.isdigit() else kwargs[name]))
        except (IndexError, KeyError):
            raise DataError(
                f.url, call.lineno, f"format field {{{name}}} has no argument"
            ) from None
    return out


def _named(tree: ast.AST, name: str, kinds: tuple[type, ...]) -> Any:
    """The first definition of one of ``kinds`` named ``name`` in ``tree``, or None; a dotted name
    (``DoctorAgent.system_prompt``) finds each part inside the one before it, for a method that
    several classes of the file define."""
    node: Any = tree
    parts = name.split(".")
    for i, part in enumerate(parts):
        scope, want = (
            node,
            kinds if i == len(parts) - 1 else (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef),
        )
        node = next(
            (
                n
                for n in ast.walk(scope)
                if n is not scope and isinstance(n, want) and getattr(n, "name", None) == part
            ),
            None,
        )
        if node is None:
            return None
    return node


def _function(
    f: UpstreamFile, tree: ast.Module, name: str
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    func = _named(tree, name, (ast.FunctionDef, ast.AsyncFunctionDef))
    if func is None:
        raise DataError(f.url, None, f"no function {name!r} in the upstream file")
    return func


def python_appended_strings(f: UpstreamFile, name: str, *, within: str) -> list[UpstreamText]:
    """The strings appended to ``name`` with ``name += ...`` inside the function ``within``, in source order.

    For prompts a function builds piece by piece (``prompt = "Question: " + q``, then ``prompt += ...``
    in a loop and after it): the caller reads each piece and composes them the way the function does.
    """
    func = _function(f, _parse(f), within)
    out = [
        UpstreamText(f, f"{within}.{name}+={i}", tuple(_merge(_string_parts(f, node.value))))
        for i, node in enumerate(
            n
            for n in _walk_statements(func.body)
            if isinstance(n, ast.AugAssign)
            and isinstance(n.op, ast.Add)
            and isinstance(n.target, ast.Name)
            and n.target.id == name
        )
    ]
    if not out:
        raise DataError(
            f.url, None, f"nothing is appended to {name!r} in {within!r} in the upstream file"
        )
    return out


def python_fstring(f: UpstreamFile, *, within: str, fields: tuple[str, ...]) -> UpstreamText:
    """The f-string inside the function ``within`` whose placeholders are exactly ``fields`` (in order),
    wherever it sits (a generator expression, a call argument): e.g. an option line ``f"{k}. {v}\\n"``."""
    func = _function(f, _parse(f), within)
    for node in ast.walk(func):
        if isinstance(node, ast.JoinedStr):
            text = UpstreamText(f, f"{within}:f-string", tuple(_merge(_string_parts(f, node))))
            if text.fields == fields:
                return text
    raise DataError(
        f.url,
        None,
        f"no f-string with placeholders {', '.join(fields)} in {within!r} in the upstream file",
    )


def python_call_argument(f: UpstreamFile, call: str, index: int, *, within: str) -> UpstreamText:
    """The string template passed as positional argument ``index`` to the first call of ``call``
    inside the function ``within`` (a dotted name for a method: ``DoctorAgent.inference_doctor``),
    for a prompt built inline in a call: ``query_model(model, "History: " + hist + ..., system)``."""
    func = _function(f, _parse(f), within)
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == call and len(node.args) > index:
            return UpstreamText(
                f, f"{within}:{call}[{index}]", tuple(_merge(_string_parts(f, node.args[index])))
            )
    raise DataError(
        f.url,
        None,
        f"no call of {call!r} with an argument {index} in {within!r} in the upstream file",
    )


def python_value(f: UpstreamFile, name: str) -> Any:
    """The literal value (list, tuple, dict, string, number) assigned to ``name`` at module level,
    read with ``ast.literal_eval`` (never executed); e.g. a list of regular expressions."""
    tree = _parse(f)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise DataError(f.url, node.lineno, f"{name!r} is not a literal value") from None
    raise DataError(f.url, None, f"no module-level {name!r} in the upstream file")


def python_assigned_strings(f: UpstreamFile, target: str, *, within: str) -> list[UpstreamText]:
    """Every string assigned to ``target`` inside the function ``within``, in source order.

    ``target`` is the target's source as ``ast.unparse`` writes it: a name (``prompt``) or a
    subscript (``full_prompt[-1]['content']``). For prompts assigned in several branches (a
    chain-of-thought header and a plain one); assignments of something other than a string
    template are passed over.
    """
    func = _function(f, _parse(f), within)
    out: list[UpstreamText] = []
    for node in _walk_statements(func.body):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == target for t in node.targets):
            try:
                parts = _merge(_string_parts(f, node.value))
            except DataError:
                continue
            out.append(UpstreamText(f, f"{within}.{target}={len(out)}", tuple(parts)))
    if not out:
        raise DataError(
            f.url, None, f"no string assigned to {target!r} in {within!r} in the upstream file"
        )
    return out


def python_message_contents(f: UpstreamFile, *, within: str) -> list[tuple[str, UpstreamText]]:
    """(role, content) of every chat message written as a dict literal ``{"role": ..., "content": ...}``
    inside the function ``within``, in source order (each branch's messages included)."""
    func = _function(f, _parse(f), within)
    found: list[tuple[int, int, str, UpstreamText]] = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Dict):
            continue
        entries = {
            k.value: v
            for k, v in zip(node.keys, node.values)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
        role, content = entries.get("role"), entries.get("content")
        if (
            isinstance(role, ast.Constant)
            and isinstance(role.value, str)
            and content is not None
            and _is_template(content)
        ):
            text = UpstreamText(
                f, f"{within}:{role.value}#{len(found)}", tuple(_merge(_string_parts(f, content)))
            )
            found.append((node.lineno, node.col_offset, role.value, text))
    if not found:
        raise DataError(f.url, None, f"no chat message literal in {within!r} in the upstream file")
    return [(role, text) for _, _, role, text in sorted(found, key=lambda t: (t[0], t[1]))]
