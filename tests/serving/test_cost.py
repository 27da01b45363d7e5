"""serving.cost: clips/s for a fleet from recorded GPU measurements or a job's live rate (issue 12)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from serving import cost, cost_records
from tests.support.work_table import table_with_gaps

REPO = Path(__file__).resolve().parents[2]  # the repository: the commands run from it

ROOT = Path(__file__).resolve().parents[2]
M = cost_records.Measurement


def table_rate(frames: int = 16, max_pixels: int = 9437184, precision: str = "bf16") -> float:
    """The committed work-per-clip table's clips/s at a point (what a new GPU measurement changes)."""
    points = json.loads((ROOT / "docs" / "work-per-clip.json").read_text())["points"]
    return next(
        p["clips_per_s"]
        for p in points
        if (p["frames"], p["max_pixels"], p["precision"]) == (frames, max_pixels, precision)
    )


def steady_rate() -> float:
    """The best steady rate the committed GPU tests' reports hold at the recipe's point (bf16, 16 frames) with the
    runner as it ships (48 in flight per replica, sent at once)."""
    ms = cost_records.load_measurements(cost_records.RUNS)
    return max(
        m.per_gpu
        for m in ms
        if m.steady
        and (m.frames, m.max_pixels, m.precision) == (16, 9437184, "bf16")
        and m.runner_settings() == (48, 0)
    )


def test_the_committed_table_and_runs_give_the_8_gpu_bf16_estimate():
    ms = cost_records.default_measurements()
    # the failed first run (error, no rate) is skipped; a point that failed on the GPU says so with 0 clips/s
    assert ms and all(m.clips_per_s > 0 or m.failed for m in ms)
    e = cost.estimate(8, 16, "bf16", ms)
    # the GPU test's steady rate (Little's law, through our runner) beats the table's 48-clip whole job, scaled
    # by the 2-GPU efficiency node_run measured in one run (4.412 / 2 per GPU at 2 replicas over 2.574 at 1: x0.86)
    eff = 4.412 / 2 / 2.574
    rate = steady_rate()
    assert rate > table_rate() and "the GPU test, steady over" in e.note
    assert e.basis == "measured" and f"{rate:.2f}" in e.note and "efficiency measured at 2 GPUs" in e.note
    assert e.clips_per_s == pytest.approx(8 * rate * eff)
    assert e.seconds_for(100_000) == pytest.approx(100_000 / (8 * rate * eff))
    assert e.gpu_hours(100_000) == pytest.approx(100_000 / (rate * eff) / 3600)
    # without the runner's records, vLLM alone
    alone = cost.estimate(8, 16, "bf16", [m for m in ms if m.via != "runner"])
    assert "4.35" in alone.note and alone.clips_per_s == pytest.approx(8 * 4.351)
    # FP8 only from FP8 records: the table's steady 4.33 beats the whole-job 2.82 of another run
    assert cost.estimate(1, 16, "fp8", ms).clips_per_s == pytest.approx(4.33)
    # CPU-decode records describe another fleet: not used for the NVDEC estimate
    assert cost.estimate(1, 16, "bf16", ms, backend="opencv").clips_per_s == pytest.approx(2.741)


def test_every_sweep_point_is_in_the_table_measured_or_said_not_to_be():
    """Each GPU model's points of the sweep, as serving.cost prices them on that model."""
    table = cost_records.load_table()
    points = {(p["frames"], p["max_pixels"], p["precision"], p["gpu"]): p for p in table["points"]}
    models = {p["gpu"] for p in table["points"]}
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= models  # every point names the GPU it was measured on
    ms = cost_records.default_measurements()
    for gpu in models:
        for frames in (8, 16, 32):
            for pixels in (9_437_184, 4_718_592, 2_359_296):
                p = points.get((frames, pixels, "bf16", gpu))
                e = cost.estimate(8, frames, "bf16", ms, max_pixels=pixels, gpu=gpu)
                if p is None or p["status"] not in ("measured", "failed"):  # never a figure nobody measured
                    assert p is None or not p["clips_per_s"]
                    if e.basis == "none":
                        assert e.clips_per_s is None and "not yet measured" in e.note and "node workload" in e.note
                    continue
                assert (p["status"] == "measured") == bool(p["clips_per_s"]), p
                if p["status"] == "measured":
                    assert e.basis == "measured" and p["source"] and p["date"]
                    assert p["frame_preprocess"] in ("gpu", "cpu") and f"measured on {gpu}" in e.note
                else:  # no figure, and why in the note the job form shows
                    assert e.clips_per_s is None and e.basis == "failed" and p["note"] in e.note and p["date"] in e.note


def test_a_point_that_failed_on_the_gpu_gets_no_estimate_until_a_later_run_gets_through(tmp_path):
    f = tmp_path / "work-per-clip.json"
    failed = {"frames": 32, "max_pixels": 9437184, "precision": "bf16", "status": "failed", "clips_per_s": None}
    failed |= {"note": "the replica ran out of GPU memory", "date": "2026-12-03"}
    older = {"frames": 32, "max_pixels": 9437184, "precision": "bf16", "status": "measured", "clips_per_s": 2.5}
    f.write_text(json.dumps({"points": [failed, older | {"date": "2026-12-02"}]}))
    ms = cost_records.load_measurements(f)
    e = cost.estimate(8, 32, "bf16", ms)
    assert e.clips_per_s is None and e.basis == "failed"
    assert "ran out of GPU memory" in e.note and "2026-12-03" in e.note and "32 frames" in e.note
    # the failure says nothing about other points, and never feeds another estimate's efficiency
    assert cost.estimate(8, 16, "bf16", ms).basis == "none"
    f.write_text(json.dumps({"points": [failed, older | {"date": "2026-12-04"}]}))  # a later run got through
    e = cost.estimate(8, 32, "bf16", cost_records.load_measurements(f))
    assert e.basis == "measured" and e.clips_per_s == pytest.approx(8 * 2.5)
    # a simulated failure is no record at all
    f.write_text(json.dumps({"points": [failed | {"simulated": True}]}))
    assert cost_records.load_measurements(f) == []


def test_exact_match_uses_the_best_single_gpu_rate_and_the_efficiency_of_one_run():
    ms = [M(4.0), M(4.4), M(4.0, series="run1"), M(6.8, gpus=2, series="run1"), M(9.0, frames=8)]
    e = cost.estimate(8, 16, "bf16", ms)
    eff = (6.8 / 2) / 4.0  # from run1 alone: its 1-GPU rate, not the best one of another run
    assert e.basis == "measured" and e.per_replica == pytest.approx(4.4 * eff)
    assert e.clips_per_s == pytest.approx(8 * 4.4 * eff) and "2 GPUs" in e.note
    assert cost.estimate(1, 16, "bf16", ms).clips_per_s == pytest.approx(4.4)  # one GPU: no efficiency applied
    assert "linear" in cost.estimate(8, 16, "bf16", ms[:2]).note


def test_other_frames_or_pixels_are_not_derived_from_a_measured_point():
    ms = [M(4.0, frames=16), M(7.0, frames=8), M(6.0, frames=16, max_pixels=4_718_592)]
    e = cost.estimate(2, 32, "bf16", ms)
    assert e.clips_per_s is None and e.basis == "none" and "not yet measured at 32 frames" in e.note
    assert cost.estimate(2, 16, "bf16", ms, max_pixels=4_718_592).clips_per_s == pytest.approx(12.0)
    assert cost.estimate(2, 16, "bf16", ms, max_pixels=2_359_296).basis == "none"


def test_fp8_is_never_guessed_from_bf16():
    e = cost.estimate(8, 16, "fp8", [M(4.35)])
    assert e.clips_per_s is None and e.basis == "none" and "fp8" in e.note
    assert e.seconds_for(10) is None and e.gpu_hours(10) is None
    e = cost.estimate(8, 16, "FP8", [M(4.35), M(8.2, precision="fp8")])
    assert e.basis == "measured" and e.clips_per_s == pytest.approx(8 * 8.2)


def test_live_rate_wins_and_scales_per_replica():
    e = cost.estimate(16, 16, "bf16", [M(4.35)], live_rate=30.0, live_replicas=8)
    assert e.basis == "live" and e.clips_per_s == pytest.approx(60.0) and e.per_replica == pytest.approx(3.75)
    assert cost.estimate(16, 16, "bf16", [M(4.35)], live_rate=0.0, live_replicas=8).basis == "measured"


def test_records_from_a_sweep_file(tmp_path):
    f = tmp_path / "sweep.jsonl"
    f.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "config": "fp8-f8",
                        "precision": "fp8",
                        "frames": 8,
                        "gpus": 1,
                        "clips_per_s": 12.5,
                        "date": "2026-12-01",
                    }
                ),
                "not json",
                json.dumps({"config": "x", "error": "oom"}),
                json.dumps({"config": "nan", "clips_per_s": float("nan")}),
            ]
        )
    )
    ms = cost_records.load_measurements(f)
    assert len(ms) == 1 and ms[0].precision == "fp8" and ms[0].frames == 8
    assert cost.estimate(4, 8, "fp8", ms).clips_per_s == pytest.approx(50.0)
    with pytest.raises(ValueError):
        cost.estimate(0, 16, "bf16", ms)


def test_cli_prints_the_estimate_and_the_gpu_hours(capsys, tmp_path):
    assert cost.main(["--replicas", "8", "--frames", "16", "--clips", "100000"]) == 0
    out = capsys.readouterr().out
    assert f"{8 * steady_rate() * 4.412 / 2 / 2.574:.2f} clips/s on 8 replica(s)" in out and "GPU-hours" in out
    assert cost.main(["--replicas", "1", "--frames", "16", "--precision", "fp8"]) == 0
    assert "4.33 clips/s" in capsys.readouterr().out
    # a point the table has not measured yet: no figure, exit 1, and which run gives one
    gaps = ["--table", str(table_with_gaps(tmp_path))]
    assert cost.main(["--replicas", "8", "--frames", "8", "--max-pixels", "4718592", "--clips", "1000", *gaps]) == 1
    out = capsys.readouterr().out
    assert "no estimate: not yet measured at 8 frames, 4,718,592 pixels" in out


def test_a_gpu_test_s_steady_rate_prices_a_long_job_and_a_short_job_s_rate_says_it_reads_low(tmp_path):
    """A lead's estimate is for a long job: a GPU test's steady rate (Little's law over every result's latency) is
    used before a 48-clip job's whole rate at the same point, and where only the short job's rate exists the note
    says a long job runs faster. A report from before Little's law, a rehearsal or an unfinished job is no record."""
    table = tmp_path / "work-per-clip.json"
    point = {"frames": 16, "max_pixels": 9437184, "precision": "bf16", "status": "measured", "via": "runner"}
    point |= {"clips_per_s": 2.96, "rate": "whole job (too few clips)", "config": "node_run workload, whole job of 48"}
    table.write_text(json.dumps({"points": [point | {"date": "2026-12-03"}]}))
    runs = tmp_path / "runs"
    job = {"state": "done", "failed": 0, "done": 208, "steady_clips_per_s": 3.7, "result_latencies_s": [24.6] * 208}
    job |= {"efficiency": {"precision": "bf16"}}
    good = {"rehearsal": False, "gpus": "0", "date": "2026-12-03 10:55 UTC", "provenance_example": {"frames": 16}}
    reports = {
        "good": good | {"job": job},
        "old-rule": good
        | {"job": {k: v for k, v in job.items() if k != "result_latencies_s"} | {"steady_clips_per_s": 9}},
        "rehearsal": good | {"rehearsal": True, "job": job | {"steady_clips_per_s": 74.0}},
        "unfinished": good | {"job": job | {"state": "stopped", "steady_clips_per_s": 8.0}},
        "nested": "[" * 100_000,  # unreadable: no record, no crash
    }
    for name, report in reports.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "report.json").write_text(report if isinstance(report, str) else json.dumps(report))
    ms = cost_records.load_measurements(table, runs)
    steady = [m for m in ms if m.steady]
    assert [(m.clips_per_s, m.via, m.date) for m in steady] == [(3.7, "runner", "2026-12-03")]
    e = cost.estimate(1, 16, "bf16", ms)
    assert e.clips_per_s == pytest.approx(3.7) and "the GPU test, steady over 208 clips" in e.note
    short = cost.estimate(1, 16, "bf16", cost_records.load_measurements(table))
    assert short.clips_per_s == pytest.approx(2.96) and "a long job runs faster" in short.note


def _gpu_test(tmp_path, name: str, rate: float, **job) -> None:
    """A GPU test's report.json with a steady rate, under tmp_path/runs/<name>."""
    report = {"rehearsal": False, "gpus": job.pop("gpus", "0"), "date": "2026-12-04 10:00 UTC"}
    report |= {"provenance_example": {"frames": 16}, "vllm_args": job.pop("vllm_args", "")}
    report["job"] = {"state": "done", "failed": 0, "done": 392, "steady_clips_per_s": rate}
    report["job"] |= {"result_latencies_s": [20.0] * 392, "efficiency": {"precision": "bf16"}, **job}
    (tmp_path / "runs" / name).mkdir(parents=True)
    (tmp_path / "runs" / name / "report.json").write_text(json.dumps(report))


def test_an_estimate_comes_from_runs_of_the_runner_settings_the_fleet_runs(tmp_path, capsys, monkeypatch):
    """The job form priced the default fleet (48 in flight) at 4.06 clips/s per GPU: the GPU test with 96 in
    flight, not the 3.70-3.80 of those at 48. A record counts for a fleet running as it was measured (requests in
    flight per replica, the window's fill); without one, the nearest other is used and the note says so. A GPU
    test run with other replica flags (not the precision's) measured another recipe."""
    _gpu_test(tmp_path, "at48", 3.8)  # from before the report said its window: the default, 48
    _gpu_test(tmp_path, "at96", 4.06, in_flight=96)
    _gpu_test(tmp_path, "two-gpus-at96", 8.1, in_flight=192, gpus="0,1")  # 96 per replica
    _gpu_test(tmp_path, "filled", 3.66, in_flight=48, window_fill_s=12.0)
    _gpu_test(tmp_path, "other-recipe", 5.0, vllm_args="--max-num-batched-tokens=16384")
    ms = cost_records.load_measurements(tmp_path / "runs")
    assert sorted((m.per_gpu, m.in_flight, m.window_fill_s) for m in ms) == [
        (3.66, 48, 12.0),
        (3.8, 48, 0.0),
        (4.05, 96, 0.0),
        (4.06, 96, 0.0),
    ]
    shipped = cost.estimate(1, 16, "bf16", ms)
    assert shipped.clips_per_s == pytest.approx(3.8) and "may differ" not in shipped.note
    assert cost.estimate(1, 16, "bf16", ms, in_flight=96).clips_per_s == pytest.approx(4.06)
    assert cost.estimate(1, 16, "bf16", ms, window_fill_s=12).clips_per_s == pytest.approx(3.66)
    other = cost.estimate(1, 16, "bf16", ms, in_flight=64)
    assert other.clips_per_s == pytest.approx(4.06)
    assert (
        "4.06 clips/s per GPU measured on an unrecorded GPU (the GPU test, steady over 392 clips, 2026-12-04); taken "
        "with 96 in flight per replica sent at once, this fleet runs 64 in flight per replica sent at once: its rate "
        "may differ; one GPU"
    ) == other.note
    with pytest.raises(ValueError, match="in_flight must be"):
        cost.estimate(1, 16, "bf16", ms, in_flight=0)
    with pytest.raises(ValueError, match="window_fill_s must be"):
        cost.estimate(1, 16, "bf16", ms, window_fill_s=float("nan"))
    # the command line takes the fleet's settings as the launcher does: flags, else CW_* variables
    runs = ["--runs", str(tmp_path / "runs"), "--table", str(tmp_path / "none.json")]
    assert cost.main(["--replicas", "1", *runs]) == 0
    assert capsys.readouterr().out.startswith("3.80 clips/s on 1 replica(s)")
    assert cost.main(["--replicas", "1", "--per-replica-inflight", "96", *runs]) == 0
    assert capsys.readouterr().out.startswith("4.06 clips/s on 1 replica(s)")
    monkeypatch.setenv("CW_WINDOW_FILL_SECONDS", "12")
    assert cost.main(["--replicas", "1", *runs]) == 0
    assert capsys.readouterr().out.startswith("3.66 clips/s on 1 replica(s)")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(replicas=0),
        dict(replicas=-8),
        dict(replicas=math.inf),
        dict(replicas=2.5),
        dict(frames=-16),
        dict(frames=math.nan),
        dict(live_rate=-3.0, live_replicas=2),
        dict(live_rate=math.inf, live_replicas=2),
        dict(live_rate=math.nan, live_replicas=2),
        dict(live_rate=2.0, live_replicas=0),
        dict(live_rate=2.0),
    ],
)
def test_cost_refuses_negative_infinite_and_nonsense_inputs(kwargs):
    args = {"replicas": 8, "frames": 16, **kwargs}
    with pytest.raises(ValueError, match="must be|needs"):
        cost.estimate(args.pop("replicas"), args.pop("frames"), "bf16", [cost_records.Measurement(4.0)], **args)


def test_cost_refuses_a_negative_or_infinite_clip_count():
    e = cost.estimate(8, 16, "bf16", [cost_records.Measurement(4.0)])
    for bad in (-100, math.inf, math.nan, 1.5):
        with pytest.raises(ValueError, match="clips must be"):
            e.gpu_hours(bad)
    assert e.gpu_hours(0) == 0


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--replicas", "0"], "--replicas must be a whole number from 1"),
        (["--replicas", "8", "--clips", "-100"], "--clips must be"),
        (["--replicas", "8", "--live-rate", "inf", "--live-replicas", "2"], "--live-rate must be"),
        (["--replicas", "8", "--live-rate", "-1", "--live-replicas", "2"], "--live-rate must be"),
    ],
)
def test_the_cost_cli_answers_bad_input_with_a_message_not_a_traceback(argv, says):
    r = subprocess.run(
        [sys.executable, "-m", "serving.cost", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
