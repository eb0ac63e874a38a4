"""CLI command of the team store: ``publish`` (an SQLite store's runs into PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from grandrounds.core.display import SafeConsole

console = SafeConsole()


def _publish_command(
    store_path: Callable[[Path | None], Path], StoreOpt: Any
) -> Callable[..., None]:
    def publish(
        to: str = typer.Option(
            ...,
            "--to",
            help="the team store: postgresql://[user@]host[:port]/database (the password from "
            "$PGPASSWORD or ~/.pgpass, never the command line; other settings from the PG* variables)",
        ),
        run: list[str] = typer.Option(
            [], "--run", help="only this run (id, or its first 6+ characters); repeatable"
        ),
        store: Path | None = StoreOpt,
    ) -> None:
        """Publish the store's runs (answers, grades, episodes, images, reviews) to a team store in PostgreSQL; publishing again changes nothing."""
        from grandrounds.cli.common import stored_run, user_errors
        from grandrounds.core.errors import ConfigError
        from grandrounds.store import Store
        from grandrounds.store.team.dsn import is_team_dsn, shown
        from grandrounds.store.team.publish import RunPublished, publish

        with user_errors():
            if not is_team_dsn(to):
                raise ConfigError(
                    f"--to takes a PostgreSQL DSN (postgresql://host/database), not {shown(to)!r}"
                )
            path = store_path(store)
            ids = None
            if run:
                with Store(path, readonly=True) as st:
                    ids = [stored_run(st, text).id for text in run]

            def said(r: RunPublished) -> None:
                what = ", ".join(f"{n} {t}" for t, n in r.written.items() if n) or "already there"
                console.print(
                    f"{r.run_id[:12]} {r.benchmark} {r.model}: {what}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )

            done = publish(path, to, ids, log=said)
        console.print(
            f"published {len(done.runs)} runs from {path} to {shown(to)} in {done.seconds:.1f} s "
            f"({sum(1 for r in done.runs if r.changed)} changed; {done.images_added} new images, "
            f"{done.agreements_written} judge-agreement rows written)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    return publish


def register(app: typer.Typer, store_path: Callable[[Path | None], Path], StoreOpt: Any) -> None:
    """Add ``publish`` to ``app``."""
    app.command()(_publish_command(store_path, StoreOpt))
