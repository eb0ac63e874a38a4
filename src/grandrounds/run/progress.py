"""Rich progress bar for runs: done / total, calls per second, failed calls, retries, unscored, ETA.

"failed" counts calls that finally failed (each retried attempt is counted apart, as "retries").
The ETA is estimated from the items that took work in this process only: after a resume the
items read back from the store advance the bar at once, and counting them would make the
remaining work look almost free.

Batched runs (``--batch``) also show their batches: how many are in which provider state and how
many of their requests the providers have processed, e.g. ``batches: 2 in_progress, 1
finalizing · 340/1,000 calls back``, updated at every batch event (a state or count change seen
by a poll). The column is added at the first batch event, so live runs render exactly what they
did before. Submissions, pick-ups and collections are also printed as lines above the bar.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from grandrounds.core.records import Grade, Response

if TYPE_CHECKING:
    from grandrounds.run.batches.events import BatchEvent


#: Seconds between updates of the bar's counts.
DRAW_EVERY = 0.1


class BatchColumn(ProgressColumn):
    """The batches' states and requests processed (empty for a task without batches)."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("batches", "")), style="cyan")


class RichProgress:
    """Implements the runner's Progress protocol on a rich progress bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} calls/s"),
            TextColumn("failed {task.fields[failed]}"),
            TextColumn("retries {task.fields[retries]}"),
            TextColumn("unscored {task.fields[unscored]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            transient=False,
        )
        self.task: int | None = None
        #: Inside ``with``, and the bar shown (from the first task on).
        self._entered = self._started = False
        self._reset()

    def _reset(self) -> None:
        self.calls = self.failed = self.retries = self.unscored = 0
        self.done = self.worked = 0  # items advanced; items among them that took work here
        self.total = 0
        self.t0 = time.perf_counter()
        self.t_work: float | None = None  # when the first item that took work started counting
        # batches of this run: (provider, id) -> (state, size, requests processed) while watched
        self.batches: dict[tuple[str, str], tuple[str, int, int]] = {}
        self.batches_closed = 0
        self.closed_size = self.closed_back = 0
        self._owed = 0  # items advanced since the bar was last updated
        self._drawn = -DRAW_EVERY

    def __enter__(self) -> "RichProgress":
        # The bar is shown from the first task on: a command that fails before it has anything
        # to count (bad data, a bad option) prints its error alone, not after an empty bar line.
        self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self.draw()
            self.bar.stop()
        self._entered = self._started = False

    def start(self, total: int, label: str) -> None:
        if self._entered and not self._started:
            self.bar.start()
            self._started = True
        self.draw()  # the previous task's last counts
        self._reset()
        self.total = total
        self.task = self.bar.add_task(label, total=total, rate=0.0, failed=0, retries=0, unscored=0, eta="-")

    def eta(self) -> float | None:
        """Seconds left at the pace of the items that took work in this process (None: no pace yet)."""
        if self.worked == 0 or self.t_work is None:
            return None
        pace = (time.perf_counter() - self.t_work) / self.worked
        return max(0, self.total - self.done) * pace

    def draw(self) -> None:
        """Hand the bar the counts as they are now (they are otherwise at most DRAW_EVERY seconds old)."""
        self._update(force=True)

    def _update(self, advance: int = 0, force: bool = False) -> None:
        """Hand the counts to the bar at most every DRAW_EVERY seconds (and for the last item):
        it redraws ten times a second anyway, and updating it for each of thousands of calls a
        second would cost the run more than the calls' own bookkeeping."""
        if self.task is None:
            return
        self._owed += advance
        now = time.perf_counter()
        if not force and now - self._drawn < DRAW_EVERY and self.done < self.total:
            return
        self._drawn = now
        advance, self._owed = self._owed, 0
        rate = self.calls / max(1e-6, time.perf_counter() - self.t0)
        left = self.eta()
        eta = "-" if left is None else str(timedelta(seconds=round(left)))
        self.bar.update(self.task, advance=advance, rate=rate, failed=self.failed, retries=self.retries, unscored=self.unscored, eta=eta)

    def advance(self, grade: Grade, fresh: bool = True) -> None:
        """One item done; ``fresh`` False for a grade read back from the store (no work done)."""
        if grade.value is None:
            self.unscored += 1
        self.done += 1
        if fresh:
            if self.t_work is None:
                self.t_work = self.t0
            self.worked += 1
        self._update(1)

    def stored(self, n: int, unscored: int) -> None:
        """``n`` items read back at once from a grading that had finished (``unscored`` of them
        without a score): no work done."""
        self.unscored += unscored
        self.done += n
        self._update(n, force=True)

    def on_batch(self, event: "BatchEvent") -> None:
        """A batch was submitted, picked up, changed state or counts, or closed."""
        key = (event.provider, event.batch_id)
        if event.closed:
            last = self.batches.pop(key, None)
            self.batches_closed += 1
            self.closed_size += event.size
            # a collected batch's every request has an outcome; one left unreachable, what was last seen
            self.closed_back += event.size if event.what.startswith("collected") else (last[2] if last else event.back)
        else:
            self.batches[key] = (event.state or event.what, event.size, event.back)
        if self.task is not None:
            if not any(isinstance(c, BatchColumn) for c in self.bar.columns):
                self.bar.columns = (*self.bar.columns, BatchColumn())
            self.bar.update(self.task, batches=self.batch_text())
        if event.milestone:
            self.console.print(f"[dim]{escape(event.line())}")
            if event.summary:
                self.console.print(f"[dim]  {escape(event.summary)}")

    def batch_text(self) -> str:
        """E.g. "batches: 2 in_progress, 1 finalizing · 340/1,000 calls back"; once none is
        watched, "batches: 3 closed · 1,000/1,000 calls back"."""
        states = Counter(state for state, _, _ in self.batches.values())
        if states:
            shown = ", ".join(f"{n} {state}" for state, n in sorted(states.items(), key=lambda kv: (-kv[1], kv[0])))
        else:
            shown = f"{self.batches_closed} closed"
        total = self.closed_size + sum(size for _, size, _ in self.batches.values())
        back = self.closed_back + sum(n for _, _, n in self.batches.values())
        return f"batches: {shown} · {back:,}/{total:,} calls back"

    def on_call(self, response: Response, *, retries: int) -> None:
        self.calls += 1
        self.retries += retries
        self.failed += 0 if response.ok else 1
        self._update()
