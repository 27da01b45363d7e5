"""Lineage of caption versions (migration m011_lineage, data.captions): every version names the version it was
derived from and the machine caption at the root of its chain, on new writes and, backfilled, on a library
written before lineage existed."""

from __future__ import annotations

import json
import sqlite3

import pytest

from data import caption_history, captions, db as dbmod, schema
from tests.support.audit_checks import assert_audit_complete, lineage_problems
from tests.support.runner_fixtures import LABELS

OTHER = {**LABELS, "weather": "snow"}


class OldLibrary:
    """Writes caption versions exactly as data.captions did before m011 (same columns, same events), on a
    database migrated up to, not including, m011_lineage."""

    def __init__(self, db):
        self.db = db
        self.at = 1_000.0

    def clip(self, clip_id: int) -> int:
        self.db.execute("INSERT INTO clips (id, path) VALUES (?, ?)", [clip_id, f"old/{clip_id}.mp4"])
        self.db.conn.commit()
        return clip_id

    def _current(self, clip_id):
        return self.db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [clip_id]).fetchone()[0]

    def _insert(self, clip_id, *, text, labels, source, author, parent_id, note=None, **prov) -> int:
        self.at += 1
        version = self.db.execute(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM captions WHERE clip_id = ?", [clip_id]
        ).fetchone()[0]
        row = dict(clip_id=clip_id, version=version, parent_id=parent_id, text=text, labels=json.dumps(labels))
        row.update(source=source, author=author, note=note, created_at=self.at, **prov)
        cols = ", ".join(row)
        return self.db.execute(
            f"INSERT INTO captions ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values())
        ).lastrowid

    def _event(self, actor, action, clip_id, caption_id, **detail):
        self.db.execute(
            "INSERT INTO events (at, actor, action, clip_id, caption_id, detail) VALUES (?, ?, ?, ?, ?, ?)",
            [self.at, actor, action, clip_id, caption_id, json.dumps(detail)],
        )

    def machine(self, clip_id, text="machine", *, current=True, simulated=False) -> int:
        prev = self._current(clip_id)
        cid = self._insert(
            clip_id,
            text=text,
            labels=LABELS,
            source="model",
            author="model",
            parent_id=prev,
            model="m",
            simulated=int(simulated),
        )
        if current:
            self.db.execute("UPDATE clips SET current_caption_id = ? WHERE id = ?", [cid, clip_id])
        self._event("model", "caption.machine" if current else "caption.candidate", clip_id, cid, previous=prev)
        self.db.conn.commit()
        return cid

    def save(self, clip_id, text, labels=LABELS, author="ann") -> int:
        base = self._current(clip_id)
        cid = self._insert(clip_id, text=text, labels=labels, source="human", author=author, parent_id=base)
        self.db.execute("UPDATE clips SET current_caption_id = ? WHERE id = ?", [cid, clip_id])
        self._event(author, "caption.save", clip_id, cid, previous=base)
        self.db.conn.commit()
        return cid

    def adopt(self, clip_id, source_id, author="lee") -> int:
        base = self._current(clip_id)
        src = self.db.execute("SELECT text, labels, version FROM captions WHERE id = ?", [source_id]).fetchone()
        cid = self._insert(
            clip_id,
            text=src[0],
            labels=json.loads(src[1]),
            source="human",
            author=author,
            parent_id=base,
            note=f"adopted version {src[2]}",
        )
        self.db.execute("UPDATE clips SET current_caption_id = ? WHERE id = ?", [cid, clip_id])
        self._event(author, "caption.adopt", clip_id, cid, previous=base, adopted=source_id)
        self.db.conn.commit()
        return cid


@pytest.fixture
def old_db(settings):
    d = dbmod.connect(settings.db, migrate=False)
    schema.MIGRATIONS.apply(d, stop_before="m011_lineage")
    assert "derived_from_id" not in d["captions"].columns_dict
    yield d
    d.close()


def lineage_of(db) -> dict[int, tuple]:
    return {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, derived_from_id, origin_id FROM captions")}


def test_backfill_walks_the_old_parent_chains(old_db, settings):
    old = OldLibrary(old_db)
    # clip ids far apart: the backfill goes through clips in ranges and must jump the gaps
    a, b, c, d = old.clip(1), old.clip(2), old.clip(45_000), old.clip(9_000_000)
    a1 = old.machine(a, simulated=True)
    a2 = old.save(a, "[SIMULATED] fixed a label", OTHER)
    a3 = old.save(a, "rewritten", OTHER, author="bob")
    a4 = old.machine(a, current=False)  # a candidate beside a human caption: its parent is a3, it derives from none
    a5 = old.adopt(a, a2)  # back to ann's version: derived from a2, not from a3 (its parent)
    b1 = old.save(b, "by hand")  # no origin
    b2 = old.save(b, "by hand, again")
    b3 = old.machine(b, current=False)
    b4 = old.adopt(b, b3)  # a candidate adopted: it is the origin from now on
    c1 = old.machine(c)
    c2 = old.machine(c)  # a re-caption replacing an unreviewed machine caption: parent c1, yet an origin itself
    c3 = old.save(c, "edited")
    d1 = old.machine(d)
    old_db.close()

    db = dbmod.connect(settings.db)  # the real migration path: connect applies what is pending
    try:
        assert lineage_of(db) == {
            a1: (None, a1),
            a2: (a1, a1),
            a3: (a2, a1),
            a4: (None, a4),
            a5: (a2, a1),
            b1: (None, None),
            b2: (b1, None),
            b3: (None, b3),
            b4: (b3, b3),
            c1: (None, c1),
            c2: (None, c2),
            c3: (c2, c2),
            d1: (None, d1),
        }
        assert lineage_problems(db) == []
        assert_audit_complete(db)  # the old rows and their events still form a complete history
        lin = caption_history.lineage(db, captions.get(db, a5))
        assert lin["simulated"] is True and lin["origin"]["id"] == a1 and lin["changed"] == "both"
        assert [(e["caption_id"], e["author"], e["changed"]) for e in lin["edits"]] == [
            (a2, "ann", "both"),
            (a5, "lee", "unchanged"),
        ]
        # new versions continue the backfilled chains
        new = captions.save_human(db, a, text="after the upgrade", labels=OTHER, author="cy", base_caption_id=a5)
        assert (new["derived_from_id"], new["origin_id"]) == (a5, a1)
    finally:
        db.close()


def test_lineage_cannot_be_rewritten(db):
    cid = db.execute("INSERT INTO clips (path) VALUES ('x.mp4')").lastrowid
    db.conn.commit()
    m, _ = captions.add_machine(db, cid, job_id=None, text="m", labels=LABELS, provenance={"model": "m"})
    h = captions.save_human(db, cid, text="h", labels=LABELS, author="ann", base_caption_id=m["id"])
    for col in ("derived_from_id", "origin_id"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(f"UPDATE captions SET {col} = NULL WHERE id = ?", [h["id"]])
    assert (captions.get(db, h["id"])["derived_from_id"], captions.get(db, h["id"])["origin_id"]) == (m["id"], m["id"])


def test_new_versions_record_what_they_were_derived_from(db):
    a, b = (db.execute("INSERT INTO clips (path) VALUES (?)", [p]).lastrowid for p in ("a.mp4", "b.mp4"))
    db.conn.commit()
    m, _ = captions.add_machine(db, a, job_id=None, text="m", labels=LABELS, provenance={"simulated": True})
    assert (m["derived_from_id"], m["origin_id"]) == (None, m["id"])
    h = captions.save_human(db, a, text="h", labels=OTHER, author="ann", base_caption_id=m["id"])
    assert (h["derived_from_id"], h["origin_id"], h["parent_id"]) == (m["id"], m["id"], m["id"])
    cand, current = captions.add_machine(db, a, job_id=None, text="c", labels=LABELS, provenance={})
    assert not current and (cand["derived_from_id"], cand["origin_id"], cand["parent_id"]) == (
        None,
        cand["id"],
        h["id"],
    )
    ad = captions.adopt(db, a, caption_id=m["id"], author="lee", base_caption_id=h["id"])
    assert (ad["derived_from_id"], ad["origin_id"], ad["parent_id"]) == (m["id"], m["id"], h["id"])
    s = captions.save_human(db, b, text="scratch", labels=LABELS, author="ann", base_caption_id=None)
    assert (s["derived_from_id"], s["origin_id"]) == (None, None)
    lin = caption_history.lineage(db, captions.get(db, s["id"]))
    assert lin["origin"] is None and lin["changed"] == "written" and lin["simulated"] is False
    assert [e["changed"] for e in lin["edits"]] == ["written"]
    assert lineage_problems(db) == []


def test_the_lineage_check_catches_a_wrong_origin(settings):
    d = dbmod.connect(settings.db, migrate=False)
    schema.MIGRATIONS.apply(d, stop_before="m011_lineage")
    old = OldLibrary(d)
    old.clip(1)
    m = old.machine(1)
    old.save(1, "edit")
    d.close()
    db = dbmod.connect(settings.db)
    try:
        assert lineage_problems(db) == []
        db.execute("DROP TRIGGER captions_lineage_append_only")  # only to plant the fault the check must see
        db.execute("UPDATE captions SET origin_id = NULL WHERE id != ?", [m])
        db.conn.commit()
        assert [p[1] for p in lineage_problems(db)] == ["origin is not its chain's root"]
    finally:
        db.close()


def test_walking_a_chain_looks_versions_up_by_id_never_scans(db):
    """The export walks a chain per edited caption: a scan of `captions` there (a Bloom filter built by a
    scan, as SQLite plans a recursive join) would make a million-clip export quadratic."""
    db.execute("INSERT INTO clips (path) VALUES ('x.mp4')")
    db.conn.commit()
    for _ in range(3):  # enough rows for ANALYZE to give the planner statistics
        captions.add_machine(db, 1, job_id=None, text="m", labels=LABELS, provenance={})
    db.execute("ANALYZE")
    plan = [
        r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + caption_history.CHAIN_SQL, [1, caption_history.EDITS_MAX])
    ]
    lookups = [p for p in plan if "captions" in p or p.split()[1:2] in (["d"], ["k"])]
    assert lookups and all("USING INTEGER PRIMARY KEY" in p for p in lookups), plan
    assert not any("BLOOM" in p or p.startswith(("SCAN d", "SCAN k")) for p in plan), plan
