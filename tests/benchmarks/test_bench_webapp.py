"""benchmarks/bench_webapp.py on the library of bench_browse.build, whose captioned clips name a current caption
version that the build never writes: the benchmark writes it for the clips it saves on, so a save derives from it
(the whole run: `python benchmarks/bench_webapp.py --db /tmp/w.db --clips 3000 --repeat 2 --seconds 3`)."""

from __future__ import annotations

from benchmarks import bench_webapp
from data import captions, examples
from data.db import connect


def test_a_save_on_a_built_clip_derives_from_the_version_the_clip_names(tmp_path):
    db_path = tmp_path / "w.db"
    bench_webapp.build(db_path, 200)
    db = connect(db_path)
    try:
        pool = list(range(1, 51))
        named = dict(db.execute("SELECT id, current_caption_id FROM clips WHERE id <= 50 AND current_caption_id"))
        assert named and not db.execute("SELECT COUNT(*) FROM captions").fetchone()[0]  # what the build leaves
        assert bench_webapp.current_versions(db, pool) == len(named)
        assert bench_webapp.current_versions(db, pool) == 0  # written once
        clip_id, current = next(iter(named.items()))
        version = captions.get(db, current)
        assert (version["clip_id"], version["source"], version["origin_id"]) == (clip_id, "model", current)
        saved = captions.save_human(
            db, clip_id, text="an edit", labels=examples.HAZARD_LABELS, author="ann", base_caption_id=current
        )
        assert (saved["derived_from_id"], saved["origin_id"]) == (current, current)
    finally:
        db.close()
