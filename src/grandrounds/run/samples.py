"""The samples a run asks: read and checked before any call (:func:`read_samples`), held where
they are few or a dialogue's turns are apart in the data (:data:`KEEP_SAMPLES`), else read again
as the run goes; and grouped so that each dialogue's turns go to one worker, in order
(:func:`group_samples` over held samples, :func:`consecutive_groups` over a stream).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grandrounds
from grandrounds.benchmarks.base import Benchmark
from grandrounds.benchmarks.readers.decoding import DATA_ENCODING
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import content_hash
from grandrounds.core.records import Sample
from grandrounds.store import Store

#: A streaming benchmark's run holds the samples its check pass read when there are at most this
#: many, instead of reading and parsing the file a second time as it asks (HealthBench's 500
#: conversations hold about 5 MB; parsing them again cost the event loop's thread 0.08 s).
#: Past it, the samples read are let go and the run streams, its memory flat in the file's size.
KEEP_SAMPLES = 1000


#: Rubric items in one sample past which a run says how many judge calls that one answer costs.
RUBRIC_WARN = 1_000
#: Rubric items in one sample past which a run refuses unless ``--max-rubric-items`` allows more.
RUBRIC_MAX = 10_000


def limited(samples: Iterable[Sample], limit: int | None) -> Iterator[Sample]:
    """The samples of the first ``limit`` questions: ``--limit`` counts questions (dialogues,
    cases), whatever the turns per question, so the turns of one ``group`` count once. Reading
    stops at the first sample of a question past the limit (a dialogue's turns come together in
    the data; any turn of a counted dialogue after that point is left out)."""
    if limit is None:
        yield from samples
        return
    seen: set[str] = set()
    for smp in samples:
        key = smp.group if smp.group is not None else "\x00" + smp.id
        if key not in seen:
            if len(seen) >= limit:
                return
            seen.add(key)
        yield smp


def check_rubric_size(smp: Sample, root: Path, max_items: int, notes: list[str]) -> None:
    """A sample whose rubric is over ``max_items`` is refused (every item is a judge call per judge);
    one over :data:`RUBRIC_WARN` is noted once, so a plan of 100,000 judge calls is never silent."""
    n = len(smp.rubric)
    if n > max_items:
        raise DataError(
            root,
            f"sample {smp.id!r}",
            f"{n:,} rubric items, so {n:,} judge calls per judge for this one answer "
            f"(more than {max_items:,}); pass --max-rubric-items {n} to run it anyway",
        )
    if n > RUBRIC_WARN and not any(note.startswith("large rubrics") for note in notes):
        notes.append(
            f"large rubrics: sample {smp.id!r} has {n:,} rubric items ({n:,} judge calls per judge for that one "
            f"answer; over {RUBRIC_WARN:,}); the limit is {max_items:,} (--max-rubric-items)"
        )


def read_samples(
    store: Store,
    bench: Benchmark,
    root: Path,
    limit: int | None,
    dataset: str,
    max_rubric: int = RUBRIC_MAX,
    notes: list[str] | None = None,
) -> tuple[int, list[Sample] | None]:
    """Read and check every record the run will ask (bad data fails here, before any call): how
    many there are, and the samples themselves, unless the benchmark reads records one at a time
    and there are more than :data:`KEEP_SAMPLES` (then the run reads them again as it goes,
    holding one sample, or one dialogue, at a time).

    A dialogue is asked turn by turn in one worker, so its turns must come together. Streamed
    samples are grouped on the fly from consecutive turns (:func:`consecutive_groups`); this pass
    checks that no dialogue starts again after another one began, remembering only the ids of
    the dialogues already over. Where one does, grouping needs every sample at hand: the samples
    are held (read again if they were let go), as for a benchmark read whole (correct, not flat).

    Records read and found good once are not checked again: the store remembers a data file
    (its bytes' hash, the benchmark's spec, the limit, the encoding and this version of the code)
    with its count, so a re-run of a large benchmark reads it once instead of twice. Only a file
    whose dialogues come together is remembered, so a remembered file streams.
    """
    streams = type(bench).iter_samples is not Benchmark.iter_samples
    notes = notes if notes is not None else []
    check = content_hash(
        {
            "benchmark": str(bench.spec()),
            "dataset": dataset,
            "limit": limit,
            "limit_counts": "questions",
            "encoding": DATA_ENCODING.get(),
            "version": grandrounds.__version__,
        }
        | ({"max_rubric": max_rubric} if max_rubric != RUBRIC_MAX else {})
    )
    if streams:
        known = store.checked_data(check)
        if known is not None:
            return known, None
    n = 0
    held: list[Sample] | None = []  # every sample read so far, while the run may hold them
    apart = False  # a dialogue's turns are not together: the run must hold every sample
    over: set[str] = set()  # dialogues whose turns have all gone by
    current: str | None = None
    for smp in limited(bench.iter_samples(root), limit):  # --limit counts questions, not turns
        if smp.group != current:
            if current is not None:
                over.add(current)
            if smp.group in over:
                apart = True
                if held is None:  # let go already: read them all again
                    held = list(limited(bench.iter_samples(root), limit))
                    return len(held), held
            current = smp.group
        n += 1
        if smp.rubric:
            check_rubric_size(smp, root, max_rubric, notes)
        if held is not None:
            held.append(smp)
            if streams and not apart and n > KEEP_SAMPLES:
                held = None
    if streams and not apart:
        store.put_checked_data(check, n)
    return n, held


class DataWatch:
    """The data files of a run as they were when the dataset's hash was taken: each file's device,
    inode, size, modification and change times (``os.stat``; a change time cannot be set back, so
    a rewrite that restores the size and modification time is seen too). :meth:`check` after the
    check pass (a rewrite while hashing or checking), and :meth:`watch` on every sample read again
    as the run asks: a sample is handed on only while the files are as hashed, so no answer to
    rewritten text is stored under the hash of the original file."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self.stamps = {Path(p): self._stamp(Path(p)) for p in paths}

    @staticmethod
    def _stamp(path: Path) -> tuple[int, ...] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def check(self, sample_id: str | None = None) -> None:
        """A DataError naming the first file that is not as it was hashed (and the sample read last)."""
        for path, stamp in self.stamps.items():
            if self._stamp(path) != stamp:
                raise DataError(
                    path,
                    None if sample_id is None else f"sample {sample_id!r}",
                    "the file changed while the run was reading it (its size, modification time or inode differ from when "
                    "its hash was taken): stopped before storing answers to the new text under the old file's hash; "
                    "what was answered before is stored. Run again once the file is no longer being written",
                )

    def watch(self, samples: Iterable[Sample]) -> Iterator[Sample]:
        """``samples``, each handed on only after :meth:`check`."""
        for smp in samples:
            self.check(smp.id)
            yield smp


def group_samples(samples: Sequence[Sample]) -> list[list[Sample]]:
    """Single samples alone; turns of one group together, ordered by turn (over the whole list:
    a group's turns may be anywhere in it)."""
    groups: dict[str, list[Sample]] = {}
    out: list[list[Sample]] = []
    for s in samples:
        if s.group is None:
            out.append([s])
        elif s.group in groups:
            groups[s.group].append(s)
        else:
            groups[s.group] = [s]
            out.append(groups[s.group])
    for g in out:
        g.sort(key=lambda s: s.turn)
    return out


def consecutive_groups(
    samples: Iterable[Sample], root: Path | str = ""
) -> Iterator[list[tuple[int, Sample]]]:
    """:func:`group_samples` over a stream whose dialogues come together, each sample with its
    position in the stream: a sample without a group alone, the consecutive turns of one group
    together, ordered by turn. Holds one dialogue at a time, and the ids of those already over.

    :func:`read_samples` checked that the turns of each dialogue are consecutive (else the run
    holds its samples and groups them with :func:`group_samples`); a dialogue starting again
    here means the data changed since: a DataError naming ``root``.
    """
    over: set[str] = set()
    turns: list[tuple[int, Sample]] = []
    for position, smp in enumerate(samples):
        if turns and smp.group == turns[0][1].group:
            turns.append((position, smp))
            continue
        if turns:
            over.add(turns[0][1].group)  # type: ignore[arg-type]  # turns are of one group
            yield sorted(turns, key=lambda pair: pair[1].turn)
            turns = []
        if smp.group is None:
            yield [(position, smp)]
        elif smp.group in over:
            from grandrounds.core.errors import DataError

            raise DataError(
                root,
                f"sample {smp.id!r}",
                f"dialogue {smp.group!r} starts again after another began (the data changed during the run?)",
            )
        else:
            turns = [(position, smp)]
    if turns:
        yield sorted(turns, key=lambda pair: pair[1].turn)


def store_images(store: Store, samples: Iterable[Sample], provider: Any) -> int:
    """Check every image of ``samples`` against what ``provider`` takes (a one-line error naming the
    sample and the image, before any call), and keep each image once in the store's image folder,
    so answers can be shown with their images and replayed offline. Returns the images written."""
    from grandrounds.core.errors import ConfigError
    from grandrounds.store.images import ImageStore

    limits = provider.image_limits()
    path = getattr(
        store, "path", None
    )  # a dry run's store writes nothing: the images are only checked
    images = ImageStore.beside(path) if path is not None else None
    seen: set[str] = set()
    written = 0
    for s in samples:
        if limits is None and any(m.images for m in s.messages):
            raise ConfigError(
                f"{provider.spec} cannot send images, and sample {s.id} is asked with one "
                "(use openai/, anthropic/, vllm/ or sglang/ with a vision model)"
            )
        if limits is not None:
            limits.check(s)
        for m in s.messages:
            for img in m.images:
                if images is not None and img.sha256 not in seen and img.data is not None:
                    seen.add(img.sha256)
                    written += images.put(img.sha256, img.media_type, img.data)
    return written
