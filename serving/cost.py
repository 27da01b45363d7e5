"""What a captioning job will cost: clips/s for a fleet, from recorded GPU measurements or a job's live rate.

    python -m serving.cost --replicas 8 --frames 16 --precision bf16 --clips 100000
    python -m serving.cost --replicas 8 --frames 8 --max-pixels 4718592 --clips 100000
    python -m serving.cost --replicas 8 --gpu H100 --clips 100000

    from serving import cost, cost_records
    ms = cost_records.default_measurements()
    e = cost.estimate(replicas=8, frames=16, precision="bf16", measurements=ms, max_pixels=9_437_184)
    e.clips_per_s, e.seconds_for(100_000), e.gpu_hours(100_000), e.basis, e.note

Pure functions over plain records (serving/cost_records.py reads them), so the job form, the CLI and the docs
can all show the same figure. The records are the work-per-clip table (docs/work-per-clip.json, written by
`benchmarks/node_run.py workload`: one point per frames x pixel budget x precision, clips/s per GPU through our
runner, or "not yet measured") and the JSON lines of recorded runs (docs/gpu-runs/*/ *.jsonl: `bench_fleet.py
sweep`, node_run's scaling) and the GPU tests' reports (docs/gpu-runs/**/report.json, `tests/serving/test_gpu_fleet.py`:
a steady rate through our runner). A record's `frames`, `max_pixels`, `precision`, `backend` and `gpus` say what it
measured; where one lacks them it was taken with the launcher's defaults then (1 GPU, 16 frames, the recipe's
9,437,184 pixels, bf16).

How an estimate is made, best basis first:
1. `live`: the running job's own rate (clips/s over its last minute, `data.jobs.queries.progress`) on `live_replicas`
   replicas with the same settings, scaled per replica. Nothing predicts a fleet better than itself.
2. `measured`: a record of the same frames, pixel budget and precision: the best per-GPU rate (through our runner
   where there is one, else vLLM alone; a steady rate where there is one, since a long job runs at it), times the
   replicas, times the multi-GPU efficiency measured in one run (per-GPU rate at N GPUs / at 1 GPU, the same
   series), else linear, and the note says so. A whole-job rate of a short job (the work-per-clip points of 48
   clips: one in-flight window) reads low: at the recipe's point 2.96 against the 3.70 steady of the GPU test the
   same day, so the note says "a long job runs faster". The steady records are the GPU tests' reports whose rate
   is Little's law over every result's latency (`report.json` with `job.result_latencies_s`, since 2026-12-02).
Only records of the runner's settings the fleet runs count as `measured`: its requests in flight per replica
(PER_REPLICA_INFLIGHT) and its window's fill (WINDOW_FILL_SECONDS), which a record says where it was taken with
others (the GPU test's report, node_run's rows; a record that does not say was taken with the defaults then, 48 and
0). Where none was, the best record taken with other settings is used and the note names them: the job form had
shown 4.06 clips/s per GPU, the GPU test with 96 in flight, to a fleet running the default 48 (3.70-3.80). A GPU
test started with replica flags other than the precision's (`--quantization`) measured another recipe: not a
record.
A point the table records as `failed` (its clips failed on the GPU, e.g. the replicas ran out of GPU memory at 32
frames on 2026-12-03) gets no estimate either, unless a later run got through at it: basis `failed`, and the note
says why, so a lead does not plan a job on a rate the fleet cannot reach.
Otherwise there is no estimate: `clips_per_s` is None and the note names the run that would give one. Nothing is
derived from another point: at the recipe's pixel budget more frames means smaller frames, not more vision tokens
(serving.flops.vision_grid), so no ratio of frames predicts a rate; and FP8 is not derived from bf16.
Nor is one GPU model derived from another: with `gpu` (the fleet's model, as the launcher recorded it from
nvidia-smi, or `--gpu`) only records measured on that model count, and where there is none the answer is no
estimate, saying what was measured on which other model. Without `gpu` (a head, whose replicas run on the nodes;
a fleet not launched from here) every model's records count and the note names the model the figure is from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from data.job_params import RECIPE_MAX_PIXELS
from data.settings import add_arguments, from_args
from serving import gpu_models
from serving.cost_records import (
    DEFAULT_BACKEND,
    DEFAULT_IN_FLIGHT,
    RUNS,
    WORK_TABLE,
    Measurement,
    finite_number,
    load_measurements,
    normalise_precision,
)
from serving.launch.record import fleet_gpus, fleet_precision, load_record

PRECISIONS = ("bf16", "fp8")
# The job parameters (fields of data.job_params.JobParams) an estimate depends on, as `estimate` takes them: the
# Jobs form sends these with its preview and prices the job again when one changes (webapp.jobs.fields).
PRICED_BY = ("frames", "max_pixels")
MAX_REPLICAS = 100_000  # 100 nodes of 8 GPUs is 800: this is a typo guard, not a plan
MAX_FRAMES = 4_096
MAX_PIXELS = 10**12
MAX_CLIPS = 10**12


def _whole(value, what: str, low: int, high: int) -> int:
    """`value` as a whole number in [low, high], or ValueError saying what was wrong (a negative or infinite
    input made a confident wrong answer: "-100 clips: -0.01 h wall")."""
    if not finite_number(value):
        raise ValueError(f"{what} must be a whole number from {low:,} to {high:,}, not {value!r}")
    if value != int(value) or not low <= value <= high:
        raise ValueError(f"{what} must be a whole number from {low:,} to {high:,}, not {value:g}")
    return int(value)


def _rate(value, what: str) -> float | None:
    """A live rate: finite and not negative; 0 (a job with no result yet) is no rate."""
    if not finite_number(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of clips/s, 0 or more, not {value!r}")
    return float(value) or None


@dataclass(frozen=True)
class Estimate:
    clips_per_s: float | None
    replicas: int
    frames: int
    precision: str
    basis: str  # "live" | "measured" | "failed" | "none"
    note: str
    per_replica: float | None = None
    max_pixels: int = RECIPE_MAX_PIXELS
    gpu: str = ""  # the GPU model the rate was measured on ("" where it is the fleet's own live rate or none)

    def seconds_for(self, clips: int) -> float | None:
        """Wall time for `clips` clips at this rate (None without an estimate). ValueError for a count that is
        negative, fractional or not finite."""
        clips = _whole(clips, "clips", 0, MAX_CLIPS)
        return clips / self.clips_per_s if self.clips_per_s else None

    def gpu_hours(self, clips: int) -> float | None:
        """What users pay for: replica (GPU) hours for `clips` clips."""
        s = self.seconds_for(clips)
        return s * self.replicas / 3600 if s is not None else None


def _efficiency(ms: list[Measurement], replicas: int) -> tuple[float, str]:
    """Per-GPU rate at the largest GPU count <= replicas over the 1-GPU rate, both from one run (a series), so
    that a steady rate is never divided by a whole-job one."""
    if replicas <= 1:
        return 1.0, "one GPU"
    best: tuple[int, float, str] | None = None
    for series in {m.series for m in ms if m.series}:
        runs = [m for m in ms if m.series == series]
        one = [m.per_gpu for m in runs if m.gpus == 1]
        multi = [m for m in runs if 1 < m.gpus <= replicas]
        if one and multi:
            n = max(m.gpus for m in multi)
            eff = min(1.0, max(m.per_gpu for m in multi if m.gpus == n) / max(one))
            if best is None or n > best[0]:
                best = (n, eff, series)
    if best is None:
        return 1.0, "linear in replicas (no multi-GPU measurement)"
    n, eff, series = best
    return eff, f"x{eff:.2f} per-GPU efficiency measured at {n} GPUs ({series.rsplit('#', 1)[-1]})"


def estimate(
    replicas: int,
    frames: int,
    precision: str = "bf16",
    measurements: Iterable[Measurement] = (),
    *,
    max_pixels: int = RECIPE_MAX_PIXELS,
    live_rate: float | None = None,
    live_replicas: int | None = None,
    backend: str = DEFAULT_BACKEND,
    in_flight: int = DEFAULT_IN_FLIGHT,
    window_fill_s: float = 0.0,
    gpu: str | None = None,
) -> Estimate:
    """Clips/s of `replicas` replicas (one per GPU) at `frames` frames, `max_pixels` pixels per clip and
    `precision`, with our runner keeping `in_flight` requests per replica and filling an idle replica's window
    over `window_fill_s` (the fleet's PER_REPLICA_INFLIGHT and WINDOW_FILL_SECONDS; see the module doc).
    `gpu`: the replicas' GPU model (nvidia-smi's name, or the start of it: "H100"); only records measured on it
    count (None: any model, and the note names it).
    ValueError, saying which, for an input out of range: replicas, frames, max_pixels and in_flight at least 1,
    the fill and a live rate finite and not negative (0: none yet), a live rate given with its replicas; nothing
    negative, NaN or infinite reaches an answer."""
    replicas = _whole(replicas, "replicas", 1, MAX_REPLICAS)
    in_flight = _whole(in_flight, "in_flight", 1, MAX_REPLICAS)
    if not finite_number(window_fill_s) or window_fill_s < 0:
        raise ValueError(f"window_fill_s must be a finite number of seconds, 0 or more, not {window_fill_s!r}")
    fleet_settings = (in_flight, float(window_fill_s))
    frames = _whole(frames, "frames", 1, MAX_FRAMES)
    max_pixels = _whole(max_pixels, "max_pixels", 1, MAX_PIXELS)
    if live_rate is not None:
        live_rate = _rate(live_rate, "the live rate")
        if live_rate is not None and live_replicas is None:
            raise ValueError("a live rate needs the replicas it was measured on (live_replicas)")
    if live_replicas is not None:
        live_replicas = _whole(live_replicas, "live replicas", 1, MAX_REPLICAS)
    precision = normalise_precision(precision)
    point = f"{frames} frames, {max_pixels:,} pixels, {precision}"
    if live_rate is not None and live_replicas:
        per = live_rate / live_replicas
        return Estimate(
            per * replicas,
            replicas,
            frames,
            precision,
            "live",
            f"the running job's rate, {live_rate:.2f} clips/s on {live_replicas} replica(s), per replica",
            per,
            max_pixels,
        )
    ms = [m for m in measurements if m.precision == precision and m.backend == backend]
    others: list[Measurement] = []
    if gpu is not None:
        gpu = gpu_models.clean_name(gpu)
        if not gpu:
            raise ValueError("gpu must name a GPU model (e.g. 'NVIDIA H100 80GB HBM3', or H100), not an empty name")
        others = [m for m in ms if not gpu_models.matches(gpu, m.gpu)]
        ms = [m for m in ms if gpu_models.matches(gpu, m.gpu)]
        point += f" on {gpu}"
    failures = [m for m in ms if m.failed and m.frames == frames and m.max_pixels == max_pixels]
    ms = [m for m in ms if not m.failed]
    exact = [m for m in ms if m.frames == frames and m.max_pixels == max_pixels]
    latest = max(failures, key=lambda m: m.date, default=None)
    if latest and all(m.date <= latest.date for m in exact):  # no run since has got through at this point
        return Estimate(
            None,
            replicas,
            frames,
            precision,
            "failed",
            f"it failed on the GPU at {point} ({latest.date or 'undated'}): {latest.failed}",
            None,
            max_pixels,
        )
    best = _best(exact, fleet_settings)
    if best is None:
        return Estimate(
            None,
            replicas,
            frames,
            precision,
            "none",
            f"not yet measured at {point}{_elsewhere(others, frames, max_pixels, fleet_settings)}: "
            "`benchmarks/gpu_session.sh node workload` measures the frames x pixels points on a GPU (docs/GPU.md), "
            "or start the job and use its live rate",
            None,
            max_pixels,
        )
    eff, how = _efficiency(ms, replicas)
    per = best.per_gpu * eff
    other = ""  # said right after the rate it qualifies: the job form shortens a long note at its end
    if best.runner_settings() != fleet_settings:
        other = (
            f"; taken with {_runner_words(*best.runner_settings())}, this fleet runs {_runner_words(*fleet_settings)}:"
            " its rate may differ"
        )
    on = f" on {best.gpu or 'an unrecorded GPU'}"
    return Estimate(
        per * replicas,
        replicas,
        frames,
        precision,
        "measured",
        f"{best.per_gpu:.2f} clips/s per GPU measured{on} ({best.config or 'run'}, {best.date}"
        f"{': a long job runs faster' if best.short_job else ''}){other}; {how}",
        per,
        max_pixels,
        best.gpu,
    )


def _best(exact: list[Measurement], fleet_settings: tuple[int, float]) -> Measurement | None:
    """The record a point is priced from: of those taken with the fleet's runner settings where there are any,
    through our runner where there are any, steady where there are any, the best per-GPU rate at 1 GPU (of
    equal ones the latest), else at any GPU count."""
    if any(m.runner_settings() == fleet_settings for m in exact):  # taken as this fleet runs: only those
        exact = [m for m in exact if m.runner_settings() == fleet_settings]
    if any(m.via == "runner" for m in exact):  # what a job sees beats vLLM alone on another workload
        exact = [m for m in exact if m.via == "runner"]
    if any(m.steady for m in exact):  # a long job runs at its steady rate, not at a short job's whole one
        exact = [m for m in exact if m.steady]
    if not exact:
        return None

    def rank(m: Measurement) -> tuple:
        return m.per_gpu, m.date

    return max((m for m in exact if m.gpus == 1), key=rank, default=None) or max(exact, key=rank)


def _elsewhere(others: list[Measurement], frames: int, max_pixels: int, fleet_settings: tuple[int, float]) -> str:
    """What was measured at this point on other GPU models (the figure each would be priced from): said, never
    priced as this one."""
    there = [m for m in others if not m.failed and m.frames == frames and m.max_pixels == max_pixels]
    by_model: dict[str, float] = {}
    for name in {m.gpu for m in there}:
        best = _best([m for m in there if m.gpu == name], fleet_settings)
        if best:
            by_model[name or "an unrecorded GPU"] = best.per_gpu
    if not by_model:
        return ""
    said = ", ".join(f"{rate:.2f} clips/s per GPU on {name}" for name, rate in sorted(by_model.items()))
    return f" (measured on other GPUs only: {said}; another GPU's rate is not this one's)"


def estimate_fleet(models: list[str], frames: int, precision: str = "bf16", measurements=(), **kw) -> Estimate:
    """`estimate` for a fleet whose replicas run on the GPU models `models` (one name per replica, the launcher's
    record): each model's replicas priced from that model's records, the rates added. No estimate where one of
    the models has none (the note says which)."""
    ms = list(measurements)
    counts: dict[str, int] = {}
    for m in models:
        counts[m] = counts.get(m, 0) + 1
    parts = [estimate(n, frames, precision, ms, gpu=model, **kw) for model, n in counts.items()]
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    missing = [p for p in parts if p.clips_per_s is None]
    if missing:
        return replace(missing[0], replicas=len(models))
    rate = sum(p.clips_per_s or 0.0 for p in parts)
    notes = "; ".join(f"{p.replicas} x {p.gpu}: {p.note}" for p in parts)
    return Estimate(
        rate,
        len(models),
        first.frames,
        first.precision,
        "measured",
        notes,
        rate / len(models),
        first.max_pixels,
        "mixed",
    )


def _runner_words(in_flight: int, fill: float) -> str:
    return f"{in_flight} in flight per replica " + (f"filled over {fill:g} s" if fill else "sent at once")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m serving.cost",
        description="Clips/s, wall time and GPU-hours for a fleet, from recorded GPU runs.",
        epilog="example: python -m serving.cost --replicas 8 --frames 8 --max-pixels 4718592 --clips 100000",
    )
    p.add_argument("--replicas", type=int, required=True, help="replicas (one per GPU), at least 1")
    p.add_argument("--frames", type=int, default=16, help="frames per clip (default 16)")
    p.add_argument(
        "--max-pixels",
        type=int,
        default=RECIPE_MAX_PIXELS,
        help=f"pixel budget of a clip's frames together (default {RECIPE_MAX_PIXELS:,}, the recipe's)",
    )
    p.add_argument(
        "--precision",
        default=None,
        help="bf16 or fp8 (default: what the fleet launched from --data-dir computes in, else bf16)",
    )
    p.add_argument(
        "--gpu",
        default=None,
        metavar="MODEL",
        help="the GPU model to price, as nvidia-smi names it or its start (e.g. H100, 'NVIDIA H200'); only points "
        "measured on it count (default: the models of the fleet launched from --data-dir, else any model, named "
        "in the answer)",
    )
    p.add_argument("--clips", type=int, default=0, help="clips in the job, for wall time and GPU-hours")
    p.add_argument("--table", default=str(WORK_TABLE), help="the work-per-clip table (default docs/work-per-clip.json)")
    p.add_argument("--runs", default=str(RUNS), help="folder or .jsonl of recorded runs (default docs/gpu-runs)")
    p.add_argument("--live-rate", type=float, default=None, help="a running job's clips/s, to scale instead")
    p.add_argument("--live-replicas", type=int, default=None, help="replicas that live rate was measured on")
    # the fleet's runner, as it runs, and the data dir whose launcher record names its GPUs and precision
    add_arguments(p, ("data_dir", "per_replica_inflight", "window_fill_seconds"))
    a = p.parse_args(argv)
    settings = from_args(a)
    rec = load_record(settings) or {}
    recorded = fleet_gpus(settings, [rec.get("router_url") or ""], rec) if rec.get("router_url") else None
    precision = a.precision or fleet_precision(settings, [rec.get("router_url") or ""], rec) or "bf16"
    try:
        _whole(a.clips, "--clips", 0, MAX_CLIPS)
        kw = dict(
            max_pixels=a.max_pixels,
            live_rate=a.live_rate,
            live_replicas=a.live_replicas,
            in_flight=settings.per_replica_inflight,
            window_fill_s=settings.window_fill_seconds,
        )
        ms = load_measurements(a.table, a.runs)
        if a.gpu is not None or not recorded:
            e = estimate(a.replicas, a.frames, precision, ms, gpu=a.gpu, **kw)
        else:  # the recorded fleet's models, as many replicas as asked, in the recorded mix's order
            e = estimate_fleet([recorded[i % len(recorded)] for i in range(a.replicas)], a.frames, precision, ms, **kw)
    except ValueError as err:
        names = {
            "live replicas must": "--live-replicas must",
            "replicas must": "--replicas must",
            "frames must": "--frames must",
            "max_pixels must": "--max-pixels must",
            "the live rate": "--live-rate",
            "in_flight must": "--per-replica-inflight must",
            "(live_replicas)": "(--live-replicas)",
            "gpu must": "--gpu must",
        }
        msg = str(err)
        for api, flag in names.items():
            if msg.startswith(api) or api.startswith("("):
                msg = msg.replace(api, flag, 1)
        p.error(msg)
    if e.clips_per_s is None:
        print(f"no estimate: {e.note}")
        return 1
    on = f" of {e.gpu}" if e.gpu and e.gpu != "mixed" else ""
    print(
        f"{e.clips_per_s:.2f} clips/s on {e.replicas} replica(s){on} at {e.frames} frames, {e.max_pixels:,} pixels, "
        f"{e.precision} ({e.basis}: {e.note})"
    )
    if e.basis == "measured" and a.gpu is None and not recorded:
        print(
            f"(a fleet of {e.gpu or 'that GPU'}: no GPU model was given, and no launcher in {settings.data_dir} "
            "recorded one; --gpu MODEL prices another)"
        )
    if a.clips:
        print(f"{a.clips} clips: {e.seconds_for(a.clips) / 3600:.2f} h wall, {e.gpu_hours(a.clips):.1f} GPU-hours")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Estimate", "estimate", "estimate_fleet", "main"]
