"""Stage `threads`: a replica per configuration of its CPU budget (threads per pool 1, 2, 4, the launcher's
budget, pinned, or vLLM's own pools), the same clips through our runner against each, side by side.

A configuration may carry modifiers after `+`: `apiN` starts the replica with N API servers and N renderer
workers (the recipe has 4 of each: where the CPU goes beyond the thread pools), `nocache` with prefix caching off
(the recipe leaves it on: the prompt's text is a prefix every clip shares), `fp8` with the language model's linear
layers quantized to FP8 at load (`--quantization fp8`), `mbtN` with `--max-num-batched-tokens` N x 1024 (the
recipe: 32; a prefill lever), `gpupre` / `cpupre` with Qwen3-VL's video processor on the GPU / the CPU whatever
the FRAME_PREPROCESS setting says (`device: cuda` in the server's `--mm-processor-kwargs`, beside the recipe's size;
the GPU is the recipe's since 2026-12-02: on the CPU the resize and normalisation of every decoded frame were most
of the API servers' CPU, docs/GPU.md; vllm-project/vllm#21995), `shm` with the processed frames handed to the
engine through shared memory (`--mm-tensor-ipc torch_shm`, zero-copy; the recipe serializes them, which copies a
tensor the GPU made back to the CPU first; with frames made on the GPU vLLM 0.25's engine core dies at the first
request, "Only dense CPU tensors can be pinned", docs/gpu-runs/2026-12-02-h200-fifth), `gmuN` with the replica
taking N % of the GPU's memory (N 50-95; `--gpu-memory-utilization`, after the recipe's 0.8, which left the API servers
the room to prepare 32 frames per clip that 0.9 did not, 2026-12-03), `inflN` with our runner keeping N
requests in flight per replica instead of the PER_REPLICA_INFLIGHT setting's (48: with captions of one length, a
window of 48 is prefilled, then decoded, together; a deeper window overlaps the two). `1+api2`, `budget+nocache`,
`budget+fp8`, `budget+mbt64`, `budget+cpupre`, `budget+shm`, `budget+infl96`, `budget+gmu90+infl96`. `kvfp8` keeps
the KV cache in FP8 (`--kv-cache-dtype fp8`: half the bytes each decode step's attention reads). `prof` records a
torch profile of the engine: --profile-after seconds into the job, --profile-iterations engine steps, then the
trace's kernel time by class and by vLLM's scopes (benchmarks/node/kernels.py) goes into the row and
`profile-<config>.json`; the profiler slows the steps it records, so that row's clips/s are not comparable with
the others'. `fillN` has our runner fill each idle replica's window over N seconds (the WINDOW_FILL_SECONDS
setting) instead of sending it at once. `frN` asks for N frames per clip in the measured job (the FRAMES setting:
16), e.g. `2+infl96+fr32`: the in-flight depth at 32 frames. Each row also reports the prompt tokens per clip that
vLLM's prefix cache served (`vllm:prompt_tokens_cached_total` over the job), i.e. the prefill not repeated.

`inflN`, `fillN` and `frN` change only our runner: consecutive configurations that differ only in them share one
replica instead of starting a fresh one each (~140 s on an H200), and before each one after the first its
prefix and encoder caches are emptied (`POST /reset_prefix_cache`, `/reset_encoder_cache`: vLLM's dev routes,
VLLM_SERVER_DEV_MODE=1), so that the same clips are prefilled again as on a fresh replica. The row says which
replica it shared and checks the reset by the prompt tokens the cache served per clip.

For each configuration (`--threads-configs`, in order): the project's replica command (serving.launch.commands, the
launcher's recipe) on every GPU of --gpus with that budget in its environment, a warm-up job (--warmup clips per
replica, the same for every configuration), then one job of --threads-clips clips per replica (the same clips for
every configuration, distinct from the warm-up's; each configuration's replicas start fresh, so nothing is cached
across them), then the replicas stop. Per configuration: clips/s over the whole job and steady (Little's law,
jobs.steady_rate: only for a job of 4 in-flight windows), CPU core-s per clip and cores busy (the whole machine from
psutil, and vLLM's own processes), and the compute efficiency. A configuration that would end past --stage-deadline is
not started (the report says which, and a later call with `--threads-configs` of the rest adds them to the same table
while the machine keeps its /tmp).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time

from benchmarks.node import kernels
from benchmarks.node.context import Ctx, say
from benchmarks.node.cpu import CpuMeter, group_cpu_seconds
from benchmarks.node.fleet import Fleet, mps_daemon, router
from benchmarks.node.jobs import (
    EngineTimeline,
    cache_per_clip,
    cached_prompt_tokens,
    caption_job,
    efficiency,
    good_clip_ids,
    in_flight,
    job_check,
    job_work,
    new_job,
    none_done,
    prepare_db,
    result_latencies,
    result_times,
    steady_rate,
)
from data.settings import Settings
from serving.launch import commands as fleet_commands

CONFIG_WORDS = ("budget", "pinned", "unset")
MODIFIERS = (
    "nocache", "fp8", "kvfp8", "apiN", "mbtN", "gpupre", "cpupre", "shm", "inflN", "fillN", "frN", "gmuN", "prof"
)  # fmt: skip
RUNNER_ONLY = ("infl", "fill", "fr")  # modifiers of our runner alone: the replica is the same
CACHE_RESET_SLACK = 1.5  # a shared replica's row whose cache served more than this x its first row's: not reset


def _base(config: str) -> str:
    return config.split("+", 1)[0]


def _modifiers(config: str) -> list[str]:
    return config.split("+")[1:]


def _count(m: str, prefix: str) -> int | None:
    """N of a modifier `<prefix>N` (N > 0), else None."""
    rest = m[len(prefix) :]
    return int(rest) if m.startswith(prefix) and rest.isdigit() and int(rest) > 0 else None


def _modifier_ok(m: str) -> bool:
    return (
        m in ("nocache", "fp8", "kvfp8", "gpupre", "cpupre", "shm", "prof")
        or _count(m, "api") is not None
        or _count(m, "mbt") is not None
        or _count(m, "infl") is not None
        or _count(m, "fill") is not None
        or _count(m, "fr") is not None
        or (_count(m, "gmu") or 0) in range(50, 96)
    )


def replica_flags(config: str) -> tuple[list[str], bool]:
    """(extra replica flags, prefix caching off) of a configuration's modifiers."""
    flags: list[str] = []
    for m in _modifiers(config):
        if _count(m, "api"):
            flags += ["--api-server-count", m[3:], "--renderer-num-workers", m[3:]]
        elif _count(m, "mbt"):  # after the recipe's flags: the last one given is the one vLLM takes
            flags += ["--max-num-batched-tokens", str(_count(m, "mbt") * 1024)]
        elif m == "fp8":
            flags += ["--quantization", "fp8"]
        elif m == "kvfp8":
            flags += ["--kv-cache-dtype", "fp8"]
        elif m in ("gpupre", "cpupre"):  # the whole value replaces the recipe's: its size kept, the device named
            device = "gpu" if m == "gpupre" else "cpu"
            kwargs = fleet_commands.processor_kwargs(Settings.load(environ={}).replace(frame_preprocess=device))
            flags += ["--mm-processor-kwargs", json.dumps(kwargs, separators=(",", ":"))]
        elif m == "shm":
            flags += ["--mm-tensor-ipc", "torch_shm"]
        elif _count(m, "gmu"):  # after the recipe's: the last one given is the one vLLM takes
            flags += ["--gpu-memory-utilization", f"{_count(m, 'gmu') / 100:g}"]
    return flags, "nocache" in _modifiers(config)


def runner_settings(config: str, settings):
    """The runner's settings under a configuration: `inflN` sets the requests it keeps in flight per replica,
    `fillN` the seconds over which it fills an idle replica's window."""
    for m in _modifiers(config):
        if _count(m, "infl"):
            settings = settings.replace(per_replica_inflight=_count(m, "infl"))
        elif _count(m, "fill"):
            settings = settings.replace(window_fill_seconds=float(_count(m, "fill")))
    return settings


def job_frames(config: str, settings) -> int:
    """The frames per clip a configuration's measured job asks for: `frN`, else the FRAMES setting (the replica's
    own decoder bounds them per request, so the replica is shared)."""
    for m in _modifiers(config):
        if _count(m, "fr"):
            return _count(m, "fr")
    return settings.frames


def replica_key(config: str) -> tuple:
    """What the replicas of a configuration are: its base and its modifiers other than the runner's own."""
    return (_base(config), tuple(m for m in _modifiers(config) if not any(_count(m, p) for p in RUNNER_ONLY)))


def precision(config: str, ctx: Ctx) -> str:
    """The precision a configuration's replicas compute in: `fp8` quantizes the linear layers at load."""
    return "fp8" if "fp8" in _modifiers(config) else ctx.precision


def parse_configs(text: str) -> list[str]:
    """'1,2,4,budget,1+api2' -> ['1', '2', '4', 'budget', '1+api2']; each a whole number of threads or one of
    CONFIG_WORDS, then optional `+` modifiers (MODIFIERS)."""
    out = [c.strip() for c in text.split(",") if c.strip()]
    bad = [
        c
        for c in out
        if not (_base(c).isdigit() and int(_base(c)) > 0)
        and _base(c) not in CONFIG_WORDS
        or not all(_modifier_ok(m) for m in _modifiers(c))
    ]
    if bad or not out:
        raise SystemExit(
            f"node_run: --threads-configs takes threads per pool (1, 2, 4, ...) or {', '.join(CONFIG_WORDS)}, "
            f"each optionally followed by +{' +'.join(MODIFIERS)} (gmuN: N 50-95); "
            f"not {', '.join(bad) or repr(text)}"
        )
    return out


def budgets(config: str, settings, replicas: int) -> list:
    """Each replica's budget under `config` (None: no thread variables at all, vLLM's own pools)."""
    config = _base(config)
    if config == "unset":
        return [None] * replicas
    if config == "budget":
        return fleet_commands.replica_budgets(settings.replace(replica_threads=0, pin_replicas="off"), replicas)
    if config == "pinned":
        return fleet_commands.replica_budgets(settings.replace(replica_threads=0, pin_replicas="on"), replicas)
    return fleet_commands.replica_budgets(settings.replace(replica_threads=config, pin_replicas="off"), replicas)


def describe(config: str, settings, replicas: int) -> str:
    b = budgets(config, settings, replicas)[0]
    text = b.describe() if b else "no thread variables (vLLM sizes its own pools: one thread per core it sees)"
    mods = _modifiers(config)
    for m in mods:
        if _count(m, "api"):
            text += f"; {_count(m, 'api')} API servers and renderer workers (the recipe: 4)"
        elif _count(m, "mbt"):
            text += f"; --max-num-batched-tokens {_count(m, 'mbt') * 1024} (the recipe: 32768)"
        elif _count(m, "gmu"):
            text += f"; {_count(m, 'gmu')} % of the GPU's memory for the engine (the recipe: 80 %)"
        elif _count(m, "infl"):
            text += (
                f"; {_count(m, 'infl')} requests in flight per replica (the setting: {settings.per_replica_inflight})"
            )
        elif _count(m, "fill"):
            text += (
                f"; the window filled over {_count(m, 'fill')} s after idle (the setting: "
                f"{settings.window_fill_seconds:g})"
            )
        elif _count(m, "fr"):
            text += f"; {_count(m, 'fr')} frames per clip (the setting: {settings.frames})"
    if "nocache" in mods:
        text += "; prefix caching off"
    if "gpupre" in mods:
        text += "; the video processor on the GPU (mm-processor-kwargs device cuda)"
    if "cpupre" in mods:
        text += "; the video processor on the CPU (mm-processor-kwargs without a device: vLLM's default)"
    if "shm" in mods:
        text += "; frames to the engine through shared memory (--mm-tensor-ipc torch_shm)"
    if "fp8" in mods:
        text += "; FP8 weights (--quantization fp8)"
    if "kvfp8" in mods:
        text += "; FP8 KV cache (--kv-cache-dtype fp8)"
    if "prof" in mods:
        text += "; the engine profiled (torch profiler): clips/s not comparable"
    return text


def stage_threads(ctx: Ctx) -> dict:
    configs = parse_configs(ctx.a.threads_configs)
    slots = ctx.gpus
    n = len(slots)
    per, warm = ctx.a.threads_clips, ctx.a.warmup
    t_stage = time.time()
    deadline = t_stage + ctx.a.stage_deadline if ctx.a.stage_deadline else None
    report: dict = {
        "configs": configs,
        "replicas": n,
        "clips_per_config": per * n,
        "precision": ctx.precision,
        "method": (
            "a fresh replica per GPU per configuration (the launcher's recipe, prefix caching on as in production), "
            f"{warm} warm-up clips per replica, then one job of {per} clips per replica through our runner "
            "(serving.runner.run_job), the same clips for every configuration; CPU from psutil over the job: the "
            "whole machine and vLLM's own process groups"
        ),
    }
    rows: list[dict] = []
    report["rows"] = rows
    peak = ctx.gpu_peak()
    report["peak"] = peak
    earlier = earlier_rows(ctx, "threads")
    # the clips first: preparing empties the stage's data dir, where the MPS pipes are about to live
    settings, _ = prepare_db(ctx, "threads", (warm + per) * n, media=False)
    ids = good_clip_ids(settings)
    if len(ids) < (warm + per) * n:
        raise RuntimeError(f"{len(ids)} good clips, {(warm + per) * n} needed")
    warm_ids, measured = ids[: warm * n], ids[warm * n : (warm + per) * n]
    with mps_daemon(ctx, settings) as mps:
        report["mps"] = mps
        running: Replicas | None = None
        costs = {"startup": 0.0, "job": 0.0}  # the latest replica start and the latest config after it (seconds)
        try:
            for k, config in enumerate(configs):
                if running and running.key != replica_key(config):
                    running.stop()
                    running = None
                cost = costs["job"] + (0.0 if running else costs["startup"])
                if deadline and costs["job"] and time.time() + cost > deadline:
                    rows.append(
                        {"config": config, "skipped": f"would end past --stage-deadline {ctx.a.stage_deadline:g} s"}
                    )
                    say(f"threads: {config} not started: it would end past the stage deadline; run it in another call")
                    continue
                t_cfg, startup = time.time(), None
                try:
                    if running is None:
                        running = Replicas(replica_fleet(ctx, config, settings, slots), replica_key(config), config)
                        startup = costs["startup"] = running.fleet.start()
                    rows.append(_measure(ctx, config, settings, running, startup, warm_ids, measured, peak, deadline))
                except Exception as e:  # record, stop this configuration's replicas, go on
                    rows.append({"config": config, "error": f"{type(e).__name__}: {e}"})
                    say(f"threads: {config} FAILED: {e}")
                    if running:
                        running.stop()
                        running = None
                took = time.time() - t_cfg
                costs["job"] = took - (startup or 0.0)
                say(f"threads: {config} took {took:.0f} s ({k + 1}/{len(configs)})")
        finally:
            if running:
                running.stop()

    _merge(rows, earlier, report)
    report["table"] = table(report)
    (ctx.out / "threads.md").write_text(report["table"] + "\n")
    (ctx.work / "threads-rows.json").write_text(json.dumps(rows, default=str))
    print(report["table"], flush=True)
    report["ok"] = any("clips_per_s" in r for r in rows) and not any("error" in r for r in rows)
    return report


@dataclasses.dataclass
class Replicas:
    """The replicas running now: the configuration that started them, what they are (replica_key), and the prompt
    tokens per clip the prefix cache served in its row (what a later row on them must not exceed by much)."""

    fleet: Fleet
    key: tuple
    started_by: str
    first_cache: float | None = None

    def stop(self) -> None:
        self.fleet.stop()


def replica_fleet(ctx: Ctx, config: str, settings, slots) -> Fleet:
    """The replicas of a configuration (not started): the recipe with its modifiers' flags, vLLM's cache routes
    (a later configuration may share them), and the profiler where it is profiled."""
    flags, nocache = replica_flags(config)
    prof_flags, prof_env, prof_dir = profile_setup(ctx, config)
    if prof_dir is not None:
        shutil.rmtree(prof_dir, ignore_errors=True)
        prof_dir.mkdir(parents=True)
        flags += prof_flags
    return Fleet(
        ctx,
        settings,
        ctx.decoders[0],
        slots,
        f"threads-{config}",
        benchmark=nocache,
        budgets=budgets(config, settings, len(slots)),
        extra=flags,
        env={**DEV_ROUTES, **prof_env},
    )


def _measure(ctx: Ctx, config: str, settings, running: Replicas, startup, warm_ids, measured, peak, deadline) -> dict:
    """One configuration's row on `running`: just started by it (`startup` seconds), or the replicas of the
    configuration before, their caches emptied first; a warm-up job, then the measured job."""
    fleet, n = running.fleet, len(running.fleet.urls())
    rs = runner_settings(config, settings)
    prof_dir = profile_setup(ctx, config)[2]
    profiling = prof_dir is not None
    reset = None if startup is not None else reset_caches(ctx, fleet.urls())
    timer = None
    try:
        with router(ctx, settings, fleet.urls(), f"threads-{config}") as (urls, via):
            if warm_ids:
                caption_job(rs, new_job(settings, f"warm-up threads {config}", warm_ids), urls, n, deadline=deadline)
            job = new_job(settings, f"threads {config}", measured, frames=job_frames(config, settings))
            vllm0 = group_cpu_seconds(c.pgid for c in fleet.children)
            cached0, prompt0 = cached_prompt_tokens(fleet.urls())
            if profiling:
                timer = threading.Timer(ctx.a.profile_after, profile_call, (fleet.urls(), "start_profile"))
                timer.start()
            with CpuMeter() as cpu, EngineTimeline(fleet.urls()) as engine:
                _, wall = caption_job(rs, job, urls, n, deadline=deadline)
            vllm_cpu = group_cpu_seconds(c.pgid for c in fleet.children) - vllm0
            cached1, prompt1 = cached_prompt_tokens(fleet.urls())
        check = job_check(settings, job)
        if why := none_done(check, len(measured)):
            raise RuntimeError(why)
        work = job_work(settings, job)
        done = check["counts"]["done"]
        steady = steady_rate(work, in_flight(rs, n))
        cache = cache_per_clip((cached0, prompt0), (cached1, prompt1), done)
        row = {
            "config": config,
            "cpu_budget": describe(config, settings, n),
            "threads": (budgets(config, settings, n)[0].threads if _base(config) != "unset" else None),
            "in_flight_per_replica": rs.per_replica_inflight,
            "window_fill_s": rs.window_fill_seconds,
            "frames": job_frames(config, settings),
            "clips": len(measured),
            "done": done,
            "failed": check["failed"],
            "seconds": round(wall, 2),
            "clips_per_s": round(done / wall, 3) if wall else None,
            "steady_clips_per_s": steady,
            "result_times_s": result_times(work),
            "result_latencies_s": result_latencies(work),
            "core_s_per_clip": round(cpu.busy / done, 3) if done else None,
            "cores_busy": round(cpu.busy / cpu.wall, 2),
            "vllm_core_s_per_clip": round(vllm_cpu / done, 3) if done else None,
            "vllm_cores_busy": round(vllm_cpu / wall, 2) if wall else None,
            "fleet_startup_s": startup,
            "cached_prompt_tokens_per_clip": round((cached1 - cached0) / done, 1) if done else None,
            "prompt_tokens_per_clip": round((prompt1 - prompt0) / done, 1) if done else None,
            "via": via,
            "efficiency": efficiency(
                ctx, work, steady or (done / wall if wall else None), n, peak, cache, precision(config, ctx)
            ),
            "engine": engine.summary(),  # where the requests were: in the engine, waiting, or not there yet
            "engine_timeline": engine.samples,
        }
        if reset is not None:
            row["replicas_of"] = running.started_by
            row["cache_reset"] = reset
            first = running.first_cache
            if cache is not None and first is not None and cache > CACHE_RESET_SLACK * first + 64:
                row["cache_reset"] += (
                    f"; NOT EMPTIED: the cache served {cache:.0f} prompt tokens per clip against {first:.0f} on "
                    f"the fresh replicas: the clips' video was not prefilled again, the row is not comparable"
                )
        else:
            running.first_cache = cache
        if profiling:
            row["profiled"] = True
            try:  # a profile that cannot be read costs the row its profile, not its figures
                row["profile"] = collect_profile(ctx, config, fleet.urls(), prof_dir)
            except Exception as e:
                row["profile"] = {"error": f"{type(e).__name__}: {e}"}
        say(
            f"threads: {config}: {row['clips_per_s']} clips/s ({steady} steady), {row['core_s_per_clip']} "
            f"core-s/clip, {row['cores_busy']} cores busy (vLLM {row['vllm_core_s_per_clip']} / "
            f"{row['vllm_cores_busy']}), {done}/{len(measured)} done"
            + (f"; replicas of {row['replicas_of']}, {row['cache_reset']}" if reset is not None else "")
        )
        return row
    finally:
        if timer is not None:
            timer.cancel()


DEV_ROUTES = {"VLLM_SERVER_DEV_MODE": "1"}  # vLLM's /reset_prefix_cache and /reset_encoder_cache


def reset_caches(ctx: Ctx, urls: list[str]) -> str:
    """Empty the prefix and encoder caches of running replicas (between two configurations that share them), so
    that the next job's clips are prefilled again; what happened, in words. A replica that refuses is an error:
    the rows after it would not be comparable. The simulated replicas have no such cache."""
    import httpx

    if ctx.sim:
        return "caches not emptied: the simulated replicas keep none"
    for url in urls:
        for route in ("reset_prefix_cache", "reset_encoder_cache"):
            r = httpx.post(url.rstrip("/") + "/" + route, timeout=60, trust_env=False)
            if r.status_code != 200:
                raise RuntimeError(f"{url}/{route}: HTTP {r.status_code} {r.text[:200]}")
    return "prefix and encoder caches emptied before it"


def profile_setup(ctx: Ctx, config: str):
    """(replica flags, replica environment, trace folder) of a `prof` configuration on real replicas, else
    ([], {}, None): the torch profiler on the engine, with vLLM's scopes (forward, sample, ...) in the trace."""
    if "prof" not in _modifiers(config) or ctx.sim:
        return [], {}, None
    folder = ctx.work / f"profile-{config}"
    flags = ["--profiler-config", kernels.profiler_config(folder, ctx.a.profile_iterations)]
    return flags, {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}, folder


def profile_call(urls: list[str], what: str) -> None:
    """POST /start_profile or /stop_profile to each replica (a failure is said, never raised: the job goes on)."""
    import httpx

    for url in urls:
        try:
            r = httpx.post(url.rstrip("/") + "/" + what, timeout=120, trust_env=False)
            say(f"threads: {what} {url}: HTTP {r.status_code}")
        except httpx.HTTPError as e:
            say(f"threads: {what} {url} failed: {type(e).__name__}: {e}")


def collect_profile(ctx: Ctx, config: str, urls: list[str], folder) -> dict:
    """The first replica's engine trace, summed (kernels.summarize), kept beside the report as
    profile-<config>.json with vLLM's own table (profiler_out_0.txt) as profile-<config>.txt; the trace itself is
    left in --work (hundreds of MB)."""
    profile_call(urls, "stop_profile")  # already stopped after --profile-iterations steps: then a no-op
    trace = kernels.wait_for_trace(folder)
    if trace is None:
        return {"error": f"no trace in {folder} within 240 s"}
    t0 = time.time()
    summary = {"trace": str(trace), "trace_bytes": trace.stat().st_size, **kernels.summarize(kernels.read_trace(trace))}
    summary["summarized_in_s"] = round(time.time() - t0, 1)
    (ctx.out / f"profile-{config}.json").write_text(json.dumps(summary, indent=1))
    table = folder / "profiler_out_0.txt"
    if table.exists():
        shutil.copy(table, ctx.out / f"profile-{config}.txt")
    shares = ", ".join(f"{c['name']} {c['share_of_kernel_time']:.0%}" for c in summary.get("by_class", [])[:6])
    say(f"threads: {config} profile: GPU busy {summary.get('gpu_busy_share_of_window')} of the window; {shares}")
    return summary


def earlier_rows(ctx: Ctx, stage: str) -> list[dict]:
    """Rows an earlier call of this stage left in --work (the lent machines keep /tmp while warm, not $OUT)."""
    try:
        return json.loads((ctx.work / f"{stage}-rows.json").read_text())
    except (OSError, ValueError):
        return []


def _merge(rows: list[dict], earlier: list[dict], report: dict) -> None:
    now = {r["config"] for r in rows if "clips_per_s" in r}
    kept = [r for r in earlier if r.get("config") not in now and "clips_per_s" in r]
    if kept:
        rows[:0] = kept
        report["merged_from_earlier_call"] = [r["config"] for r in kept]


def table(report: dict) -> str:
    """The side-by-side table for docs/BENCHMARKS.md."""
    head = (
        "| config | CPU budget | clips/s whole job | clips/s steady | core-s per clip | cores busy | "
        "vLLM core-s per clip | vLLM cores busy | % of peak | prompt tokens per clip (from the prefix cache) | "
        "done / clips |"
    )
    out = [head, "|" + "---|" * 11]
    for r in report["rows"]:
        if "clips_per_s" not in r:
            out.append(f"| {r['config']} | {r.get('error') or r.get('skipped')} | | | | | | | | | |")
            continue
        eff = r.get("efficiency") or {}
        frac = eff.get("fraction_of_peak")
        out.append(
            f"| {r['config']} | {r['cpu_budget']} | {r['clips_per_s']} | {r['steady_clips_per_s']} | "
            f"{r['core_s_per_clip']} | {r['cores_busy']} | {r['vllm_core_s_per_clip']} | {r['vllm_cores_busy']} | "
            f"{'' if frac is None else f'{frac:.0%}'} | {r.get('prompt_tokens_per_clip')} "
            f"({r.get('cached_prompt_tokens_per_clip')}) | {r['done']} / {r['clips']} |"
        )
    if any(r.get("efficiency", {}).get("simulated") for r in report["rows"]):
        out.append("")
        out.append("SIMULATED REHEARSAL: simulated replicas on a CPU machine; not GPU figures.")
    return "\n".join(out)
