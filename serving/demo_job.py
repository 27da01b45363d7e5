"""The first launch's own captioning job, so that the first page a newcomer sees has captions to review.

`./launch.sh` on a machine without a GPU generates a demo library and starts the simulated fleet. Before this
module, the first page said "0 captioned" and nothing said that a job had to be started. Now, on the first launch
of a fresh data dir (launch.sh knows it: the database did not exist before this launch ingested the library), it
runs `python -m serving.demo_job --data-dir D`. That starts one job through data.jobs like any other: created by
"launch", over every clip without a caption whose ingest passed (the Jobs tab's "everything uncaptioned"), with
the newest prompt and the deployment's parameters. It is listed on Jobs, and the runner launch.sh starts captions
it. A second call, or a library that already has a job, makes nothing: a later launch never starts work by
itself. The job records no fleet (`jobs.fleet`): launch.sh starts the fleet after this, on ports it may still
change, and a job without a fleet is one the data dir's runner takes whatever fleet it sends to.

For example:
    python -m serving.demo_job --data-dir var      # prints what it did
"""

from __future__ import annotations

import argparse
import sys

import sqlite_utils

from data import clips, db as dbmod, jobs, prompts
from data.errors import DataError
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.settings import Settings, add_arguments, from_args

NAME = "demo library (first launch)"
CREATED_BY = "launch"


def start(db: sqlite_utils.Database, settings: Settings) -> tuple[int | None, str]:
    """(job id or None, what was done, in words): the first launch's job over every uncaptioned clip whose
    ingest passed, unless the library has a job already or nothing to caption."""
    if db["jobs"].exists() and sum(job_queries.count_jobs(db).values()):
        return None, "the library has jobs already: no demo job started"
    selection = Selection(filter=clips.Filter(has_caption=False), origin="first launch: the demo library")
    n = selection.count(db)
    if not n:
        return None, "no clip to caption: no demo job started"
    prompt = prompts.latest(db)
    job_id = jobs.create(
        db,
        name=NAME,
        created_by=CREATED_BY,
        selection=selection,
        prompt_id=prompt["id"],
        params=JobParams.resolve(settings),
    )
    return job_id, f"started job {job_id} ({NAME!r}): {n} clips to caption, shown on the Jobs tab"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m serving.demo_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p, ("data_dir", "db"))
    settings = from_args(p.parse_args(argv))
    db = dbmod.connect(settings.db)
    try:
        _, said = start(db, settings)
    except DataError as e:
        print(f"demo_job: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()
    print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
