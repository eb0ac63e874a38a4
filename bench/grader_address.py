"""How many answers addressed to their grader each flagger catches, by kind, and how many honest texts
it flags, with the time it takes per answer.

The corpus is ``tests/grader_addressed.py``: answers that ask whoever grades them for a pass in
other scripts and languages, with invisible or look-alike characters, spaced out, encoded, in
markdown, YAML or a chat template, as role-play, or behind a forged end marker; and honest answers
that speak of judges and scores. ``--before FILE`` loads another ``flags.py`` (an earlier version of
:mod:`grandrounds.graders.flags`, e.g. from ``git show REV:src/grandrounds/graders/flags.py``) and
prints its counts beside the current one's. ``--honest FILE...`` adds the string values of JSON /
JSONL(.gz) files as honest texts (published answers, reference answers).

    python bench/grader_address.py --before /tmp/old_flags.py --honest ../shared/data/mmlu-pro-health/published/*.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from grandrounds.graders.flags import answer_flags  # noqa: E402
from tests.grader_addressed import ADDRESSED, BASE, HONEST  # noqa: E402

Flagger = Callable[[str], tuple[str, ...]]


def load_flagger(path: Path) -> Flagger:
    spec = importlib.util.spec_from_file_location("flags_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.answer_flags  # type: ignore[no-any-return]


def strings(value: Any, min_len: int = 12) -> Iterator[str]:
    if isinstance(value, str):
        if len(value) >= min_len:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v, min_len)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v, min_len)


def read_texts(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        if ".jsonl" in path.name:
            return [s for line in fh if line.strip() for s in strings(json.loads(line))]
        return list(strings(json.load(fh)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="an earlier flags.py to compare with")
    ap.add_argument(
        "--honest", type=Path, nargs="*", default=[], help="JSON/JSONL(.gz) files of honest texts"
    )
    ap.add_argument(
        "--guard",
        help="PROVIDER/MODEL[@URL]: also measure this guard model's agreement on the labelled corpus",
    )
    args = ap.parse_args()
    flaggers: dict[str, Flagger] = {"now": answer_flags}
    if args.before:
        flaggers = {"before": load_flagger(args.before), "now": answer_flags}
    print(f"{'kind':34} " + " ".join(f"{n:>7}" for n in flaggers))
    caught = dict.fromkeys(flaggers, 0)
    for kind, words in ADDRESSED:
        row = []
        for name, flag in flaggers.items():
            hit = bool(flag(f"{BASE}\n{words}"))
            caught[name] += hit
            row.append("flagged" if hit else "-")
        print(f"{kind:34} " + " ".join(f"{c:>7}" for c in row))
    print(
        "addressed answers flagged: "
        + ", ".join(f"{n} {c}/{len(ADDRESSED)}" for n, c in caught.items())
    )
    honest = list(HONEST)
    for path in args.honest:
        honest.extend(read_texts(path))
    for name, flag in flaggers.items():
        t = time.perf_counter()
        flagged = [h for h in honest if flag(h)]
        per = (time.perf_counter() - t) / max(1, len(honest)) * 1e3
        print(f"{name}: honest texts flagged {len(flagged)}/{len(honest)}; {per:.2f} ms per text")
        for h in flagged[:20]:
            print(f"   {h[:150]!r}")
    if args.guard:
        print(json.dumps(measure_guard(args.guard), indent=1))


def measure_guard(spec_url: str) -> dict[str, Any]:
    """The guard's agreement with the corpus' labels (addressed: yes; honest: no), through a
    throwaway store (its calls cached there only for the measurement)."""
    import asyncio
    import tempfile

    from grandrounds.core.records import GenParams
    from grandrounds.graders.guard import agreement
    from grandrounds.providers.base import split_endpoint
    from grandrounds.run.config import JudgeConfig
    from grandrounds.run.executor import RetryPolicy
    from grandrounds.run.pipeline import make_judges
    from grandrounds.store import Store

    spec, url = split_endpoint(spec_url)
    labelled = [(f"{BASE}\n{w}", True) for _, w in ADDRESSED] + [(h, False) for h in HONEST]
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "guard.db") as st:
        params = GenParams(temperature=0.0, max_tokens=96, seed=0)  # a sentence and the tag
        execs, (guard,) = make_judges(
            st, (JudgeConfig(spec=spec, base_url=url, params=params),), 1, RetryPolicy(), 0, None
        )

        async def go() -> dict[str, Any]:
            try:
                return await agreement(guard, labelled, max_reask=0)
            finally:
                await execs[0].provider.aclose()

        t = time.perf_counter()
        out = asyncio.run(go())
        out["seconds"] = round(time.perf_counter() - t, 1)
        return out


if __name__ == "__main__":
    main()
