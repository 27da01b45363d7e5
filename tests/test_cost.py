"""serving.cost: clips/s for a fleet from recorded GPU measurements or a job's live rate (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving import cost

ROOT = Path(__file__).resolve().parents[1]
M = cost.Measurement


def test_the_recorded_h200_runs_give_the_8_gpu_bf16_estimate():
    ms = cost.load_measurements(ROOT / "docs" / "gpu-runs")
    assert ms and all(m.clips_per_s > 0 for m in ms)  # the failed first run (error, no rate) is skipped
    e = cost.estimate(8, 16, "bf16", ms)
    # measured through our runner (runner.jsonl) beats vLLM alone: 2.574 per GPU at 1, 4.412 at 2 replicas
    assert e.basis == "measured" and "2.57" in e.note and "efficiency measured at 2 GPUs" in e.note
    assert e.clips_per_s == pytest.approx(8 * 4.412 / 2)
    assert e.seconds_for(100_000) == pytest.approx(100_000 / (8 * 2.206))
    assert e.gpu_hours(100_000) == pytest.approx(100_000 / 2.206 / 3600)
    # without the runner's records, vLLM alone
    alone = cost.estimate(8, 16, "bf16", [m for m in ms if m.via != "runner"])
    assert "4.35" in alone.note and alone.clips_per_s == pytest.approx(8 * 4.351)
    # FP8 only from FP8 records
    assert cost.estimate(1, 16, "fp8", ms).clips_per_s == pytest.approx(2.82)
    # CPU-decode records describe another fleet: not used for the NVDEC estimate
    assert cost.estimate(1, 16, "bf16", ms, backend="opencv").clips_per_s == pytest.approx(2.741)


def test_exact_match_uses_the_best_single_gpu_rate_and_measured_efficiency():
    ms = [M(4.0), M(4.4), M(8.4, gpus=2), M(9.0, frames=8)]
    e = cost.estimate(8, 16, "bf16", ms)
    eff = (8.4 / 2) / 4.4
    assert e.basis == "measured" and e.per_replica == pytest.approx(4.4 * eff)
    assert e.clips_per_s == pytest.approx(8 * 4.4 * eff) and "2 GPUs" in e.note
    assert cost.estimate(1, 16, "bf16", ms).clips_per_s == pytest.approx(4.4)  # one GPU: no efficiency applied


def test_other_frames_are_scaled_and_said_so():
    e = cost.estimate(2, 32, "bf16", [M(4.0, frames=16), M(7.0, frames=8)])
    assert e.basis == "scaled" and e.clips_per_s == pytest.approx(2 * 4.0 * 16 / 32)
    assert "not measured at 32 frames" in e.note


def test_fp8_is_never_guessed_from_bf16():
    e = cost.estimate(8, 16, "fp8", [M(4.35)])
    assert e.clips_per_s is None and e.basis == "none" and "bench_fleet.py sweep" in e.note
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
    ms = cost.load_measurements(f)
    assert len(ms) == 1 and ms[0].precision == "fp8" and ms[0].frames == 8
    assert cost.estimate(4, 8, "fp8", ms).clips_per_s == pytest.approx(50.0)
    with pytest.raises(ValueError):
        cost.estimate(0, 16, "bf16", ms)


def test_cli_prints_the_estimate_and_the_gpu_hours(capsys):
    assert cost.main(["--replicas", "8", "--frames", "16", "--clips", "100000"]) == 0
    out = capsys.readouterr().out
    assert "17.65 clips/s on 8 replica(s)" in out and "GPU-hours" in out
    assert cost.main(["--replicas", "8", "--frames", "16", "--precision", "fp8"]) == 0
    assert "22.56 clips/s" in capsys.readouterr().out
