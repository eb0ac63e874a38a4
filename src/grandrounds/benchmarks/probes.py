"""Robustness probes of a multiple-choice exam: each transforms every item after it is loaded.

A probe is the ``probe`` parameter every multiple-choice benchmark takes (``--param probe=nota``),
so it is part of the benchmark's spec, run id and fingerprint; the probed items are another item
set, keyed by :func:`probe_dataset_hash`. Item ids are kept, which is what pairs a probe run with
the unperturbed run item by item. The probes and their statistics are described in
:mod:`grandrounds.analyses.robustness`, which runs them; the attacker's rewritten questions are
read here from the file it writes (``$GRANDROUNDS_CACHE/robustness/rewrites-ID.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import canonical_json, content_hash
from grandrounds.core.records import Message, Sample
from grandrounds.graders.mcq_grader import shuffle_choices
from grandrounds.sources.downloads import cache_dir

KINDS = ("permute", "nota", "distractors", "rewrite")
#: "None of the above" in the benchmark's language.
NOTA_TEXT = {"en": "None of the above", "zh": "以上都不是"}
#: Options that speak about the other options; NOTA would make such an item ambiguous, and none is drawn as a distractor.
ABOUT_OTHERS = re.compile(
    r"\b(none|all|both|neither)\s+of\s+(the\s+)?(above|these|them|the\s+options)\b|以上",
    re.IGNORECASE,
)
#: What the attacker's calls are stored as (neither an answer nor a judge's vote).
_DIGEST = re.compile(r"[0-9a-f]{16}")


class Exam(Protocol):
    """What a probe needs of the exam it probes (a :class:`~grandrounds.benchmarks.mcq.MultipleChoiceBenchmark`):
    its language, for "None of the above", and how it words an item."""

    @property
    def language(self) -> str: ...

    def render(self, sample: Sample, mode: str) -> str: ...


# ---- probes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One probe, parsed from the ``probe`` parameter; :attr:`text` is its canonical spelling."""

    kind: str
    seed: int = 0
    count: int = 0
    attacker: str = ""
    digest: str = ""

    @property
    def text(self) -> str:
        if self.kind == "permute":
            return f"permute:{self.seed}"
        if self.kind == "distractors":
            return f"distractors:{self.count}:{self.seed}"
        if self.kind == "rewrite":
            return f"rewrite:{self.attacker}:{self.digest}"
        return self.kind

    @classmethod
    def parse(cls, text: str) -> Probe:
        """``permute[:SEED]`` (seed 1), ``nota``, ``distractors[:N[:SEED]]`` (2 and 0), ``rewrite:ATTACKER:ID``."""
        kind, _, rest = str(text).strip().partition(":")
        bad = ConfigError(
            f"--param probe {text!r}: expected permute:SEED, nota, distractors:N:SEED or rewrite:ATTACKER:ID "
            "(see `grandrounds robustness --help`)"
        )
        if kind == "nota" and not rest:
            return cls("nota")
        if kind in ("permute", "distractors"):
            parts = rest.split(":") if rest else []
            if not all(p.isdigit() for p in parts) or len(parts) > (1 if kind == "permute" else 2):
                raise bad
            nums = [int(p) for p in parts]
            if kind == "permute":
                return cls("permute", seed=nums[0] if nums else 1)
            count = nums[0] if nums else 2
            if count < 1:
                raise ConfigError(f"--param probe {text!r}: at least one distractor")
            return cls("distractors", seed=nums[1] if len(nums) > 1 else 0, count=count)
        if kind == "rewrite":
            attacker, _, digest = rest.rpartition(":")  # model names may hold a colon (llama3:8b)
            if attacker and _DIGEST.fullmatch(digest):
                return cls("rewrite", attacker=attacker, digest=digest)
        raise bad

    def apply(self, bench: Exam, samples: Sequence[Sample]) -> list[Sample]:
        """The probed items, in source order, with their prompt messages rebuilt; items the probe
        does not apply to are left out (the statistics count them)."""
        if self.kind == "permute":
            out = [permuted(s, self.seed) for s in samples]
        elif self.kind == "nota":
            lang = "zh" if bench.language.startswith("zh") else "en"
            out = [p for s in samples if (p := with_nota(s, NOTA_TEXT[lang])) is not None]
        elif self.kind == "distractors":
            pool = option_pool(samples)
            out = [with_distractors(s, pool, self.count, self.seed) for s in samples]
        else:
            questions = load_rewrites(self)
            out = [
                rewritten(s, questions[s.id], self.attacker) for s in samples if s.id in questions
            ]
        return [replace(s, messages=(Message("user", bench.render(s, "generate")),)) for s in out]


def probe_dataset_hash(dataset: str, probe: str) -> str:
    """The dataset key of a probe's items: the data file's hash combined with the probe."""
    return content_hash({"dataset": dataset, "probe": probe})


def _meta(sample: Sample, **probe: Any) -> dict[str, Any]:
    return {**sample.metadata, "probe": probe}


def permuted(sample: Sample, seed: int) -> Sample:
    """The item with its options in the order (seed, id) fixes; a key kept as written (CMB's
    ``metadata["key"]``, which its official reading compares exactly) is relettered the same way."""
    shown, perm = shuffle_choices(sample, seed)
    meta = _meta(shown, name="permute", seed=seed, permutation=perm)
    if isinstance(meta.get("key"), str):
        meta["key"] = "".join(LETTERS[perm.index(ch)] if ch in perm else ch for ch in meta["key"])
    return replace(shown, metadata=meta)


def about_others(text: str) -> bool:
    return bool(ABOUT_OTHERS.search(text))


def with_nota(sample: Sample, nota: str) -> Sample | None:
    """The item with its correct option's text replaced by ``nota`` (the key letter is unchanged),
    or None where that would not leave exactly one right answer."""
    key = str(sample.target)
    if (
        sample.metadata.get("multi")
        or key not in sample.choices
        or any(about_others(t) for t in sample.choices.values())
    ):
        return None
    choices = {**sample.choices, key: nota}
    return replace(
        sample, choices=choices, metadata=_meta(sample, name="nota", replaced=sample.choices[key])
    )


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def option_pool(samples: Sequence[Sample]) -> list[str]:
    """Every distinct option text of the items, in source order, without those about other options."""
    seen: dict[str, str] = {}
    for s in samples:
        for t in s.choices.values():
            if t.strip() and not about_others(t):
                seen.setdefault(_norm(t), t)
    return list(seen.values())


def _draw(seed: int, sample_id: str, i: int, n: int) -> int:
    digest = hashlib.sha256(f"distractors:{seed}:{sample_id}:{i}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


def with_distractors(sample: Sample, pool: Sequence[str], count: int, seed: int) -> Sample:
    """The item with ``count`` options appended, drawn from ``pool`` by (seed, item id)."""
    n = len(sample.choices)
    if n + count > len(LETTERS):
        raise ConfigError(
            f"distractors:{count}: item {sample.id} has {n} options; at most {len(LETTERS)} ({LETTERS[0]}-{LETTERS[-1]})"
        )
    taken = {_norm(t) for t in sample.choices.values()}
    added: list[str] = []
    for i in range(64 * count):
        text = pool[_draw(seed, sample.id, i, len(pool))] if pool else ""
        if text and _norm(text) not in taken:
            taken.add(_norm(text))
            added.append(text)
            if len(added) == count:
                break
    else:  # almost every draw hit the item's own texts: a tiny pool; take the first unused ones in order
        for text in pool:
            if len(added) == count:
                break
            if _norm(text) not in taken:
                taken.add(_norm(text))
                added.append(text)
    if len(added) < count:
        raise ConfigError(
            f"distractors:{count}: the other items offer only {len(added)} option texts for item {sample.id}"
        )
    new = dict(zip(LETTERS[n : n + count], added))
    return replace(
        sample,
        choices={**sample.choices, **new},
        metadata=_meta(sample, name="distractors", seed=seed, added=new),
    )


def rewritten(sample: Sample, question: str, attacker: str) -> Sample:
    meta = _meta(
        sample, name="rewrite", attacker=attacker, original_question=sample.metadata["question"]
    )
    return replace(sample, metadata={**meta, "question": question})


# ---- attacker rewrites, as the probe reads them ------------------------------------------


@dataclass(frozen=True)
class Rewrites:
    """The attacker's usable rewrites (item id -> question) and why the others were not usable."""

    attacker: str
    questions: Mapping[str, str]
    failures: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return content_hash({"attacker": self.attacker, "questions": dict(self.questions)})[:16]

    def save(self) -> Probe:
        """Write the rewrites where the probe's loader finds them; the probe naming them."""
        probe = Probe("rewrite", attacker=self.attacker, digest=self.digest)
        path = rewrites_path(probe)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(
            canonical_json({"attacker": self.attacker, "questions": dict(self.questions)}),
            encoding="utf-8",
        )
        tmp.replace(path)
        return probe


def rewrites_path(probe: Probe) -> Path:
    return cache_dir() / "robustness" / f"rewrites-{probe.digest}.json"


def load_rewrites(probe: Probe) -> dict[str, str]:
    """The questions a rewrite probe names, checked against its id."""
    path = rewrites_path(probe)
    if not path.exists():
        raise DataError(
            path,
            None,
            f"file not found: the questions rewritten by {probe.attacker}; "
            "`grandrounds robustness BENCHMARK --attacker ...` writes it again from the stored attacker calls",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rewrites = Rewrites(
            str(data["attacker"]), {str(k): str(v) for k, v in data["questions"].items()}
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(path, None, f"not a rewrites file ({type(e).__name__}: {e})") from None
    if rewrites.digest != probe.digest or rewrites.attacker != probe.attacker:
        raise DataError(path, None, f"content does not match the probe's id {probe.digest}")
    return dict(rewrites.questions)
