"""Ingest (data.library.ingest, `python -m data.ingest`): a folder of clips and their sidecars becomes rows of the
library, and nothing a folder holds stops it. What was test_ingest, test_ingest_plan, test_ingest_hardening and
test_sidecars, in that order.

- A run end to end on real files: probes and media, re-runs, moved, deleted and changed footage, the hostile
  corpus, deadlines, the CLI, the frames sampled as vLLM samples them.
- The planner is pure: given the rows and the walk it says what a run will do, without a file or a database.
  These cases are the rules of data.ingest's docstring, one each.
- Hardening (issue 11): dimensions over the whole stream, memory-capped workers, footage that changes under its
  caption (R13), and two ingests of one root at once.
- Sidecars (issue 21, class 1): sidecar metadata that parses but cannot be stored never stops an ingest. Every
  sidecar is stored as it reads back, or the clip is recorded with a `_sidecar_error` and still ingested. The
  property test writes generated JSON-ish bytes beside a clip, reads them as the walk does, and sends the result
  through the real INSERT of ingest (`data.library.ingest._write`), then reads the row back (`data.clips.get`).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from PIL import Image

from data import captions, clips, db as dbmod, export, review_states
from data.clips import Filter
from data.errors import DataError
from data.library import clip_root, clipgen, ingest, media, walk, worker_pool
from data.library.demo import BROKEN_FILES
from data.library.ingest import decide, plan
from data.library.walk import Entry
from tests.support.clip_fixtures import TINY_COUNT
from tests.support.examples import examples
from tests.support.webapp_fixtures import LABELS, write_clip

REPO = Path(__file__).resolve().parents[2]  # the repository: the commands run from it

LABELS = {
    "scenario_category": "pedestrian_crossing",
    "hazard_level": "high",
    "road_users": ["pedestrian"],
    "ego_maneuver": "slowing",
    "weather": "rain",
    "lighting": "daylight",
    "road_type": "urban",
}


def run(settings, **kw):
    return ingest.ingest(settings, workers=2, decoder="pyav", **kw)


def test_sample_indices_follow_vllm_qwen3_vl_rule():
    # np.linspace(0, total - 1, n).round(): rounded, not truncated (0, 1.93 -> 2, 3.87 -> 4, ...)
    assert media.sample_indices(30, 16) == [0, 2, 4, 6, 8, 10, 12, 14, 15, 17, 19, 21, 23, 25, 27, 29]
    assert media.sample_indices(10, 16) == list(range(10))  # fewer frames than asked: all of them
    assert media.sample_indices(300, 4) == [0, 100, 199, 299]
    assert media.sample_indices(0, 16) == []


def test_ingest_small_library_probes_every_clip_and_writes_media(settings, db, tiny_library):
    summary = run(settings, db=db)
    assert summary["ok"] == TINY_COUNT and summary["failed"] == len(BROKEN_FILES)
    rows = {r["path"]: r for r in db.query("SELECT * FROM clips")}
    good = [r for r in rows.values() if r["probe_error"] is None]
    assert len(good) == TINY_COUNT
    for r in good:
        assert r["width"] == 160 and r["height"] == 90 and r["codec"] in ("h264", "hevc")
        assert 1.4 <= r["duration"] <= 2.1 and r["fps"] == 15 and r["frames"] >= 16
        assert len(r["sha256"]) == 64
        indices = json.loads(r["filmstrip_indices"])
        assert indices == media.sample_indices(r["frames"], settings.frames)
        with Image.open(settings.media_dir / r["filmstrip"]) as strip:
            assert strip.width == media.TILE_WIDTH * settings.frames
        with Image.open(settings.media_dir / r["thumbnail"]) as thumb:
            assert thumb.width == media.THUMB_WIDTH
        assert json.loads(r["sidecar"])["camera"]
    for name, keyword in BROKEN_FILES.items():
        assert keyword in rows[name]["probe_error"].lower(), (name, rows[name]["probe_error"])


def test_reingest_writes_nothing_new(settings, db, tiny_library):
    run(settings, db=db)
    before = [dict(r) for r in db.query("SELECT * FROM clips ORDER BY id")]
    changes = db.conn.total_changes
    summary = run(settings, db=db)
    assert summary["skipped"] == TINY_COUNT + len(BROKEN_FILES)
    assert summary["ok"] == summary["failed"] == summary["moved"] == summary["missing"] == 0
    assert db.conn.total_changes == changes
    assert [dict(r) for r in db.query("SELECT * FROM clips ORDER BY id")] == before


def test_moved_file_keeps_its_row_and_captions(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    captions.save_human(
        db, row["id"], text="A pedestrian crosses in the rain.", labels=LABELS, author="ann", base_caption_id=None
    )
    src = tiny_library / row["path"]
    (tiny_library / "moved").mkdir()
    shutil.move(src, tiny_library / "moved" / "renamed.mp4")
    summary = run(settings, db=db)
    assert summary["moved"] == 1 and summary["missing"] == 0 and summary["ok"] == 0
    clip = clips.get(db, row["id"])
    assert clip["path"] == "moved/renamed.mp4" and clip["missing"] == 0
    assert clip["caption"]["text"] == "A pedestrian crosses in the rain."
    assert db.execute("SELECT COUNT(*) FROM clips").fetchone()[0] == TINY_COUNT + len(BROKEN_FILES)


def test_deleted_file_is_marked_missing_and_comes_back(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    keep = tiny_library.parent / "kept.mp4"
    shutil.move(tiny_library / row["path"], keep)
    assert run(settings, db=db)["missing"] == 1
    assert clips.get(db, row["id"])["missing"] == 1
    assert row["id"] not in [r["id"] for r in clips.page(db).rows]
    shutil.move(keep, tiny_library / row["path"])
    run(settings, db=db)
    assert clips.get(db, row["id"])["missing"] == 0


def test_changed_file_is_probed_again(settings, db, tiny_library):
    run(settings, db=db)
    row = next(db.query("SELECT id, path FROM clips WHERE probe_error IS NULL ORDER BY id LIMIT 1"))
    (tiny_library / row["path"]).write_bytes(b"<html>gone</html>")
    summary = run(settings, db=db)
    assert summary["failed"] == 1
    assert "not a video" in clips.get(db, row["id"])["probe_error"]


def test_hostile_corpus_every_file_recorded_with_its_reason(settings, db, hostile_root):
    root, expected = hostile_root
    summary = run(settings, db=db, timeout=20)
    assert summary["ok"] == 0 and summary["failed"] == len(expected)
    rows = {r["path"]: r["probe_error"] for r in db.query("SELECT path, probe_error FROM clips")}
    for name, keyword in expected.items():
        stored = walk.storable_name(name)[0]
        assert stored in rows, name
        assert keyword in rows[stored].lower(), (name, rows[stored])


def test_a_clip_over_its_deadline_is_recorded_as_timed_out(settings, db, tiny_library):
    summary = run(settings, db=db, timeout=0.001)
    reasons = [r["probe_error"] for r in db.query("SELECT probe_error FROM clips")]
    assert summary["ok"] == 0
    # every good clip overran each of its attempts; a broken file may be refused faster than its deadline
    timed_out = [r for r in reasons if "timed out after 0.001 s, 0.003 s, 0.009 s (3 attempts" in (r or "")]
    assert TINY_COUNT <= len(timed_out) <= TINY_COUNT + len(BROKEN_FILES)
    assert summary["retried"] >= 2 * TINY_COUNT


def test_cli_help_mentions_an_example():
    out = subprocess.run([sys.executable, "-m", "data.ingest", "--help"], capture_output=True, text=True, check=True)
    assert "example" in out.stdout and "--decoder" in out.stdout and "--data-dir" in out.stdout


def test_cli_ingests_and_prints_a_summary(settings, tiny_library):
    env = {**os.environ, "CW_DATA_DIR": str(settings.data_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "data.ingest", str(tiny_library), "--workers", "2", "--decoder", "pyav", "--no-media"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"{TINY_COUNT} ok, {len(BROKEN_FILES)} failed" in out.stderr


def test_hevc_clip_gets_a_browser_playable_preview(settings, db, tmp_path):
    import av

    from data.library import demo

    root = tmp_path / "hevc"
    demo.make_library(root, 2, seed=5, workers=1, broken=False, height=90, min_seconds=1, max_seconds=2, hevc_share=1.0)
    run(settings, root=root)
    rows = list(db.query("SELECT codec, frames, preview FROM clips"))
    assert rows and all(r["codec"] == "hevc" and r["preview"] for r in rows)
    for r in rows:
        with av.open(str(settings.media_dir / r["preview"])) as c:
            v = c.streams.video[0]
            assert v.codec_context.name == "h264" and v.width <= media.PREVIEW_WIDTH
            assert sum(1 for _ in c.demux(v) if _.size) == r["frames"]  # every frame, none dropped


def row(id_: int, path: str, **kw) -> dict:
    base = {"id": id_, "path": path, "sha256": f"h{id_}", "size": 10, "mtime": 1.0, "missing": 0}
    return {**base, "probe_error": None, "sidecar": None, **kw}


def entry(rel: str, size: int = 10, mtime: float = 1.0, **kw) -> Entry:
    return Entry(rel, "/root/" + rel, size, mtime, **kw)


def test_each_file_gets_the_action_its_row_calls_for():
    assert decide(None, entry("new.mp4")) == "probe"
    assert decide(row(1, "a.mp4"), entry("a.mp4")) == "skip"
    assert decide(row(1, "a.mp4"), entry("a.mp4", size=11)) == "probe"  # changed on disk
    assert decide(row(1, "a.mp4", probe_error="probe timed out after 20 s"), entry("a.mp4")) == "probe"
    assert decide(row(1, "a.mp4", probe_error="corrupt: x"), entry("a.mp4")) == "skip"  # not retried
    assert decide(row(1, "a.mp4", missing=1), entry("a.mp4")) == "revive"
    assert decide(row(1, "a.mp4"), entry("a.mp4", sidecar='{"camera": "rear"}')) == "revive"
    assert decide(None, entry("link.mp4", error="broken symlink")) == "refuse"
    same_reason = row(1, "link.mp4", probe_error="broken symlink")
    assert decide(same_reason, entry("link.mp4", error="broken symlink")) == "skip"


def test_the_plan_counts_writes_and_gone_rows_without_touching_anything():
    known = {"a.mp4": row(1, "a.mp4"), "gone.mp4": row(2, "gone.mp4"), "back.mp4": row(3, "back.mp4", missing=1)}
    walk = [entry("a.mp4"), entry("back.mp4"), entry("bad.mp4", error="not a regular file"), entry("new.mp4")]
    p = plan(known, walk)
    assert p.counts == {"ok": 0, "failed": 1, "skipped": 2, "moved": 0}
    assert p.writes == [
        ("revive", {"id": 3, "rel": "back.mp4", "sidecar": None}),
        ("insert", {"rel": "bad.mp4", "size": 10, "mtime": 1.0, "probe_error": "not a regular file"}),
    ]
    assert [e.rel for e in p.probe] == ["new.mp4"]
    assert p.vanished() == [2]


def test_a_probed_file_with_a_vanished_rows_content_is_a_move_and_a_changed_hash_is_flagged():
    known = {"old/name.mp4": row(7, "old/name.mp4", sha256="abc"), "same.mp4": row(8, "same.mp4", sha256="x1")}
    p = plan(known, [entry("new/name.mp4"), entry("same.mp4", size=99), entry("fresh.mp4")])
    action, moved = p.place({"rel": "new/name.mp4", "sha256": "abc", "probe_error": None})
    assert (action, moved["id"]) == ("move", 7)
    assert p.vanished() == []  # the moved row is not marked missing
    action, updated = p.place({"rel": "same.mp4", "sha256": "x2", "probe_error": None})
    assert (action, updated["id"], updated["_old_sha256"]) == ("update", 8, "x1")
    action, inserted = p.place({"rel": "fresh.mp4", "sha256": "f", "probe_error": "corrupt: y"})
    assert action == "insert" and inserted["size"] == 10
    assert p.counts == {"ok": 1, "failed": 1, "skipped": 0, "moved": 1}


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


def _says_corrupt(task, report):  # runs in a pool worker: FFmpeg's answer when its allocation was refused
    vm = next(int(ln.split()[1]) >> 10 for ln in open("/proc/self/status") if ln.startswith("VmSize:"))
    held = bytearray(max(0, task["reach_mib"] - vm) << 20)  # the address space the decoder had reached
    return {"rel": task["rel"], "probe_error": "corrupt: Invalid data found when processing input", "held": len(held)}


def test_a_corrupt_verdict_reached_at_the_cap_is_taken_for_memory_and_one_far_below_it_stays_corrupt():
    """Under a tight cap FFmpeg may answer an allocation it was refused with "Invalid data" (PyAV 18.1.1, a 1080p
    clip under 250 MiB): a sound clip called corrupt, never probed again. A failure after the worker reached
    NEAR_CAP of its cap is recorded as out of memory (the next ingest tries again); one that raised no such peak
    stays corrupt, in the same worker too."""
    cap = 1024
    pool = worker_pool.WorkerPool(1, 60, cap, target=_says_corrupt)  # one worker: the second clip follows the first
    try:
        near, far = list(
            pool.run(iter([{"rel": "near", "reach_mib": int(0.85 * cap)}, {"rel": "far", "reach_mib": 0}]))
        )
    finally:
        pool.close()
    by = {r["rel"]: r for r in (near, far)}
    assert by["near"]["probe_error"].startswith(worker_pool.OUT_OF_MEMORY), by["near"]
    assert "1024 MiB" in by["near"]["probe_error"] and "Invalid data" in by["near"]["probe_error"]
    # the same worker, its peak still the first clip's: a corrupt clip that raised no peak stays corrupt
    assert by["far"]["probe_error"] == "corrupt: Invalid data found when processing input", by["far"]


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
    # too little to decode 1080p: 400 MiB was, until the workers stopped loading pandas (data/sqlite.py); with PyAV
    # 18.1.1 they now decode it in 400 and fail in 350. 250 leaves a margin either way (under ~200 they cannot even
    # load PyAV's libraries, which is still said as out of memory)
    ingest.ingest(settings, db=db, workers=1, decoder="pyav", memory_mib=250)
    error = db.execute("SELECT probe_error FROM clips").fetchone()[0]
    assert error and error.startswith(worker_pool.OUT_OF_MEMORY) and "250 MiB" in error and "corrupt" not in error, (
        error
    )
    summary = ingest.ingest(settings, db=db, workers=1, decoder="pyav")
    assert summary["failed"] == 0 and db.execute("SELECT probe_error FROM clips").fetchone()[0] is None


# tokens that a JSON parser accepts (or nearly) but that a naive store or read-back gets wrong
HOSTILE_SCALARS = [
    "1e400",
    "-1e400",
    "1E+999",
    "2e308",
    "1.7976931348623157e308",
    "1e-400",
    "-0.000e-999",
    "0e-400",
    "5e-324",
    "-0",
    "-0.0",
    "9" * 400,
    "-" + "9" * 4000,
    "9" * 4400,
    "NaN",
    "-Infinity",
    '"\\ud800"',
    '"x\\udfffy"',
    '"\\ud83d\\ude00"',
    '"\\u0000"',
    '"\\uffff"',
    '"ok"',
    "true",
    "null",
]
KEYS = ['"a"', '"\\ud800"', '"\\u0000"', '"camera"', '""']


def _json_text(scalar: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    plain = st.one_of(
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: json.dumps(f)),
        st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)),
    )
    leaf = st.one_of(scalar, plain)
    keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=6).map(json.dumps))
    return st.recursive(
        leaf,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(st.tuples(keys, kids), max_size=4).map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"),
        ),
        max_leaves=12,
    )


def _to_bytes(text: str, garbage: bytes, cut: int | None) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate: bytes that are not UTF-8
    if garbage:
        raw = raw[: len(raw) // 2] + garbage + raw[len(raw) // 2 :]
    return raw[:cut] if cut is not None else raw


JSONISH = st.builds(
    _to_bytes,
    _json_text(st.sampled_from(HOSTILE_SCALARS)),
    st.one_of(st.just(b""), st.binary(max_size=4)),
    st.one_of(st.none(), st.integers(0, 40)),
)


def _ingest_one(db, root, n: int, raw: bytes) -> dict:
    """The walk's reading of one sidecar, written through ingest's own INSERT, read back as the app reads it."""
    (root / f"c{n}.json").write_bytes(raw)
    clip = root / f"c{n}.mp4"
    clip.write_bytes(b"\0")
    side = walk.read_sidecar(str(clip))  # never raises
    entry = Entry(f"c{n}.mp4", str(clip), 1, 0.0, sidecar=side)
    p = ingest.plan({}, [entry])
    ingest._write(db, [p.place({"rel": entry.rel, "sha256": f"{n:064x}", "probe_error": "not a video"})])
    row = next(db.query("SELECT id FROM clips WHERE path = ?", [entry.rel]))
    return clips.get(db, row["id"])["sidecar"]


def _refuse(constant: str):
    raise ValueError(constant)


def _expected(raw: bytes):
    """What the file holds for a strict reader (no NaN or Infinity), or None if it refuses the file."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else {"value": value}


@hsettings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=JSONISH)
def test_any_jsonish_sidecar_is_stored_as_it_reads_back_or_recorded_as_an_error(db, tmp_path, raw):
    n = next(_COUNTER)
    stored = _ingest_one(db, tmp_path, n, raw)
    assert isinstance(stored, dict)
    if "_sidecar_error" in stored and set(stored) == {"_sidecar_error"}:
        assert stored["_sidecar_error"].startswith(f"sidecar c{n}.json ")
        return
    want = _expected(raw)
    assert want is not None, "a sidecar a strict reader refuses was stored as data"
    assert stored == want  # the value read back is the value in the file
    text = json.dumps(stored, ensure_ascii=False, allow_nan=False)  # and it goes out again (export, the page)
    text.encode("utf-8")


_COUNTER = itertools.count()


@pytest.mark.parametrize(
    "raw, why",
    [
        (b'{"speed": 1e400}', "out of range"),
        (b'{"speed": -2e308, "ok": 1}', "out of range"),
        (b'{"tiny": 1e-400}', "out of range"),
        (b'{"note": "\\ud800"}', "not valid Unicode"),
        (b'{"\\udc00": 1}', "not valid Unicode"),
        (b'{"note": "\xff\xfe"}', "not valid JSON"),
    ],
)
def test_each_unstorable_kind_is_a_sidecar_error_naming_why(tmp_path, raw, why):
    (tmp_path / "a.json").write_bytes(raw)
    note = json.loads(walk.read_sidecar(str(tmp_path / "a.mp4")))
    assert why in note["_sidecar_error"]


def test_values_that_can_be_stored_are_kept_exactly(tmp_path):
    big = int("9" * 400)
    (tmp_path / "a.json").write_text(
        json.dumps({"big": big, "neg0": -0.0, "max": 1.7976931348623157e308, "emoji": "😀", "nul": "a\x00b"})
    )
    stored = json.loads(walk.read_sidecar(str(tmp_path / "a.mp4")))
    assert stored == {"big": big, "neg0": -0.0, "max": 1.7976931348623157e308, "emoji": "😀", "nul": "a\x00b"}


def test_an_ingest_with_unstorable_sidecars_finishes_and_ingests_every_clip(settings, capsys):
    root = settings.clip_root
    root.mkdir(parents=True)
    sidecars = {
        "overflow": b'{"speed": 1e400}',
        "surrogate": b'{"note": "\\ud800"}',
        "bytes": b'{"note": "\xed\xa0\x80"}',
        "bigint": b'{"n": ' + b"7" * 1000 + b"}",
        "fine": b'{"camera": "front"}',
    }
    for name, raw in sidecars.items():
        (root / f"{name}.mp4").write_bytes(b"\0" * 16)
        (root / f"{name}.json").write_bytes(raw)
    rc = ingest.main([str(root), "--data-dir", str(settings.data_dir), "--no-media", "--quiet", "--workers", "1"])
    assert rc == 0, capsys.readouterr().err
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    try:
        rows = {r["path"]: json.loads(r["sidecar"]) for r in db.query("SELECT path, sidecar FROM clips")}
    finally:
        db.close()
    assert set(rows) == {f"{n}.mp4" for n in sidecars}
    assert rows["fine.mp4"] == {"camera": "front"}
    assert rows["bigint.mp4"] == {"n": int("7" * 1000)}
    for bad in ("overflow", "surrogate", "bytes"):
        assert set(rows[f"{bad}.mp4"]) == {"_sidecar_error"}, rows[f"{bad}.mp4"]


def test_ingest_refuses_a_system_folder_or_the_database_folder_as_the_root(settings, db):
    for bad in (Path("/"), settings.data_dir):
        with pytest.raises(DataError, match="refused as the clip root"):
            clip_root.record_root(db, bad)
    assert clip_root.recorded_root(db) is None


def test_ingest_makes_an_existing_data_dir_private(settings):
    old = os.umask(0o022)
    try:
        settings.data_dir.mkdir(parents=True)
        os.chmod(settings.data_dir, 0o755)
        (settings.data_dir / "notes.txt").write_text("x")
        os.chmod(settings.data_dir / "notes.txt", 0o644)
        root = settings.clip_root
        write_clip(root / "a.mp4", seconds=0.5)
        r = subprocess.run(
            [sys.executable, "-m", "data.ingest", str(root), "--data-dir", str(settings.data_dir), "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "CW_DATA_DIR": str(settings.data_dir)},
        )
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(settings.data_dir.stat().st_mode) == 0o700  # before: 0755 until the app ran
    assert stat.S_IMODE((settings.data_dir / "notes.txt").stat().st_mode) == 0o600
    assert any(settings.media_dir.rglob("*.jpg"))  # the thumbnails are there, under the private folder
