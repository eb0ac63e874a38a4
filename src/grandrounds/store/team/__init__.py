"""The team store: results published from SQLite stores into PostgreSQL for a whole team to read.

``publish`` (:mod:`.publish`) writes a store's runs into it; ``TeamStore`` (:mod:`.connection`)
reads it with the store's own read methods; :mod:`.schema` holds its migrations and :mod:`.dsn`
how a DSN is recognised and shown (never with its password). psycopg is imported only here, and
only when a team store is used (``pip install 'grandrounds[team]'``).
"""

from __future__ import annotations

from grandrounds.store.team.dsn import is_team_dsn, shown

__all__ = ["is_team_dsn", "shown"]
