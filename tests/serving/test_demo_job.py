"""The first launch's own captioning job (serving.demo_job, issue 26 item 9): made through data.jobs like any other,
over the clips a job can caption, once. The launched stack shows it on Jobs
(tests/browser/test_browser_launched_review.py); here, what it selects and that a second call or a library with jobs
makes none, and launch.sh's dry run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from data import captions, examples
from data.jobs import queries as job_queries
from serving import demo_job
from tests.support.runner_fixtures import add_clips

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_launch_job_covers_every_clip_a_job_can_caption_and_is_made_once(db, settings):
    ids = add_clips(db, 5, probe_errors={2: "not a video"})
    captions.add_machine(db, ids[4], job_id=None, text="already", labels=examples.LABELS, provenance={"model": "m"})
    job_id, said = demo_job.start(db, settings)
    job = job_queries.get(db, job_id)
    assert job["name"] == demo_job.NAME and job["created_by"] == "launch" and job["state"] == "queued"
    items = [r["clip_id"] for r in db.query("SELECT clip_id FROM job_items WHERE job_id = ? ORDER BY 1", [job_id])]
    assert items == [ids[0], ids[1], ids[3]]  # not the ingest failure, not the captioned clip
    assert f"started job {job_id}" in said and "3 clips" in said and "Jobs tab" in said
    assert demo_job.start(db, settings) == (None, "the library has jobs already: no demo job started")
    assert len(job_queries.list_jobs(db)) == 1


def test_nothing_to_caption_makes_no_job(db, settings):
    add_clips(db, 2, probe_errors={0: "truncated", 1: "truncated"})
    assert demo_job.start(db, settings) == (None, "no clip to caption: no demo job started")
    assert job_queries.list_jobs(db) == []


def test_launch_sh_starts_it_only_on_a_fresh_data_dir_without_a_gpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    env.update(PYTHONPATH=str(ROOT), PYTHON=sys.executable)

    def dry(data_dir: Path, *extra: str) -> str:
        r = subprocess.run(
            [str(ROOT / "launch.sh"), "--dry-run", "--no-install", "--data-dir", str(data_dir), *extra],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return r.stdout

    fresh = dry(tmp_path / "fresh", "--fleet-mode", "sim")
    assert "-m serving.demo_job --data-dir" in fresh
    launched = tmp_path / "launched"
    launched.mkdir()
    (launched / "workbench.db").write_bytes(b"")  # a library a launch made before
    assert "serving.demo_job" not in dry(launched, "--fleet-mode", "sim")
    assert "serving.demo_job" not in dry(tmp_path / "own", "--fleet-mode", "sim", "--clip-root", str(tmp_path))
