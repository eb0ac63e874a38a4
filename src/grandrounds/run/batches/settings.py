"""Batch settings: which calls go through batch APIs (``--batch answers|judges|both``), how
requests are gathered into batches and how often open batches are looked at, read from the flag
and from ``$GRANDROUNDS_BATCH_WINDOW`` / ``$GRANDROUNDS_BATCH_POLL``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from grandrounds.core.errors import ConfigError

Role = Literal["answers", "judges"]


@dataclass(frozen=True, kw_only=True)
class BatchSettings:
    """Which calls go through batch APIs, and how batches are formed and watched.

    ``window``, ``poll_interval`` default to ``$GRANDROUNDS_BATCH_WINDOW`` and
    ``$GRANDROUNDS_BATCH_POLL`` when :meth:`parse` builds the settings (tests poll a loopback
    server every few hundredths of a second; a real batch takes minutes to hours).
    """

    answers: bool = False
    judges: bool = False
    #: Seconds requests are collected after the first one before they are submitted together.
    window: float = 1.0
    #: Most requests in one batch (OpenAI accepts 50,000, Anthropic 100,000).
    max_requests: int = 10_000
    #: Most bytes of request lines in one batch (OpenAI's input file may be 200 MB, Anthropic's request 256 MB).
    max_bytes: int = 100 * 2**20
    #: Seconds between looks at each open batch.
    poll_interval: float = 30.0
    #: Submissions of one request (the first and the retries after an expiry, a cancellation or a retryable error).
    max_attempts: int = 3
    #: Requests that may wait in batches at once, per executor (the width of the runner's pool).
    concurrency: int = 5_000
    #: Seconds an upload, a status look or a results download may take.
    transfer_timeout: float = 600.0

    def covers(self, role: Role) -> bool:
        return self.answers if role == "answers" else self.judges

    @classmethod
    def parse(cls, what: str | None, **overrides: Any) -> BatchSettings | None:
        """``answers`` | ``judges`` | ``both`` (None or "" = no batching) -> settings."""
        if not what:
            return None
        if what not in ("answers", "judges", "both"):
            raise ConfigError(f"--batch {what!r}: expected answers, judges or both")
        env: dict[str, Any] = {}
        for name, var in (
            ("window", "GRANDROUNDS_BATCH_WINDOW"),
            ("poll_interval", "GRANDROUNDS_BATCH_POLL"),
        ):
            raw = os.environ.get(var)
            if raw:
                try:
                    env[name] = float(raw)
                except ValueError:
                    raise ConfigError(f"${var}={raw!r}: expected a number of seconds") from None
                if env[name] <= 0:
                    raise ConfigError(f"${var}={raw!r}: expected a positive number of seconds")
        return cls(
            answers=what in ("answers", "both"),
            judges=what in ("judges", "both"),
            **(env | overrides),
        )
