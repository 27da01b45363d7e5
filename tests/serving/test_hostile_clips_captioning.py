"""R7 for captioning: every clip of the hostile corpus (data.library.hostile.write_hostile_corpus, ingested) ends failed
with a specific reason; clips that slip past ingest are refused by the fleet or the client (4xx / decode 500 /
outside the root) and never retried; the good clips of the same job are captioned."""

from __future__ import annotations

import os
import time

from data import jobs, prompts
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.library import ingest
from data.library.clipgen import tiny_clip
from data.library.hostile import write_hostile_corpus
from serving import runner as runmod, simfleet


def test_r7_hostile_corpus_fails_with_reasons_and_is_never_retried(settings, db):
    root = settings.clip_root
    expected = write_hostile_corpus(root / "hostile")
    (root / "good").mkdir(parents=True)
    for i in range(3):
        (root / "good" / f"{i}.mp4").write_bytes(tiny_clip())
    ingest.ingest(settings, db=db, media=False, workers=2)
    # rows that slip past ingest (a file replaced after probing, a row pointing outside the root)
    (root / "late").mkdir()
    (root / "late" / "swapped.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + os.urandom(500))
    with db.conn:
        db["clips"].insert_all(
            [
                {"path": "late/swapped.mp4", "width": 64, "height": 48, "frames": 10},
                {"path": "../outside.mp4", "width": 64, "height": 48, "frames": 10},
                {"path": "good/0.mp4/../../../etc/passwd", "width": 64, "height": 48, "frames": 10},
            ]
        )
    all_ids = [r[0] for r in db.execute("SELECT id FROM clips")]
    job_id = jobs.create(
        db,
        name="r7",
        created_by="test",
        selection=Selection.of_clips(all_ids),
        prompt_id=prompts.latest(db)["id"],
        params=JobParams(),
    )
    fleet = simfleet.start_fleet(2, 0, root, speed=0.01)
    try:
        t = time.monotonic()
        prog = runmod.run_job(settings, job_id, fleet.urls, backoff_base=0.05)
        took = time.monotonic() - t
        sent = sum(fleet.stats(i)["chat_requests"] for i in range(2))
    finally:
        fleet.stop()
    assert prog["state"] == "done" and took < 60
    rows = {
        r["path"]: r
        for r in db.query(
            "SELECT c.path, i.state, i.attempts, i.last_error, i.error_kind "
            "FROM job_items i JOIN clips c ON c.id = i.clip_id "
            "WHERE i.job_id = ?",
            [job_id],
        )
    }
    good = [p for p in rows if p.startswith("good/") and "passwd" not in p]
    assert len(good) == 3 and all(rows[p]["state"] == "done" for p in good)
    bad = {p: r for p, r in rows.items() if p not in good}
    assert len(bad) >= len(expected) + 3
    for path, r in bad.items():
        assert r["state"] == "failed", (path, r)
        assert r["attempts"] == 1, (path, r)  # never retried
        assert r["last_error"] and len(r["last_error"]) > 8, (path, r)
    # the ingest reason is carried onto the item, with the corpus' expected keyword
    hostile = {p: r for p, r in bad.items() if p.startswith("hostile/")}
    assert len(hostile) >= 30
    keywords = set(expected.values())
    for path, r in hostile.items():
        assert r["last_error"].startswith("ingest: ") and r["error_kind"] == "ingest", (path, r)
        assert any(k in r["last_error"].lower() for k in keywords), (path, r)  # a specific reason
    assert rows["late/swapped.mp4"]["error_kind"] in ("decode", "rejected")
    assert (
        "HTTP 500" in rows["late/swapped.mp4"]["last_error"]
        or "decode" in rows["late/swapped.mp4"]["last_error"].lower()
    )
    assert "outside" in rows["../outside.mp4"]["last_error"] or "root" in rows["../outside.mp4"]["last_error"]
    # only the good clips and the swapped file reached the fleet; paths outside the root never left the client
    assert sent == 4
