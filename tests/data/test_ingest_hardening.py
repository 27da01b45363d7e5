"""Ingest hardening (issue 11): dimensions over the whole stream, memory-capped workers, footage that changes
under its caption (R13), and two ingests of one root at once."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading

from data import captions, db as dbmod, export, review_states
from data.clips import Filter
from data.library import clipgen, ingest, worker_pool
from tests.support.webapp_fixtures import LABELS


def _ts(path, w, h, n=10, shade=0):
    clipgen.tiny_clip(path, width=w, height=h, frames=n, step=10, shade=shade, fmt="mpegts")


def test_a_resolution_change_mid_stream_is_refused_at_ingest(settings, db, tmp_path):
    root = settings.clip_root
    root.mkdir(parents=True)
    _ts(tmp_path / "a.ts", 160, 96)
    _ts(tmp_path / "b.ts", 1920, 1088)
    (root / "grows.ts").write_bytes((tmp_path / "a.ts").read_bytes() + (tmp_path / "b.ts").read_bytes())
    shutil.copy(tmp_path / "a.ts", root / "fine.ts")
    summary = ingest.ingest(settings, db=db, workers=1, decoder="pyav")
    rows = {r["path"]: r for r in db.query("SELECT path, probe_error, width FROM clips")}
    assert rows["fine.ts"]["probe_error"] is None
    assert "resolution changes mid-stream" in rows["grows.ts"]["probe_error"], rows["grows.ts"]
    assert summary["failed"] == 1


def test_the_worker_memory_cap_holds():
    code = (
        "from data.library.worker_pool import _cap_memory; _cap_memory(300)\n"
        "try:\n    bytearray(600 << 20)\nexcept MemoryError:\n    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "refused", out.stderr[-500:]


def test_hostile_corpus_stays_under_the_worker_cap(settings, db, hostile_root):
    summary = ingest.ingest(settings, db=db, workers=2, decoder="pyav", memory_mib=worker_pool.WORKER_MEMORY_MIB)
    print(
        f"R10: ingest worker peak RSS over the hostile corpus ({summary['seen']} files): "
        f"{summary['worker_peak_rss_mib']:.0f} MiB (cap {worker_pool.WORKER_MEMORY_MIB} MiB address space)"
    )
    assert 0 < summary["worker_peak_rss_mib"] <= worker_pool.WORKER_MEMORY_MIB


def test_other_footage_under_the_same_name_makes_the_caption_stale(settings, db, tmp_path):
    root = settings.clip_root
    root.mkdir(parents=True)
    _ts(root / "c.ts", 160, 96)
    ingest.ingest(settings, db=db, workers=1, decoder="pyav")
    cid = db.execute("SELECT id FROM clips").fetchone()[0]
    cap = captions.save_human(db, cid, text="a red car turns left", labels=LABELS, author="ann", base_caption_id=None)
    review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=cap["id"])
    _ts(root / "c.ts", 160, 96, n=12, shade=128)  # other footage, same name
    ingest.ingest(settings, db=db, workers=1, decoder="pyav")
    clip = next(db.query("SELECT review_status, current_caption_id FROM clips WHERE id = ?", [cid]))
    assert clip["review_status"] == "unreviewed" and clip["current_caption_id"] == cap["id"]  # kept, not approved
    ev = [dict(e) for e in db.query("SELECT * FROM events WHERE action = 'clip.content_changed'")]
    assert len(ev) == 1 and ev[0]["clip_id"] == cid
    detail = json.loads(ev[0]["detail"])
    assert detail["previous_review"] == "approved" and detail["old_sha256"] != detail["new_sha256"]
    out = io.StringIO()
    assert export.export(db, Filter(review_status="approved"), "jsonl", out) == 0


def test_two_ingests_of_one_root_at_once_end_cleanly(settings, tiny_library):
    dbmod.connect(settings.db).close()
    errors, summaries = [], []

    def run():
        try:
            summaries.append(ingest.ingest(settings, workers=1, decoder="pyav", media=False))
        except Exception as e:  # the test reports any
            errors.append(repr(e))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [] and len(summaries) == 2
    db = dbmod.connect(settings.db)
    paths = [r["path"] for r in db.query("SELECT path FROM clips")]
    assert len(paths) == len(set(paths)) == summaries[0]["seen"]
    db.close()


def _footprint(task, report):  # runs in a pool worker: what its libraries started there
    import numpy  # noqa: F401  (OpenBLAS starts its threads on import)

    threads = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("Threads:"))
    return {"rel": task["rel"], "env": {k: os.environ.get(k) for k in worker_pool.WORKER_ENV}, "threads": threads}


def test_a_workers_footprint_does_not_grow_with_the_machines_cores(monkeypatch):
    """On a 16-core GPU node every clip failed ingest: NumPy's OpenBLAS started 16 threads in each worker and
    each decoding thread got its own malloc arena, past the worker's address-space cap. A worker's libraries
    get one thread whatever the parent's environment says (here: what OpenBLAS would take on 16 cores)."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "16")
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    pool = worker_pool.WorkerPool(1, 60, worker_pool.WORKER_MEMORY_MIB, target=_footprint)
    try:
        (result,) = list(pool.run(iter([{"rel": "x"}])))
    finally:
        pool.close()
    assert result["env"] == worker_pool.WORKER_ENV
    assert result["threads"] <= 2, result  # the main thread (and at most one helper), not 16
    assert os.environ["OPENBLAS_NUM_THREADS"] == "16" and "MALLOC_ARENA_MAX" not in os.environ  # parent as it was


def test_a_1080p_clip_leaves_the_worker_most_of_its_cap(settings, db, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "16")
    root = settings.clip_root
    root.mkdir(parents=True)
    clipgen.tiny_clip(root / "hd.mp4", width=1920, height=1088, frames=12, step=10)
    summary = ingest.ingest(settings, db=db, workers=1, decoder="pyav", memory_mib=worker_pool.WORKER_MEMORY_MIB)
    print(f"ingest worker peak address space, one 1080p clip: {summary['worker_peak_vm_mib']:.0f} MiB")
    assert db.execute("SELECT probe_error FROM clips").fetchone()[0] is None
    assert 0 < summary["worker_peak_vm_mib"] < worker_pool.WORKER_MEMORY_MIB / 2


def test_a_worker_out_of_memory_is_said_so_and_the_next_ingest_tries_again(settings, db):
    """Not "corrupt": the clip may be fine and the cap too tight for this machine."""
    root = settings.clip_root
    root.mkdir(parents=True)
    clipgen.tiny_clip(root / "hd.mp4", width=1920, height=1088, frames=12, step=10)
    ingest.ingest(settings, db=db, workers=1, decoder="pyav", memory_mib=400)  # too little to decode 1080p
    error = db.execute("SELECT probe_error FROM clips").fetchone()[0]
    assert error.startswith(worker_pool.OUT_OF_MEMORY) and "400 MiB" in error and "corrupt" not in error, error
    summary = ingest.ingest(settings, db=db, workers=1, decoder="pyav")
    assert summary["failed"] == 0 and db.execute("SELECT probe_error FROM clips").fetchone()[0] is None
