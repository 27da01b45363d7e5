"""What a captioning job will cost: clips/s for a fleet, from recorded GPU measurements or a job's live rate.

    python -m serving.cost --replicas 8 --frames 16 --precision bf16 --clips 100000
    python -m serving.cost --replicas 8 --frames 8 --max-pixels 4718592 --clips 100000

    from serving import cost
    ms = cost.default_measurements()
    e = cost.estimate(replicas=8, frames=16, precision="bf16", measurements=ms, max_pixels=9_437_184)
    e.clips_per_s, e.seconds_for(100_000), e.gpu_hours(100_000), e.basis, e.note

Pure functions over plain records, so the job form, the CLI and the docs can all show the same figure. The
records are the work-per-clip table (docs/work-per-clip.json, written by `benchmarks/node_run.py workload`: one
point per frames x pixel budget x precision, clips/s per GPU through our runner, or "not yet measured") and the
JSON lines of recorded runs (docs/gpu-runs/*/ *.jsonl: `bench_fleet.py sweep`, node_run's scaling) and the GPU
tests' reports (docs/gpu-runs/**/report.json, `tests/test_gpu_fleet.py`: a steady rate through our runner). A record's
`frames`, `max_pixels`, `precision`, `backend` and `gpus` say what it measured; where one lacks them it was taken
with the launcher's defaults then (1 GPU, 16 frames, the recipe's 9,437,184 pixels, bf16).

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
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from data import limits
from data.job_params import RECIPE_MAX_PIXELS
from data.settings import add_arguments, from_args

ROOT = Path(__file__).resolve().parents[1]
WORK_TABLE = ROOT / "docs" / "work-per-clip.json"  # the work-per-clip sweep's points
RUNS = ROOT / "docs" / "gpu-runs"  # recorded GPU runs (.jsonl)
DEFAULT_BACKEND = "pynvvideocodec"  # the production decoder; CPU-decode records describe another fleet
DEFAULT_IN_FLIGHT = 48  # PER_REPLICA_INFLIGHT of every record that does not say (the default since the start)
PRECISIONS = ("bf16", "fp8")
MAX_REPLICAS = 100_000  # 100 nodes of 8 GPUs is 800: this is a typo guard, not a plan
MAX_FRAMES = 4_096
MAX_PIXELS = 10**12
MAX_CLIPS = 10**12


def _whole(value, what: str, low: int, high: int) -> int:
    """`value` as a whole number in [low, high], or ValueError saying what was wrong (a negative or infinite
    input made a confident wrong answer: "-100 clips: -0.01 h wall")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a whole number from {low:,} to {high:,}, not {value!r}")
    if value != int(value) or not low <= value <= high:
        raise ValueError(f"{what} must be a whole number from {low:,} to {high:,}, not {value:g}")
    return int(value)


def _rate(value, what: str) -> float | None:
    """A live rate: finite and not negative; 0 (a job with no result yet) is no rate."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of clips/s, 0 or more, not {value!r}")
    return float(value) or None


@dataclass(frozen=True)
class Measurement:
    clips_per_s: float
    gpus: int = 1
    frames: int = 16
    precision: str = "bf16"
    backend: str = DEFAULT_BACKEND
    config: str = ""
    date: str = ""
    source: str = ""
    via: str = "vllm"  # "runner": measured through our runner and router (what a job sees); "vllm": vLLM alone
    max_pixels: int = RECIPE_MAX_PIXELS
    series: str = ""  # records of one run (node_run's scaling rows): the multi-GPU efficiency pairs them
    failed: str = ""  # a point that failed on the GPU (clips/s 0): why, from the work-per-clip table
    steady: bool = False  # the rate a long job runs at (Little's law over a job of several in-flight windows)
    short_job: bool = False  # the whole rate of a job of one in-flight window: a long job runs faster
    in_flight: int = DEFAULT_IN_FLIGHT  # our runner's requests in flight per replica when it was measured
    window_fill_s: float = 0.0  # and the seconds over which it filled an idle replica's window

    def runner_settings(self) -> tuple[int, float]:
        return self.in_flight, self.window_fill_s

    @property
    def per_gpu(self) -> float:
        return self.clips_per_s / max(1, self.gpus)


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

    def seconds_for(self, clips: int) -> float | None:
        """Wall time for `clips` clips at this rate (None without an estimate). ValueError for a count that is
        negative, fractional or not finite."""
        clips = _whole(clips, "clips", 0, MAX_CLIPS)
        return clips / self.clips_per_s if self.clips_per_s else None

    def gpu_hours(self, clips: int) -> float | None:
        """What users pay for: replica (GPU) hours for `clips` clips."""
        s = self.seconds_for(clips)
        return s * self.replicas / 3600 if s is not None else None


def normalise_precision(value: str | None) -> str:
    v = (value or "bf16").strip().lower().replace("-", "")
    if v in ("bf16", "bfloat16"):
        return "bf16"
    if v.startswith("fp8") or v == "float8":
        return "fp8"
    return v


def from_record(rec: dict, source: str = "") -> Measurement | None:
    """A Measurement from one record (a bench_fleet JSON line, a work-per-clip point), or None for a failed or
    partial run, a simulated one, or a point not yet measured. A work-per-clip point whose status is "failed"
    (its clips failed on the GPU) is a Measurement of 0 clips/s with `failed` saying why."""
    if rec.get("status") == "failed" and not rec.get("simulated"):
        return Measurement(
            clips_per_s=0.0,
            gpus=int(rec.get("gpus") or 1),
            frames=int(rec.get("frames") or 16),
            precision=normalise_precision(rec.get("precision")),
            date=str(rec.get("date") or ""),
            source=source,
            via="runner",
            max_pixels=int(rec.get("max_pixels") or RECIPE_MAX_PIXELS),
            failed=str(rec.get("note") or "its clips failed on the GPU"),
        )
    rate = rec.get("clips_per_s")
    if rec.get("error") or rec.get("simulated") or not isinstance(rate, (int, float)):
        return None  # a failed run, a simulated rehearsal (no GPU figure) or a point not yet measured
    if not math.isfinite(rate) or rate <= 0:
        return None
    return Measurement(
        clips_per_s=float(rate),
        gpus=int(rec.get("gpus") or 1),
        frames=int(rec.get("frames") or 16),
        precision=normalise_precision(rec.get("precision") or rec.get("dtype")),
        backend=str(rec.get("backend") or DEFAULT_BACKEND),
        config=str(rec.get("config") or ""),
        date=str(rec.get("date") or ""),
        source=source,
        via=str(rec.get("via") or "vllm"),
        max_pixels=int(rec.get("max_pixels") or RECIPE_MAX_PIXELS),
        series=f"{source.rsplit(':', 1)[0]}#{rec['report']}" if rec.get("report") else "",
        steady=str(rec.get("rate") or "").startswith("steady"),
        short_job=str(rec.get("rate") or "").startswith("whole job"),
        in_flight=_in_flight(rec.get("in_flight_per_replica")),
        window_fill_s=_fill(rec.get("window_fill_s")),
    )


def _in_flight(value) -> int:
    """A record's requests in flight per replica; the default where it does not say."""
    return int(value) if _number(value) and value >= 1 else DEFAULT_IN_FLIGHT


def _fill(value) -> float:
    """A record's window fill in seconds; 0 (the whole window at once) where it does not say."""
    return float(value) if _number(value) and value > 0 else 0.0


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def from_gpu_test(report: dict, source: str = "") -> Measurement | None:
    """The steady rate of a GPU test's report (tests/test_gpu_fleet.py: the launcher's fleet, the caption CLI as
    the runner, the launcher's frames and pixels), with the runner's in-flight window and fill it ran with, or
    None: a rehearsal, a job that did not finish every clip, a steady rate from before it was Little's law over
    every result's latency (the older rule read up to ~15 % off, docs/BENCHMARKS.md), or replica flags other
    than the precision's (another recipe)."""
    job = report.get("job")
    if not isinstance(job, dict) or report.get("rehearsal") is not False or job.get("state") != "done":
        return None
    other_flags = [a for a in str(report.get("vllm_args") or "").split() if not a.startswith("--quantization")]
    if other_flags:
        return None
    rate, eff = job.get("steady_clips_per_s"), job.get("efficiency") or {}
    if job.get("failed") or not job.get("result_latencies_s") or not isinstance(rate, (int, float)):
        return None
    if not math.isfinite(rate) or rate <= 0 or not isinstance(eff, dict):
        return None
    gpus = [g for g in str(report.get("gpus") or "0").replace(" ", "").split(",") if g]
    example = report.get("provenance_example") or {}
    return Measurement(
        clips_per_s=float(rate),
        gpus=len(gpus) or 1,
        frames=int(example.get("frames") or 16),
        precision=normalise_precision(eff.get("precision")),
        config=f"the GPU test, steady over {job.get('done')} clips",
        date=str(report.get("date") or "")[:10],
        source=source,
        via="runner",
        steady=True,
        # the report's window is the runner's over all the replicas
        in_flight=_in_flight(job["in_flight"] / (len(gpus) or 1) if _number(job.get("in_flight")) else None),
        window_fill_s=_fill(job.get("window_fill_s")),
    )


def _read_object(path: str | Path) -> dict:
    """A JSON object from a file; {} where the file is missing, unreadable or not an object."""
    try:
        text = Path(path).read_text()
        if not limits.json_depth_ok(text):  # before parsing: the stdlib parser recurses (RecursionError)
            return {}
        found = json.loads(text)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def load_table(path: str | Path = WORK_TABLE) -> dict:
    """The work-per-clip table ({"points": [...], ...}); an empty one where the file is missing or unreadable."""
    table = _read_object(path)
    return table if isinstance(table.get("points"), list) else {"points": []}


def load_measurements(*paths: str | Path) -> list[Measurement]:
    """Every usable record in the given .jsonl files, work-per-clip tables (.json) or folders (searched
    recursively for .jsonl and the GPU tests' report.json). Points "not yet measured" (no rate) are not records."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted([*p.rglob("*.jsonl"), *p.rglob("report.json")]) if p.is_dir() else [p]
    out: list[Measurement] = []
    for f in files:
        if f.name == "report.json":
            m = from_gpu_test(_read_object(f), str(f))
            if m:
                out.append(m)
            continue
        if f.suffix == ".json":
            for i, point in enumerate(load_table(f)["points"], 1):
                m = from_record(point, f"{f}#{i}") if isinstance(point, dict) else None
                if m:
                    out.append(m)
            continue
        try:
            lines = f.read_text().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines, 1):
            try:
                rec = json.loads(line) if limits.json_depth_ok(line) else None
            except ValueError:
                continue
            m = from_record(rec, f"{f}:{i}") if isinstance(rec, dict) else None
            if m:
                out.append(m)
    return out


def default_measurements() -> list[Measurement]:
    """The work-per-clip table and the recorded runs of this repository."""
    return load_measurements(WORK_TABLE, RUNS)


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
) -> Estimate:
    """Clips/s of `replicas` replicas (one per GPU) at `frames` frames, `max_pixels` pixels per clip and
    `precision`, with our runner keeping `in_flight` requests per replica and filling an idle replica's window
    over `window_fill_s` (the fleet's PER_REPLICA_INFLIGHT and WINDOW_FILL_SECONDS; see the module doc).
    ValueError, saying which, for an input out of range: replicas, frames, max_pixels and in_flight at least 1,
    the fill and a live rate finite and not negative (0: none yet), a live rate given with its replicas; nothing
    negative, NaN or infinite reaches an answer."""
    replicas = _whole(replicas, "replicas", 1, MAX_REPLICAS)
    in_flight = _whole(in_flight, "in_flight", 1, MAX_REPLICAS)
    if not _number(window_fill_s) or window_fill_s < 0:
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
    if any(m.runner_settings() == fleet_settings for m in exact):  # taken as this fleet runs: only those
        exact = [m for m in exact if m.runner_settings() == fleet_settings]
    if any(m.via == "runner" for m in exact):  # what a job sees beats vLLM alone on another workload
        exact = [m for m in exact if m.via == "runner"]
    if any(m.steady for m in exact):  # a long job runs at its steady rate, not at a short job's whole one
        exact = [m for m in exact if m.steady]
    if not exact:
        return Estimate(
            None,
            replicas,
            frames,
            precision,
            "none",
            f"not yet measured at {point}: `benchmarks/gpu_session.sh node workload` measures the frames x pixels "
            "points on a GPU (docs/GPU.md), or start the job and use its live rate",
            None,
            max_pixels,
        )

    def rank(m: Measurement) -> tuple:  # the best rate; of equal ones, the latest run
        return m.per_gpu, m.date

    best = max((m for m in exact if m.gpus == 1), key=rank, default=None) or max(exact, key=rank)
    eff, how = _efficiency(ms, replicas)
    per = best.per_gpu * eff
    other = ""
    if best.runner_settings() != fleet_settings:
        other = (
            f"; measured with {_runner_words(*best.runner_settings())}, and this fleet runs with "
            f"{_runner_words(*fleet_settings)}: its rate may differ, nothing was measured so"
        )
    return Estimate(
        per * replicas,
        replicas,
        frames,
        precision,
        "measured",
        f"{best.per_gpu:.2f} clips/s per GPU measured ({best.config or 'run'}, {best.date}"
        f"{': a long job runs faster' if best.short_job else ''}); {how}{other}",
        per,
        max_pixels,
    )


def _runner_words(in_flight: int, fill: float) -> str:
    fill_words = f"filled over {fill:g} s" if fill else "sent at once"
    return f"{in_flight} requests in flight per replica, {fill_words}"


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
    p.add_argument("--precision", default="bf16", help="bf16 or fp8 (default bf16)")
    p.add_argument("--clips", type=int, default=0, help="clips in the job, for wall time and GPU-hours")
    p.add_argument("--table", default=str(WORK_TABLE), help="the work-per-clip table (default docs/work-per-clip.json)")
    p.add_argument("--runs", default=str(RUNS), help="folder or .jsonl of recorded runs (default docs/gpu-runs)")
    p.add_argument("--live-rate", type=float, default=None, help="a running job's clips/s, to scale instead")
    p.add_argument("--live-replicas", type=int, default=None, help="replicas that live rate was measured on")
    add_arguments(p, ("per_replica_inflight", "window_fill_seconds"))  # the fleet's runner, as it runs
    a = p.parse_args(argv)
    settings = from_args(a)
    try:
        _whole(a.clips, "--clips", 0, MAX_CLIPS)
        e = estimate(
            a.replicas,
            a.frames,
            a.precision,
            load_measurements(a.table, a.runs),
            max_pixels=a.max_pixels,
            live_rate=a.live_rate,
            live_replicas=a.live_replicas,
            in_flight=settings.per_replica_inflight,
            window_fill_s=settings.window_fill_seconds,
        )
    except ValueError as err:
        names = {
            "live replicas must": "--live-replicas must",
            "replicas must": "--replicas must",
            "frames must": "--frames must",
            "max_pixels must": "--max-pixels must",
            "the live rate": "--live-rate",
            "in_flight must": "--per-replica-inflight must",
            "(live_replicas)": "(--live-replicas)",
        }
        msg = str(err)
        for api, flag in names.items():
            if msg.startswith(api) or api.startswith("("):
                msg = msg.replace(api, flag, 1)
        p.error(msg)
    if e.clips_per_s is None:
        print(f"no estimate: {e.note}")
        return 1
    print(
        f"{e.clips_per_s:.2f} clips/s on {e.replicas} replica(s) at {e.frames} frames, {e.max_pixels:,} pixels, "
        f"{e.precision} ({e.basis}: {e.note})"
    )
    if a.clips:
        print(f"{a.clips} clips: {e.seconds_for(a.clips) / 3600:.2f} h wall, {e.gpu_hours(a.clips):.1f} GPU-hours")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "default_measurements",
    "Estimate",
    "estimate",
    "from_record",
    "load_measurements",
    "load_table",
    "Measurement",
    "normalise_precision",
]
