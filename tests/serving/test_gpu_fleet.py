"""The fleet on a real GPU: the project's own launcher starts CUDA MPS, a vLLM replica with NVDEC decoding and
vllm-router; the project's captioning CLI (the runner's code path) captions >= 200 distinct realistic clips plus
the hostile corpus. Every good clip must end with a stored caption and full provenance, every bad one failed with
a reason. Also records how real vLLM answers bad input (to check the simulated fleet against it) and NVDEC vs PyAV
ingest speed.

Run on a GPU node (vLLM importable, model weights or a Qwen3-VL-8B-shaped folder for --load-format dummy):

    CW_GPU_MODEL=/path/to/model CW_GPU_OUT=docs/gpu-runs/latest python -m pytest -m gpu tests/serving/test_gpu_fleet.py

Knobs (environment): CW_GPU_MODEL (default Qwen/Qwen3-VL-8B-Instruct), CW_GPU_DUMMY=1 (random weights:
adds --load-format dummy), CW_GPU_GPUS (default 0; "0,1" = two replicas behind the router;
with CW_GPU_REHEARSE one simulated replica per GPU listed, default 2), CW_GPU_CLIPS
(default 208), CW_GPU_CLIP_ROOT (a folder kept across runs: the clips are generated into it once and reused),
CW_GPU_VLLM_ARGS (extra replica flags, space-separated, e.g. "--quantization=fp8"), CW_GPU_COMPARE_DECODERS=1
(also time NVDEC vs PyAV thumbnails on 24 clips), CW_GPU_CAPTION_CHARS (caption with a new version of the
prompt whose caption is bounded to this many characters: random weights always fill the bound), CW_GPU_OUT
(report + logs + vllm-answers.json, the recording of how the fleet answered that tests/serving/test_vllm_recordings.py
replays), CW_GPU_REHEARSE=sim (run the same flow against the simulated fleet on a machine without a GPU).

CW_GPU_TOPOLOGY=nodehead runs docs/SCALE.md's deployment instead, through launch.sh on one machine: a `--role node`
(the replicas, vLLM with NVDEC and the same model knobs) bound to 127.0.0.2 holding the head's fleet key, and a
`--role head` (router behind its gate, supervised runner, app) on 127.0.0.3. The README's terminal command, run on
the head with only --data-dir and --fleet-urls while the head's supervised runner runs, must caption every clip
(>= 200 on a GPU) with 0 failed, each fetched by vLLM over the app's signed URL. Then real vLLM's answers to http
media are recorded under "http_media" of vllm-answers.json (good, tampered, expired, unsigned, unknown clip, the
origin failing, slow past VLLM_VIDEO_FETCH_TIMEOUT, oversized, another port and another host), each with what
our client makes of it; copy that key into tests/recordings/vllm-<version>-answers.json, where
tests/serving/test_vllm_recordings.py replays it against the simulated fleet.
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

ROOT = Path(__file__).resolve().parents[2]
REHEARSE = os.environ.get("CW_GPU_REHEARSE") == "sim"
TOPOLOGY = os.environ.get("CW_GPU_TOPOLOGY", "single")


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


def _post(url: str, body: dict, headers: dict) -> dict:
    try:
        r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=300)
    except httpx.HTTPError as e:
        return {"status": None, "body": f"{type(e).__name__}: {e}"}
    try:
        parsed = r.json()
    except ValueError:
        parsed = r.text[:2000]
    return {"status": r.status_code, "body": parsed}


# the caption bound of the recorded answer with logprobs: random weights fill it, and each of its tokens carries
# top_logprobs alternatives; the labels, whose confidence is read, come after it whatever its length
LOGPROBS_CAPTION_CHARS = 120


def record_answers(replica: str, served: str, clip_root: Path, good_rel: str, headers: dict) -> dict:
    """Ask the fleet what tests/serving/test_vllm_recordings.py replays: one good request as the runner builds it, the
    preset v1 schema (uniqueItems), each kind of bad input, and an answer with token logprobs (the job's
    default top_logprobs) and the 400 for more than --max-logprobs allows. Requests are our client's bodies with
    the video URL swapped; the clip root is written as <root> so the recording is machine-independent."""
    from data import prompts, taxonomy
    from data.job_params import MAX_TOP_LOGPROBS, JobParams
    from data.settings import Settings
    from serving.client import CaptionRequest, FleetClient, content_part

    settings = Settings.load(environ={}).replace(clip_root=clip_root, served_model_name=served)
    v2 = {**next(p for p in prompts.PRESETS if p["version"] == 2), "id": 2}
    client = FleetClient(settings)
    # the good answer as recorded before logprobs existed (and the bad inputs made from it): without them
    plain = JobParams(max_tokens=2048, top_logprobs=0)
    good = client.build_body(CaptionRequest(good_rel, v2, plain, camera="front_center"))
    short = json.loads(json.dumps(v2))
    short["schema"]["properties"]["caption"]["maxLength"] = LOGPROBS_CAPTION_CHARS
    with_logprobs = client.build_body(
        CaptionRequest(good_rel, short, JobParams(max_tokens=2048), camera="front_center")
    )
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
        content_part(body, "video_url")["video_url"]["url"] = url
        body["max_completion_tokens"] = 16 if name != "truncated_library_half" else 2048
        cases[name] = (url, body)
    cases["good_logprobs"] = ("file", with_logprobs)
    cases["logprobs_over_max"] = ("file", {**good, "logprobs": True, "top_logprobs": MAX_TOP_LOGPROBS + 1})
    out: dict = {}
    for name, (_url, body) in cases.items():
        t = time.time()
        ans = _post(replica, body, headers)
        ans["seconds"] = round(time.time() - t, 2)
        ans["video_url"] = content_part(body, "video_url")["video_url"]["url"].replace(root.as_uri(), "file://<root>")
        if name == "good" and isinstance(ans["body"], dict):
            ans["request_schema_features"] = sorted(
                taxonomy.unsupported_features(body["response_format"]["json_schema"]["schema"])
            )
        if name == "good_logprobs":  # what tests/serving/test_vllm_recordings.py reads the confidence against
            ans["request"] = {k: body[k] for k in ("logprobs", "top_logprobs", "max_completion_tokens")}
            ans["request"]["schema"] = body["response_format"]["json_schema"]["schema"]
        out[name] = json.loads(json.dumps(ans).replace(str(root), "<root>"))
    return out


def _vllm_version(py: str) -> str:
    if REHEARSE:
        return "simulated"
    return subprocess.run(
        [py, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
    ).stdout.strip()


def _fleet_logs(logs: Path, into: Path, prefix: str = "") -> None:
    """The start (flags, quantization, memory) and the end of each log of the fleet, appended to `into`."""
    for f in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        lines = f.read_text(errors="replace").splitlines(keepends=True)
        with into.open("a") as o:
            o.write(f"===== {prefix}{f.name} (first 150 and last 80 of {len(lines)} lines)\n")
            o.writelines(lines[:150] + (["[...]\n"] if len(lines) > 230 else []) + lines[max(150, len(lines) - 80) :])


def job_efficiency(db, job_id: int, report: dict, out: Path) -> dict:
    """Model FLOPs per clip and the share of the GPUs' peak the job achieved, at its steady rate (else the
    whole job's), from each caption's tokens, frames and pixel budget and the clip's size (serving.flops)."""
    from data.jobs import queries as job_queries
    from serving import flops
    from serving.cost_records import precision_of_args

    work = [
        flops.ClipWork(
            w["prompt_tokens"], w["completion_tokens"], w["frames"], w["height"], w["width"], w["max_pixels"]
        )
        for w in job_queries.work_per_clip(db, job_id)
        if w["width"] and w["height"]
    ]
    precision = precision_of_args(os.environ.get("CW_GPU_VLLM_ARGS", "").split())
    peak_file = Path(os.environ.get("CW_GPU_PEAK") or out / "peak.json")
    try:
        peak = json.loads(peak_file.read_text())
    except (OSError, ValueError):
        peak = None
    gpus = 1 if REHEARSE else len([g for g in str(report.get("gpus", "0")).split(",") if g.strip()])
    rate = report["job"].get("steady_clips_per_s") or report["job"]["clips_per_s"]
    cached = report["job"].get("cached_prompt_tokens_per_clip")
    eff = flops.efficiency(rate, work, precision, measured_peak=peak, gpus=gpus, cached_prompt_tokens=cached)
    eff["rate"] = "steady" if report["job"].get("steady_clips_per_s") else "whole job"
    if REHEARSE:
        eff["simulated"] = "SIMULATED: tokens from the simulator, no GPU: not a GPU figure"
    eff["summary"] = flops.summary(eff)
    return eff


def job_form_cost_line(data_dir: Path, clip_root: Path, router: str) -> str:
    """The Jobs form's cost line for 100,000 clips as the app computes it on this stack (webapp.jobs.start, over
    the launcher's record and the router's workers), as text; what stopped it where it cannot be read (the app's
    packages missing on this machine)."""
    try:
        import re

        from data.settings import Settings
        from webapp.context import AppContext
        from webapp.jobs.start import StartForm
    except ImportError as e:
        return f"not read: {e}"
    settings = Settings(data_dir=data_dir, clip_root=clip_root, fleet_urls=(router,))
    ctx = AppContext(settings, fleet_urls=[router], simulated=REHEARSE)
    try:
        html = StartForm(ctx, None)._cost_html(100_000)
    finally:
        ctx.close()
    return re.sub(r"<[^>]+>", "", html).strip() or "(none: a simulated fleet gets no estimate)"


def test_gpu_fleet_captions_a_realistic_library(tmp_path):
    assert TOPOLOGY in ("single", "nodehead"), f"CW_GPU_TOPOLOGY={TOPOLOGY}: single or nodehead"
    if TOPOLOGY == "nodehead":
        return node_and_head(tmp_path)
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
        # a clip cache another process is filling (benchmarks/gpu_session.sh pregen, node_run's layout): its first
        # `count` clips linked in once it is whole, the wait overlapping the fleet's start; nothing generated here
        source = os.environ.get("CW_GPU_CLIPS_FROM")
        if source and not (clip_root / "library").is_dir():
            from benchmarks.node.clips import link_tree

            deadline = time.time() + 900
            while not (Path(source) / ".complete").exists():
                assert time.time() < deadline, f"{source}/.complete did not appear within 900 s"
                time.sleep(2)
            linked = link_tree(Path(source) / "library", clip_root / "library", limit=count)
            assert linked == count, f"{source} holds {linked} clips, {count} asked (CW_GPU_CLIPS)"
            report["clips_from"] = source
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
        # what the job form prices in (webapp.jobs.start): the precision the launcher recorded for its replicas
        from serving.cost_records import precision_of_args

        recorded = json.loads((data_dir / "run" / "fleet.json").read_text()).get("precision")
        report["fleet_precision"] = recorded
        want = None if REHEARSE else precision_of_args(os.environ.get("CW_GPU_VLLM_ARGS", "").split())
        assert recorded == want, f"the launcher recorded precision {recorded!r} for replicas run in {want!r}"
        # and the GPU model of each replica, which the job form and serving.cost price from (issue 48)
        from serving import gpu_models

        rec = json.loads((data_dir / "run" / "fleet.json").read_text())
        report["fleet_gpus"] = [g.get("name") for g in rec.get("gpus") or []] or None
        if not REHEARSE:
            smi = gpu_models.query()
            want_gpus = [smi[int(g)]["name"] for g in os.environ.get("CW_GPU_GPUS", "0").split(",") if g.strip()]
            assert report["fleet_gpus"] == want_gpus, (report["fleet_gpus"], smi)
        report["job_form_cost_line"] = job_form_cost_line(data_dir, clip_root, router)

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

        from data import db as dbmod, taxonomy

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

        # the prompt tokens vLLM's prefix cache serves over the job (the fixed text before the video): the GPU does
        # not compute them, and the compute efficiency does not count them (serving.flops.efficiency)
        from benchmarks.node.jobs import EngineTimeline, cache_per_clip, cached_prompt_tokens

        gpus = [g.strip() for g in os.environ.get("CW_GPU_GPUS", "0").split(",") if g.strip()]
        replica_urls = [] if TOPOLOGY != "single" else [f"http://127.0.0.1:{8000 + int(g)}" for g in gpus]
        if REHEARSE:  # the simulated replicas (they count no cached tokens, and say their engines' requests)
            replica_urls = [f"http://127.0.0.1:{8000 + i}" for i in range(sim_replicas)]
        cache0 = cached_prompt_tokens(replica_urls)
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
        # the engines' view beside it, every second: where the runner's requests are (docs/GPU.md, the window's fill)
        with EngineTimeline(replica_urls, period=0.25 if REHEARSE else 1.0) as engine:
            p = _run(cap, out / "caption.log", env=env, cwd=ROOT)
        report["caption_s"] = round(time.time() - t, 1)
        (out / "engine-timeline.json").write_text(json.dumps(engine.samples))
        cpu1 = psutil.cpu_times()
        cache1 = cached_prompt_tokens(replica_urls)
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
        # through our runner: the whole job (start-up and tail included), the steady part (Little's law over the
        # requests sent while the runner held its whole in-flight window; every result's time and latency are kept
        # so that another rule can be applied), and the machine's CPU (vLLM + router + runner) per captioned clip
        from benchmarks.node.jobs import in_flight, result_times, steady_rate
        from data.jobs import queries as job_queries
        from data.settings import Settings

        work = job_queries.work_per_clip(db, job["id"])
        # steady only for a job of at least four in-flight windows: node_run's rule, one function for both
        replicas = sim_replicas if REHEARSE else len(gpus)
        # the window the runner kept: the PER_REPLICA_INFLIGHT setting as the run's environment gives it
        run_settings = Settings.load()
        window = in_flight(run_settings, replicas)
        report["job"]["in_flight"] = window
        report["job"]["window_fill_s"] = run_settings.window_fill_seconds  # idle replicas' windows filled over
        report["job"]["engine"] = engine.summary()
        if replica_urls:
            assert engine.samples, "no replica answered /metrics during the job"
        steady = steady_rate(work, window)
        if steady is not None:
            report["job"]["steady_clips_per_s"] = round(steady, 2)
        report["job"]["result_times_s"] = result_times(work)
        report["job"]["result_latencies_s"] = [
            None if w["latency_s"] is None else round(w["latency_s"], 3) for w in work
        ]
        cached = cache_per_clip(cache0, cache1, len(done))  # None: the replicas did not say (the simulated fleet)
        if cached is not None:
            report["job"]["cached_prompt_tokens_per_clip"] = round(cached, 1)
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
            # the job asked for token logprobs (JobParams' default): every label has the model's confidence
            conf = json.loads(c["confidence"] or "null")
            assert conf and "note" not in conf, (c["id"], conf)
            assert set(conf["labels"]) == set(taxonomy.ENUMS) and None not in conf["labels"].values(), conf
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
        from data.settings import Settings
        from serving import fleet_key

        auth = fleet_key.headers(Settings.load({"data_dir": str(data_dir)}, environ={}))  # replicas require it
        answers = record_answers(
            replica, served, clip_root, next(r["path"] for r in good if r["path"].startswith("library/")), auth
        )
        report["answers"] = {k: {"status": v["status"], "body": str(v["body"])[:300]} for k, v in answers.items()}
        metrics = httpx.get(replica + "/metrics", timeout=10).text
        metric_names = sorted({ln.split("{")[0].split(" ")[0] for ln in metrics.splitlines() if ln.startswith("vllm:")})
        models = httpx.get(replica + "/v1/models", headers=auth, timeout=10).json()
        version = _vllm_version(py)
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
        report["router_workers"] = httpx.get(router + "/workers", headers=auth, timeout=10).text[:500]
        assert answers["good"]["status"] == 200, answers["good"]
        assert answers["unsupported_schema"]["status"] == 400
        assert answers["good_logprobs"]["status"] == 200, answers["good_logprobs"]
        assert answers["good_logprobs"]["body"]["choices"][0]["logprobs"]["content"]
        assert answers["logprobs_over_max"]["status"] == 400, answers["logprobs_over_max"]
    finally:
        if launcher.poll() is None:
            launcher.kill()
        _run(
            [py, "-m", "serving.launcher", "down", "--data-dir", str(data_dir)], out / "launcher.log", env=env, cwd=ROOT
        )
        _fleet_logs(data_dir / "logs", out / "fleet-logs.txt")
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))


# ---- CW_GPU_TOPOLOGY=nodehead: docs/SCALE.md's deployment on one machine ---------------------------------------
NODE_HOST, HEAD_HOST, FOREIGN_HOST = "127.0.0.2", "127.0.0.3", "127.0.0.9"
FETCH_TIMEOUT_S = 8  # VLLM_VIDEO_FETCH_TIMEOUT on the node, so that the "slow" case ends in seconds


def _launch(args: list[str], env: dict, log: Path, timeout: float) -> subprocess.CompletedProcess:
    with log.open("a") as f:
        f.write(f"\n$ ./launch.sh {' '.join(args)}\n")
    p = subprocess.run(
        [str(ROOT / "launch.sh"), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )
    # the first admin's password of a throwaway head: not for a report that may be committed
    text = "".join(
        ln.split("password")[0] + "password <redacted>\n" if "password" in ln else ln + "\n"
        for ln in (p.stdout + p.stderr).splitlines()
    )
    with log.open("a") as f:
        f.write(text + f"[exit {p.returncode}]\n")
    return p


def record_http_media(replica: str, auth: dict, head_settings, good_id: int, clip: bytes) -> dict:
    """How the node's replica answers a clip URL of each kind, asked directly (with the fleet key), what our
    client makes of that answer (a caption, or a failure and whether it is retried), and whether our runner would
    send such a URL at all. The origin's failures (an error, slowness, a huge body) are played by a stand-in on
    the app's host at another port (tests/support/media_origin.py). Messages carry the URL as <url>, the app's
    host as <app-host>, the foreign one as <foreign-host>."""
    from data import prompts
    from data.job_params import JobParams
    from serving import media_urls
    from serving.answers import classify_status, error_message
    from serving.client import CaptionRequest, FleetClient, content_part
    from serving.errors import FleetError
    from tests.support.media_origin import MediaOrigin, spec_url

    app = head_settings.media_url_base
    key = media_urls.load_key(head_settings.data_dir)
    client = FleetClient(head_settings)
    prompt = {**prompts.PRESETS[-1], "id": 2}
    good = media_urls.signed_url(app, key, good_id, ttl=600)
    body = client.build_body(CaptionRequest("x.mp4", prompt, JobParams(max_tokens=2048), media_url=good))
    out: dict = {}
    with MediaOrigin(HEAD_HOST, clip) as other, MediaOrigin(FOREIGN_HOST, clip) as foreign:
        cases = {
            "good": (good, {"serve": "clip"}),
            "tampered": (good[:-4] + ("0000" if not good.endswith("0000") else "1111"), {"status": 403}),
            "expired": (media_urls.signed_url(app, key, good_id, ttl=60, now=time.time() - 600), {"status": 403}),
            "unsigned": (f"{app}{media_urls.ROUTE}/{good_id}", {"status": 403}),
            "unknown_clip": (media_urls.signed_url(app, key, 10**9, ttl=600), {"status": 404}),
            "origin_error": (spec_url(other, {"status": 500}), {"status": 500}),
            "slow": (spec_url(other, {"delay_s": FETCH_TIMEOUT_S * 3}), {"delay_s": FETCH_TIMEOUT_S * 3}),
            "oversized": (spec_url(other, {"bytes": 300 << 20}), {"bytes": 300 << 20}),
            "another_port": (spec_url(other, {"serve": "clip"}), {"serve": "clip", "port": "other"}),
            "another_host": (spec_url(foreign, {"serve": "clip"}), {"serve": "clip", "host": "foreign"}),
        }
        for name, (url, origin) in cases.items():
            b = json.loads(json.dumps(body))
            content_part(b, "video_url")["video_url"]["url"] = url
            t = time.time()
            try:
                r = httpx.post(replica + "/v1/chat/completions", json=b, headers=auth, timeout=600)
                status, text = r.status_code, r.text
                message = error_message(r) if r.status_code != 200 else ""
            except httpx.HTTPError as e:
                status, text, message = None, f"{type(e).__name__}: {e}", ""
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text[:2000]
            ans = {"status": status, "body": parsed, "seconds": round(time.time() - t, 2), "origin": origin}
            # the job's outcome were the runner to send it: a caption, or a failure and whether it is retried
            if status == 200:
                ans["client"] = {"outcome": "caption"}
            elif status is None:
                ans["client"] = {"outcome": "unreachable", "retryable": True}
            else:
                err: FleetError = classify_status(status, message, replica)
                ans["client"] = {"outcome": "failed", "kind": err.kind, "retryable": err.retryable}
            try:  # and whether our runner sends such a URL at all (only the app's origin, port included)
                client.build_body(CaptionRequest("x.mp4", prompt, media_url=url))
                ans["runner_sends"] = True
            except FleetError as e:
                ans["runner_sends"] = False
                ans["runner_refusal"] = e.kind
            text = json.dumps(ans, default=str).replace(url, "<url>")
            out[name] = json.loads(text.replace(HEAD_HOST, "<app-host>").replace(FOREIGN_HOST, "<foreign-host>"))
    return out


def node_and_head(tmp_path: Path) -> None:
    from data.settings import Settings
    from serving import procs
    from serving.launch import addresses as fleet_addresses

    out = Path(os.environ.get("CW_GPU_OUT") or tmp_path / "out")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "gpu-test.log"
    report: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rehearsal": REHEARSE,
        "topology": "nodehead",
    }
    node_dir, head_dir = tmp_path / "node", tmp_path / "head"
    clip_root = Path(os.environ.get("CW_GPU_CLIP_ROOT") or tmp_path / "clips").resolve()
    count = int(os.environ.get("CW_GPU_CLIPS", "208"))
    model = os.environ.get("CW_GPU_MODEL", "Qwen/Qwen3-VL-8B-Instruct")
    # the node serves the name every command sends by default, so the terminal command needs no --served-model-name
    served = Settings.load(environ={}).model_name
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    env.update(PYTHONUNBUFFERED="1", PYTHON=py, PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    gpus = os.environ.get("CW_GPU_GPUS", "0" if not REHEARSE else "0,1")
    n_rep = len([g for g in gpus.split(",") if g.strip()])
    app_port = procs.free_port(HEAD_HOST)
    app = f"http://{HEAD_HOST}:{app_port}"
    try:
        # 1. the clips (the library only: every clip is good, so the job must end with 0 failed)
        t = time.time()
        if not (clip_root / "library").is_dir():
            small = ["--height", "360", "--max-seconds", "11"] if REHEARSE else ["--max-seconds", "12"]
            p = _run(
                [py, "-m", "data.demo", str(clip_root / "library"), "--count", str(count), "--realistic", "--no-broken"]
                + small,
                log,
                env=env,
                cwd=ROOT,
            )
            assert p.returncode == 0
        report["clip_generation_s"] = round(time.time() - t, 1)

        # 2. the head's fleet key, stored on the node (docs/SCALE.md's order), then the node, then the head
        key = subprocess.run(
            [py, "-m", "serving.fleet_key", "show", "--data-dir", str(head_dir)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        ).stdout
        subprocess.run(
            [py, "-m", "serving.fleet_key", "set", "--data-dir", str(node_dir)],
            input=key,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        )
        node_args = ["--role", "node", "--replica-host", NODE_HOST, "--media-url-base", app, "--model", model]
        node_args += ["--served-model-name", served, "--detach", "--no-install", "--data-dir", str(node_dir)]
        if REHEARSE:
            node_args += ["--fleet-mode", "sim", "--replicas", str(n_rep)]
        else:
            node_args += ["--fleet-mode", "gpu", "--gpus", gpus]
            if os.environ.get("CW_GPU_DUMMY"):
                node_args += ["--vllm-arg=--load-format=dummy"]
            node_args += [f"--vllm-arg={a}" for a in os.environ.get("CW_GPU_VLLM_ARGS", "").split()]
        port = fleet_addresses.free_block(NODE_HOST, max(int(g) for g in gpus.split(",")) + 1, 8000)
        node_env = {
            **env,
            "CW_FLEET_PORT": str(port),
            "VLLM_VIDEO_FETCH_TIMEOUT": str(FETCH_TIMEOUT_S),
            "VLLM_MEDIA_FETCH_MAX_RETRIES": "1",  # releases that retry a fetch would otherwise multiply "slow"
        }
        t = time.time()
        p = _launch(node_args, node_env, out / "launcher.log", timeout=2400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        report["node_up_s"] = round(time.time() - t, 1)
        workers = [ln for ln in p.stdout.splitlines() if "worker URLs for the head" in ln][0].split(": ", 1)[1].strip()
        report["workers"] = workers
        head_args = ["--role", "head", "--host", HEAD_HOST, "--port", str(app_port), "--worker-urls", workers]
        # the library alone: a kept CW_GPU_CLIP_ROOT may also hold the hostile corpus of the single topology
        head_args += [
            "--clip-root",
            str(clip_root / "library"),
            "--detach",
            "--no-install",
            "--data-dir",
            str(head_dir),
        ]
        head_env = {
            **env,
            "CW_ROUTER_PORT": str(procs.free_port()),
            "CW_ROUTER_PROMETHEUS_PORT": str(procs.free_port()),
        }
        t = time.time()
        p = _launch(head_args, head_env, out / "launcher.log", timeout=2400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        report["head_up_s"] = round(time.time() - t, 1)  # ingest included
        router = json.loads((head_dir / "run" / "fleet.json").read_text())["router_url"]

        # 3. the README's terminal command on the head, with only --data-dir and --fleet-urls, while the head's
        #    supervised runner runs too
        from data import db as dbmod, heartbeats

        db = dbmod.connect(head_dir / "workbench.db")
        good = [r["id"] for r in db.query("SELECT id FROM clips WHERE probe_error IS NULL")]
        report["clips"] = {
            "good": len(good),
            "bad_at_ingest": db.execute("SELECT COUNT(*) FROM clips").fetchone()[0] - len(good),
        }
        assert len(good) >= 200 or REHEARSE, report["clips"]
        t = time.time()
        cap = [py, "-m", "serving.caption", "--data-dir", str(head_dir), "--fleet-urls", router, "--has-caption", "no"]
        p = _run(cap + ["--no-progress"], out / "caption.log", env=env, cwd=ROOT)
        report["caption_s"] = round(time.time() - t, 1)
        assert p.returncode == 0, (out / "caption.log").read_text()[-3000:]
        job = next(db.query("SELECT * FROM jobs ORDER BY id DESC LIMIT 1"))
        states = {
            r["state"]: r["n"]
            for r in db.query("SELECT state, COUNT(*) AS n FROM job_items WHERE job_id = ? GROUP BY state", [job["id"]])
        }
        report["job"] = {"total": job["total"], "state": job["state"], **states}
        report["job"]["clips_per_s"] = round(states.get("done", 0) / max(1e-9, report["caption_s"]), 2)
        runners = [b for b in heartbeats.heartbeats(db, "runner") if procs.pid_alive(b["pid"])]
        report["runners_alive"] = [b["name"] for b in runners]
        failures = {
            r["path"]: r["last_error"][:300]
            for r in db.query(
                "SELECT c.path, i.last_error FROM job_items i JOIN clips c ON c.id = i.clip_id "
                "WHERE i.job_id = ? AND i.state = 'failed' LIMIT 20",
                [job["id"]],
            )
        }
        report["failures"] = failures
        assert job["state"] == "done" and states.get("done", 0) == len(good) and not states.get("failed"), report
        assert "runner" in report["runners_alive"], "the head's supervised runner was not running"
        sims = db.execute("SELECT SUM(simulated) FROM captions WHERE job_id = ?", [job["id"]]).fetchone()[0]
        assert sims == (len(good) if REHEARSE else 0)
        from data import taxonomy

        # as in the single topology: every caption has the model's confidence for every label (the job asked for
        # token logprobs, JobParams' default), and the run reports its compute efficiency
        for c in db.query("SELECT id, confidence FROM captions WHERE job_id = ?", [job["id"]]):
            conf = json.loads(c["confidence"] or "null")
            assert conf and "note" not in conf, (c["id"], conf)
            assert set(conf["labels"]) == set(taxonomy.ENUMS) and None not in conf["labels"].values(), conf
        report["job"]["efficiency"] = job_efficiency(db, job["id"], report, out)
        with (out / "gpu-test.log").open("a") as f:
            f.write(f"compute efficiency: {report['job']['efficiency'].get('summary')}\n")

        # 4. how real vLLM answers http media, asked on the node's first replica with the head's key
        head_settings = Settings.load({"data_dir": str(head_dir)}, environ={})
        from data.library import clip_root

        head_settings = clip_root.settings_for(db, head_settings)
        clip = (
            head_settings.clip_root / next(db.query("SELECT path FROM clips WHERE id = ?", [good[0]]))["path"]
        ).read_bytes()
        db.close()
        replica = workers.split(",")[0]
        answers = record_http_media(replica, {"authorization": f"Bearer {key.strip()}"}, head_settings, good[0], clip)
        report["http_media"] = {
            k: {"status": v["status"], "client": v["client"], "runner_sends": v["runner_sends"]}
            for k, v in answers.items()
        }
        version = _vllm_version(py)
        (out / "vllm-answers.json").write_text(
            json.dumps(
                {"vllm_version": version, "recorded": report["date"], "topology": "nodehead", "http_media": answers},
                indent=1,
                default=str,
            )
        )
        a = answers
        assert a["good"]["status"] == 200 and a["good"]["client"]["outcome"] == "caption", a["good"]
        for name in ("tampered", "expired", "unsigned", "unknown_clip"):  # the app refused: the clip's fault
            assert 400 <= (a[name]["status"] or 0) < 500 and a[name]["client"]["retryable"] is False, (name, a[name])
        for name in ("origin_error", "slow"):  # the origin's trouble, not the clip's: retried
            assert a[name]["status"] and a[name]["status"] >= 500 and a[name]["client"]["retryable"], (name, a[name])
        assert a["oversized"]["status"] != 200, a["oversized"]
        for name in ("good", "tampered", "expired", "unsigned", "unknown_clip"):  # the app's own origin
            assert a[name]["runner_sends"], (name, a[name])
        for name in ("another_port", "another_host"):  # never sent by our runner, whatever vLLM would do with it
            assert not a[name]["runner_sends"] and a[name]["runner_refusal"] == "origin", (name, a[name])
        assert a["another_host"]["status"] == 400, a["another_host"]  # --allowed-media-domains: host checked
    finally:
        for d in (head_dir, node_dir):
            _launch(["stop", "--data-dir", str(d)], env, out / "launcher.log", timeout=300)
        for d in (node_dir, head_dir):
            _fleet_logs(d / "logs", out / "fleet-logs.txt", prefix=f"{d.name}/")
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
