"""Issue 31, point 5: a job runs on the fleet it was made for. A job records its fleet (m023, data.jobs.fleet_of);
a runner takes only the jobs of the fleet it sends to, and jobs made before fleets were recorded; a job that no
running runner takes says so on Jobs, with the command that runs it. The processes (a terminal job beside the
supervised runner, and resumes): test_a_terminal_job_runs_on_the_fleet_it_names_and_nowhere_else in
tests/data/test_deployment.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from data import jobs
from data.errors import DataError
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from serving import runner as runmod
from tests.support.runner_fixtures import FakeClient, add_clips, default_prompt
from webapp.jobs import fleet_notice

A = ["http://127.0.0.1:1"]
B = ["http://127.0.0.1:2", "http://127.0.0.1:3"]


def make_job(db, ids, fleet, name="t"):
    return jobs.create(
        db,
        name=name,
        created_by="lead",
        selection=Selection.of_clips(ids),
        prompt_id=default_prompt(db)["id"],
        params=JobParams(),
        fleet=fleet,
    )


def test_two_spellings_of_one_fleet_are_one_fleet():
    one = jobs.fleet_of("http://LOCALHOST:30000/v1/")
    assert one == jobs.fleet_of(["http://127.0.0.1:30000"]) == "http://127.0.0.1:30000"
    assert jobs.fleet_of("127.0.0.1:8001,http://127.0.0.1:8000") == jobs.fleet_of(
        ["http://127.0.0.1:8000", "http://127.0.0.1:8001/"]
    )
    assert jobs.fleet_of("https://router.example") == "https://router.example:443"
    assert jobs.fleet_of([]) is None and jobs.fleet_of(None) is None
    assert jobs.fleet_of("http://127.0.0.1:30000") != jobs.fleet_of("http://127.0.0.1:30001")


def test_a_runner_takes_only_the_jobs_of_its_fleet_and_those_that_name_none(settings, db):
    ids = add_clips(db, 9)
    for_a = make_job(db, ids[:3], jobs.fleet_of(A), "for A")
    for_b = make_job(db, ids[3:6], jobs.fleet_of(B), "for B")
    legacy = make_job(db, ids[6:], None, "made before fleets were recorded")
    assert job_queries.get(db, for_b)["fleet"] == "http://127.0.0.1:2,http://127.0.0.1:3"
    client = FakeClient()
    runner = runmod.Runner(settings, A, client=client, exit_when_idle=True, look=None)
    asyncio.run(runner.run())
    assert runner.info()["sends_to"] == jobs.fleet_of(A)
    assert job_queries.counts(db, for_a)["done"] == 3 and job_queries.counts(db, legacy)["done"] == 3
    assert job_queries.counts(db, for_b) == {"pending": 3, "leased": 0, "done": 0, "failed": 0}  # before: taken
    assert {url for url, _ in client.calls} == set(A)


def test_run_job_refuses_a_job_of_another_fleet(settings, db):
    job = make_job(db, add_clips(db, 2), jobs.fleet_of(B))
    with pytest.raises(DataError, match="made for the fleet http://127.0.0.1:2,http://127.0.0.1:3"):
        runmod.run_job(settings, job, A, client=FakeClient())
    assert runmod.run_job(settings, job, B, client=FakeClient())["counts"]["done"] == 2


def test_a_job_moved_to_another_fleet_says_so_in_the_events(db):
    job = make_job(db, add_clips(db, 1), jobs.fleet_of(B))
    moved = jobs.move_to_fleet(db, job, "http://localhost:1", "cli:lead")
    assert moved["fleet"] == "http://127.0.0.1:1"
    ev = next(db.query("SELECT actor, detail FROM events WHERE action = 'job.fleet' AND job_id = ?", [job]))
    assert ev["actor"] == "cli:lead" and "127.0.0.1:2" in ev["detail"] and "127.0.0.1:1" in ev["detail"]


def _beat(sends_to, jobs_=None):
    report = {"state": "up", "replicas": [], "total": 1, "look": None}
    return {"name": "runner", "age_s": 1.0, "pid": 1, "info": {"fleet": report, "jobs": jobs_, "sends_to": sends_to}}


def test_jobs_says_when_no_running_runner_sends_to_a_jobs_fleet(settings):
    job = {"id": 7, "fleet": jobs.fleet_of(B), "state": "queued"}
    beats = [_beat(jobs.fleet_of(A))]
    notice = fleet_notice.no_runner(beats, job, settings)
    assert "No runner sends to this job's fleet (http://127.0.0.1:2,http://127.0.0.1:3)" in notice, notice
    assert "the runner here sends to http://127.0.0.1:1" in notice
    assert f"python -m serving.caption --data-dir {settings.data_dir} --resume 7 --fleet-urls http" in notice
    assert fleet_notice.report_for(beats, 7, job["fleet"]) is None  # the other fleet's health is not this job's
    assert "No runner sends to this fleet" in fleet_notice.start_warning(beats, time.time(), fleet=job["fleet"])
    # a runner of its fleet (the terminal's, restricted to it), or a job that names none: nothing to say
    assert fleet_notice.no_runner(beats + [_beat(jobs.fleet_of(B), [7])], job, settings) == ""
    assert fleet_notice.no_runner(beats, {**job, "fleet": None}, settings) == ""
    assert fleet_notice.start_warning(beats, time.time(), fleet=jobs.fleet_of(A)) == ""
