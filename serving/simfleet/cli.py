"""The command line of the simulated fleet: `python -m serving.simfleet`, read (`main`) and written (`command`).

    python -m serving.simfleet --replicas 8 --port 8000 --allowed-local-media-path var/clips
    python -m serving.simfleet --replicas 2 --port 0 --allowed-local-media-path DIR --speed 0 --ready-file f.json

`command(spec)` is the one place that writes this command line: the launcher and the test harness start a
fleet through it, so the flags they pass are the flags `build_parser` reads. Secrets never go on it: the API key
is read from VLLM_API_KEY (as vLLM reads it; `--api-key` also works, as on vLLM) and the knobs token from
SIMFLEET_KNOBS_TOKEN (default: the API key), both from the environment (`secret_env(spec)`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Sequence

from serving import console
from serving.simfleet.answers import SIM_SUFFIX
from serving.simfleet.knobs import FLAGS, as_flags, flag
from serving.simfleet.server import FleetSpec, serve_fleet

# FleetSpec's fields as flags, in the order `command` writes them: (field, flag, type, help). One table that
# `build_parser` reads, `command` writes and `main` turns back into a FleetSpec.
SPEC_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("replicas", "--replicas", int, "number of replicas (ports PORT..PORT+N-1)"),
    ("port", "--port", int, "first replica port; 0 = free ephemeral ports (see --ready-file)"),
    ("host", "--host", str, "address to bind (default loopback)"),
    ("root", "--allowed-local-media-path", str, "clip root: file:// URLs outside it are refused with vLLM's 400"),
    ("model", "--model", str, "model name to imitate"),
)


def _dest(flag_name: str) -> str:
    return flag_name[2:].replace("-", "_")


def command(spec: FleetSpec, extra: Sequence[str] = ()) -> list[str]:
    """The command that serves `spec` in a process of its own; `extra` flags are appended as given."""
    cmd = [sys.executable, "-m", "serving.simfleet"]
    for field, name, _, _ in SPEC_FLAGS:
        cmd += [name, str(getattr(spec, field))]
    if spec.seed:
        cmd += ["--seed", str(spec.seed)]
    return cmd + as_flags(spec.knobs) + list(extra)


API_KEY_ENV = "VLLM_API_KEY"
KNOBS_TOKEN_ENV = "SIMFLEET_KNOBS_TOKEN"


def secret_env(spec: FleetSpec) -> dict[str, str]:
    """The environment that gives the process of `spec` its API key and knobs token."""
    env = {API_KEY_ENV: spec.api_key} if spec.api_key else {}
    return env | ({KNOBS_TOKEN_ENV: spec.knobs_token} if spec.knobs_token else {})


def build_parser() -> argparse.ArgumentParser:
    from data.settings import Settings

    defaults = Settings.load()
    p = argparse.ArgumentParser(
        prog="python -m serving.simfleet",
        description="Run a simulated vLLM fleet (OpenAI-compatible; output always marked simulated).",
        epilog="example: python -m serving.simfleet --replicas 8 --port 8000 --allowed-local-media-path "
        "var/clips --speed 0.5",
    )
    default = {"replicas": 8, "port": defaults.fleet_port, "host": "127.0.0.1", "model": defaults.model_name}
    for field, name, kind, text in SPEC_FLAGS:
        if field in default:
            p.add_argument(name, type=kind, default=default[field], help=text)
        else:
            p.add_argument(name, required=True, help=text)
    for knob, kind, default, text in FLAGS:
        if kind is bool:
            p.add_argument(flag(knob), action="store_true", help=text)
        else:
            p.add_argument(flag(knob), type=kind, default=default, help=text)
    p.add_argument("--seed", type=int, default=0, help="seed of the error-rate dice")
    p.add_argument(
        "--api-key",
        default=None,
        help=f"/v1 requests need `Authorization: Bearer KEY`, as with vLLM's --api-key (default: ${API_KEY_ENV})",
    )
    p.add_argument("--ready-file", default=None, help='write {"urls": [...]} here once every replica listens')
    return p


def main(argv: list[str] | None = None) -> int:
    console.install()  # every log record bounded (serving.log_clip), output best-effort
    args = build_parser().parse_args(argv)
    spec = FleetSpec(
        **{field: getattr(args, _dest(name)) for field, name, *_ in SPEC_FLAGS},
        seed=args.seed,
        knobs={knob: getattr(args, knob) for knob, *_ in FLAGS},
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        knobs_token=os.environ.get(KNOBS_TOKEN_ENV) or args.api_key or os.environ.get(API_KEY_ENV) or None,
    )

    def on_ready(urls: list[str], knob_urls: list[str]) -> None:
        print(
            f"simulated fleet ready ({len(urls)} replicas, model {args.model}{SIM_SUFFIX}): " + " ".join(urls),
            flush=True,
        )
        if args.ready_file:
            tmp = args.ready_file + ".tmp"
            Path(tmp).write_text(json.dumps({"urls": urls, "knob_urls": knob_urls, "pid": os.getpid()}))
            os.replace(tmp, args.ready_file)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_fleet(spec, on_ready=on_ready, stop=stop)

    try:
        asyncio.run(run())
    except OSError as e:
        print(f"simfleet: {e}", file=sys.stderr)
        return 2
    return 0
