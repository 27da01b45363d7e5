"""The records serving.cost prices a fleet from: one `Measurement` per recorded rate, read from the work-per-clip
table (docs/work-per-clip.json), the JSON lines of recorded runs (docs/gpu-runs/*/ *.jsonl) and the GPU tests'
reports (docs/gpu-runs/**/report.json). Which of them count for an estimate, and how: serving/cost.py.

Each record names the GPU model it was measured on (`gpu`, nvidia-smi's name). Records written before they did
take it from the `gpu.json` of their run's folder (docs/gpu-runs/<run>/gpu.json, written from that session's
nvidia-smi output); a record with neither has no model ("") and prices no fleet whose model is known."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from data import limits
from data.job_params import RECIPE_MAX_PIXELS
from serving import gpu_models

ROOT = Path(__file__).resolve().parents[1]
WORK_TABLE = ROOT / "docs" / "work-per-clip.json"  # the work-per-clip sweep's points
RUNS = ROOT / "docs" / "gpu-runs"  # recorded GPU runs (.jsonl)
DEFAULT_BACKEND = "pynvvideocodec"  # the production decoder; CPU-decode records describe another fleet
DEFAULT_IN_FLIGHT = 48  # PER_REPLICA_INFLIGHT of every record that does not say (the default since the start)


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
    gpu: str = ""  # the GPU model it was measured on, as nvidia-smi names it ("": not recorded)

    def runner_settings(self) -> tuple[int, float]:
        return self.in_flight, self.window_fill_s

    @property
    def per_gpu(self) -> float:
        return self.clips_per_s / max(1, self.gpus)


def normalise_precision(value: str | None) -> str:
    v = (value or "bf16").strip().lower().replace("-", "")
    if v in ("bf16", "bfloat16"):
        return "bf16"
    if v.startswith("fp8") or v == "float8":
        return "fp8"
    return v


_DTYPE_NAMES = {"half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}  # vLLM's --dtype spellings


def precision_of_args(args) -> str:
    """The precision a vLLM replica started with `args` (its flags, one token each) computes in: the
    `--quantization` method (`-q`), else `--dtype` ("auto": the recipe's bf16 weights), else bf16."""
    tokens = [t for a in args or () for t in str(a).split("=", 1)]
    for flags in (("--quantization", "-q"), ("--dtype",)):
        for flag, value in zip(tokens, tokens[1:]):
            if flag in flags and value.lower() not in ("auto", "none", ""):
                return normalise_precision(_DTYPE_NAMES.get(value.lower(), value))
    return "bf16"


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
            gpu=gpu_models.clean_name(rec.get("gpu")),
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
        gpu=gpu_models.clean_name(rec.get("gpu")),
    )


def _in_flight(value) -> int:
    """A record's requests in flight per replica; the default where it does not say."""
    return int(value) if finite_number(value) and value >= 1 else DEFAULT_IN_FLIGHT


def _fill(value) -> float:
    """A record's window fill in seconds; 0 (the whole window at once) where it does not say."""
    return float(value) if finite_number(value) and value > 0 else 0.0


def finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def from_gpu_test(report: dict, source: str = "") -> Measurement | None:
    """The steady rate of a GPU test's report (tests/serving/test_gpu_fleet.py: the launcher's fleet, the caption CLI as
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
        in_flight=_in_flight(job["in_flight"] / (len(gpus) or 1) if finite_number(job.get("in_flight")) else None),
        window_fill_s=_fill(job.get("window_fill_s")),
        gpu=_one_model(report.get("fleet_gpus")),
    )


def _one_model(names) -> str:
    """The model of a report's replicas (the launcher's record), or "" where they are not all one named model."""
    if not isinstance(names, list) or not names:
        return ""
    found = {gpu_models.clean_name(n) for n in names}
    return found.pop() if len(found) == 1 and "" not in found else ""


def _folder_gpu(path: Path, seen: dict[Path, str]) -> str:
    """The GPU model the nearest `gpu.json` above `path` names (a run folder's, for its records that do not say),
    or ""."""
    for d in path.parents:
        if d in seen:
            return seen[d]
        found = gpu_models.clean_name(_read_object(d / "gpu.json").get("gpu")) if (d / "gpu.json").is_file() else ""
        if found or d == RUNS or d.parent == d:
            seen[d] = found
            return found
    return ""


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
    folders: dict[Path, str] = {}

    def add(m: Measurement | None, f: Path) -> None:
        if m and not m.gpu:
            m = replace(m, gpu=_folder_gpu(f.resolve(), folders))
        if m:
            out.append(m)

    for f in files:
        if f.name == "report.json":
            add(from_gpu_test(_read_object(f), str(f)), f)
            continue
        if f.suffix == ".json":
            for i, point in enumerate(load_table(f)["points"], 1):
                add(from_record(point, f"{f}#{i}") if isinstance(point, dict) else None, f)
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
            add(from_record(rec, f"{f}:{i}") if isinstance(rec, dict) else None, f)
    return out


def default_measurements() -> list[Measurement]:
    """The work-per-clip table and the recorded runs of this repository."""
    return load_measurements(WORK_TABLE, RUNS)


__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_IN_FLIGHT",
    "default_measurements",
    "finite_number",
    "from_gpu_test",
    "from_record",
    "load_measurements",
    "load_table",
    "Measurement",
    "normalise_precision",
    "precision_of_args",
    "RUNS",
    "WORK_TABLE",
]
