"""What a run sees of its batches: each change seen on a batch (:class:`BatchEvent`, for the
progress display) and the counts kept for the summaries (:class:`BatchStats` per executor,
:class:`HubStats` per endpoint)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grandrounds.run.executor import CallStats

#: How a batch ended, as counted in summaries (Anthropic's ``ended`` is told apart by its request counts).
OUTCOMES = ("completed", "expired", "cancelled", "failed")
#: Why a request was sent again in a new batch -> the words of the summary.
RESENT = {
    "batch_expired": "after an expiry",
    "batch_cancelled": "after a cancellation",
    "error": "after a failed line",
}


@dataclass(kw_only=True)
class BatchStats(CallStats):
    """CallStats of a batch executor, plus what went through batches: requests submitted (a
    request sent again after an expiry counts again), requests picked up from batches an earlier
    run submitted, and those resolved from a batch; the batches that carried this executor's
    requests (``batches`` submitted, ``resumed_batches`` picked up, ``ended`` by outcome: completed,
    expired, cancelled, failed, or "not reachable" for one left open for the next run), and the
    requests sent again in a new batch by cause (``resent``: batch_expired, batch_cancelled, error)."""

    submitted: int = 0
    resumed: int = 0
    batched: int = 0
    batches: int = 0
    resumed_batches: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    resent: dict[str, int] = field(default_factory=dict)

    def batch_line(self) -> str:
        """The batches of this executor's calls, for the run's summary, e.g. "batches: 2 submitted,
        0 picked up from an earlier run; ended: 1 completed, 1 expired, 0 cancelled, 0 failed;
        calls retried: 4 after an expiry, 0 after a cancellation, 1 after a failed line"."""
        if not self.batches and not self.resumed_batches:
            return "batches: none submitted or picked up (every call came from the store)"
        ended = [f"{self.ended.get(o, 0)} {o}" for o in OUTCOMES]
        ended += [f"{n} {o}" for o, n in sorted(self.ended.items()) if o not in OUTCOMES]
        still = self.batches + self.resumed_batches - sum(self.ended.values())
        if still > 0:
            ended.append(f"{still} still open")
        resent = ", ".join(
            f"{self.resent.get(cause, 0)} {words}" for cause, words in RESENT.items()
        )
        return (
            f"batches: {self.batches} submitted, {self.resumed_batches} picked up from an earlier run; "
            f"ended: {', '.join(ended)}; calls retried: {resent}"
        )


@dataclass(kw_only=True)
class HubStats:
    """Per endpoint: batches submitted and picked up, polls, failed looks and submissions (each
    tried again), how each batch ended (completed, expired, cancelled, failed), the largest batch,
    and of the batches submitted those found again after their creation's reply was lost (created
    once, not twice)."""

    batches: int = 0
    found_again: int = 0
    resumed_batches: int = 0
    requests: int = 0
    polls: int = 0
    poll_failures: int = 0
    submit_failures: int = 0
    largest: int = 0
    ended: dict[str, int] = field(default_factory=dict)

    def line(self, where: str) -> str:
        ended = (
            ", ".join(f"{n} {state}" for state, n in sorted(self.ended.items())) or "none ended yet"
        )
        resumed = (
            f", {self.resumed_batches} picked up from an earlier run"
            if self.resumed_batches
            else ""
        )
        lost = (
            f", {self.found_again} of them found again after a lost reply (not created twice)"
            if self.found_again
            else ""
        )
        return (
            f"batches at {where}: {self.batches} submitted ({self.requests} requests, largest {self.largest}){lost}{resumed}; "
            f"{ended}; {self.polls} polls"
        )


@dataclass(frozen=True, kw_only=True)
class BatchEvent:
    """One change seen on a batch: ``what`` is submitted, resumed, a provider state (validating,
    in_progress, finalizing, completed, expired, cancelling, cancelled, failed; in_progress,
    canceling, ended), collected or not reachable; ``counts`` the provider's request counts;
    ``state`` the provider's state after it; ``closed`` True once this run no longer watches the
    batch (collected, or not reachable)."""

    provider: str
    batch_id: str
    what: str
    size: int
    counts: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    state: str = ""
    closed: bool = False

    @property
    def back(self) -> int:
        """Requests of the batch the provider has processed (answered or failed) so far, from its
        counts: OpenAI's completed + failed, Anthropic's all but processing."""
        c = self.counts
        keys = [k for k in c if k != "processing"] if "processing" in c else ["completed", "failed"]
        n = sum(v for k in keys if isinstance(v := c.get(k), int) and not isinstance(v, bool))
        return max(0, min(self.size, n))

    @property
    def milestone(self) -> bool:
        """Worth a line of its own (submitted, picked up, closed); other events only move the bar."""
        return self.closed or self.what == "submitted" or self.what.startswith("resumed")

    def line(self) -> str:
        counts = (
            ", ".join(f"{k} {v}" for k, v in self.counts.items() if isinstance(v, int))
            if self.counts
            else ""
        )
        tail = f" ({counts})" if counts else ""
        return f"batch {self.provider} {self.batch_id}: {self.what}, {self.size} requests{tail}"
