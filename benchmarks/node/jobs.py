"""The database side of the scaling and kill stages: a data dir with clips ingested, caption jobs run
through our runner (serving.runner.run_job), and what a job left behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from benchmarks.node.clips import fresh_clips, ingest
from benchmarks.node.context import Ctx, say


def prepare_db(ctx: Ctx, name: str, clips: int, *, media: bool = True) -> tuple[object, Path]:
    """A data dir with `clips` cached clips linked in and ingested (`media=False`: probed only, no thumbnails or
    filmstrips, seconds instead of a minute); returns (settings, data_dir). The data dir is emptied first: call it
    before anything of this stage (the MPS daemon's pipes, a replica) lives in it."""
    data_dir = ctx.work / name
    clip_root = data_dir / "clips"
    fresh_clips(ctx, data_dir, "clips", clips)
    t = time.time()
    ingest(ctx, data_dir, clip_root, ctx.logs / f"{name}-ingest.log", media=media)
    say(f"{name}: {clips} clips ingested in {time.time() - t:.1f} s")
    return ctx.settings(data_dir, clip_root), data_dir


def good_clip_ids(settings) -> list[int]:
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    try:
        return [r["id"] for r in db.query("SELECT id FROM clips WHERE probe_error IS NULL ORDER BY id")]
    finally:
        db.close()


# Random weights fill the caption to its bound: the shipped prompt's 1,500 characters are ~700 tokens, past the
# --max-tokens every stage sends (the answer is cut, its JSON unreadable, and the clip fails: 0 of 80 done on the
# H200 on 2026-12-02). 600 characters come to ~280 completion tokens, as in the GPU test (CW_GPU_CAPTION_CHARS=600),
# 1.5-3x what a real model writes (100-200).
CAPTION_CHARS = 600


def bounded_prompt(db, chars: int = CAPTION_CHARS) -> dict:
    """The latest prompt version, or a new version of it whose caption is at most `chars` characters."""
    import json

    from data import prompts

    base = prompts.latest(db)
    caption = base["schema"]["properties"]["caption"]
    if caption.get("maxLength", chars + 1) <= chars:
        return base
    schema = json.loads(json.dumps(base["schema"]))
    schema["properties"]["caption"]["maxLength"] = chars
    prompts.create_version(
        db,
        name=base["name"],
        system=base["system"],
        user=base["user"],
        schema=schema,
        description=f"{base['description']}; caption at most {chars} characters (node_run: random weights)",
    )
    return prompts.latest(db)


def new_job(settings, name: str, clip_ids: list[int], **params) -> int:
    """A caption job over `clip_ids` with the settings' frames, max tokens and temperature, and `params` over
    them (the workload sweep's frames and pixels per point), with the prompt's caption bounded (`bounded_prompt`)."""
    from data import db as dbmod, jobs
    from data.job_params import JobParams
    from data.jobs.selection import Selection

    db = dbmod.connect(settings.db)
    try:
        prompt = bounded_prompt(db)
        return jobs.create(
            db,
            name=name,
            created_by="node_run",
            selection=Selection.of_clips(clip_ids),
            prompt_id=prompt["id"],
            params=JobParams(
                **{
                    "frames": settings.frames,
                    "max_tokens": settings.max_tokens,
                    "temperature": settings.temperature,
                    **params,
                }
            ),
        )
    finally:
        db.close()


class PastDeadline(RuntimeError):
    """A job stopped at its deadline before it was done (a replica that died mid-job leaves the runner waiting for
    the fleet to come back, as it should in production; a benchmark must go on)."""


def caption_job(
    settings, job_id: int, urls: list[str], replicas: int, *, deadline: float | None = None
) -> tuple[dict, float]:
    """Run job `job_id` to its end through our runner (serving.runner.run_job); (final progress, seconds).
    `deadline` (time.time()): the runner is stopped then, and PastDeadline raised if the job was not done."""
    from serving.runner import run_job

    stop = threading.Event()
    timer = threading.Timer(max(0.0, deadline - time.time()), stop.set) if deadline else None
    if timer:
        timer.daemon = True
        timer.start()
    t = time.time()
    try:
        prog = run_job(settings, job_id, urls, replicas=replicas, stop_event=stop)
    finally:
        if timer:
            timer.cancel()
    if stop.is_set() and prog.get("state") != "done":
        c = prog.get("counts", {})
        raise PastDeadline(
            f"stopped at the deadline after {time.time() - t:.0f} s with {c.get('done')} of {sum(c.values())} clips "
            "done: see the replica's log"
        )
    return prog, time.time() - t


def job_check(settings, job_id: int) -> dict:
    """What the job left: items per state, clips without a caption, clips with more than one."""
    from data import db as dbmod
    from data.jobs import queries as job_queries

    db = dbmod.connect(settings.db)
    try:
        c = job_queries.counts(db, job_id)
        state = job_queries.get(db, job_id)["state"]
        missing = [
            r["clip_id"]
            for r in db.query(
                "SELECT i.clip_id FROM job_items i JOIN clips k ON k.id = i.clip_id WHERE i.job_id = ? AND "
                "k.probe_error IS NULL AND NOT EXISTS (SELECT 1 FROM captions c WHERE c.job_id = i.job_id AND "
                "c.clip_id = i.clip_id)",
                [job_id],
            )
        ]
        dup = [
            r["clip_id"]
            for r in db.query(
                "SELECT clip_id FROM captions WHERE job_id = ? GROUP BY clip_id HAVING COUNT(*) > 1", [job_id]
            )
        ]
        failed = {
            r["clip_id"]: r["last_error"]
            for r in db.query(
                "SELECT clip_id, last_error FROM job_items WHERE job_id = ? AND state = 'failed'", [job_id]
            )
        }
        attempts = db.execute("SELECT COALESCE(SUM(attempts), 0) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[
            0
        ]
        job = job_queries.get(db, job_id)
        last = db.execute("SELECT MAX(finished_at) FROM job_items WHERE job_id = ?", [job_id]).fetchone()[0]
        span = (last - job["started_at"]) if last and job.get("started_at") else None
        replicas = {
            r["replica"]: r["n"]
            for r in db.query("SELECT replica, COUNT(*) AS n FROM captions WHERE job_id = ? GROUP BY replica", [job_id])
        }
    finally:
        db.close()
    return {
        "state": state,
        "counts": c,
        "missing": len(missing),
        "missing_ids": missing[:20],
        "duplicated": len(dup),
        "duplicated_ids": dup[:20],
        "failed": len(failed),
        "failed_errors": dict(list(failed.items())[:10]),
        "attempts": attempts,
        "captions_by_replica": replicas,
        "span_s": round(span, 3) if span else None,
    }


def none_done(check: dict, clips: int) -> str | None:
    """Why a measured job is no measurement: not one of its `clips` captioned (a replica that was not ours
    answered, or every request failed). None when at least one was."""
    if check["counts"].get("done"):
        return None
    first = next(iter(check["failed_errors"].values()), None)
    return f"0 of {clips} clips done ({check['failed']} failed{f'; the first: {first[:300]}' if first else ''})"


def job_work(settings, job_id: int) -> list[dict]:
    """Per captioned clip: tokens, frames, pixel budget, size, when written (data.jobs.queries.work_per_clip)."""
    from data import db as dbmod
    from data.jobs import queries as job_queries

    db = dbmod.connect(settings.db)
    try:
        return job_queries.work_per_clip(db, job_id)
    finally:
        db.close()


STEADY_WAVES = 4  # a job is long enough for a steady rate when it holds this many in-flight windows


def steady_rate(work: list[dict], in_flight: int) -> float | None:
    """Clips/s while the runner held `in_flight` requests (all replicas) in flight, by Little's law: `in_flight`
    over the mean latency of the requests sent after the first window and before the last (the GPU test's
    'steady'). Not a count of results over a span of time: results come back in waves, not evenly. On one H200
    with dummy weights (every caption as long as its bound) the 48 requests of a window finished within 0.3 s
    of each other, one wave every ~12.6 s (GPU run of 2026-12-02): a rule by share of results (the middle 80 %,
    used until then) read 3.57 and 4.23 clips/s for the same recipe, by where its ends fell within a wave, and
    any span that cuts a wave is off by up to a window. Only for a job of at least STEADY_WAVES x `in_flight`
    clips whose results all carry their latency; else None, and the whole job's rate is the figure."""
    if len(work) < max(20, STEADY_WAVES * in_flight) or any(w.get("latency_s") is None for w in work):
        return None
    sent = sorted(work, key=lambda w: w["created_at"] - w["latency_s"])
    mid = sent[in_flight : len(sent) - in_flight]
    mean = sum(w["latency_s"] for w in mid) / len(mid)
    return round(in_flight / mean, 3) if mean > 0 else None


def result_times(work: list[dict]) -> list[float]:
    """Each result's arrival, seconds after the job's first, in order (kept in reports so that a steady rate
    can be recomputed under another rule)."""
    ends = sorted(w["created_at"] for w in work)
    return [round(e - ends[0], 3) for e in ends]


def result_latencies(work: list[dict]) -> list[float | None]:
    """Each result's request latency (seconds; None where not recorded), in the order of result_times."""
    return [
        None if w["latency_s"] is None else round(w["latency_s"], 3)
        for w in sorted(work, key=lambda w: w["created_at"])
    ]


def in_flight(settings, replicas: int) -> int:
    """The requests our runner keeps in flight against `replicas` replicas."""
    return settings.per_replica_inflight * max(1, replicas)


def metric_sums(urls: list[str], names: tuple[str, ...]) -> tuple[dict[str, float], int]:
    """The samples named `names` in the replicas' /metrics, each summed over the replicas (and over its labels),
    and how many replicas answered; a replica that does not answer or is not vLLM adds nothing."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    sums = dict.fromkeys(names, 0.0)
    answered = 0
    for url in urls:
        try:
            text = httpx.get(url.rstrip("/") + "/metrics", timeout=5, trust_env=False).text
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name in sums:
                        sums[sample.name] += sample.value
        except (httpx.HTTPError, ValueError):
            continue
        answered += 1
    return sums, answered


def cached_prompt_tokens(urls: list[str]) -> tuple[float, float]:
    """(prompt tokens served from vLLM's prefix cache, prompt tokens) so far, summed over the replicas' /metrics
    (0, 0 for a replica that does not say, as the simulated fleet)."""
    sums, _ = metric_sums(urls, ("vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_total"))
    return sums["vllm:prompt_tokens_cached_total"], sums["vllm:prompt_tokens_total"]


class EngineTimeline:
    """The engines' own view while a job runs: every `period` seconds, the requests running and waiting in the
    replicas' engines and the tokens generated so far (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
    `vllm:generation_tokens_total`, summed over the replicas). Beside the runner's requests in flight it says
    where they are: not in an engine yet (in the API servers: fetching, decoding, preparing frames), waiting in
    one, or running; and whether the engine's batch comes in waves. On a freshly launched replica the GPU test's
    first window of 2026-12-04 came back ~27 s after it was sent, all within 0.43 s: this says where it waited.
    A sample where no replica answered is left out."""

    NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total")

    def __init__(self, urls: list[str], period: float = 1.0):
        self.urls, self.period = list(urls), period
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> "EngineTimeline":
        self._t0 = time.time()
        if self.urls:
            self._thread = threading.Thread(target=self._watch, name="engine-timeline", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            sums, answered = metric_sums(self.urls, self.NAMES)
            if answered:
                self.samples.append(
                    {
                        "t": round(t - self._t0, 2),
                        "running": int(sums["vllm:num_requests_running"]),
                        "waiting": int(sums["vllm:num_requests_waiting"]),
                        "generated": int(sums["vllm:generation_tokens_total"]),
                    }
                )
            self._stop.wait(max(0.0, self.period - (time.time() - t)))

    def summary(self) -> dict:
        """When the engines first ran a request (seconds after the job started), the most running and waiting at
        once, and the samples taken (the timeline itself: `samples`)."""
        s = self.samples
        first = next((x["t"] for x in s if x["running"] > 0), None)
        return {
            "period_s": self.period,
            "samples": len(s),
            "first_running_s": first,
            "max_running": max((x["running"] for x in s), default=None),
            "max_waiting": max((x["waiting"] for x in s), default=None),
        }


def cache_per_clip(before: tuple[float, float], after: tuple[float, float], done: int) -> float | None:
    """Prompt tokens per clip the prefix cache served between two cached_prompt_tokens readings; None where the
    replicas did not say (no prompt tokens counted: the simulated fleet) or nothing was done."""
    return (after[0] - before[0]) / done if done and after[1] > before[1] else None


def efficiency(
    ctx: Ctx,
    work: list[dict],
    clips_per_s: float | None,
    gpus: int,
    peak: dict | None,
    cached_per_clip: float | None = None,
    precision: str | None = None,
) -> dict:
    """serving.flops.efficiency of a job's captioned clips at `clips_per_s` on `gpus` GPUs (simulated: marked);
    `cached_per_clip`: prompt tokens per clip the prefix cache served, where the stage read them from the replicas
    (cache_per_clip), not counted as computed; `precision`: what the replicas computed in (default: the run's,
    ctx.precision)."""
    from serving import flops

    clips = [
        flops.ClipWork(
            w["prompt_tokens"], w["completion_tokens"], w["frames"], w["height"], w["width"], w["max_pixels"]
        )
        for w in work
        if w["width"] and w["height"]
    ]
    out = flops.efficiency(
        clips_per_s,
        clips,
        precision or ctx.precision,
        measured_peak=peak,
        gpus=gpus,
        cached_prompt_tokens=cached_per_clip,
    )
    if ctx.sim:
        out["simulated"] = "SIMULATED: tokens from the simulator, no GPU: not a GPU figure"
    return out
