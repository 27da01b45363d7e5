"""The data floor: the only owner of SQLite. Its core (flat: db, schema, settings, errors, clips, captions, ...) and
its wings (library/, jobs/, quality/, release/); docs/ARCHITECTURE.md, "The floors", says what each holds and may
import."""
