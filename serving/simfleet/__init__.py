"""A simulated vLLM fleet: N OpenAI-compatible replicas in one process, for tests and GPU-less machines.

    python -m serving.simfleet --replicas 8 --port 8000 --allowed-local-media-path var/clips
    python -m serving.simfleet --replicas 2 --port 0 --allowed-local-media-path DIR --speed 0 --ready-file f.json

Each replica speaks what vLLM 0.25 speaks, closely enough for the client, runner, router and web app:
`POST /v1/chat/completions`, `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text with vLLM's
metric names and `model_name`/`engine` labels), errors as `{"error": {"message", "type", "param", "code"}}`.
It opens every clip with PyAV (metadata only): a file outside `--allowed-local-media-path` gets vLLM's 400,
a missing file vLLM's 500 with the OSError text, an undecodable one the NVDEC backend's 500
(`CreateFormatContext : ... "Invalid data found when processing input"`), a clip too large for the decode
budget a 400. It answers schema-valid JSON derived deterministically from the clip; the caption always
starts with "[SIMULATED]", the served model id ends with " (simulated)" and every response carries
`x-simulated: 1`, so a simulated caption can never pass for a real one. Real vLLM is the reference: the
answers are checked against a recording of it (tests/serving/test_vllm_recordings.py), never more lenient.

With an API key (`--api-key`, or VLLM_API_KEY as vLLM reads it) `/v1` needs `Authorization: Bearer <key>`, and a
missing or wrong one gets vLLM's 401 `{"error": "Unauthorized"}`. Failure knobs, as flags and at run time per
replica (`POST /sim/knobs` with a JSON object and `Authorization: Bearer <knobs token>`, the token from
SIMFLEET_KNOBS_TOKEN or else the API key): see knobs.py. `GET /sim/stats` returns the knobs and counters. The
controls take no request a browser sends for a page, and a fleet bound beyond loopback serves them on 127.0.0.1
only (`FleetHandle.knob_urls`). In-process API for tests: `start_fleet(replicas, port, root,
...)` returns a `FleetHandle` with `.urls`, `.stop()`, `.kill_replica(i)`, `.set_knobs(i, **knobs)`, `.stats(i)`.

The modules, from the clip outwards:
- errors.py   vLLM's error answers (`SimError`), word for word as recorded on a GPU node
- probe.py    opening a clip as the decoder would (PyAV metadata, cached), or the error it gave
- costs.py    the latency model and the decode-memory budget
- answers.py  the request read as vLLM reads it; the deterministic answer; vLLM's response bodies
- logprobs.py the token logprobs a replica returns with an answer, in vLLM 0.25's shape
- knobs.py    the failure knobs and their command-line flags
- metrics.py  the Prometheus series (vLLM's names) and the exact busy-time integrals
- replica.py  one replica: faults, clip loading, the capacity queue, the chat request end to end
- app.py      the Starlette app around a replica (the same ASGI stack as the web app), its key and its controls' guard
- server.py   `FleetSpec` and `serve_fleet`: N replicas, one uvicorn server each, on one event loop
- harness.py  `start_fleet` / `FleetHandle`: a fleet in a child process or a thread, for tests
- cli.py      the command line, read (`main`) and written (`command`, used by the launcher too)
"""

from serving.simfleet.answers import (
    CHARS_PER_TOKEN,
    SCENE,
    SIM_MARK,
    SIM_SUFFIX,
    estimate_prompt_tokens,
    synthetic_answer,
)
from serving.simfleet.app import DECODE_BACKEND, build_app
from serving.simfleet.cli import build_parser, command, main
from serving.simfleet.costs import (
    DECODE_BUDGET_BYTES,
    DEFAULT_CAPACITY,
    DEFAULT_FRAMES,
    GEN_S_PER_TOKEN,
    PREFILL_S_PER_TOKEN,
    REF_DECODE_S,
    REF_PIXELS_FRAMES,
    prefill_s,
)
from serving.simfleet.errors import XGRAMMAR_REFUSAL, SimError
from serving.simfleet.harness import FleetHandle, start_fleet
from serving.simfleet.knobs import Knobs
from serving.simfleet.metrics import E2E_BUCKETS, FINISH_REASONS, TTFT_BUCKETS
from serving.simfleet.probe import ClipInfo, ProbeCache
from serving.simfleet.replica import SimReplica
from serving.simfleet.server import DEFAULT_MODEL, FleetSpec, serve_fleet

__all__ = [
    "build_app",
    "build_parser",
    "CHARS_PER_TOKEN",
    "ClipInfo",
    "command",
    "DECODE_BACKEND",
    "DECODE_BUDGET_BYTES",
    "DEFAULT_CAPACITY",
    "DEFAULT_FRAMES",
    "DEFAULT_MODEL",
    "E2E_BUCKETS",
    "estimate_prompt_tokens",
    "FINISH_REASONS",
    "FleetHandle",
    "FleetSpec",
    "GEN_S_PER_TOKEN",
    "Knobs",
    "main",
    "prefill_s",
    "PREFILL_S_PER_TOKEN",
    "ProbeCache",
    "REF_DECODE_S",
    "REF_PIXELS_FRAMES",
    "SCENE",
    "serve_fleet",
    "SIM_MARK",
    "SIM_SUFFIX",
    "SimError",
    "SimReplica",
    "start_fleet",
    "synthetic_answer",
    "TTFT_BUCKETS",
    "XGRAMMAR_REFUSAL",
]
