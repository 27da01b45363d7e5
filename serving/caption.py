"""Caption a selection of clips from the command line, with a progress bar: the lead's batch tool. It creates
a captioning job over the clips a filter matches and runs it in the foreground (Ctrl-C pauses it; --resume JOB
continues it).

examples:
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --has-caption no
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:8000,http://127.0.0.1:8001 \\
        --status unreviewed --text rain --prompt av-hazard@1 --frames 16 --limit 500
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --has-caption no \
        --frames 8 --max-pixels 4718592     # fewer frames, half the pixels: what it costs, `python -m serving.cost`
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --job 3 --job-state failed
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --resume 12
    python -m serving.caption --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --resume 12 --retry-failed

It writes the same job rows the web app writes and executes them with the runner's own loop
(`serving.runner.run_job`), so a job started here can be watched, paused or resumed from the app, and the
other way round. Ctrl-C pauses the job cleanly (requests in flight are finished and recorded) and prints the
command that resumes it.

The same command works on a head (`./launch.sh --role head`): the library records where the GPU nodes fetch
clips (data.deployment), so this runner sends signed URLs of the head's app like the supervised one, and it sends
the fleet key of the data dir (serving.fleet_key).

A job runs on the fleet it was made for: the job records this command's `--fleet-urls` (without it, what the
launcher of the data dir started, which is where launch.sh's supervised runner sends), and a runner takes only the
jobs of the fleet it sends to. So a job for another fleet is captioned by this command alone, and a job for the
launcher's fleet by this command and the supervised runner together: items are claimed with leases in SQLite, so
each clip is sent by one of them and written once, and this command waits, showing everyone's progress, until the
job is done (Ctrl-C pauses the job for both). `--resume JOB` runs the job on the fleet it was made for; with a
`--fleet-urls` that names another, the job moves there (said here and in the events).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import shlex
import signal
import sys
import threading

from data import db as dbmod, filter_args, job_param_args, jobs, prompts
from data.errors import DataError, NotFound
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library import clip_root
from data.settings import add_arguments, from_args
from serving import fleet_key
from serving.runner import fleet_targets, run_job


def pick_prompt(db, spec: str | None) -> dict:
    """A prompt by id (`7`), by name (newest version: `av-hazard`) or by name and version (`av-hazard@1`)."""
    if not spec:
        return prompts.latest(db)
    if spec.isdigit():
        return prompts.get(db, int(spec))
    if "@" in spec:
        name, version = spec.rsplit("@", 1)
        for p in prompts.list_prompts(db):
            if p["name"] == name and str(p["version"]) == version:
                return p
        raise NotFound(f"no prompt {name!r} version {version}")
    return prompts.latest(db, spec)


def create_job(db, settings, args: argparse.Namespace, fleet: str | None) -> int:
    f = filter_args.from_args(args)
    prompt = pick_prompt(db, args.prompt)
    selection = Selection(filter=f, limit=args.limit, origin="command line")
    params = job_param_args.from_args(args, settings)
    n = sum(1 for _ in selection.clip_ids_in(db))
    name = args.name or f"cli: {prompt['name']} v{prompt['version']} over {n} clips"
    return jobs.create(
        db, name=name, created_by=args.user, selection=selection, prompt_id=prompt["id"], params=params, fleet=fleet
    )


class Bar:
    """tqdm over a job's finished items, with rate, ETA and failures in the postfix."""

    def __init__(self, total: int, initial: int, desc: str, disable: bool):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=initial, desc=desc, unit="clip", dynamic_ncols=True, disable=disable, smoothing=0.1
        )

    def __call__(self, prog: dict) -> None:
        c = prog["counts"]
        finished = c["done"] + c["failed"]
        if finished > self.bar.n:
            self.bar.update(finished - self.bar.n)
        self.bar.set_postfix(failed=c["failed"], inflight=c["leased"], state=prog["state"], refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def build_parser() -> argparse.ArgumentParser:
    # the module docstring is the help: what it does, and the examples (--job 3 --job-state failed: a new job
    # over job 3's failures)
    p = argparse.ArgumentParser(
        prog="python -m serving.caption", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(
        p,
        (
            "data_dir",
            "db",
            "clip_root",
            "fleet_urls",
            "router_port",
            "model",
            "served_model_name",
            "per_replica_inflight",
            "request_timeout",
            "max_attempts",
            "lease_seconds",
            # where the nodes fetch clips: the library's record says it (data.deployment); given, they must agree
            "role",
            "media_url_base",
            "media_url_ttl",
        ),
    )
    sel = p.add_argument_group("which clips")
    filter_args.add_arguments(sel)
    sel.add_argument("--limit", type=int, default=None, help="at most this many clips (in id order)")
    how = p.add_argument_group("how")
    how.add_argument("--prompt", help="prompt name (newest version), name@version, or id (default: av-hazard)")
    # one flag per JobParams field, with the field's help and check (data.job_param_args)
    job_param_args.add_arguments(how)
    how.add_argument("--name", help="job name")
    how.add_argument("--user", default=f"cli:{getpass.getuser()}", help="who the job is created by")
    how.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="replicas behind a single router URL (default: ask the router's /workers)",
    )
    how.add_argument("--resume", type=int, metavar="JOB", help="continue job JOB instead of creating one")
    how.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: send again the failed items a retry can help (not ingest failures, clips the fleet "
        "refused, unusable answers: data.jobs.FINAL_KINDS)",
    )
    how.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def fleet_for_resume(db, settings, job: dict, user: str) -> tuple:
    """(settings, job) to resume `job` with: on the fleet it was made for, unless the command names another
    (`--fleet-urls`), which the job then moves to (data.jobs.move_to_fleet, said here and in the events)."""
    made_for = job.get("fleet")
    if made_for is None:
        return settings, job
    if not settings.fleet_urls:
        return settings.replace(fleet_urls=tuple(made_for.split(","))), job
    named = jobs.fleet_of(fleet_targets(settings))
    if named != made_for:
        job = jobs.move_to_fleet(db, job["id"], named, user)
        print(
            f"job {job['id']} was made for the fleet {made_for}; it runs on {named} from now on (its runners there "
            "take nothing more of it)",
            file=sys.stderr,
        )
    return settings, job


def again(settings, job_id: int, *extra: str) -> str:
    """The command that resumes job `job_id` against the same fleet."""
    fleet = ["--fleet-urls", ",".join(settings.fleet_urls)] if settings.fleet_urls else []
    cmd = ["python", "-m", "serving.caption", "--db", str(settings.db), *fleet, "--resume", str(job_id), *extra]
    return shlex.join(cmd)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = from_args(args)
    # what the runner's loop logs (warnings and worse) is redacted like everything else the fleet says
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    fleet_key.auth(settings).redact.install()
    db = dbmod.connect(settings.db)
    try:
        # the library's clip root and deployment (a head's signed URLs): refused here, with the message, if a flag
        # contradicts them
        settings = clip_root.settings_for(db, settings)
        if args.resume:
            job = job_queries.get(db, args.resume)
            settings, job = fleet_for_resume(db, settings, job, args.user)
            if args.retry_failed:
                r = jobs.retry_failed(db, job["id"], args.user)
                left = ", ".join(f"{n} {why}" for why, n in sorted(r.left.items()))
                print(
                    f"job {job['id']}: {r.requeued} failed item(s) back to pending"
                    + (f"; left failed, a retry cannot help: {left} (see data.jobs.FINAL_KINDS)" if left else ""),
                    file=sys.stderr,
                )
                job = job_queries.get(db, job["id"])
            if job["state"] in ("paused", "cancelled") or (
                job["state"] in job_queries.FINISHED and job_queries.counts(db, job["id"])["pending"]
            ):
                job = jobs.change_state(db, job["id"], "resume", args.user)
            job_id = job["id"]
        else:
            job_id = create_job(db, settings, args, jobs.fleet_of(fleet_targets(settings)))
        job = job_queries.get(db, job_id)
        c = job_queries.counts(db, job_id)
    except DataError as e:
        print(f"caption: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()
    print(
        f"job {job_id} ({job['name']}): {job['total']} clips, {c['done']} done, {c['failed']} failed", file=sys.stderr
    )
    if job["state"] not in job_queries.ACTIVE:
        print(f"job {job_id} is {job['state']}: nothing to run", file=sys.stderr)
        return 0

    stop = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):
        if stop.is_set():  # a second Ctrl-C: give up waiting for requests in flight
            signal.signal(signal.SIGINT, previous)
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)
    bar = Bar(job["total"], c["done"] + c["failed"], f"job {job_id}", args.no_progress)
    try:
        prog = run_job(settings, job_id, progress_cb=bar, stop_event=stop, replicas=args.replicas)
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    if stop.is_set() and prog["state"] in job_queries.ACTIVE:
        db = dbmod.connect(settings.db)
        try:
            prog = jobs.change_state(db, job_id, "pause", args.user)
        finally:
            db.close()
        print(
            f"\npaused job {job_id}; nothing in flight was lost. Resume with:\n  {again(settings, job_id)}",
            file=sys.stderr,
        )
        return 130
    cnt = prog["counts"]
    print(f"job {job_id} {prog['state']}: {cnt['done']} captioned, {cnt['failed']} failed", file=sys.stderr)
    if cnt["failed"]:
        db = dbmod.connect(settings.db)
        try:
            for f in job_queries.failures(db, job_id, limit=5):
                print(f"  failed: {f['path']}: {f['last_error']}", file=sys.stderr)
        finally:
            db.close()
        print(f"  retry them with: {again(settings, job_id, '--retry-failed')}", file=sys.stderr)
    return 0 if prog["state"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
