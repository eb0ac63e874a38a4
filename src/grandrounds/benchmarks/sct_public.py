"""SCT-Public: 174 Script Concordance Test items, scored against an expert panel's answers.

Data: Medmarks' vendored copy, tmabraham/med-lm-envs @ 23fa6c5 ("Add sctpublic environment (#96)"),
``environments/sctpublic/sctpublic/data/``: ``sct_cleaned_full.csv`` (174 items on 75 case stems,
Adelaide SCT 102 and Open Medical SCT 72, each with the panel's scores for ratings -2..+2) and the
prompt files of that environment (``guideline.md``, ``testcase.md``, ``example_-2.md`` ... ``example_+2.md``),
all sha256-pinned and downloaded together. It is a repackaging: Medmarks adapted it from the
official SCT-Bench/sctpublic (MIT, McCoy et al., NEJM AI 2025), which could not be compared byte for
byte. The CSV carries mojibake from an earlier double encoding ("37.5ËC"); it is sent as published.

Protocols. The authors' own harness is not pinned here, so ``reference`` is the named peer's, Medmarks'
``sctpublic`` environment (MIT): its prompt, built at run time from the pinned prompt files exactly as
``generate_prompt_template`` builds it (the guideline, with " and a brief explanation for your choice"
removed unless ``--param reason=true``; the five examples under a "## Examples with Response Labels"
heading when ``--param few_shot=true``; then the test case, its ``{{ scenario }}``, ``{{ hypothesis }}``
and ``{{ additional information }}`` filled from the row), no system message, its reading
(``SCTParser``, :mod:`grandrounds.graders.sct_grader`: an unreadable reply scores 0) and its score,
aggregate panel scoring averaged over the items (:mod:`grandrounds.scoring.sct`). ``grandrounds``:
our prompt and tolerant reading, unreadable replies left out and counted.
Breakdowns: by source collection, and by the panel's modal rating.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import (
    Aggregate,
    Benchmark,
    Prompt,
    RemoteFile,
    RunOptions,
    read_text,
    resolve_file,
)
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import group_cells, mean_cell
from grandrounds.scoring.sct import modal_rating
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours

REPO = "tmabraham/med-lm-envs"
COMMIT = "23fa6c51948691e14fddc9dbc0b8d4940c3fc896"
_BASE = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/environments/sctpublic/sctpublic/data"
_SHA = {
    "sct_cleaned_full.csv": "1328f30945fd44b1557ebbf163d83d6113fbf0ae64db51149343fb42ea7814d8",
    "guideline.md": "ce6fa51be6151534445c9b1d5aadc7577b04d9ce9cace2ba6478109dcfbcddcd",
    "testcase.md": "bfa6691b4b722c9054f44fbf5df060129e2a27c279bd6c47e74e106e1e116d94",
    "example_-2.md": "a7b4b0e1cd3a4c18d8bea5f665e6bb99bea0da9f6106f1879d58eac5d9c34ec8",
    "example_-1.md": "e7fc0c2b462aa1e2bfabc67f937d08bfbb7a53639f1f00f65cac90d48a603cd8",
    "example_0.md": "2f87f916dc2aeab5712e936e89108a2f7725d8d49b5794f64502a0aea31b220d",
    "example_+1.md": "b0bf3110cf95948b6facc8f3b6226605ae9963743ef25aef23296423d9148b77",
    "example_+2.md": "5eba547200f40d82b954657076f0ae7d27a1d67fff13259f298d40ea10153369",
}
FILES = {
    name: RemoteFile(f"{_BASE}/{name.replace('+', '%2B')}", name, sha) for name, sha in _SHA.items()
}
EXAMPLE_ORDER = ("-2", "-1", "0", "+1", "+2")
PANEL_COLUMNS = ("-2", "-1", "0", "1", "2")
#: The clause Medmarks removes from the guideline when reasoning is off (generate_prompt_template).
REASON_CLAUSE = " and a brief explanation for your choice"
EXAMPLES_HEADING = "\n## Examples with Response Labels\n"

#: Our prompt (the grandrounds protocol).
TEMPLATE = (
    "This is a Script Concordance Test item. Given the clinical scenario, judge how the new information "
    "changes the likelihood of the hypothesis, on this scale:\n"
    "-2: strongly decreases; -1: slightly decreases; 0: no effect; +1: slightly increases; +2: strongly increases.\n\n"
    "Scenario:\n{scenario}\n\nHypothesis:\n{hypothesis}\n\nNew information:\n{info}\n\n"
    'End your reply with one line "Rating: X", where X is -2, -1, 0, +1 or +2.'
)

REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,  # Medmarks leaves sampling to its runner's defaults; none is pinned
    extraction="Medmarks SCTParser on the completion's printed form (the reply quoted with escapes): five characters "
    "after the first 'Rating: ', signed digits joined; unreadable scores 0",
    aggregation="mean panel credit (chosen rating's panel score / the panel's maximum) over every item",
    source=f"{REPO}@{COMMIT[:7]} environments/sctpublic (Medmarks, adapted from SCT-Bench/sctpublic)",
    settings={
        "prompt": "guideline.md [+ examples] + testcase.md, as generate_prompt_template builds it"
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="the last 'Rating:' line, tolerant; unreadable replies unscored and counted",
    aggregation="mean panel credit over readable replies; unreadable and failed ones counted",
    settings={"prompt": "ours"},
)


def build_template(folder: Path, reason: bool, few_shot: bool) -> str:
    """Medmarks' prompt template from the pinned prompt files in ``folder`` (generate_prompt_template)."""
    guideline = read_text(resolve_file(folder, "guideline.md"), "utf-8")
    if not reason:
        guideline = guideline.replace(REASON_CLAUSE, "")
    prompt = guideline
    if few_shot:
        prompt += EXAMPLES_HEADING + "".join(
            read_text(resolve_file(folder, f"example_{r}.md"), "utf-8") for r in EXAMPLE_ORDER
        )
    return prompt + read_text(resolve_file(folder, "testcase.md"), "utf-8")


def fill(template: str, scenario: str, hypothesis: str, info: str) -> str:
    """The template's placeholders replaced in Medmarks' order (parse_prompt)."""
    return (
        template.replace("{{ scenario }}", scenario)
        .replace("{{ hypothesis }}", hypothesis)
        .replace("{{ additional information }}", info)
    )


class SCTPublic(Benchmark):
    """SCT-Public (174 items): mean aggregate panel score."""

    name: ClassVar[str] = "sct-public"
    description: ClassVar[str] = (
        "SCT-Public Script Concordance Test, 174 items (Adelaide, Open Medical SCT); expert-panel aggregate score. "
        "Medmarks' vendored copy of SCT-Bench/sctpublic (MIT)"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(FILES.values())
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    reference_fidelity = {
        "reference": f"Medmarks' `sctpublic` environment ({REPO}@{COMMIT[:7]})",
        "reader": "`SCTParser.parse_answer` on what verifiers hands it, the chat completion's printed "
        'form: the reply quoted with escapes, so "Rating: \\n\\n+1" reads nothing',
        "prompt": "`guideline.md` (+ examples) and `testcase.md` from the pinned data folder",
        "equal": "each reply's rating, checked against `SCTParser` executed from the pinned file on "
        "the one-message completion, through the CLI on 348 written replies (0 differ)",
        "differs": 'grandrounds reads the last "Rating:" line tolerantly and leaves an unreadable '
        "reply unscored instead of 0",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="reason",
            type=bool,
            default=False,
            help="ask for a brief explanation with the rating (Medmarks reason=True)",
        ),
        Param(
            name="few_shot",
            type=bool,
            default=False,
            help="add the five worked examples (Medmarks few_shot=True)",
        ),
    )

    def data_files(self, root: Path) -> list[Path]:
        folder = root.parent if root.is_file() else root
        return [resolve_file(folder, name) for name in FILES]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path, folder = self.data_files(root)[0], (root.parent if root.is_file() else root)
        template = build_template(folder, self.param("reason"), self.param("few_shot"))
        seen = IdSet(path)
        columns = (
            "question_id",
            "sct_stem",
            "question",
            "additional_info",
            *PANEL_COLUMNS,
            "source",
        )
        for line, row in iter_csv(path, columns):
            sample = self._sample(path, line, row, template)
            seen.add(sample.id, line)
            yield sample
        if not seen:
            raise DataError(path, None, "no items in the file")

    def _sample(self, path: Path, line: int, row: dict[str, Any], template: str) -> Sample:
        texts = {
            k: row.get(k) or ""
            for k in ("question_id", "sct_stem", "question", "additional_info", "source")
        }
        missing = [k for k, v in texts.items() if not v.strip()]
        if missing:
            raise DataError(path, line, f"empty {', '.join(missing)}")
        try:
            panel = [float(row[c]) for c in PANEL_COLUMNS]
        except (TypeError, ValueError):
            raise DataError(
                path, line, f"panel scores {[row.get(c) for c in PANEL_COLUMNS]} are not numbers"
            ) from None
        if max(panel) <= 0 or min(panel) < 0:
            raise DataError(
                path, line, f"panel scores {panel} need a positive maximum and no negative score"
            )
        prompt = fill(template, texts["sct_stem"], texts["question"], texts["additional_info"])
        modal = modal_rating(panel)
        return Sample(
            id=texts["question_id"].strip(),
            benchmark=self.name,
            messages=(Message("user", prompt),),
            target={"panel": panel, "modal": modal},
            metadata={
                "scenario": texts["sct_stem"],
                "hypothesis": texts["question"],
                "info": texts["additional_info"],
                "source": texts["source"],
                "modal_rating": f"{modal:+d}" if modal else "0",
            },
        )

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if options.protocol == "reference":
            return Prompt(sample.messages)
        m = sample.metadata
        return Prompt(
            (
                Message(
                    "user",
                    TEMPLATE.format(
                        scenario=m["scenario"], hypothesis=m["hypothesis"], info=m["info"]
                    ),
                ),
            )
        )

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        return {"ours": text_hash(TEMPLATE)[:16]} | {
            f"{REPO}/{n}": sha for n, sha in _SHA.items() if n.endswith(".md")
        }

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("sct", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        pairs = [(s, by_id[s.id]) for s in samples if s.id in by_id]
        ref = options.protocol == "reference"

        def value(g: Grade, mine: bool) -> float | None:
            if g.value is None and g.status != "unreadable":
                # a failed call: wrong under reference, as Medmarks' empty reply
                return 0.0 if ref == mine else None
            return g.value if mine else g.details.get("other_value")

        mine = [value(g, True) for _, g in pairs]
        other = [value(g, False) for _, g in pairs]
        overall = mean_cell(mine)
        breakdown = {
            "source": group_cells(
                ((s.metadata["source"], v) for (s, _), v in zip(pairs, mine)), mean_cell
            ),
            "modal_rating": group_cells(
                ((s.metadata["modal_rating"], v) for (s, _), v in zip(pairs, mine)), mean_cell
            ),
        }
        scored_other = [v for v in other if v is not None]
        extra: dict[str, Any] = {
            "protocol": options.protocol,
            "n_unextracted": sum(1 for _, g in pairs if g.details.get("unextracted")),
            "n_failed": sum(1 for _, g in pairs if g.status == "answer_failed"),
            "modal_agreement": _modal_share(pairs),
            "other_protocol": {
                "protocol": "grandrounds" if ref else "reference",
                "score": sum(scored_other) / len(scored_other) if scored_other else None,
                "differs": "reference: Medmarks' prompt and reading, unreadable replies score 0; "
                "grandrounds: our prompt's reading, unreadable replies excluded",
            },
        }
        return Aggregate.of("panel_score", overall, breakdown, extra)


def _modal_share(pairs: Sequence[tuple[Sample, Grade]]) -> float | None:
    """Share of readable replies that chose the panel's modal rating (Medmarks' displayed ``answer``)."""
    read = [(s, g) for s, g in pairs if g.details.get("rating") is not None]
    return (
        sum(1 for s, g in read if g.details["rating"] == s.target["modal"]) / len(read)
        if read
        else None
    )
