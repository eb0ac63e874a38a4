"""Shards: one part of a run, asked by one worker of a cluster.

``--shard i/N`` asks only the samples of shard ``i`` (0-based) of ``N``; ``--shard auto`` reads
``i`` and ``N`` from the launcher's environment (:func:`from_environment`). Membership is decided
per *group*, what the runner asks together: a dialogue's turns, an agent case with all its
epochs, a question with its images; a group's key is its dialogue id, else its sample id.

- ``hash`` (the default): a group belongs to shard ``h mod N``, ``h`` the first 8 bytes of
  sha256(dataset hash, NUL, group key). It depends on nothing but the data and ``N``: the order
  of the records and which machine runs which shard change nothing.
- ``cost``: the groups sorted by estimated calls (most first, ties by the same hash), each given
  to the shard with the fewest calls so far (the longest-processing-time rule). Needs every
  group's estimate, so the data is read once more; the estimate is the dry run's count of calls
  a sample makes (:func:`estimated_calls`).

A shard is recorded with its run (the ``shards`` table) and is never part of the run id: every
shard of a run writes under the run's one id, and a shard never stores a result of its own
(a part is not a result). The whole run is settled by the ordinary command on the merged store.
"""

from __future__ import annotations

import hashlib
import heapq
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Sample

#: How a shard's groups are chosen.
ASSIGNMENTS = ("hash", "cost")

#: Launchers' environment variables, in the order ``--shard auto`` looks for them: (index
#: variable, count variable or None where the launcher does not export one, launcher).
LAUNCHERS: tuple[tuple[str, str | None, str], ...] = (
    ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "Slurm job array"),
    ("JOB_COMPLETION_INDEX", None, "Kubernetes Indexed Job"),
    ("SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", "SkyPilot"),
)

#: Where ``--shard auto`` reads the count for a launcher that does not export one (Kubernetes:
#: the manifest sets it to the Job's ``completions``); ``--shard auto/N`` gives it instead.
COUNT_VARIABLE = "GRANDROUNDS_SHARDS"

SHARD_FORMS = (
    "expected i/N (0 <= i < N, e.g. 0/4), auto (the launcher's environment: Slurm array, "
    "Kubernetes Indexed Job, SkyPilot), or auto/N, optionally followed by :cost"
)


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based), chosen by ``assign`` (hash | cost)."""

    index: int
    count: int
    assign: str = "hash"
    #: Where the index came from ("--shard", or the launcher's variable), for the run's summary.
    source: str = "--shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str | None, env: Mapping[str, str] | None = None) -> Shard | None:
    """``--shard``'s value as a :class:`Shard` (None: no shard). ``i/N``, ``auto`` or ``auto/N``,
    each optionally with ``:cost`` (cost-balanced). Anything else is a one-line ConfigError."""
    if text is None or text == "":
        return None
    raw = text.strip()
    assign = "hash"
    if ":" in raw:
        raw, assign = raw.split(":", 1)
        if assign not in ASSIGNMENTS:
            raise ConfigError(
                f"--shard {text!r}: unknown assignment {assign!r}; expected one of "
                + ", ".join(ASSIGNMENTS)
            )
    head, _, tail = raw.partition("/")
    if head == "auto":
        count = _whole(tail, text) if tail else None
        return from_environment(os.environ if env is None else env, count, assign)
    if not tail:
        raise ConfigError(f"--shard {text!r}: {SHARD_FORMS}")
    return _checked(_whole(head, text), _whole(tail, text), assign, "--shard", text)


def _whole(part: str, text: str) -> int:
    try:
        return int(part.strip())
    except ValueError:
        raise ConfigError(f"--shard {text!r}: {SHARD_FORMS}") from None


def _checked(index: int, count: int, assign: str, source: str, text: str) -> Shard:
    if count < 1 or not 0 <= index < count:
        raise ConfigError(
            f"{source} {text!r}: shard index {index} of {count}: {SHARD_FORMS}"
            if source == "--shard"
            else f"--shard auto: {source} gives shard {index} of {count}, expected 0 <= index < count"
        )
    return Shard(index, count, assign, source)


def from_environment(
    env: Mapping[str, str], count: int | None = None, assign: str = "hash"
) -> Shard:
    """The shard a launcher's environment names: a Slurm array task (its id less the array's
    first id, of ``SLURM_ARRAY_TASK_COUNT``), a Kubernetes Indexed Job's pod
    (``JOB_COMPLETION_INDEX``, of ``count`` or ``$GRANDROUNDS_SHARDS``), a SkyPilot node
    (``SKYPILOT_NODE_RANK`` of ``SKYPILOT_NUM_NODES``). ``count`` overrides the launcher's count."""
    for index_var, count_var, launcher in LAUNCHERS:
        if index_var not in env:
            continue
        raw_index = env[index_var]
        try:
            index = int(raw_index)
            if index_var == "SLURM_ARRAY_TASK_ID" and "SLURM_ARRAY_TASK_MIN" in env:
                index -= int(env["SLURM_ARRAY_TASK_MIN"])
            n = count
            if n is None and count_var is not None and count_var in env:
                n = int(env[count_var])
            if n is None and COUNT_VARIABLE in env:
                n = int(env[COUNT_VARIABLE])
        except ValueError:
            raise ConfigError(
                f"--shard auto: {launcher}'s environment is not whole numbers "
                f"({index_var}={raw_index!r})"
            ) from None
        if n is None:
            raise ConfigError(
                f"--shard auto: {launcher} ({index_var}={index}) names no shard count: "
                f"pass --shard auto/N or set {COUNT_VARIABLE}"
            )
        return _checked(index, n, assign, index_var, str(index))
    raise ConfigError(
        "--shard auto: no launcher's shard index in the environment (looked for "
        + ", ".join(v for v, _, _ in LAUNCHERS)
        + "); pass --shard i/N"
    )


def group_key(group: Sequence[Sample]) -> str:
    """What a group is known by: its dialogue id, else its (one) sample's id."""
    first = group[0]
    return f"g:{first.group}" if first.group is not None else f"s:{first.id}"


def group_hash(dataset: str, key: str) -> int:
    """The stable number a group is sharded by (first 8 bytes of sha256(dataset NUL key))."""
    digest = hashlib.sha256(f"{dataset}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_of(dataset: str, key: str, count: int) -> int:
    """The hash shard of the group ``key`` of ``dataset`` among ``count``."""
    return group_hash(dataset, key) % count


def balanced(dataset: str, costs: Iterable[tuple[str, float]], count: int) -> dict[str, int]:
    """Group key -> shard, cost-balanced: most expensive first (ties by hash, then key), each to
    the shard with the least cost so far (ties: the lowest index). The same for any input order."""
    order = sorted(costs, key=lambda kc: (-kc[1], group_hash(dataset, kc[0]), kc[0]))
    heap = [(0.0, i) for i in range(count)]
    out: dict[str, int] = {}
    for key, cost in order:
        load, i = heapq.heappop(heap)
        out[key] = i
        heapq.heappush(heap, (load + max(cost, 0.0), i))
    return out


def estimated_calls(sample: Sample, n_judges: int, epochs: int = 1) -> int:
    """Calls one sample makes, as the dry run counts them before any answer: one answer per
    epoch, and one judge call per rubric criterion and judge (a sample without a rubric is
    judged once per judge where there are judges)."""
    judged = n_judges * (len(sample.rubric) if sample.rubric else 1)
    return epochs * (1 + judged)


G = list[tuple[int, Sample]]


def select(
    groups: Iterable[G],
    dataset: str,
    shard: Shard,
    assignment: Mapping[str, int] | None = None,
) -> Iterator[G]:
    """The groups of ``shard``: by hash, or by ``assignment`` (from :func:`balanced`) where given."""
    for group in groups:
        key = group_key([smp for _, smp in group])
        where = assignment[key] if assignment is not None else shard_of(dataset, key, shard.count)
        if where == shard.index:
            yield group


def cost_assignment(
    groups: Iterable[G], dataset: str, shard: Shard, cost: Callable[[Sample], float]
) -> dict[str, int]:
    """:func:`balanced` over ``groups`` with ``cost`` per sample (summed over a group)."""
    return balanced(
        dataset,
        ((group_key([smp for _, smp in g]), float(sum(cost(smp) for _, smp in g))) for g in groups),
        shard.count,
    )


def shared_limit(value: Any, shard: Shard | None) -> Any:
    """A per-minute limit shared by the ``count`` shards of a run: each takes its share (at least
    1). ``value`` is an int (requests or tokens), a TokenLimits, or None (unchanged)."""
    if value is None or shard is None or shard.count == 1:
        return value
    from grandrounds.run.limits import TokenLimits, token_limits

    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, value // shard.count)
    limits = value if isinstance(value, TokenLimits) else token_limits(value)
    if limits is None:
        return None
    return TokenLimits(
        *(
            None if n is None else max(1, n // shard.count)
            for n in (limits.total, limits.input, limits.output)
        )
    )


def shard_groups(
    groups: Callable[[], Iterable[G]],
    dataset: str,
    shard: Shard,
    n_judges: int,
    epochs: int = 1,
) -> tuple[Callable[[], Iterator[G]], int]:
    """The groups of ``shard`` (a callable that reads them afresh) and how many samples they hold.
    ``groups`` reads every group of the run; the count takes one pass over it (two for ``cost``)."""
    assignment = None
    if shard.assign == "cost":
        assignment = cost_assignment(
            groups(), dataset, shard, lambda smp: estimated_calls(smp, n_judges, epochs)
        )

    def mine() -> Iterator[G]:
        return select(groups(), dataset, shard, assignment)

    return mine, sum(len(g) for g in mine())
