"""Stage `kill`: a caption job over the whole fleet, one replica SIGKILLed mid-job; nothing lost."""

from __future__ import annotations

import threading
import time

from benchmarks.node.context import Ctx, say
from benchmarks.node.fleet import Fleet, mps_daemon, router
from benchmarks.node.jobs import caption_job, good_clip_ids, job_check, new_job, prepare_db
from serving.fleet.reader import FleetReader


def stage_kill(ctx: Ctx) -> dict:
    clips = min(ctx.a.clips, ctx.a.kill_clips)
    settings, _ = prepare_db(ctx, "kill", clips)
    ids = good_clip_ids(settings)
    victim = min(ctx.a.kill_replica, ctx.size - 1)
    report: dict = {"replicas": ctx.size, "clips": len(ids), "decoder": ctx.decoders[0], "kill_at_share": ctx.a.kill_at}
    with mps_daemon(ctx, settings):
        fleet = Fleet(ctx, settings, ctx.decoders[0], ctx.gpus, "kill", benchmark=False)
        try:
            report["fleet_startup_s"] = fleet.start()
            with router(ctx, settings, fleet.urls(), "kill") as (urls, via):
                report["via"] = via
                job = new_job(settings, "kill a replica mid-job", ids)
                killed: dict = {}
                waited: dict = {}
                done_flag = threading.Event()

                def killer() -> None:
                    from data import db as dbmod
                    from data.jobs import queries as job_queries

                    db = dbmod.connect(settings.db)
                    try:
                        t0 = time.time()
                        while not done_flag.wait(0.1):
                            c = job_queries.counts(db, job)
                            if c["done"] + c["failed"] >= ctx.a.kill_at * len(ids):
                                # kill while the victim has requests in flight (they die with it), or give up
                                # waiting for that after 15 s and kill anyway
                                st = FleetReader(settings).scrape(fleet.children[victim].url, timeout=2.0)
                                if (
                                    st.running + st.waiting == 0
                                    and time.time() - t0 < 15 + waited.setdefault("since", time.time() - t0)
                                    and c["pending"] + c["leased"] > 0
                                ):
                                    continue
                                child = fleet.kill(victim)
                                killed["victim_running"] = st.running
                                killed["victim_waiting"] = st.waiting
                                killed.update(
                                    {
                                        "replica": child.name,
                                        "pgid": child.pgid,
                                        "url": child.url,
                                        "at_s": round(time.time() - t0, 2),
                                        "finished_before": c,
                                        "inflight_at_kill": c["leased"],
                                    }
                                )
                                say(
                                    f"kill: SIGKILL to process group {child.pgid} ({child.name}, {st.running:.0f} "
                                    f"requests running on it) with {c['done']} done, {c['leased']} in flight"
                                )
                                return
                    finally:
                        db.close()

                th = threading.Thread(target=killer, daemon=True)
                th.start()
                prog, wall = caption_job(settings, job, urls, ctx.size)
                done_flag.set()
                th.join(timeout=5)
                check = job_check(settings, job)
            report.update(
                {
                    "killed": killed or None,
                    "seconds": round(wall, 1),
                    "job": check,
                    "victim_alive_after": fleet.children[victim].alive(),
                }
            )
            report["ok"] = (
                bool(killed)
                and check["state"] == "done"
                and check["missing"] == 0
                and check["duplicated"] == 0
                and check["counts"]["pending"] == 0
                and check["counts"]["leased"] == 0
            )
            report["nothing_lost"] = check["missing"] == 0 and check["duplicated"] == 0
            say(
                f"kill: job {check['state']} in {wall:.1f} s; {check['counts']['done']} captioned, "
                f"{check['missing']} missing, {check['duplicated']} duplicated, {check['failed']} failed"
                + ("" if killed else "; the job ended before the kill point (use more --kill-clips)")
            )
        finally:
            fleet.stop()
    return report
