"""The database file (data.db, data.schema): migrations from empty make every table, writers on many threads never
see "database is locked", the write lock's figures, and a refused commit that leaves no lock behind."""

from __future__ import annotations

import threading

import pytest

from data import captions, clips, db as dbmod, schema
from data.db import immediate
from data.errors import Conflict
from tests.support.rows import LABELS, add_clip


def test_migrations_from_empty_create_every_table(tmp_path):
    d = dbmod.connect(tmp_path / "fresh.db")
    tables = set(d.table_names())
    assert {
        "clips",
        "captions",
        "prompts",
        "jobs",
        "job_items",
        "users",
        "events",
        "heartbeats",
        "clips_fts",
        "_counts",
    } <= tables
    assert not schema.MIGRATIONS.pending(d)
    cols = d["clips"].columns_dict
    assert "filmstrip_indices" in cols and "media_decoder" in cols
    d.close()
    again = dbmod.connect(tmp_path / "fresh.db")  # a second open migrates nothing
    assert not schema.MIGRATIONS.pending(again)


def test_concurrent_saves_from_threads_never_see_database_is_locked(db_path):
    setup = dbmod.connect(db_path)
    ids = [add_clip(setup, f"c{i}.mp4") for i in range(4)]
    setup.close()
    errors, acked, conflicts = [], [], []

    def annotator(n):
        d = dbmod.connect(db_path)  # one connection per thread
        try:
            for k in range(25):
                cid = ids[(n + k) % len(ids)]
                base = clips.get(d, cid)["current_caption_id"]
                try:
                    row = captions.save_human(
                        d, cid, text=f"t{n}-{k}", labels=LABELS, author=f"u{n}", base_caption_id=base
                    )
                    acked.append(row["id"])
                except Conflict:
                    conflicts.append(cid)
        except Exception as e:  # any other error fails the test below
            errors.append(repr(e))
        finally:
            d.close()

    threads = [threading.Thread(target=annotator, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = dbmod.connect(db_path)
    assert check.execute("SELECT COUNT(*) FROM captions").fetchone()[0] == len(acked)
    assert len(acked) + len(conflicts) == 8 * 25
    check.close()


def test_write_lock_stats_count_holds_and_the_longest(db, settings):
    import time as _time

    from data.db import immediate, write_lock_stats

    before = write_lock_stats(settings.db)
    with immediate(db):
        _time.sleep(0.05)  # a long transaction
    with immediate(db):
        pass
    after = write_lock_stats(settings.db)
    assert after["holds"] - before["holds"] == 2
    assert after["max_ms"] >= 50


def test_a_refused_commit_leaves_no_write_lock_behind(settings):
    """A COMMIT SQLite refuses (here a deferred foreign key; in the field a lock or an I/O error) can leave the
    transaction open on its connection. `immediate` must end it: else that connection holds the write lock and
    every other writer (the runner, each save) waits on it until the process exits."""
    import sqlite3

    db = dbmod.connect(settings.db)
    other = dbmod.connect(settings.db)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        db.execute(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, "
            "parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
        )
        with pytest.raises(sqlite3.IntegrityError):
            with immediate(db):
                db.execute("INSERT INTO child VALUES (1, 99)")  # checked only at COMMIT
        assert not db.conn.in_transaction
        with immediate(other, wait=0.5):  # another connection can write at once
            other.execute("INSERT INTO parent VALUES (99)")
        assert db.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0  # nothing of the refused one stayed
    finally:
        db.close()
        other.close()
