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

When the console is not a terminal (output to a log file, a pipe, a CI log) there is no bar: a
live bar there would print nothing until the end and then one line cut to the console's width.
Instead a plain line is printed every :data:`LOG_EVERY` seconds while a task runs, from a timer
thread so it comes while every call is waiting too, e.g. ``healthbench · openai/m: 120/500
(24%) · 3.2 calls/s · failed 2 · retries 5 · unscored 0 · elapsed 0:01:05 · ETA 0:03:10``, and
one when each task ends: only text, no control characters, never cut.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from grandrounds.core.display import SafeConsole, styled
from grandrounds.core.records import Grade, Request, Response

if TYPE_CHECKING:
    from grandrounds.run.batches.events import BatchEvent


#: Seconds between updates of the bar's counts.
DRAW_EVERY = 0.1
#: Seconds between progress lines when the console is not a terminal.
LOG_EVERY = 10.0


class BatchColumn(ProgressColumn):
    """The batches' states and requests processed (empty for a task without batches)."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("batches", "")), style="cyan")


class RichProgress:
    """Implements the runner's Progress protocol on a rich progress bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or SafeConsole(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} calls/s"),
            TextColumn("{task.fields[inner]}"),
            TextColumn("failed {task.fields[failed]}"),
            TextColumn("retries {task.fields[retries]}"),
            TextColumn("unscored {task.fields[unscored]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            transient=False,
        )
        self.task: TaskID | None = None
        #: Inside ``with``, and the bar shown (from the first task on).
        self._entered = self._started = False
        #: Plain lines instead of the bar (the console is not a terminal), and their timer thread.
        self.plain = False
        self.log_every = LOG_EVERY
        self.label = ""
        self._ticker: threading.Thread | None = None
        self._stop_ticker = threading.Event()
        self._reset()

    def _reset(self) -> None:
        self.calls = self.failed = self.retries = self.unscored = 0
        # calls sent and not yet answered, calls sent by purpose, when the calls in flight started
        # waiting (the first of them) and when the last answer came: a run whose items each take
        # many calls (a judge panel, an agent's steps) shows them moving before an item is done
        self.in_flight = 0
        self.sent_by_purpose: Counter[str] = Counter()
        self.oldest_sent: float | None = None
        self.last_answer: float | None = None
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

    def __enter__(self) -> RichProgress:
        # The bar is shown from the first task on: a command that fails before it has anything
        # to count (bad data, a bad option) prints its error alone, not after an empty bar line.
        self._entered = True
        self.plain = not self.console.is_terminal
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self.draw()
            if self.plain:
                self._stop_ticker.set()
                if self._ticker is not None:
                    self._ticker.join()
                self.log_line()
            else:
                self.bar.stop()
        self._entered = self._started = False

    def start(self, total: int, label: str) -> None:
        if self._entered and not self._started:
            if self.plain:
                self._stop_ticker.clear()
                self._ticker = threading.Thread(
                    target=self._tick, name="grandrounds-progress", daemon=True
                )
                self._ticker.start()
            else:
                self.bar.start()
            self._started = True
        elif self.plain and self._started:
            self.log_line()  # the previous task's last counts
        self.draw()  # the previous task's last counts
        self._reset()
        self.total, self.label = total, label
        self.task = self.bar.add_task(
            label, total=total, rate=0.0, inner="", failed=0, retries=0, unscored=0, eta="-"
        )

    def _tick(self) -> None:
        """A progress line every ``log_every`` seconds until the block ends."""
        while not self._stop_ticker.wait(self.log_every):
            self.log_line()

    def log_line(self) -> None:
        """The counts as one plain line (the console is not a terminal)."""
        if self.task is None:
            return
        elapsed = time.perf_counter() - self.t0
        left = self.eta()
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        parts = [
            f"{self.label}: {self.done:,}/{self.total:,}{share}",
            f"{self.calls / max(1e-6, elapsed):.1f} calls/s",
            *self.call_parts(),
            f"failed {self.failed}",
            f"retries {self.retries}",
            f"unscored {self.unscored}",
            f"elapsed {timedelta(seconds=round(elapsed))}",
            f"ETA {'-' if left is None else timedelta(seconds=round(left))}",
        ]
        if self.batches or self.batches_closed:
            parts.append(self.batch_text())
        self.console.print(styled(" · ".join(parts)), soft_wrap=True, highlight=False)

    def call_parts(self) -> list[str]:
        """The calls inside the items: answered so far, in flight and for how long, and the calls
        sent by purpose where more than one kind is asked, e.g. ``calls 7 (answer 3, judge 4) ·
        1 in flight for 0:02:10``."""
        if not self.sent_by_purpose and not self.calls:
            return []
        kinds = ""
        if len(self.sent_by_purpose) > 1:
            kinds = (
                " ("
                + ", ".join(f"{p} {n}" for p, n in sorted(self.sent_by_purpose.items()))
                + " sent)"
            )
        parts = [f"calls {self.calls:,} answered{kinds}"]
        if self.in_flight:
            waiting = time.perf_counter() - (self.oldest_sent or time.perf_counter())
            parts.append(f"{self.in_flight} in flight for {timedelta(seconds=round(waiting))}")
        return parts

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
        self.bar.update(
            self.task,
            advance=advance,
            rate=rate,
            failed=self.failed,
            retries=self.retries,
            unscored=self.unscored,
            inner=" · ".join(self.call_parts()),
            eta=eta,
        )

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

    def on_batch(self, event: BatchEvent) -> None:
        """A batch was submitted, picked up, changed state or counts, or closed."""
        key = (event.provider, event.batch_id)
        if event.closed:
            last = self.batches.pop(key, None)
            self.batches_closed += 1
            self.closed_size += event.size
            # a collected batch's every request has an outcome; one left unreachable, what was last seen
            self.closed_back += (
                event.size
                if event.what.startswith("collected")
                else (last[2] if last else event.back)
            )
        else:
            self.batches[key] = (event.state or event.what, event.size, event.back)
        if self.task is not None:
            if not any(isinstance(c, BatchColumn) for c in self.bar.columns):
                self.bar.columns = (*self.bar.columns, BatchColumn())
            self.bar.update(self.task, batches=self.batch_text())
        if event.milestone:
            self.console.print(
                styled(event.line(), "dim")
            )  # batch ids and states are the server's text: never markup
            if event.summary:
                self.console.print(styled(f"  {event.summary}", "dim"))

    def batch_text(self) -> str:
        """E.g. "batches: 2 in_progress, 1 finalizing · 340/1,000 calls back"; once none is
        watched, "batches: 3 closed · 1,000/1,000 calls back"."""
        states = Counter(state for state, _, _ in self.batches.values())
        if states:
            shown = ", ".join(
                f"{n} {state}"
                for state, n in sorted(states.items(), key=lambda kv: (-kv[1], kv[0]))
            )
        else:
            shown = f"{self.batches_closed} closed"
        total = self.closed_size + sum(size for _, size, _ in self.batches.values())
        back = self.closed_back + sum(n for _, _, n in self.batches.values())
        return f"batches: {shown} · {back:,}/{total:,} calls back"

    def on_send(self, request: Request) -> None:
        """A call went out: counted in flight, by its purpose (answer, judge, simulator...)."""
        self.in_flight += 1
        self.sent_by_purpose[request.purpose] += 1
        if self.oldest_sent is None:
            self.oldest_sent = time.perf_counter()
        self._update()

    def on_call(self, response: Response, *, retries: int) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if self.in_flight == 0:
            self.oldest_sent = None
        self.last_answer = time.perf_counter()
        self.calls += 1
        self.retries += retries
        self.failed += 0 if response.ok else 1
        self._update()
