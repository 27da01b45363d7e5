"""benchmarks/bench_fleet.py runs only on a GPU node; what can be checked anywhere is the vLLM command line it
builds: the launcher's production recipe (serving.launch.commands.vllm_command), the sweep's overrides, and the
benchmark-only flags, never a copy of the recipe that drifts from it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from serving.launch import commands as fleet_commands

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_fleet():
    spec = importlib.util.spec_from_file_location("bench_fleet", REPO / "benchmarks" / "bench_fleet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_the_sweep_runs_the_launchers_recipe_with_its_overrides(bench_fleet, tmp_path):
    s = bench_fleet.bench_settings("/models/qwen", str(tmp_path / "clips"), tmp_path / "var")
    version = (0, 26, 0)
    cmd = bench_fleet.vllm_command(s, 8100, bench_fleet.CONFIGS["nvdec-api8"], version)
    recipe = fleet_commands.vllm_command(s, 8100, version=version, backend="pynvvideocodec")
    # everything the launcher sets is there, in its order; only the overridden values differ
    assert cmd[: len(recipe)] == bench_fleet.with_flags(
        recipe, {"--api-server-count": "8", "--renderer-num-workers": "8"}
    )
    assert flag(cmd, "--api-server-count") == "8" and flag(cmd, "--renderer-num-workers") == "8"
    assert flag(recipe, "--api-server-count") == "4"
    assert cmd[len(recipe) :] == ["--load-format", "dummy", "--no-enable-prefix-caching"]
    assert flag(cmd, "--served-model-name") == "bench"
    assert flag(cmd, "--allowed-local-media-path") == str(tmp_path / "clips")
    video = json.loads(flag(cmd, "--media-io-kwargs"))["video"]
    assert video == {"backend": "pynvvideocodec", "min_frames": 16, "max_frames": 16, "hw_decoders": 2}


def test_backend_frames_and_batch_size_come_from_the_configuration(bench_fleet, tmp_path):
    s = bench_fleet.bench_settings("/models/qwen", str(tmp_path), tmp_path / "var")
    opencv = bench_fleet.vllm_command(s, 8100, bench_fleet.CONFIGS["opencv"], (0, 26, 0))
    assert json.loads(flag(opencv, "--media-io-kwargs"))["video"] == {
        "backend": "opencv",
        "min_frames": 16,
        "max_frames": 16,
    }
    eight = bench_fleet.vllm_command(s, 8100, bench_fleet.CONFIGS["nvdec-8f"], (0, 26, 0))
    assert json.loads(flag(eight, "--media-io-kwargs"))["video"]["max_frames"] == 8
    big = bench_fleet.vllm_command(s, 8100, bench_fleet.CONFIGS["nvdec-bt64k"], (0, 26, 0))
    assert flag(big, "--max-num-batched-tokens") == "65536"


def test_an_override_of_a_flag_the_recipe_lacks_is_refused(bench_fleet):
    with pytest.raises(ValueError, match="no --gpu-memory-utilization"):
        bench_fleet.with_flags(["vllm", "serve", "m", "--port", "1"], {"--gpu-memory-utilization": "0.9"})


def test_sweep_dry_run_prints_each_command_and_starts_nothing(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_fleet.py"),
            "sweep",
            "--model",
            "/models/qwen",
            "--clips",
            str(tmp_path),
            "--out",
            str(tmp_path / "results.jsonl"),
            "--log-dir",
            str(tmp_path / "logs"),
            "--configs",
            "nvdec,opencv",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split("]")[0] for line in lines] == ["[nvdec", "[opencv"]
    assert all(" serve /models/qwen " in line and "--load-format dummy" in line for line in lines)
    assert not (tmp_path / "results.jsonl").exists() and not list((tmp_path / "logs").glob("vllm-*.log"))


def test_each_configuration_reports_its_compute_efficiency_from_the_clips_it_answered(bench_fleet, tiny_library):
    clips = sorted(tiny_library.rglob("*.mp4"))[:2]
    assert bench_fleet.clip_size(clips[0]) == (90, 160)
    from serving import flops

    eff = bench_fleet.efficiency([(c, 400, 150) for c in clips], 16, 4.0, "bf16", {"bf16_tflops": 780.0})
    one = flops.work_flops(flops.ClipWork(400, 150, 16, 90, 160)).total
    assert eff["clips"] == 2 and eff["tflop_per_clip"] == pytest.approx(one / 1e12, abs=0.01)
    assert eff["fraction_of_peak"] == pytest.approx(4.0 * one / 1e12 / 780.0, rel=1e-2)
    assert eff["peak_source"].startswith("measured in this run") and "of bf16 peak" in eff["summary"]


def test_an_fp8_configuration_quantizes_and_the_dry_run_shows_the_cpu_budget(bench_fleet, tmp_path):
    s = bench_fleet.bench_settings("/models/qwen", str(tmp_path), tmp_path / "var")
    cmd = bench_fleet.vllm_command(s, 8100, bench_fleet.CONFIGS["nvdec-fp8"], (0, 25, 0))
    assert flag(cmd, "--quantization") == "fp8"
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_fleet.py"), "sweep", "--model", "/m", "--clips"]
        + [str(tmp_path), "--out", str(tmp_path / "r.jsonl"), "--log-dir", str(tmp_path / "logs")]
        + ["--configs", "nvdec", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "OMP_NUM_THREADS=" in out.stdout and "MKL_NUM_THREADS=" in out.stdout
