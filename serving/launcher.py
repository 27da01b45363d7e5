"""Bring the fleet up and down: CUDA MPS, one vLLM replica per GPU (or the simulated fleet), vllm-router in front.

    python -m serving.launcher up --fleet gpu --gpus 0,1,2,3,4,5,6,7 --clip-root /data/clips
    python -m serving.launcher up --fleet gpu --gpus 0,1 --dry-run --vllm-version 0.33.0 --vllm-arg=--load-format=dummy
    python -m serving.launcher up --fleet sim --replicas 4
    python -m serving.launcher status
    python -m serving.launcher url            # what the runner and the app should talk to
    python -m serving.launcher down

The replica command is NVIDIA's recipe for vLLM with NVDEC decoding (docs/GPU.md, "Running the fleet"): GPU video
decoding selected through the `backend` key of `--media-io-kwargs` (never VLLM_VIDEO_LOADER_BACKEND, which Qwen3-VL
ignores), a decode budget from `--mm-ipc-gpu-memory-gb`, `hw_decoders` only on vLLM releases after 0.25.1, one replica
per GPU through `CUDA_VISIBLE_DEVICES` (the decoder always uses device 0 of its process), started with `vllm serve` (the
bare api_server module ignores `--api-server-count`). Every process gets its own process group and log file under
DATA_DIR/logs; its pid/pgid go to DATA_DIR/run/fleet.json as soon as it starts, so `down` and `status` work from another
shell and a failed start can be cleaned up. Processes are stopped by process group, never by name.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import httpx

from data import library
from data.settings import Settings, add_arguments, from_args
from serving import procs

HW_DECODERS_SINCE = (0, 25, 1)  # hw_decoders exists in releases after this one
SETTING_NAMES = (
    "data_dir",
    "clip_root",
    "fleet",
    "fleet_port",
    "router_port",
    "gpus",
    "model",
    "served_model_name",
    "frames",
    # beyond one node (issue 12): roles, where replicas bind, the head's worker list, remote media
    "router_prometheus_port",
    "role",
    "replica_host",
    "worker_urls",
    "media_url_base",
    "allowed_media_domains",
)


# ---- versions and GPUs --------------------------------------------------------------------------------------
def parse_version(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    nums = re.findall(r"\d+", v.split("+")[0])[:3]
    return tuple(int(n) for n in nums) if nums else None


def installed_vllm_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def visible_gpus() -> list[int]:
    """GPU indices from `nvidia-smi -L` ([] without a GPU or driver)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(m.group(1)) for m in re.finditer(r"^GPU (\d+):", out, re.M)]


def choose_gpus(spec: str) -> list[int]:
    if spec.strip():
        return [int(x) for x in re.split(r"[,\s]+", spec.strip()) if x]
    return visible_gpus()


def _entry(script: str, module: str) -> list[str]:
    """`script` when it is on PATH (or nothing is installed: dry runs print the usual name), else
    `python -m module`: on an offline GPU node the packages are often importable from a bundle on PYTHONPATH
    without their console scripts (`vllm serve` is `python -m vllm.entrypoints.cli.main serve`)."""
    import importlib.util
    import shutil

    if shutil.which(script):
        return [script]
    try:
        found = importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    return [sys.executable, "-m", module] if found else [script]


STRUCTURED_OUTPUTS = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}, separators=(",", ":"))


# ---- command lines --------------------------------------------------------------------------------------------
def vllm_command(
    settings: Settings,
    port: int,
    *,
    version: tuple[int, ...] | None,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
    frames: int | None = None,
    backend: str = "pynvvideocodec",
) -> list[str]:
    """`vllm serve` for one replica, the NVIDIA recipe adapted to the vLLM `version`. `backend` is the video
    decoder (`pynvvideocodec` = NVDEC; `opencv` = CPU decoding, for side-by-side benchmarks)."""
    frames = frames or settings.frames
    video: dict = {"backend": backend, "min_frames": frames, "max_frames": frames}
    # hw_decoders is a knob of the NVDEC backend only
    if backend == "pynvvideocodec" and (version is None or version > HW_DECODERS_SINCE):
        video["hw_decoders"] = 2
    cmd = [
        *_entry("vllm", "vllm.entrypoints.cli.main"),
        "serve",
        settings.model,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "1024",
        "--max-num-batched-tokens",
        "32768",
        "--api-server-count",
        "4",
        "--renderer-num-workers",
        "4",
        "--async-scheduling",
        "--mm-ipc-gpu-memory-gb",
        "2",
        "--media-io-kwargs",
        json.dumps({"video": video}, separators=(",", ":")),
        "--mm-processor-kwargs",
        json.dumps({"size": {"shortest_edge": 65536, "longest_edge": 9437184}}, separators=(",", ":")),
        "--allowed-local-media-path",
        str(settings.clip_root),
        # 0.25: renderer workers > 1 refuse to start with the (not thread-safe) processor cache on
        "--mm-processor-cache-gb",
        "0",
        # structured output chosen on purpose: xgrammar (the schema we send is what it compiles, see
        # data.taxonomy.model_schema) and compact JSON (no whitespace tokens; 0.25 refuses this option
        # with backend "auto")
        "--structured-outputs-config",
        STRUCTURED_OUTPUTS,
    ]
    if settings.served_model_name:
        cmd += ["--served-model-name", settings.served_model_name]
    return cmd + list(extra)


def router_command(
    settings: Settings,
    worker_urls: Sequence[str],
    *,
    prometheus_port: int = 29000,
    health_interval: int = 10,
    startup_timeout: int = 1800,
) -> list[str]:
    return [
        *_entry("vllm-router", "vllm_router.launch_router"),
        "--host",
        "127.0.0.1",
        "--port",
        str(settings.router_port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        "round_robin",
        "--worker-startup-timeout-secs",
        str(startup_timeout),
        "--health-check-interval-secs",
        str(health_interval),
        "--request-timeout-secs",
        "1800",
        "--retry-max-retries",
        "2",
        "--prometheus-port",
        str(prometheus_port),
    ]


def simfleet_command(settings: Settings, replicas: int, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "serving.simfleet",
        "--replicas",
        str(replicas),
        "--port",
        str(settings.fleet_port),
        "--host",
        settings.replica_host,
        "--allowed-local-media-path",
        str(settings.clip_root),
        "--model",
        settings.model_name,
        *extra,
    ]


def mps_env(settings: Settings) -> dict[str, str]:
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(settings.data_dir / "run" / "mps"),
        "CUDA_MPS_LOG_DIRECTORY": str(settings.data_dir / "logs" / "mps"),
    }


def plan(settings: Settings, args: argparse.Namespace) -> dict:
    """Everything `up` would start, in order: [{name, cmd, env, log, url, health}], plus the fleet URLs."""
    settings = library.settings_for_path(settings)  # replicas may read only the library's recorded clip root
    logs = settings.data_dir / "logs"
    if settings.role == "head":
        return head_plan(settings, args)
    if settings.role == "node":  # replicas fetch clips over signed URLs only: file:// reaches an empty folder
        settings = settings.replace(clip_root=no_local_media(settings))
    fleet = settings.fleet if settings.fleet in ("sim", "gpu") else ("gpu" if visible_gpus() else "sim")
    steps: list[dict] = []
    media_args = remote_media_args(settings)
    mps = None
    if fleet == "gpu":
        gpus = choose_gpus(settings.gpus)
        if not gpus:
            raise SystemExit("launcher: no GPU found (nvidia-smi -L); pass --gpus 0,1,... or use --fleet sim")
        version = parse_version(args.vllm_version or installed_vllm_version())
        extra = media_args + [t for a in args.vllm_arg for t in shlex.split(a)]
        env_common: dict[str, str] = {}
        if not args.no_mps:
            mps = {"cmd": ["nvidia-cuda-mps-control", "-d"], "env": mps_env(settings)}
            env_common.update(mps_env(settings))
        replica_urls = []
        for i in gpus:
            port = settings.fleet_port + i
            url = f"http://{advertised_host(settings.replica_host)}:{port}"
            replica_urls.append(url)
            steps.append(
                {
                    "name": f"replica-{i}",
                    "cmd": vllm_command(settings, port, version=version, extra=extra, host=settings.replica_host),
                    "env": {"CUDA_VISIBLE_DEVICES": str(i), **env_common},
                    "log": str(logs / f"replica-{i}.log"),
                    "url": url,
                    "health": f"http://{local_host(settings.replica_host)}:{port}/health",
                }
            )
        timeout = args.startup_timeout or 1800
    else:
        n = args.replicas
        replica_urls = [f"http://{advertised_host(settings.replica_host)}:{settings.fleet_port + i}" for i in range(n)]
        steps.append(
            {
                "name": "simfleet",
                "cmd": simfleet_command(
                    settings,
                    n,
                    remote_media_args(settings, sim=True) + [t for a in args.sim_arg for t in shlex.split(a)],
                ),
                "env": {},
                "log": str(logs / "simfleet.log"),
                "url": ",".join(replica_urls),
                "health": [
                    f"http://{local_host(settings.replica_host)}:{settings.fleet_port + i}/health" for i in range(n)
                ],
            }
        )
        timeout = args.startup_timeout or 60
    router_url = None
    router_cmd = _entry("vllm-router", "vllm_router.launch_router")
    # the router runs when its script is on PATH or its module is importable (an offline bundle on PYTHONPATH)
    if (
        not args.no_router
        and settings.role != "node"
        and (router_cmd != ["vllm-router"] or shutil.which("vllm-router") or args.dry_run)
    ):
        router_url = f"http://127.0.0.1:{settings.router_port}"
        steps.append(
            {
                "name": "router",
                "cmd": router_command(
                    settings,
                    replica_urls,
                    prometheus_port=settings.router_prometheus_port,
                    health_interval=10 if fleet == "gpu" else 1,
                    startup_timeout=int(timeout),
                ),
                "env": {},
                "log": str(logs / "router.log"),
                "url": router_url,
                "health": router_url + "/liveness",
            }
        )
    return {
        "fleet": fleet,
        "mps": mps,
        "steps": steps,
        "replica_urls": replica_urls,
        "router_url": router_url,
        "timeout": timeout,
    }


# ---- beyond one node: roles, addresses, ports of our own (issue 12; R14) -------------------------------------
def advertised_host(bind: str) -> str:
    """The host others use to reach a server bound to `bind` (a wildcard bind is reached by our name)."""
    if bind in ("0.0.0.0", "::", ""):
        import socket

        return socket.getfqdn()
    return f"[{bind}]" if ":" in bind else bind


def local_host(bind: str) -> str:
    """The address this machine's health checks use for a server bound to `bind`."""
    if bind in ("0.0.0.0", ""):
        return "127.0.0.1"
    if bind == "::":
        return "[::1]"
    return f"[{bind}]" if ":" in bind else bind


def no_local_media(settings: Settings) -> Path:
    """An empty folder given to a GPU node's replicas as --allowed-local-media-path: no file:// URL reaches
    anything there, so clips come only over signed HTTP(S) URLs."""
    path = settings.data_dir / "no-local-media"
    path.mkdir(parents=True, exist_ok=True)
    return path


def remote_media_args(settings: Settings, *, sim: bool = False) -> list[str]:
    """`--allowed-media-domains` for replicas that fetch clips over http(s) ([] when clips go as file://).
    vLLM takes the hosts as separate arguments (nargs='+'); the simulated fleet one comma-separated value."""
    from serving import media_urls

    domains = media_urls.media_domains(settings)
    if not domains:
        return []
    return ["--allowed-media-domains", domains] if sim else ["--allowed-media-domains", *domains.split(",")]


def worker_list(settings: Settings) -> list[str]:
    urls = [u.strip().rstrip("/") for u in settings.worker_urls.split(",") if u.strip()]
    bad = [u for u in urls if not re.match(r"^https?://[^/\s]+$", u)]
    if bad:
        raise SystemExit(
            f"launcher: not a replica URL: {', '.join(bad)} (expected http://HOST:PORT, e.g. http://node1:8000)"
        )
    return list(dict.fromkeys(urls))


def head_plan(settings: Settings, args: argparse.Namespace) -> dict:
    """The head: no replicas here, vllm-router over the GPU nodes' replicas (WORKER_URLS)."""
    workers = worker_list(settings)
    if not workers:
        raise SystemExit(
            "launcher: --role head needs --worker-urls http://node1:8000,http://node1:8001,... (what "
            "`./launch.sh --role node` printed on each GPU node)"
        )
    from serving import media_urls

    try:
        media_urls.media_base(settings)  # the runner needs it: fail here, not in a restart loop
    except ValueError as e:
        raise SystemExit(f"launcher: {e}") from None
    timeout = args.startup_timeout or 1800
    router_url = f"http://127.0.0.1:{settings.router_port}"
    step = {
        "name": "router",
        "cmd": router_command(
            settings,
            workers,
            prometheus_port=settings.router_prometheus_port,
            health_interval=10,
            startup_timeout=int(timeout),
        ),
        "env": {},
        "log": str(settings.data_dir / "logs" / "router.log"),
        "url": router_url,
        "health": router_url + "/liveness",
    }
    return {
        "fleet": "remote",
        "mps": None,
        "steps": [step],
        "replica_urls": workers,
        "router_url": router_url,
        "timeout": timeout,
    }


def port_free(host: str, port: int) -> bool:
    import socket

    if not 0 < port < 65536:
        return False
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                raise SystemExit(f"launcher: {host} is not an address of this machine (--replica-host)") from None
            return False
    return True


def free_block(host: str, n: int, preferred: int, avoid: set[int] = frozenset()) -> int:
    """The first port of `n` consecutive free ports: `preferred` if they are all free, else another block."""

    def ok(base: int) -> bool:
        return all(p not in avoid and port_free(host, p) for p in range(base, base + n))

    if ok(preferred):
        return preferred
    rng = __import__("random").Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - n)
        if ok(base):
            return base
    raise SystemExit(f"launcher: no {n} consecutive free ports found on {host}")


def resolve_ports(settings: Settings, args: argparse.Namespace, *, say=print) -> Settings:
    """Ports this launch will really use. A second workbench on this machine (another data dir) must not
    collide with the first: a busy replica, router or router-metrics port is replaced by a free one (and
    said), since the runner and the app learn the URLs from this launch's record, not from the defaults.
    A GPU node keeps its ports (the head's worker list names them) and refuses to start instead."""
    # replica i of a GPU node listens on FLEET_PORT + its GPU index: the block runs up to the highest index
    n = (
        0
        if settings.role == "head"
        else (args.replicas if _fleet_kind(settings) == "sim" else max(choose_gpus(settings.gpus) or [0]) + 1)
    )
    if settings.role == "node":
        if getattr(args, "dry_run", False):
            return settings  # printing commands for another machine: its ports are checked when it starts
        busy = [
            p for p in range(settings.fleet_port, settings.fleet_port + n) if not port_free(settings.replica_host, p)
        ]
        if busy and not getattr(args, "dry_run", False):
            raise SystemExit(
                f"launcher: port(s) {', '.join(map(str, busy))} on {settings.replica_host} are in use; "
                "a GPU node keeps the ports the head's worker list names: stop what holds them or "
                "pass --fleet-port (and give the head the new URLs)"
            )
        return settings
    changes: dict = {}
    used: set[int] = set()
    if n:
        base = free_block(settings.replica_host, n, settings.fleet_port)
        if base != settings.fleet_port:
            say(
                f"[launcher] replica ports {settings.fleet_port}..{settings.fleet_port + n - 1} are in use (another "
                f"workbench?): using {base}..{base + n - 1}"
            )
            changes["fleet_port"] = base
        used |= set(range(base, base + n))
    for name, label in (("router_port", "router"), ("router_prometheus_port", "router metrics")):
        want = getattr(settings, name)
        got = free_block("127.0.0.1", 1, want, used)
        if got != want:
            say(f"[launcher] {label} port {want} is in use (another workbench?): using {got}")
            changes[name] = got
        used.add(got)
    return settings.replace(**changes) if changes else settings


def _fleet_kind(settings: Settings) -> str:
    return settings.fleet if settings.fleet in ("sim", "gpu") else ("gpu" if visible_gpus() else "sim")


def owns(pgid: int | None, port: int | None) -> int:
    """`launcher owns --pgid N --listen-port P`: 0 if group N listens on P, else 1 with a message saying who does."""
    if not pgid or not port:
        print("launcher: owns needs --pgid and --listen-port", file=sys.stderr)
        return 2
    if procs.group_listens(pgid, port):
        return 0
    who = sorted(procs.listener_pids(port))
    print(
        f"launcher: port {port} is answered by process(es) {who or 'unknown'}, not by the process group {pgid} "
        "this launch started: another workbench? Pick another --port (or stop the other one)",
        file=sys.stderr,
    )
    return 1


def verify_owners(children: Sequence[procs.Child]) -> None:
    """Each URL a started process should answer on is a port that process (its group) listens on.

    A health check alone cannot tell our router from another workbench's router on the same port (R14:
    the second launcher once said "fleet up" because the first one's router answered)."""
    for c in children:
        for url in [u for u in (c.url or "").split(",") if u]:
            u = httpx.URL(url)
            port = u.port or (443 if u.scheme == "https" else 80)
            if not procs.group_listens(c.pgid, port):
                owners = procs.listener_pids(port)
                raise procs.StartupError(
                    f"{c.name}: port {port} is answered by process(es) {sorted(owners) or 'unknown'}, not by the "
                    f"{c.name} this launcher started (pgid {c.pgid}): another workbench? Stop it, or start this one "
                    f"with other ports (see {c.log})"
                )


# ---- records --------------------------------------------------------------------------------------------------
def record_path(settings: Settings) -> Path:
    return settings.data_dir / "run" / "fleet.json"


def load_record(settings: Settings) -> dict | None:
    try:
        return json.loads(record_path(settings).read_text())
    except (OSError, ValueError):
        return None


def save_record(settings: Settings, rec: dict) -> None:
    path = record_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, path)


def fleet_url(settings: Settings, rec: dict | None = None) -> str:
    """The URL(s) the runner should use: the router if there is one, else the replicas, comma-separated."""
    rec = rec if rec is not None else load_record(settings)
    if rec:
        return rec.get("router_url") or ",".join(rec.get("replica_urls") or [])
    if settings.role == "head" and not shutil.which("vllm-router"):
        return ",".join(worker_list(settings))
    return f"http://127.0.0.1:{settings.router_port}"


# ---- commands -------------------------------------------------------------------------------------------------
def _shell(cmd: Sequence[str], env: dict[str, str], log: str | None = None) -> str:
    """One line a shell can run: `ENV=... [setsid] cmd ... [> log 2>&1 &]`."""
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    line = (envs + " " if envs else "") + ("setsid " if log else "") + shlex.join(cmd)
    return line + (f" > {shlex.quote(log)} 2>&1 &" if log else "")


def up(settings: Settings, args: argparse.Namespace) -> int:
    if args.dry_run:
        # the commands as configured (they may be meant for another machine), plus what `up` would change here
        notes: list[str] = []
        resolve_ports(settings, args, say=notes.append)
    else:
        settings = resolve_ports(settings, args)
    p = plan(settings, args)
    if args.dry_run:
        if p["mps"]:
            m = p["mps"]
            print("+ mkdir -p " + " ".join(shlex.quote(v) for v in m["env"].values()))
            print("+ " + _shell(m["cmd"], m["env"]))
        for s in p["steps"]:
            print("+ " + _shell(s["cmd"], s["env"], s["log"]))
        print(f"# fleet: {fleet_url(settings, p)}")
        if settings.role == "node":
            print("# worker URLs for the head (--worker-urls): " + ",".join(p["replica_urls"]))
        for msg in notes:  # last, so that the command lines keep their places
            print(
                "# note: "
                + msg.replace("[launcher] ", "").replace(": using ", ": `up` here now would pick free ones, e.g. ")
            )
        return 0
    old = load_record(settings)
    if old and any(procs.pid_alive(c["pid"]) for c in old.get("procs", [])):
        print("launcher: a fleet is already running (python -m serving.launcher status / down)", file=sys.stderr)
        return 1
    rec = {
        "fleet": p["fleet"],
        "mps": None,
        "procs": [],
        "replica_urls": p["replica_urls"],
        "router_url": p["router_url"],
        "started_at": time.time(),
    }
    save_record(settings, rec)
    children: list[procs.Child] = []
    try:
        if p["mps"]:
            for d in p["mps"]["env"].values():
                Path(d).mkdir(parents=True, exist_ok=True)
            r = subprocess.run(
                p["mps"]["cmd"], env={**os.environ, **p["mps"]["env"]}, capture_output=True, text=True, timeout=30
            )
            if r.returncode != 0:
                raise procs.StartupError(f"nvidia-cuda-mps-control -d failed: {r.stderr.strip() or r.stdout.strip()}")
            rec["mps"] = p["mps"]["env"]
            save_record(settings, rec)
            print(f"[launcher] CUDA MPS daemon started (pipes in {p['mps']['env']['CUDA_MPS_PIPE_DIRECTORY']})")
        for s in p["steps"]:
            if s["name"] == "router":  # the router needs its workers up first
                procs.wait_healthy(children, timeout=p["timeout"])
            health = s["health"]
            c = procs.start(
                s["name"],
                s["cmd"],
                log=s["log"],
                env=s["env"],
                url=s["url"],
                health=health if isinstance(health, str) else None,
            )
            children.append(c)
            rec["procs"].append(c.record())
            save_record(settings, rec)
            print(f"[launcher] started {c.name} (pgid {c.pgid}, log {c.log})")
            if isinstance(health, list):  # one process serving several replicas
                for i, h in enumerate(health):
                    children.append(
                        procs.Child(
                            name=f"{c.name}[{i}]", pid=c.pid, pgid=c.pgid, cmd=c.cmd, log=c.log, health=h, popen=c.popen
                        )
                    )
        procs.wait_healthy(children, timeout=p["timeout"])
        verify_owners([c for c in children if "[" not in c.name])
    except (procs.StartupError, OSError, subprocess.SubprocessError) as e:
        print(f"launcher: {e}", file=sys.stderr)
        print("launcher: stopping what was started", file=sys.stderr)
        down(settings, args, quiet=True)
        return 1
    print(f"[launcher] fleet up: {fleet_url(settings, rec)}")
    if settings.role == "node":
        print("[launcher] worker URLs for the head (--worker-urls): " + ",".join(p["replica_urls"]))
    return 0


def down(settings: Settings, args: argparse.Namespace | None = None, *, quiet: bool = False) -> int:
    rec = load_record(settings)
    if not rec:
        if not quiet:
            print("[launcher] nothing recorded: no fleet to stop")
        return 0
    grace = getattr(args, "grace", 20.0) if args is not None else 20.0
    for c in reversed(rec.get("procs", [])):
        was = procs.stop_group(c["pgid"], c["pid"], grace=grace)
        if not quiet:
            print(f"[launcher] {'stopped' if was else 'already gone:'} {c['name']} (pgid {c['pgid']})")
    if rec.get("mps"):
        try:
            subprocess.run(
                ["nvidia-cuda-mps-control"],
                input="quit\n",
                text=True,
                env={**os.environ, **rec["mps"]},
                capture_output=True,
                timeout=30,
            )
            if not quiet:
                print("[launcher] CUDA MPS daemon told to quit")
        except (OSError, subprocess.SubprocessError) as e:
            print(f"launcher: could not stop the MPS daemon: {e}", file=sys.stderr)
    try:
        record_path(settings).unlink()
    except OSError:
        pass
    return 0


def status(settings: Settings, args: argparse.Namespace | None = None) -> int:
    rec = load_record(settings)
    if not rec:
        print("[launcher] no fleet recorded (python -m serving.launcher up)")
        return 3
    bad = 0
    with httpx.Client(timeout=2.0, trust_env=False) as http:
        for c in rec.get("procs", []):
            alive = procs.pid_alive(c["pid"])
            urls = [u for u in (c.get("url") or "").split(",") if u]
            health = []
            for u in urls:
                path = "/liveness" if c["name"] == "router" else "/health"
                try:
                    health.append(f"{u} {http.get(u + path).status_code}")
                except httpx.HTTPError as e:
                    health.append(f"{u} {type(e).__name__}")
            ok = alive and all(h.endswith(" 200") for h in health)
            bad += not ok
            print(f"{c['name']:<12} {'up' if alive else 'DOWN':<5} pgid {c['pgid']:<8} {'; '.join(health)}")
    print(f"fleet: {fleet_url(settings, rec)} ({rec.get('fleet')}{', MPS' if rec.get('mps') else ''})")
    return 0 if bad == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.launcher",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start, stop and inspect the captioning fleet (CUDA MPS, vLLM replicas or the simulated "
        "fleet, vllm-router).",
        epilog="examples:\n  python -m serving.launcher up --fleet gpu --gpus 0,1,2,3 --clip-root /data/clips\n"
        "  python -m serving.launcher up --fleet gpu --gpus 0,1,2,3,4,5,6,7 --dry-run --vllm-version 0.33.0\n"
        "  python -m serving.launcher up --fleet sim --replicas 4\n"
        "  python -m serving.launcher status\n  python -m serving.launcher down",
    )
    p.add_argument(
        "command",
        choices=("up", "down", "status", "url", "owns"),
        help="what to do (owns: exit 0 if process group --pgid listens on --listen-port; launch.sh "
        "checks the app it started with it)",
    )
    add_arguments(p, SETTING_NAMES)
    p.add_argument("--dry-run", action="store_true", help="print every command (with its environment); start nothing")
    p.add_argument("--vllm-version", default=None, help="vLLM version to build flags for (default: the installed one)")
    p.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every vLLM replica, e.g. --vllm-arg=--load-format=dummy (repeatable)",
    )
    p.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the simulated fleet, e.g. --sim-arg='--speed 0.1' (repeatable)",
    )
    p.add_argument("--replicas", type=int, default=4, help="replicas of the simulated fleet (default 4)")
    p.add_argument("--no-router", action="store_true", help="do not start vllm-router; the runner talks to replicas")
    p.add_argument("--no-mps", action="store_true", help="do not start the CUDA MPS daemon")
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=None,
        help="seconds to wait for health (default 1800 for vLLM, 60 for the simulated fleet)",
    )
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL on down")
    p.add_argument("--pgid", type=int, default=None, help="owns: the process group to check")
    p.add_argument("--listen-port", type=int, default=None, help="owns: the TCP port it should listen on")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = from_args(args)
    if args.command == "up":
        return up(settings, args)
    if args.command == "down":
        return down(settings, args)
    if args.command == "status":
        return status(settings, args)
    if args.command == "owns":
        return owns(args.pgid, args.listen_port)
    print(fleet_url(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
