"""What a captioning job will cost: clips/s for a fleet, from recorded GPU measurements or a job's live rate.

    python -m serving.cost --replicas 8 --frames 16 --precision bf16 --clips 100000

    from serving import cost
    ms = cost.load_measurements("docs/gpu-runs")
    e = cost.estimate(replicas=8, frames=16, precision="bf16", measurements=ms)
    e.clips_per_s, e.seconds_for(100_000), e.gpu_hours(100_000), e.basis, e.note

Pure functions over plain records, so the job form, the CLI and the docs can all show the same figure. The
records are the JSON lines `benchmarks/bench_fleet.py sweep` writes (docs/gpu-runs/*/ *.jsonl): `clips_per_s`
measured on distinct clips with caches off, and where present `gpus`, `frames`, `precision`, `backend`.
Older records lack the last three; they were taken with the launcher's defaults then (1 GPU, 16 frames,
bf16) and are read as such.

How an estimate is made, best basis first:
1. `live`: the running job's own rate (clips/s over its last minute, `data.job_queries.progress`) on `live_replicas`
   replicas with the same settings, scaled per replica. Nothing predicts a fleet better than itself.
2. `measured`: a record with the same precision and frames: the best per-GPU rate (the launcher's defaults
   are the best measured configuration), times the replicas, times the multi-GPU efficiency measured for
   that configuration (per-GPU rate at N GPUs / at 1), else linear, and the note says so.
3. `scaled`: same precision, other frames: the nearest record's rate scaled by frames_measured / frames.
   Vision tokens, and so the arithmetic per clip that bounds the GPU (docs/BENCHMARKS.md), grow with frames;
   the text part of the prompt (~5 % of its tokens) does not, so this errs slightly pessimistic for more
   frames and optimistic for fewer. The note says it is scaled.
Otherwise (no record of that precision) there is no estimate: `clips_per_s` is None and the note says which
run would give one. FP8 is not derived from bf16: the speed-up is what the GPU runs are for.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

DEFAULT_BACKEND = "pynvvideocodec"  # the production decoder; CPU-decode records describe another fleet
PRECISIONS = ("bf16", "fp8")
MAX_REPLICAS = 100_000  # 100 nodes of 8 GPUs is 800: this is a typo guard, not a plan
MAX_FRAMES = 4_096
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

    @property
    def per_gpu(self) -> float:
        return self.clips_per_s / max(1, self.gpus)


@dataclass(frozen=True)
class Estimate:
    clips_per_s: float | None
    replicas: int
    frames: int
    precision: str
    basis: str  # "live" | "measured" | "scaled" | "none"
    note: str
    per_replica: float | None = None

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
    """A Measurement from one bench_fleet JSON line, or None for a failed or partial run."""
    rate = rec.get("clips_per_s")
    if rec.get("error") or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
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
    )


def load_measurements(*paths: str | Path) -> list[Measurement]:
    """Every usable record in the given .jsonl files or folders (searched recursively)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    out: list[Measurement] = []
    for f in files:
        try:
            lines = f.read_text().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines, 1):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            m = from_record(rec, f"{f}:{i}") if isinstance(rec, dict) else None
            if m:
                out.append(m)
    return out


def _efficiency(ms: list[Measurement], replicas: int) -> tuple[float, str]:
    """Per-GPU rate at the largest measured GPU count <= replicas over the 1-GPU rate, for one configuration."""
    one = [m.per_gpu for m in ms if m.gpus == 1]
    multi = [m for m in ms if 1 < m.gpus <= replicas]
    if replicas <= 1 or not one or not multi:
        return 1.0, "linear in replicas" + ("" if replicas <= 1 else " (no multi-GPU measurement)")
    n = max(m.gpus for m in multi)
    eff = min(1.0, max(m.per_gpu for m in multi if m.gpus == n) / max(one))
    return eff, f"x{eff:.2f} per-GPU efficiency measured at {n} GPUs"


def estimate(
    replicas: int,
    frames: int,
    precision: str = "bf16",
    measurements: Iterable[Measurement] = (),
    *,
    live_rate: float | None = None,
    live_replicas: int | None = None,
    backend: str = DEFAULT_BACKEND,
) -> Estimate:
    """Clips/s of `replicas` replicas (one per GPU) at `frames` frames and `precision` (see the module doc).
    ValueError, saying which, for an input out of range: replicas and frames at least 1, a live rate finite
    and not negative (0: none yet) and given with its replicas; nothing negative, NaN or infinite reaches an
    answer."""
    replicas = _whole(replicas, "replicas", 1, MAX_REPLICAS)
    frames = _whole(frames, "frames", 1, MAX_FRAMES)
    if live_rate is not None:
        live_rate = _rate(live_rate, "the live rate")
        if live_rate is not None and live_replicas is None:
            raise ValueError("a live rate needs the replicas it was measured on (live_replicas)")
    if live_replicas is not None:
        live_replicas = _whole(live_replicas, "live replicas", 1, MAX_REPLICAS)
    precision = normalise_precision(precision)
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
        )
    same = [m for m in measurements if m.precision == precision and m.backend == backend]
    if any(m.via == "runner" for m in same):  # what a job sees beats vLLM alone on another workload
        same = [m for m in same if m.via == "runner"]
    exact = [m for m in same if m.frames == frames]
    if exact:
        best = max((m for m in exact if m.gpus == 1), key=lambda m: m.per_gpu, default=None) or max(
            exact, key=lambda m: m.per_gpu
        )
        eff, how = _efficiency(exact, replicas)
        per = best.per_gpu * eff
        return Estimate(
            per * replicas,
            replicas,
            frames,
            precision,
            "measured",
            f"{best.per_gpu:.2f} clips/s per GPU measured ({best.config or 'run'} {best.date}, {best.source}); {how}",
            per,
        )
    if same:
        near = min(same, key=lambda m: (abs(m.frames - frames), -m.per_gpu))
        at_frames = [m for m in same if m.frames == near.frames]
        best = max(at_frames, key=lambda m: (m.gpus == 1, m.per_gpu))
        eff, how = _efficiency(at_frames, replicas)
        per = best.per_gpu * best.frames / frames * eff
        return Estimate(
            per * replicas,
            replicas,
            frames,
            precision,
            "scaled",
            f"scaled from {best.per_gpu:.2f} clips/s per GPU measured at {best.frames} frames "
            f"({best.source}) by {best.frames}/{frames} frames; {how}; not measured at {frames} "
            "frames",
            per,
        )
    return Estimate(
        None,
        replicas,
        frames,
        precision,
        "none",
        f"no {precision} measurement recorded: run `benchmarks/bench_fleet.py sweep` with {precision} "
        "on a GPU node (docs/GPU.md), or start the job and use its live rate",
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(
        prog="python -m serving.cost",
        description="Clips/s, wall time and GPU-hours for a fleet, from recorded GPU runs.",
        epilog="example: python -m serving.cost --replicas 8 --frames 16 --clips 100000",
    )
    p.add_argument("--replicas", type=int, required=True, help="replicas (one per GPU), at least 1")
    p.add_argument("--frames", type=int, default=16, help="frames per clip (default 16)")
    p.add_argument("--precision", default="bf16", help="bf16 or fp8 (default bf16)")
    p.add_argument("--clips", type=int, default=0, help="clips in the job, for wall time and GPU-hours")
    p.add_argument("--runs", default=str(root / "docs" / "gpu-runs"), help="folder or .jsonl of recorded runs")
    p.add_argument("--live-rate", type=float, default=None, help="a running job's clips/s, to scale instead")
    p.add_argument("--live-replicas", type=int, default=None, help="replicas that live rate was measured on")
    a = p.parse_args(argv)
    try:
        _whole(a.clips, "--clips", 0, MAX_CLIPS)
        e = estimate(
            a.replicas,
            a.frames,
            a.precision,
            load_measurements(a.runs),
            live_rate=a.live_rate,
            live_replicas=a.live_replicas,
        )
    except ValueError as err:
        names = {
            "live replicas must": "--live-replicas must",
            "replicas must": "--replicas must",
            "frames must": "--frames must",
            "the live rate": "--live-rate",
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
        f"{e.clips_per_s:.2f} clips/s on {e.replicas} replica(s) at {e.frames} frames, {e.precision} ({e.basis}: "
        f"{e.note})"
    )
    if a.clips:
        print(f"{a.clips} clips: {e.seconds_for(a.clips) / 3600:.2f} h wall, {e.gpu_hours(a.clips):.1f} GPU-hours")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "Estimate",
    "estimate",
    "from_record",
    "load_measurements",
    "Measurement",
    "normalise_precision",
]
