#!/usr/bin/env python3
"""Fleet benchmark on a GPU node: end-to-end clips/s and CPU core-seconds per clip, NVDEC vs CPU decoding.

Runs real vLLM (any version with the `pynvvideocodec` video backend) on distinct clips, one configuration after
another in one run, so the figures sit side by side. Prefix caching and the multimodal processor cache are off:
with them on, repeated clips reuse their vision tokens and nothing is decoded (serving/gpu_bundle/README.md,
"Pitfalls seen there").

Sub-commands (each prints what it does; results are JSON lines):
  clips DIR --count N [--seconds 10 --height 1080 --bitrate 8e6 --gop 30]   distinct synthetic 1080p clips,
        H.264 and HEVC alternating, encoded on NVENC when PyAV has it (else libx264/libx265)
  sweep --model DIR --clips DIR --out results.jsonl --configs NAME[,NAME...]  start vLLM per configuration (the
        launcher's recipe, serving.launch.commands.vllm_command, plus the configuration's overrides), warm up, drive
        load at each concurrency, stop; --dry-run prints the command lines only
  report results.jsonl [--png plot.png]   a markdown table and a plot

Example (on the GPU machine, vLLM importable, a Qwen3-VL-8B-shaped model folder at /tmp/model):
  python3 benchmarks/bench_fleet.py clips /tmp/clips --count 256
  python3 benchmarks/bench_fleet.py sweep --model /tmp/model --clips /tmp/clips --out results.jsonl \
      --configs nvdec,opencv --concurrency 64
The per-GPU reference (vLLM 0.25.0, 1xH200): 4.22 clips/s with NVDEC at 5.5 busy cores, prefix caching off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, also when loaded by path

from fleet_clips import cmd_clips  # noqa: E402
from fleet_probe import cmd_hostile, probe  # noqa: E402

from benchmarks.node.cpu import group_cpu_seconds  # noqa: E402
from data.settings import Settings  # noqa: E402
from serving import procs  # noqa: E402
from serving.fleet.reader import FleetReader  # noqa: E402
from serving.launch import commands as fleet_commands  # noqa: E402

# --------------------------------------------------------------------------------------------- vLLM configs


# overrides on top of the launcher's recipe (serving.launcher); "backend" picks the video decoder
CONFIGS: dict[str, dict] = {
    "nvdec": {"backend": "pynvvideocodec"},
    "opencv": {"backend": "opencv"},
    "nvdec-api8": {"backend": "pynvvideocodec", "api_server_count": 8, "renderer_num_workers": 8},
    "nvdec-api2": {"backend": "pynvvideocodec", "api_server_count": 2, "renderer_num_workers": 2},
    "nvdec-bt64k": {"backend": "pynvvideocodec", "max_num_batched_tokens": 65536},
    "nvdec-bt16k": {"backend": "pynvvideocodec", "max_num_batched_tokens": 16384},
    "nvdec-8f": {"backend": "pynvvideocodec", "frames": 8},
    "nvdec-32f": {"backend": "pynvvideocodec", "frames": 32},
    "nvdec-nomps": {"backend": "pynvvideocodec", "mps": False},
    "nvdec-fp8": {"backend": "pynvvideocodec", "precision": "fp8"},
}


# what the sweep may vary: configuration key -> the launcher recipe's flag
FLAGS = {
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "api_server_count": "--api-server-count",
    "renderer_num_workers": "--renderer-num-workers",
    "mm_ipc_gpu_memory_gb": "--mm-ipc-gpu-memory-gb",
}
# benchmark-only: random weights (no download), and no caches, so that every clip is decoded and encoded
BENCH_FLAGS = ("--load-format", "dummy", "--no-enable-prefix-caching")


def bench_settings(model: str, clip_root: str, data_dir: str | Path) -> Settings:
    """The settings the launcher's recipe reads: this model folder, these clips, requests name it "bench"."""
    return Settings.load(
        {"model": model, "served_model_name": "bench", "clip_root": clip_root, "data_dir": str(data_dir)}, environ={}
    )


def with_flags(cmd: list[str], values: dict[str, str]) -> list[str]:
    """`cmd` with the value after each flag of `values` replaced. A flag the recipe no longer has is an error,
    not a silent no-op (the sweep would measure something else than it says)."""
    out = list(cmd)
    for flag, value in values.items():
        if flag not in out[:-1]:
            raise ValueError(f"the launcher's vLLM recipe has no {flag}: update bench_fleet.FLAGS")
        out[out.index(flag) + 1] = value
    return out


def vllm_command(settings: Settings, port: int, cfg: dict, version: tuple[int, ...] | None) -> list[str]:
    """The replica command line: serving.launch.commands.vllm_command (the production recipe) for this
    configuration's video backend and frame count, its other knobs (FLAGS) overridden, plus BENCH_FLAGS."""
    fp8 = ("--quantization", "fp8") if cfg.get("precision") == "fp8" else ()
    cmd = fleet_commands.vllm_command(
        settings,
        port,
        version=version,
        frames=cfg.get("frames", settings.frames),
        backend=cfg["backend"],
        extra=BENCH_FLAGS + fp8,
    )
    return with_flags(cmd, {flag: str(cfg[key]) for key, flag in FLAGS.items() if key in cfg})


PROMPT = (
    "Describe this driving clip for a safety team in 100 to 200 words: the ego vehicle's manoeuvre, the other "
    "road users and what they do, the road, weather and lighting, and any hazard."
)


async def drive(url: str, clips: list[Path], concurrency: int, max_tokens: int, frames: int) -> dict:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    errors: dict[str, int] = {}
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    per_clip: list[tuple[Path, int, int]] = []  # (clip, prompt tokens, completion tokens) of each answer
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(connect=5, read=900, write=60, pool=None), limits=limits
    ) as client:

        async def one(clip: Path):
            body = {
                "model": "bench",
                "max_tokens": max_tokens,
                "min_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
                "media_io_kwargs": {"video": {"min_frames": frames, "max_frames": frames}},
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "video_url", "video_url": {"url": clip.resolve().as_uri()}},
                            {"type": "text", "text": PROMPT},
                        ],
                    }
                ],
            }
            async with sem:
                t = time.time()
                try:
                    r = await client.post(url + "/v1/chat/completions", json=body)
                except httpx.HTTPError as e:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                    return
                if r.status_code != 200:
                    key = f"{r.status_code}: {r.text[:160]}"
                    errors[key] = errors.get(key, 0) + 1
                    return
                lat.append(time.time() - t)
                u = r.json().get("usage") or {}
                usage["prompt_tokens"] += u.get("prompt_tokens", 0)
                usage["completion_tokens"] += u.get("completion_tokens", 0)
                per_clip.append((clip, u.get("prompt_tokens", 0), u.get("completion_tokens", 0)))

        await asyncio.gather(*(one(c) for c in clips))
    lat.sort()
    return {
        "ok": len(lat),
        "errors": errors,
        "usage": usage,
        "per_clip": per_clip,
        "p50_s": lat[len(lat) // 2] if lat else None,
        "p95_s": lat[int(len(lat) * 0.95)] if lat else None,
    }


def nvidia_tool(name: str) -> str | None:
    """NVIDIA's tools may sit outside PATH (/usr/local/nvidia/bin on the lent GPU machines)."""
    import shutil

    return shutil.which(name) or shutil.which(name, path="/usr/local/nvidia/bin:/usr/bin")


class GpuSampler:
    """nvidia-smi every 0.5 s: SM and NVDEC utilisation, for the 'what limits it' evidence."""

    def __init__(self):
        self.p = None
        if not nvidia_tool("nvidia-smi"):
            return
        self.p = subprocess.Popen(
            [
                nvidia_tool("nvidia-smi"),
                "--query-gpu=utilization.gpu,utilization.decoder",
                "--format=csv,noheader,nounits",
                "-lms",
                "500",
            ],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def stop(self) -> dict:
        if self.p is None:
            return {}
        self.p.terminate()
        out, _ = self.p.communicate(timeout=5)
        rows = []
        for line in out.splitlines():
            try:
                rows.append([float(x) for x in line.split(",")])
            except ValueError:
                pass
        if not rows:
            return {}
        return {
            "gpu_util_mean": round(sum(r[0] for r in rows) / len(rows), 1),
            "nvdec_util_mean": round(sum(r[1] for r in rows) / len(rows), 1),
        }


def clip_size(path: Path) -> tuple[int, int]:
    """(height, width) of a clip's video stream, from its header (PyAV, nothing decoded)."""
    import av

    with av.open(str(path)) as c:
        v = c.streams.video[0].codec_context
        return v.height, v.width


def efficiency(per_clip: list, frames: int, clips_per_s: float | None, precision: str, peak: dict | None) -> dict:
    """serving.flops.efficiency of the answered clips (their tokens, frames and size; the recipe's pixels)."""
    from serving import flops

    sizes: dict[Path, tuple[int, int]] = {}
    work = []
    for clip, prompt, completion in per_clip:
        if clip not in sizes:
            try:
                sizes[clip] = clip_size(clip)
            except Exception:  # an unreadable header: that clip is left out of the count
                continue
        h, w = sizes[clip]
        work.append(flops.ClipWork(prompt, completion, frames, h, w))
    eff = flops.efficiency(clips_per_s, work, precision, measured_peak=peak)
    eff["summary"] = flops.summary(eff)
    return eff


def measure(
    reader: FleetReader,
    url: str,
    pgid: int,
    clips: list[Path],
    concurrency: int,
    max_tokens: int,
    frames: int,
    precision: str = "bf16",
    peak: dict | None = None,
) -> dict:
    import psutil

    m0 = reader.scrape(url, timeout=10)
    cpu0 = group_cpu_seconds([pgid])
    sys0 = psutil.cpu_times()
    sampler = GpuSampler()
    t0 = time.time()
    res = asyncio.run(drive(url, clips, concurrency, max_tokens, frames))
    wall = time.time() - t0
    gpu = sampler.stop()
    cpu = group_cpu_seconds([pgid]) - cpu0
    sys1 = psutil.cpu_times()
    busy = (sum(sys1) - sys1.idle - getattr(sys1, "iowait", 0)) - (sum(sys0) - sys0.idle - getattr(sys0, "iowait", 0))
    prompt_tok = reader.scrape(url, timeout=10).prompt_tokens - m0.prompt_tokens
    n = res["ok"]
    eff = efficiency(res.pop("per_clip"), frames, n / wall if wall else None, precision, peak)
    return {
        **res,
        "efficiency": eff,
        "concurrency": concurrency,
        "requests": len(clips),
        "wall_s": round(wall, 2),
        "clips_per_s": round(n / wall, 3) if wall else None,
        "vllm_cpu_core_s_per_clip": round(cpu / n, 3) if n else None,
        "vllm_cores_busy": round(cpu / wall, 2),
        "machine_cores_busy": round(busy / wall, 2),
        "prompt_tokens_per_s": round(prompt_tok / wall, 1),
        "prompt_tokens_per_clip": round(prompt_tok / n, 1) if n else None,
        **gpu,
    }


def gpu_peaks(log_dir: Path) -> dict:
    """The GPU's bf16 and FP8 matmul peaks (benchmarks/gpu_peak.py in a child process, so that no CUDA context
    of this one holds memory while vLLM runs)."""
    out = log_dir / "peak.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_peak.py"), "--out", str(out)], timeout=300)
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError):
        return {"error": "benchmarks/gpu_peak.py wrote nothing"}


def mps(on: bool, env: dict) -> str:
    """Start (or quit) the CUDA MPS daemon on the launcher's pipe and log folders (`env` has them)."""
    tool = nvidia_tool("nvidia-cuda-mps-control")
    if tool is None:
        return "not available"
    if on:
        for var in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
            Path(env[var]).mkdir(parents=True, exist_ok=True)
        r = subprocess.run([tool, "-d"], env=env, capture_output=True, text=True)
        return "started" if r.returncode == 0 else f"failed: {r.stderr.strip() or r.stdout.strip()}"
    subprocess.run([tool], input="quit\n", env=env, capture_output=True, text=True)
    return "stopped"


def cmd_sweep(a) -> None:
    clips = sorted(Path(a.clips).glob("*.mp4"))
    if len(clips) < a.warmup + a.requests and not a.dry_run:
        raise SystemExit(f"need {a.warmup + a.requests} clips in {a.clips}, found {len(clips)}")
    warm, measured = clips[: a.warmup], clips[a.warmup : a.warmup + a.requests]
    out = Path(a.out)
    log_dir = Path(a.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    settings = bench_settings(a.model, str(Path(a.clips).resolve()), log_dir / "var")
    version = fleet_commands.parse_version(fleet_commands.installed_vllm_version())
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
        **fleet_commands.mps_env(settings),  # the MPS daemon and vLLM meet on the launcher's pipe folder
    }
    concurrencies = [int(c) for c in str(a.concurrency).split(",")]
    peak = None
    if a.tflops and not a.dry_run:
        peak = gpu_peaks(log_dir)
        print(json.dumps({"peak": peak}), flush=True)
    # the launcher's CPU budget for one replica on this node (serving.launch.commands.replica_budgets)
    budget = fleet_commands.replica_budgets(settings, 1)[0]
    env.update(budget.env())
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        frames = cfg.get("frames", settings.frames)
        argv = vllm_command(settings, a.port, cfg, version)
        print(f"[{name}] {' '.join(f'{k}={v}' for k, v in budget.env().items())} {' '.join(argv)}", flush=True)
        if a.dry_run:
            continue
        mps_state = mps(cfg.get("mps", True), env)
        url = f"http://127.0.0.1:{a.port}"
        t0 = time.monotonic()
        p = procs.start(f"vllm-{name}", argv, log=log_dir / f"vllm-{name}.log", env=env, health=url + "/health")
        row = {
            "config": name,
            **cfg,
            "mps": mps_state,
            "cpu_budget": budget.describe(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        }
        try:
            procs.wait_healthy([p], timeout=a.start_timeout, interval=1.0)
            row["startup_s"] = round(time.monotonic() - t0, 1)
            if a.probe and name == a.configs.split(",")[0]:
                try:
                    found = asyncio.run(probe(url, Path(a.clips), Path(a.hostile), PROMPT))
                except Exception as e:  # the probe is a side show: keep the measurement
                    found = {"error": f"{type(e).__name__}: {e!r}"}
                Path(a.probe).write_text(json.dumps(found, indent=1))
            asyncio.run(drive(url, warm, min(len(warm), 16), a.max_tokens, frames))
            for c in concurrencies:
                res = measure(
                    FleetReader(settings),
                    url,
                    p.pgid,
                    measured,
                    c,
                    a.max_tokens,
                    frames,
                    cfg.get("precision", "bf16"),
                    peak,
                )
                line = {**row, **res}
                print(json.dumps(line), flush=True)
                with out.open("a") as f:
                    f.write(json.dumps(line) + "\n")
        except Exception as e:  # record and go on with the next configuration
            line = {**row, "error": str(e)}
            print(json.dumps(line), flush=True)
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
            print(procs.tail(p.log, 30), flush=True)
        finally:
            procs.stop_group(p.pgid, p.pid, grace=20.0, popen=p.popen)
            time.sleep(2)  # let the GPU memory go
            if cfg.get("mps", True):
                mps(False, env)


# --------------------------------------------------------------------------------------------- report


def cmd_report(a) -> None:
    rows = [json.loads(line) for line in Path(a.results).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "config" in r]
    print(
        "| config | backend | conc. | clips/s | vLLM core-s/clip | vLLM cores busy | machine cores busy | "
        "GPU util % | NVDEC util % | prompt tok/clip | p50 s | % of peak | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['config']} | {r.get('backend')} | | failed: {r['error'][:80]} | | | | | | | | | |")
            continue
        frac = (r.get("efficiency") or {}).get("fraction_of_peak")
        print(
            f"| {r['config']} | {r['backend']} | {r['concurrency']} | {r['clips_per_s']} | "
            f"{r['vllm_cpu_core_s_per_clip']} | {r['vllm_cores_busy']} | {r['machine_cores_busy']} | "
            f"{r.get('gpu_util_mean', '')} | {r.get('nvdec_util_mean', '')} | {r['prompt_tokens_per_clip']} | "
            f"{r['p50_s'] and round(r['p50_s'], 1)} | {'' if frac is None else f'{frac:.0%}'} | "
            f"{sum(r['errors'].values()) if r['errors'] else 0} |"
        )
    if a.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ok = [r for r in rows if "error" not in r]
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        labels = [f"{r['config']}\nc={r['concurrency']}" for r in ok]
        colors = ["tab:green" if r["backend"] == "pynvvideocodec" else "tab:red" for r in ok]
        ax[0].bar(labels, [r["clips_per_s"] for r in ok], color=colors)
        ax[0].axhline(4.22, ls="--", c="gray", label="reference 4.22 (NVDEC, 0.25.0)")
        ax[0].axhline(5.0, ls=":", c="k", label="goal 5")
        ax[0].set_ylabel("clips/s on one H200")
        ax[0].legend(fontsize=8)
        ax[1].bar(labels, [r["vllm_cpu_core_s_per_clip"] for r in ok], color=colors)
        ax[1].axhline(1.0, ls=":", c="k", label="goal ≤ 1")
        ax[1].set_ylabel("CPU core-seconds per clip")
        ax[1].legend(fontsize=8)
        for x in ax:
            x.tick_params(axis="x", labelsize=7, rotation=45)
        fig.suptitle("Qwen3-VL-8B (dummy weights), distinct 1080p clips, 16 frames; green = NVDEC, red = OpenCV")
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print(f"wrote {a.png}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("clips", help="generate distinct realistic clips")
    c.add_argument("dir")
    c.add_argument("--count", type=int, default=256)
    c.add_argument("--seconds", type=float, default=10)
    c.add_argument("--height", type=int, default=1080)
    c.add_argument("--bitrate", type=float, default=8e6)
    c.add_argument("--gop", type=int, default=30)
    c.add_argument("--workers", type=int, default=0)
    s = sub.add_parser("sweep", help="run configurations one after another")
    s.add_argument("--model", required=True)
    s.add_argument("--clips", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--log-dir", default="/tmp/benchlogs")
    s.add_argument("--configs", default="nvdec,opencv")
    s.add_argument("--concurrency", default="64")
    s.add_argument("--requests", type=int, default=192)
    s.add_argument("--warmup", type=int, default=16)
    s.add_argument("--max-tokens", type=int, default=150)
    s.add_argument("--port", type=int, default=8100)
    s.add_argument("--start-timeout", type=float, default=400)
    s.add_argument(
        "--tflops", action="store_true", help="measure the bf16 and FP8 matmul peaks first (benchmarks/gpu_peak.py)"
    )
    s.add_argument("--probe", help="write real vLLM's answers to bad input, metric names etc. to this JSON file")
    s.add_argument("--hostile", default="/tmp/hostile", help="folder of hostile clips for --probe")
    s.add_argument("--dry-run", action="store_true", help="print each configuration's vLLM command line, start nothing")
    h = sub.add_parser("hostile", help="write a few hostile clips")
    h.add_argument("dir")
    h.add_argument("--good", help="folder with a good clip to truncate")
    r = sub.add_parser("report", help="table + plot from results")
    r.add_argument("results")
    r.add_argument("--png")
    a = ap.parse_args(argv)
    {"clips": cmd_clips, "sweep": cmd_sweep, "report": cmd_report, "hostile": cmd_hostile}[a.cmd](a)


if __name__ == "__main__":
    main()
