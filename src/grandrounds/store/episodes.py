"""The ``episodes`` table: each agent episode's steps, written as they happen.

One row per run, sample and epoch. The row is rewritten after every step with the steps so
far and the episode's status (``running`` until it ends), so an interrupted episode shows how
far it got; its model calls are in ``calls`` like any other, so running the command again
replays the finished steps from there without asking again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from grandrounds.core.hashing import canonical_json
from grandrounds.store.connection import StoreBase, now
from grandrounds.store.rows import CallUsage


class EpisodeTables(StoreBase):
    """Reads and writes of ``episodes``."""

    def put_episode(
        self,
        run_id: str,
        sample_id: str,
        epoch: int,
        status: str,
        steps: Sequence[Mapping[str, Any]],
    ) -> None:
        """Store (or replace) one episode's steps and status."""
        self._write(
            "INSERT OR REPLACE INTO episodes VALUES (?,?,?,?,?,?)",
            (run_id, sample_id, int(epoch), status, canonical_json(list(steps)), now()),
        )

    def episodes(self, run_id: str, sample_id: str) -> list[dict[str, Any]]:
        """The stored episodes of one sample of a run, by epoch: ``{epoch, status, steps}``."""
        self.flush()
        rows = self.db.execute(
            "SELECT epoch, status, steps_json FROM episodes WHERE run_id = ? AND sample_id = ? ORDER BY epoch",
            (run_id, sample_id),
        ).fetchall()
        return [{"epoch": int(r[0]), "status": r[1], "steps": json.loads(r[2])} for r in rows]

    def episode_statuses(self, run_id: str) -> dict[str, int]:
        """How many of a run's episodes ended in each status."""
        self.flush()
        rows = self.db.execute(
            "SELECT status, COUNT(*) FROM episodes WHERE run_id = ? GROUP BY status", (run_id,)
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def episode_usage(self, run_id: str) -> CallUsage | None:
        """The candidate's calls behind a run's episodes (every step of every epoch, each distinct
        call once) with their tokens; None for a run without episodes."""
        self.flush()
        keys: set[str] = set()
        for (steps_json,) in self.db.execute(
            "SELECT steps_json FROM episodes WHERE run_id = ?", (run_id,)
        ):
            keys.update(str(st["key"]) for st in json.loads(steps_json) if st.get("key"))
        return self._keys_usage("answers", keys)

    def simulator_usage(self, run_id: str) -> CallUsage | None:
        """The simulator's calls behind a run's episodes (AgentClinic's patient and measurement
        reader: the keys each step names in ``simulator_keys``, each distinct call once) with their
        tokens; None for a run whose episodes asked no simulator."""
        self.flush()
        keys: set[str] = set()
        for (steps_json,) in self.db.execute(
            "SELECT steps_json FROM episodes WHERE run_id = ?", (run_id,)
        ):
            keys.update(
                str(k) for st in json.loads(steps_json) for k in st.get("simulator_keys") or ()
            )
        return self._keys_usage("simulator", keys)

    def _keys_usage(self, who: str, keys: set[str]) -> CallUsage | None:
        """The stored calls of ``keys`` counted with their tokens (None for no keys)."""
        if not keys:
            return None
        calls = prompt = completion = no_usage = 0
        ordered = sorted(keys)
        for i in range(0, len(ordered), 500):
            part = ordered[i : i + 500]
            marks = ",".join("?" * len(part))
            row = self.db.execute(
                f"SELECT COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), "
                f"SUM(error IS NULL AND prompt_tokens = 0 AND completion_tokens = 0) FROM calls WHERE key IN ({marks})",
                part,
            ).fetchone()
            calls += int(row[0])
            prompt, completion, no_usage = (
                prompt + int(row[1] or 0),
                completion + int(row[2] or 0),
                no_usage + int(row[3] or 0),
            )
        return CallUsage(
            who=who,
            calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            no_usage=no_usage,
        )
