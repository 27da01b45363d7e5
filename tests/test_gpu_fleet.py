"""The fleet on a real GPU: the project's own launcher starts CUDA MPS, a vLLM replica with NVDEC decoding and
vllm-router; the project's captioning CLI (the runner's code path) captions >= 200 distinct realistic clips plus
the hostile corpus. Every good clip must end with a stored caption and full provenance, every bad one failed with
a reason. Also records how real vLLM answers bad input (to check the simulated fleet against it) and NVDEC vs PyAV
ingest speed.

Run on a GPU node (vLLM importable, model weights or a Qwen3-VL-8B-shaped folder for --load-format dummy):

    CW_GPU_MODEL=/path/to/model CW_GPU_OUT=docs/gpu-runs/latest python -m pytest -m gpu tests/test_gpu_fleet.py

Knobs (environment): CW_GPU_MODEL (default Qwen/Qwen3-VL-8B-Instruct), CW_GPU_DUMMY=1 (random weights:
adds --load-format dummy), CW_GPU_GPUS (default 0; "0,1" = two replicas behind the router;
with CW_GPU_REHEARSE one simulated replica per GPU listed, default 2), CW_GPU_CLIPS
(default 208), CW_GPU_CLIP_ROOT (a folder kept across runs: the clips are generated into it once and reused),
CW_GPU_VLLM_ARGS (extra replica flags, space-separated, e.g. "--quantization=fp8"), CW_GPU_COMPARE_DECODERS=1
(also time NVDEC vs PyAV thumbnails on 24 clips), CW_GPU_CAPTION_CHARS (caption with a new version of the
prompt whose caption is bounded to this many characters: random weights always fill the bound), CW_GPU_OUT
(report + logs + vllm-answers.json, the recording of how the fleet answered that tests/test_vllm_recordings.py
replays), CW_GPU_REHEARSE=sim (run the same flow against the simulated fleet on a machine without a GPU),
CW_GPU_PEAK (benchmarks/gpu_peak.py's JSON, measured before the fleet started; default CW_GPU_OUT/peak.json, else
the recorded peaks): the denominator of the compute efficiency the report gives (report.json "job.efficiency").
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
REHEARSE = os.environ.get("CW_GPU_REHEARSE") == "sim"


def _gpu_reason() -> str | None:
    smi = shutil.which("nvidia-smi") or shutil.which("nvidia-smi", path="/usr/local/nvidia/bin")
    if not smi:
        return "no NVIDIA GPU here (nvidia-smi not found): run on a GPU node, see docs/GPU.md"
    out = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout
    if "GPU" not in out:
        return "nvidia-smi lists no GPU"
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not importable (pip install -e '.[gpu]', or the offline bundle on PYTHONPATH)"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.timeout(5400)]  # vLLM start + a full run per GPU count
if not REHEARSE:
    pytestmark.append(pytest.mark.skipif(_gpu_reason() is not None, reason=_gpu_reason() or ""))


def _run(cmd: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    t = time.time()
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, **kw)
        f.write(f"[exit {p.returncode} after {time.time() - t:.1f} s]\n")
    return p


def _post(url: str, body: dict) -> dict:
    try:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    except httpx.HTTPError as e:
        return {"status": None, "body": f"{type(e).__name__}: {e}"}
    try:
        parsed = r.json()
    except ValueError:
        parsed = r.text[:2000]
    return {"status": r.status_code, "body": parsed}


def record_answers(replica: str, served: str, clip_root: Path, good_rel: str) -> dict:
    """Ask the fleet what tests/test_vllm_recordings.py replays: one good request as the runner builds it, the
    preset v1 schema (uniqueItems), and each kind of bad input. Requests are our client's bodies with the video
    URL swapped; the clip root is written as <root> so the recording is machine-independent."""
    from data import prompts, taxonomy
    from data.job_params import JobParams
    from data.settings import Settings
    from serving.client import CaptionRequest, FleetClient

    settings = Settings.load(environ={}).replace(clip_root=clip_root, served_model_name=served)
    v2 = {**next(p for p in prompts.PRESETS if p["version"] == 2), "id": 2}
    client = FleetClient(settings)
    good = client.build_body(CaptionRequest(good_rel, v2, JobParams(max_tokens=2048), camera="front_center"))
    hostile = clip_root / "hostile"
    trunc = sorted(hostile.glob("truncated_faststart_*pct.mp4"))
    cases: dict[str, tuple[str, dict]] = {
        "good": ("file", good),
        "unsupported_schema": (
            "file",
            {
                **good,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "av-hazard_v1", "schema": taxonomy.CAPTION_SCHEMA, "strict": True},
                },
            },
        ),
    }
    root = clip_root.resolve()
    urls = {
        "missing_file": root.as_uri() + "/library/no_such_clip.mp4",
        "outside_root": "file:///etc/passwd",
        "dotdot": root.as_uri() + "/../../etc/passwd",
        "zero_length": (hostile / "zero_length.mp4").resolve().as_uri(),
        "html_named": (hostile / "html_named.mp4").resolve().as_uri(),
        "random_bytes": (hostile / "random_bytes.mp4").resolve().as_uri(),
        "audio_only": (hostile / "audio_only_aac.mp4").resolve().as_uri(),
        "truncated": trunc[len(trunc) // 2].resolve().as_uri() if trunc else root.as_uri() + "/hostile/none.mp4",
        "truncated_library_half": (hostile / "library_clip_cut_in_half.mp4").resolve().as_uri(),
    }
    for name, url in urls.items():
        body = json.loads(json.dumps(good))
        body["messages"][1]["content"][0]["video_url"]["url"] = url
        body["max_completion_tokens"] = 16 if name != "truncated_library_half" else 2048
        cases[name] = (url, body)
    out: dict = {}
    for name, (_url, body) in cases.items():
        t = time.time()
        ans = _post(replica, body)
        ans["seconds"] = round(time.time() - t, 2)
        ans["video_url"] = body["messages"][1]["content"][0]["video_url"]["url"].replace(root.as_uri(), "file://<root>")
        if name == "good" and isinstance(ans["body"], dict):
            ans["request_schema_features"] = sorted(
                taxonomy.unsupported_features(body["response_format"]["json_schema"]["schema"])
            )
        out[name] = json.loads(json.dumps(ans).replace(str(root), "<root>"))
    return out


def job_efficiency(db, job_id: int, report: dict, out: Path) -> dict:
    """Model FLOPs per clip and the share of the GPUs' peak the job achieved, at its steady rate (else the
    whole job's), from each caption's tokens, frames and pixel budget and the clip's size (serving.flops)."""
    from data import job_queries
    from serving import flops

    work = [
        flops.ClipWork(
            w["prompt_tokens"], w["completion_tokens"], w["frames"], w["height"], w["width"], w["max_pixels"]
        )
        for w in job_queries.work_per_clip(db, job_id)
        if w["width"] and w["height"]
    ]
    args = os.environ.get("CW_GPU_VLLM_ARGS", "").replace("=", " ").split()
    precision = "fp8" if "--quantization" in args and "fp8" in args else "bf16"
    peak_file = Path(os.environ.get("CW_GPU_PEAK") or out / "peak.json")
    try:
        peak = json.loads(peak_file.read_text())
    except (OSError, ValueError):
        peak = None
    gpus = 1 if REHEARSE else len([g for g in str(report.get("gpus", "0")).split(",") if g.strip()])
    rate = report["job"].get("steady_clips_per_s") or report["job"]["clips_per_s"]
    eff = flops.efficiency(rate, work, precision, measured_peak=peak, gpus=gpus)
    eff["rate"] = "steady" if report["job"].get("steady_clips_per_s") else "whole job"
    if REHEARSE:
        eff["simulated"] = "SIMULATED: tokens from the simulator, no GPU: not a GPU figure"
    eff["summary"] = flops.summary(eff)
    return eff


def test_gpu_fleet_captions_a_realistic_library(tmp_path):
    out = Path(os.environ.get("CW_GPU_OUT") or tmp_path / "out")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "gpu-test.log"
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rehearsal": REHEARSE}
    data_dir = tmp_path / "var"
    clip_root = Path(os.environ.get("CW_GPU_CLIP_ROOT") or data_dir / "clips").resolve()
    clip_root.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    count = int(os.environ.get("CW_GPU_CLIPS", "208"))
    model = os.environ.get("CW_GPU_MODEL", "Qwen/Qwen3-VL-8B-Instruct")
    served = "qwen3-vl-8b"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CW_DATA_DIR": str(data_dir), "CW_CLIP_ROOT": str(clip_root)}
    env.pop("CW_DB", None)
    py = sys.executable

    # 1. the fleet, started by our launcher, comes up while the clips are written
    up = [
        py,
        "-m",
        "serving.launcher",
        "up",
        "--data-dir",
        str(data_dir),
        "--clip-root",
        str(clip_root),
        "--model",
        model,
        "--served-model-name",
        served,
    ]
    if REHEARSE:
        # one simulated replica per GPU named in CW_GPU_GPUS (benchmarks/node_run.py rehearses 8), else 2
        sim_replicas = len([g for g in os.environ.get("CW_GPU_GPUS", "0,1").split(",") if g.strip()])
        up += ["--fleet-mode", "sim", "--replicas", str(sim_replicas), "--sim-arg=--speed 0.2"]
    else:
        up += ["--fleet-mode", "gpu", "--gpus", os.environ.get("CW_GPU_GPUS", "0")]
        if os.environ.get("CW_GPU_DUMMY"):
            up += ["--vllm-arg=--load-format=dummy"]
        up += [f"--vllm-arg={a}" for a in os.environ.get("CW_GPU_VLLM_ARGS", "").split()]
    report["gpus"] = os.environ.get("CW_GPU_GPUS", "0") if not REHEARSE else f"sim x{sim_replicas}"
    report["vllm_args"] = os.environ.get("CW_GPU_VLLM_ARGS", "")
    t_up = time.time()
    launcher = subprocess.Popen(
        up, stdout=(out / "launcher.log").open("w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT
    )
    try:
        t = time.time()
        if not (clip_root / "library").is_dir():  # a kept CW_GPU_CLIP_ROOT already has them: reused as they are
            small = ["--height", "360", "--max-seconds", "11"] if REHEARSE else ["--max-seconds", "12"]
            p = _run(
                [
                    py,
                    "-m",
                    "data.demo",
                    str(clip_root / "library"),
                    "--count",
                    str(count),
                    "--realistic",
                    "--no-broken",
                    *small,
                ],
                log,
                env=env,
                cwd=ROOT,
            )
            assert p.returncode == 0
        if not (clip_root / "hostile").is_dir():
            _run([py, "-m", "data.demo", str(clip_root / "hostile"), "--hostile"], log, env=env, cwd=ROOT)
            first = sorted((clip_root / "library").rglob("*.mp4"))[0].read_bytes()
            (clip_root / "hostile" / "library_clip_cut_in_half.mp4").write_bytes(first[: len(first) // 2])
        report["clip_generation_s"] = round(time.time() - t, 1)

        # 2. wait for the fleet
        rc = launcher.wait(timeout=1800)
        report["fleet_up_s"] = round(time.time() - t_up, 1)
        assert rc == 0, (out / "launcher.log").read_text()[-3000:]
        router = subprocess.run(
            [py, "-m", "serving.launcher", "url", "--data-dir", str(data_dir)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        report["fleet_url"] = router
        assert router.endswith(":30000"), f"the launcher started no router: {router}"

        # 3. ingest, after vLLM took its GPU memory; thumbnails + filmstrips with the default decoder (PyAV)
        t = time.time()
        p = _run(
            [py, "-m", "data.ingest", str(clip_root), "--data-dir", str(data_dir), "--quiet"], log, env=env, cwd=ROOT
        )
        assert p.returncode == 0
        report["ingest_s"] = round(time.time() - t, 1)
        if os.environ.get("CW_GPU_COMPARE_DECODERS"):
            sample = sorted((clip_root / "library").rglob("*.mp4"))[:24]
            for decoder in ("nvdec", "pyav"):
                d = tmp_path / f"ingest-{decoder}"
                (d / "clips").mkdir(parents=True)
                for i, c in enumerate(sample):
                    shutil.copy(c, d / "clips" / f"{i:02d}.mp4")  # a symlink would leave that clip root
                t = time.time()
                p = _run(
                    [py, "-m", "data.ingest", str(d / "clips"), "--data-dir", str(d), "--decoder", decoder, "--quiet"],
                    log,
                    env=env,
                    cwd=ROOT,
                )
                report[f"ingest_24_{decoder}_s"] = (
                    round(time.time() - t, 1) if p.returncode == 0 else f"exit {p.returncode}"
                )

        from data import db as dbmod

        db = dbmod.connect(data_dir / "workbench.db")
        rows = list(db.query("SELECT id, path, probe_error, filmstrip, media_decoder FROM clips"))
        good = [r for r in rows if r["probe_error"] is None]
        bad = [r for r in rows if r["probe_error"] is not None]
        report["clips"] = {
            "good": len(good),
            "bad_at_ingest": len(bad),
            "media_decoders": sorted({str(r["media_decoder"]) for r in good}),
        }
        # the library's clips were generated to be good: any reason here is ours or the machine's
        library_errors = {r["probe_error"] for r in bad if r["path"].startswith("library/")}
        report["clips"]["library_errors"] = sorted(library_errors)[:5]
        assert len(good) >= 200 or REHEARSE, report["clips"]["library_errors"]
        assert all(r["filmstrip"] for r in good)

        # 4. caption everything through the router with the lead's CLI (the runner's code path)
        import psutil

        chars = os.environ.get("CW_GPU_CAPTION_CHARS")
        if chars:
            # random weights fill the caption to its bound (1,500 characters: ~480 tokens, 2-3x a real model's
            # 100-200); a version of the prompt with a shorter bound measures the fleet at a realistic length
            from data import prompts

            base = prompts.latest(db)
            schema = json.loads(json.dumps(base["schema"]))
            schema["properties"]["caption"]["maxLength"] = int(chars)
            prompts.create_version(
                db,
                name=base["name"],
                system=base["system"],
                user=base["user"],
                schema=schema,
                description=f"{base['description']}; caption at most {int(chars)} characters (GPU test)",
            )
            report["caption_max_chars"] = int(chars)

        cpu0 = psutil.cpu_times()
        t = time.time()
        cap = [
            py,
            "-m",
            "serving.caption",
            "--data-dir",
            str(data_dir),
            "--fleet-urls",
            router,
            "--served-model-name",
            served,
            "--max-tokens",
            "2048",
            "--no-progress",
            "--name",
            "gpu test",
            "--request-timeout",
            "600",
        ]
        p = _run(cap, out / "caption.log", env=env, cwd=ROOT)
        report["caption_s"] = round(time.time() - t, 1)
        cpu1 = psutil.cpu_times()
        busy_s = sum(getattr(cpu1, f) - getattr(cpu0, f) for f in ("user", "system", "nice", "irq", "softirq"))
        assert p.returncode == 0, (out / "caption.log").read_text()[-3000:]

        job = next(db.query("SELECT * FROM jobs ORDER BY id DESC LIMIT 1"))
        items = list(
            db.query(
                "SELECT i.*, c.path, c.probe_error FROM job_items i JOIN clips c ON c.id = i.clip_id WHERE job_id = ?",
                [job["id"]],
            )
        )
        done = [i for i in items if i["state"] == "done"]
        failed = [i for i in items if i["state"] == "failed"]
        report["job"] = {
            "total": job["total"],
            "done": len(done),
            "failed": len(failed),
            "state": job["state"],
            "clips_per_s": round(len(done) / report["caption_s"], 2),
        }
        # through our runner: the whole job (start-up and tail included), the steady middle 80 % of results,
        # and the machine's CPU (vLLM + router + runner) per captioned clip
        ends = sorted(
            r["created_at"]
            for r in db.query(
                "SELECT c.created_at FROM captions c JOIN job_items i ON i.caption_id = c.id WHERE i.job_id = ?",
                [job["id"]],
            )
        )
        if len(ends) >= 20:
            lo, hi = ends[len(ends) // 10], ends[len(ends) * 9 // 10]
            report["job"]["steady_clips_per_s"] = round((len(ends) * 9 // 10 - len(ends) // 10) / (hi - lo), 2)
        report["job"]["cpu_core_s_per_clip"] = round(busy_s / max(1, len(done)), 2)
        report["job"]["cpu_cores_busy"] = round(busy_s / report["caption_s"], 1)
        report["job"]["efficiency"] = job_efficiency(db, job["id"], report, out)
        with log.open("a") as f:
            f.write(f"compute efficiency: {report['job']['efficiency'].get('summary')}\n")
        report["failures"] = {i["path"]: i["last_error"][:200] for i in failed}
        report["failure_kinds"] = sorted({i["error_kind"] or "" for i in failed})
        assert job["state"] == "done"
        assert not [i for i in items if i["state"] in ("pending", "leased")]
        # every clip that passed ingest is captioned; every failure names its reason
        assert {i["clip_id"] for i in done} == {r["id"] for r in good}, report["failures"]
        assert all(i["last_error"] for i in failed)
        caps = list(
            db.query(
                "SELECT c.* FROM captions c JOIN job_items i ON i.caption_id = c.id WHERE i.job_id = ?", [job["id"]]
            )
        )
        assert len(caps) == len(done)
        for c in caps:
            for key in (
                "model",
                "prompt_id",
                "prompt_version",
                "replica",
                "decode_backend",
                "latency_ms",
                "prompt_tokens",
                "completion_tokens",
                "finish_reason",
                "frames",
            ):
                assert c[key] not in (None, ""), (key, dict(c))
            assert c["finish_reason"] == "stop"
            assert c["simulated"] == (1 if REHEARSE else 0)
        sample_cap = dict(caps[0])
        report["provenance_example"] = {
            k: sample_cap[k]
            for k in (
                "model",
                "prompt_name",
                "prompt_version",
                "replica",
                "decode_backend",
                "latency_ms",
                "prompt_tokens",
                "completion_tokens",
                "finish_reason",
                "frames",
            )
        }
        report["prompt_tokens_mean"] = round(sum(c["prompt_tokens"] for c in caps) / len(caps), 1)

        # 5. how the fleet answers: a good request, the v1 schema, bad input; its metric names and model list
        replica = "http://127.0.0.1:8000"
        answers = record_answers(
            replica, served, clip_root, next(r["path"] for r in good if r["path"].startswith("library/"))
        )
        report["answers"] = {k: {"status": v["status"], "body": str(v["body"])[:300]} for k, v in answers.items()}
        metrics = httpx.get(replica + "/metrics", timeout=10).text
        metric_names = sorted({ln.split("{")[0].split(" ")[0] for ln in metrics.splitlines() if ln.startswith("vllm:")})
        models = httpx.get(replica + "/v1/models", timeout=10).json()
        version = (
            "simulated"
            if REHEARSE
            else subprocess.run(
                [py, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
            ).stdout.strip()
        )
        (out / "vllm-answers.json").write_text(
            json.dumps(
                {
                    "vllm_version": version,
                    "recorded": report["date"],
                    "gpus": report["gpus"],
                    "served_model_name": served,
                    "answers": answers,
                    "metric_names": metric_names,
                    "models": models,
                },
                indent=1,
                default=str,
            )
        )
        report["router_workers"] = httpx.get(router + "/workers", timeout=10).text[:500]
        assert answers["good"]["status"] == 200, answers["good"]
        assert answers["unsupported_schema"]["status"] == 400
    finally:
        if launcher.poll() is None:
            launcher.kill()
        _run(
            [py, "-m", "serving.launcher", "down", "--data-dir", str(data_dir)], out / "launcher.log", env=env, cwd=ROOT
        )
        for f in sorted((data_dir / "logs").glob("*.log")):
            lines = f.read_text(errors="replace").splitlines(keepends=True)
            with (out / "fleet-logs.txt").open("a") as o:  # the start (flags, quantization, memory) and the end
                o.write(f"===== {f.name} (first 150 and last 80 of {len(lines)} lines)\n")
                o.writelines(
                    lines[:150] + (["[...]\n"] if len(lines) > 230 else []) + lines[max(150, len(lines) - 80) :]
                )
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
