"""The data floor: the only owner of SQLite. Its core (flat: db, schema, settings, errors, clips, captions, ...) and
its wings (library/, jobs/, quality/, release/); docs/ARCHITECTURE.md, "The floors", says what each holds and may
import.

It imports sqlite-utils first, without pandas (data/sqlite.py says why and what it saves)."""

import data.sqlite  # noqa: F401  (for its effect: sqlite_utils imported without pandas)
