"""What a request costs a simulated replica: time (the latency model) and decode memory (the budget).

Latency (x `slow` x `speed`; speed 0 answers at once): decode = 0.25 s x (W x H x frames) / (1920 x 1080 x 16);
prefill = 4 us per prompt token; generation = 4 ms per output token. A replica runs at most `capacity` requests
at once (default 6) and queues the rest, which gives ~5-6 clips/s per replica at saturation on 1080p clips
(~1.0-1.3 s each) -- near the ~4.2 clips/s one H200 measured.
"""

from __future__ import annotations

from serving.simfleet.probe import ClipInfo

REF_PIXELS_FRAMES = 1920 * 1080 * 16
REF_DECODE_S = 0.25
PREFILL_S_PER_TOKEN = 4e-6
GEN_S_PER_TOKEN = 4e-3
DEFAULT_CAPACITY = 6
DEFAULT_FRAMES = 16
# --mm-ipc-gpu-memory-gb 2 shared by 4 API servers (serving.launch.commands.vllm_command): vLLM gives each API server
# G / api_server_count, so 512 MiB per decode; a clip needs frames x H x W x 3 bytes of it, or it gets HTTP 400
DECODE_BUDGET_BYTES = 2 * 1024**3 // 4


def decode_s(info: ClipInfo | None, frames: int) -> float:
    """Seconds to decode `frames` frames of the clip (0 without a clip), before `slow` and `speed`."""
    return REF_DECODE_S * (info.width * info.height * frames / REF_PIXELS_FRAMES) if info else 0.0


def prefill_s(prompt_tokens: int) -> float:
    return prompt_tokens * PREFILL_S_PER_TOKEN


def generation_s(completion_tokens: int) -> float:
    return completion_tokens * GEN_S_PER_TOKEN


def decode_bytes(info: ClipInfo, frames: int) -> int:
    """Decode memory the clip needs: frames x H x W x 3 bytes (RGB)."""
    return frames * info.width * info.height * 3
