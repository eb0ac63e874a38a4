"""MedXpertQA's official prompt text (TsinghuaC3I/MedXpertQA at a pinned commit), shared by the benchmark
and the grader's reading of the answer trigger.

``eval/config/prompt_templates.py`` sets its templates as attributes inside ``load_templates``: defaults
first, then per-dataset branches (``elif dataset in ["medxpertqa", "medxpertqa_sampled"]:``), then
per-model branches. :func:`template` reads the value an attribute has for MedXpertQA and a model
without its own branch: the last plain-string assignment at the function's top level or inside the
MedXpertQA branch, in source order (the model branches, for ``deepseek-reasoner`` and QVQ, are not
taken). Nothing is read at import.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from grandrounds.core.errors import DataError
from grandrounds.sources.upstream import TextRef, UpstreamRepo, UpstreamText, read_text

MEDXPERTQA = UpstreamRepo(
    "medxpertqa", "TsinghuaC3I/MedXpertQA", "f21247d3ccf3b14826ff2aa7fa06e1a46d64058c"
)
PROMPT_TEMPLATES = MEDXPERTQA.file(
    "eval/config/prompt_templates.py",
    "206848d7b2fe7e5a908971f6c92b7b4e19072ea1862b32a65b7c303445d6da6e",
)
#: answer_cleansing and set_correctness, whose rule graders/readings_aj.py reimplements.
UTILS = MEDXPERTQA.file(
    "eval/utils.py", "4b333621ffd33e1f53ffeb82c259c069adccdfe5794558a77cda4228a39ea322"
)
#: zero_shot_cot: the two turns and how the trigger is filled in.
MAIN = MEDXPERTQA.file(
    "eval/main.py", "bae2de6dcf11bc8c107f90ff28f2c01751f2812e031aaf019a6c654e951ba06a"
)
#: The dataset name whose branch is taken (the text sets use it and "medxpertqa_sampled" alike).
DATASET = "medxpertqa"


def _branch(node: ast.If) -> list[ast.stmt]:
    """The body of the if/elif branch whose test names the MedXpertQA datasets, or []."""
    while True:
        if f"'{DATASET}'" in ast.unparse(node.test):
            return node.body
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        return []


@functools.lru_cache(maxsize=4)
def _templates() -> dict[str, str]:
    tree = ast.parse(read_text(PROMPT_TEMPLATES), filename=PROMPT_TEMPLATES.path)
    func = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "load_templates"
        ),
        None,
    )
    if func is None:
        raise DataError(
            PROMPT_TEMPLATES.url, None, "no function 'load_templates' in the upstream file"
        )
    out: dict[str, str] = {}
    for stmt in func.body:
        for node in _branch(stmt) if isinstance(stmt, ast.If) else [stmt]:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                out[node.targets[0].attr] = node.value.value
    return out


def template(name: str) -> UpstreamText:
    """The attribute ``name`` of MedXpertQA's templates (e.g. ``zero_shot_cot_prompt``), as text."""
    values = _templates()
    if name not in values:
        raise DataError(
            PROMPT_TEMPLATES.url,
            None,
            f"no string assigned to self.{name} for {DATASET} in load_templates",
        )
    return UpstreamText(PROMPT_TEMPLATES, f"load_templates({DATASET!r}).{name}", (values[name],))


@dataclass(frozen=True)
class TemplateRef(TextRef):
    """A :class:`TextRef` to one of MedXpertQA's template attributes (the system message)."""

    def load(self) -> UpstreamText:
        return template(self.name)

    def describe(self) -> dict[str, str]:
        return self.source.describe() | {"name": f"load_templates({DATASET!r}).{self.name}"}


def system_ref() -> TemplateRef:
    return TemplateRef(PROMPT_TEMPLATES, "zero_shot_system_role")
