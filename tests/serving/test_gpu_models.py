"""What GPU a fleet runs on, and prices from: the launcher records each replica's model (nvidia-smi's name and
memory), every measurement names the model it was measured on, and serving.cost and the Jobs form price a fleet
only from measurements of its own model, saying plainly when there are none (issue 48: an H100 stack was priced
from an H200 run and said nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data.settings import Settings
from serving import cost, cost_records, gpu_models
from serving.launch import record as fleet_record

SMI = """0, NVIDIA H100 80GB HBM3, 81559
1, NVIDIA H100 80GB HBM3, 81559
"""


def test_nvidia_smi_lines_are_read_and_bounded():
    found = gpu_models.parse(SMI + "2, NVIDIA H200, 143771\nnot a gpu line\n3, \x1b[31mEvil\x00 GPU, x\n")
    assert found[0] == {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
    assert found[2] == {"name": "NVIDIA H200", "memory_mib": 143771}
    assert found[3] == {"name": "[31mEvil GPU", "memory_mib": None}  # control characters never stored
    assert gpu_models.clean_name("x" * 500) == "x" * gpu_models.MAX_NAME_CHARS


@pytest.mark.parametrize(
    ("wanted", "name", "same"),
    [
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3", True),
        ("H100 PCIe", "NVIDIA H100 80GB HBM3", False),
        ("H100", "NVIDIA H200", False),
        ("H200", "NVIDIA H200", True),
        ("H20", "NVIDIA H200", False),  # a word is matched whole, never a prefix of a word
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("H100", "", False),  # a record with no model matches no asked model
        ("", "NVIDIA H200", False),
    ],
)
def test_a_model_matches_its_own_records_only(wanted, name, same):
    assert gpu_models.matches(wanted, name) is same


def _records(tmp_path: Path) -> list[cost_records.Measurement]:
    """An H200 run folder whose records predate the `gpu` field (its gpu.json says the model), and an H100
    work-per-clip point that names its model."""
    run = tmp_path / "runs" / "2026-12-01-h200"
    run.mkdir(parents=True)
    (run / "gpu.json").write_text(json.dumps({"gpu": "NVIDIA H200", "memory_mib": 143771}))
    (run / "bench.jsonl").write_text(
        json.dumps({"clips_per_s": 3.8, "frames": 16, "via": "runner", "rate": "steady", "date": "2026-12-01"}) + "\n"
    )
    table = tmp_path / "work-per-clip.json"
    points = [
        {"frames": 8, "max_pixels": 9437184, "precision": "bf16", "via": "runner", "status": "measured",
         "clips_per_s": 4.1, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07"},
        {"frames": 8, "max_pixels": 9437184, "precision": "bf16", "via": "runner", "status": "measured",
         "clips_per_s": 3.9, "gpu": "NVIDIA H200", "date": "2026-12-03"},
    ]  # fmt: skip
    table.write_text(json.dumps({"points": points}))
    return cost_records.load_measurements(table, tmp_path / "runs")


def test_records_name_their_gpu_and_older_ones_take_their_run_folders(tmp_path):
    ms = _records(tmp_path)
    assert sorted((m.gpu, m.per_gpu) for m in ms) == [
        ("NVIDIA H100 80GB HBM3", 4.1),
        ("NVIDIA H200", 3.8),
        ("NVIDIA H200", 3.9),
    ]


def test_a_fleet_is_priced_from_its_own_model_and_never_from_another(tmp_path):
    ms = _records(tmp_path)
    h100 = cost.estimate(8, 8, "bf16", ms, gpu="NVIDIA H100 80GB HBM3")
    assert h100.clips_per_s == pytest.approx(8 * 4.1) and h100.gpu == "NVIDIA H100 80GB HBM3"
    assert "measured on NVIDIA H100 80GB HBM3" in h100.note
    # 16 frames was measured on the H200 only: no estimate for an H100, and the note says what was measured where
    none = cost.estimate(8, 16, "bf16", ms, gpu="H100")
    assert none.clips_per_s is None and none.basis == "none"
    assert "on H100" in none.note and "3.80 clips/s per GPU on NVIDIA H200" in none.note
    assert "another GPU's rate is not this one's" in none.note
    # no model given (a head): any model's records, and the note names the one the figure is from
    anyone = cost.estimate(1, 16, "bf16", ms)
    assert anyone.clips_per_s == pytest.approx(3.8) and "measured on NVIDIA H200" in anyone.note
    with pytest.raises(ValueError, match="gpu must name"):
        cost.estimate(1, 16, "bf16", ms, gpu=" \x00 ")


def test_a_mixed_fleet_adds_each_models_rate_or_says_which_model_has_none(tmp_path):
    ms = _records(tmp_path)
    mixed = cost.estimate_fleet(["NVIDIA H100 80GB HBM3"] * 2 + ["NVIDIA H200"] * 2, 8, "bf16", ms)
    assert mixed.clips_per_s == pytest.approx(2 * 4.1 + 2 * 3.9) and mixed.replicas == 4
    assert "2 x NVIDIA H100 80GB HBM3" in mixed.note and "2 x NVIDIA H200" in mixed.note
    gap = cost.estimate_fleet(["NVIDIA H100 80GB HBM3", "NVIDIA H200"], 16, "bf16", ms)
    assert gap.clips_per_s is None and "on NVIDIA H100 80GB HBM3" in gap.note


def test_the_cost_command_takes_gpu_and_defaults_to_the_launchers_record(tmp_path, capsys):
    ms_args = ["--table", str(tmp_path / "work-per-clip.json"), "--runs", str(tmp_path / "runs")]
    _records(tmp_path)
    assert cost.main(["--replicas", "2", "--frames", "8", "--gpu", "H100", *ms_args]) == 0
    assert capsys.readouterr().out.startswith("8.20 clips/s on 2 replica(s) of NVIDIA H100 80GB HBM3")
    assert cost.main(["--replicas", "2", "--frames", "16", "--gpu", "H100", *ms_args]) == 1
    assert "measured on other GPUs only" in capsys.readouterr().out
    # a data dir whose launcher recorded H100 replicas prices H100 without --gpu
    data = tmp_path / "var"
    settings = Settings(data_dir=data)
    fleet_record.save_record(
        settings,
        {
            "router_url": "http://127.0.0.1:30000",
            "replica_urls": ["http://127.0.0.1:8000"],
            "precision": "bf16",
            "gpus": [{"url": "http://127.0.0.1:8000", "index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 1}],
        },
    )
    assert cost.main(["--replicas", "2", "--frames", "16", "--data-dir", str(data), *ms_args]) == 1
    assert "not yet measured at 16 frames, 9,437,184 pixels, bf16 on NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_fleet_gpus_reads_only_a_record_of_this_fleet_that_names_every_replica(tmp_path):
    settings = Settings(data_dir=tmp_path)
    rec = {
        "router_url": "http://127.0.0.1:30000",
        "replica_urls": ["http://127.0.0.1:8000", "http://127.0.0.1:8001"],
        "gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3"}],
    }
    assert fleet_record.fleet_gpus(settings, ["http://127.0.0.1:30000/"], rec) == ["NVIDIA H100 80GB HBM3"] * 2
    assert fleet_record.fleet_gpus(settings, ["http://10.0.0.5:30000"], rec) is None  # another fleet
    assert fleet_record.fleet_gpus(settings, ["http://127.0.0.1:30000"], {**rec, "gpus": [{"name": None}]}) is None
    assert fleet_record.fleet_gpus(settings, ["http://127.0.0.1:30000"], {**rec, "gpus": None}) is None


def test_the_launcher_records_and_shows_each_replicas_gpu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # the driver's tool, as it answers on a 2-GPU H100 node
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in -L) echo 'GPU 0: H100'; echo 'GPU 1: H100';; *) printf '{SMI}';; esac\n")
    smi.chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-m", "serving.launcher", "up", "--dry-run", "--data-dir", str(tmp_path / "var")]
        + ["--fleet-mode", "gpu", "--no-mps"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "# GPU 0 under replica-0: NVIDIA H100 80GB HBM3, 81559 MiB" in out.stdout
    assert "# GPU 1 under replica-1: NVIDIA H100 80GB HBM3, 81559 MiB" in out.stdout
    from serving.launch.options import LaunchOptions
    from serving.launch.plan import plan

    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    p = plan(Settings(data_dir=tmp_path / "var", fleet_mode="gpu"), LaunchOptions(no_mps=True, dry_run=True))
    assert [(g["index"], g["name"], g["memory_mib"]) for g in p["gpus"]] == [
        (0, "NVIDIA H100 80GB HBM3", 81559),
        (1, "NVIDIA H100 80GB HBM3", 81559),
    ]
    assert [g["url"] for g in p["gpus"]] == p["replica_urls"]


def _fake_smi(tmp_path: Path, name: str, memory: int) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in -L) echo 'GPU 0: x';; *) echo '0, {name}, {memory}';; esac\n")
    smi.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize(
    ("name", "memory", "share", "refused"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "0.8", True),  # 15.9 GiB left: its API servers ran out (2026-12-07)
        ("NVIDIA H100 80GB HBM3", 81559, "0.64", False),  # 28.7 GiB left
        ("NVIDIA H200", 143771, "0.8", False),  # 28.1 GiB left: the GPU test at 96 passed there
        ("NVIDIA H200", 143771, "0.9", True),  # 14 GiB left: it killed a replica (2026-12-03)
    ],
)
def test_a_deep_window_is_refused_where_the_gpu_leaves_its_api_servers_too_little(
    tmp_path, name, memory, share, refused
):
    bin_dir = _fake_smi(tmp_path, name, memory)
    out = subprocess.run(
        [sys.executable, "-m", "serving.launcher", "up", "--dry-run", "--data-dir", str(tmp_path / "var")]
        + ["--fleet-mode", "gpu", "--no-mps", "--gpu-memory-utilization", share],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CW_PER_REPLICA_INFLIGHT": "96"},
    )
    if refused:
        assert out.returncode != 0 and "Nothing was started" in out.stderr, out.stderr
        most = {"NVIDIA H100 80GB HBM3": "0.64", "NVIDIA H200": "0.8"}[name]  # what leaves the API servers 28 GiB
        assert "GiB of GPU 0's" in out.stderr and f"--gpu-memory-utilization {most} or less" in out.stderr
    else:
        assert out.returncode == 0, out.stderr


def test_a_deep_window_on_gpus_of_unknown_memory_keeps_the_share_rule(tmp_path):
    from serving.launch.plan import refuse_deep_window_at_high_memory

    deep = Settings(data_dir=tmp_path, per_replica_inflight=96, gpu_memory_utilization=0.9)
    with pytest.raises(SystemExit, match="at 0.9, 96 in flight"):
        refuse_deep_window_at_high_memory(deep, {0: None})
    refuse_deep_window_at_high_memory(deep.replace(gpu_memory_utilization=0.8), {})
    refuse_deep_window_at_high_memory(deep.replace(per_replica_inflight=48), {0: 1024})  # the default window
