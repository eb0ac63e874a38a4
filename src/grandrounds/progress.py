"""Rich progress bar for runs: done / total, calls per second, errors, unscored, ETA."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from grandrounds.records import Grade, Response


class RichProgress:
    """Implements the runner's Progress protocol on a rich progress bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} calls/s"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("unscored {task.fields[unscored]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task: int | None = None
        self.calls = 0
        self.errors = 0
        self.unscored = 0
        self.t0 = time.perf_counter()

    def __enter__(self) -> "RichProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def start(self, total: int, label: str) -> None:
        self.t0 = time.perf_counter()
        self.calls = self.errors = self.unscored = 0
        self.task = self.bar.add_task(label, total=total, rate=0.0, errors=0, unscored=0)

    def _update(self, advance: int = 0) -> None:
        if self.task is None:
            return
        rate = self.calls / max(1e-6, time.perf_counter() - self.t0)
        self.bar.update(self.task, advance=advance, rate=rate, errors=self.errors, unscored=self.unscored)

    def advance(self, grade: Grade) -> None:
        if grade.value is None:
            self.unscored += 1
        self._update(1)

    def on_call(self, response: Response, *, retries: int) -> None:
        self.calls += 1
        self.errors += retries + (0 if response.ok else 1)
        self._update()
