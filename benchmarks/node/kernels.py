"""Where a replica's GPU time goes: a torch-profiler trace of its engine, summed by kernel class and by vLLM's
own scopes (the threads stage's `prof` modifier; issue 29, the FP8 question).

vLLM 0.25 profiles its engine when started with `--profiler-config` (profiler `torch`, a trace folder) and asked
over HTTP (`POST /start_profile`, `/stop_profile`); with `max_iterations` it stops itself after that many engine
steps and writes `<worker>.<time>.pt.trace.json.gz`, a Chrome trace whose `kernel` events are the GPU kernels (start
`ts` and `dur` in microseconds) and whose `gpu_user_annotation` events are the spans of vLLM's scopes on the GPU.
On vLLM 0.25 each engine step is one scope named after what it ran, `execute_context_N(T)_generation_M(M)`: N
requests prefilling T tokens between them (the vision encoder included) and M decoding one token each; the
kernels in no scope ran between steps (0.9 % of the kernel time on 2026-12-04). Only this engine's kernels are in
the trace: under MPS, the API servers' frame decoding and preparation on the same GPU are not.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

# (class, pattern on the kernel's name), first match wins; GEMMs split by their element type
CLASSES = (
    # torch.compile's fused Triton kernels that compute the activations' FP8 scales (abs, max, reciprocal) and
    # cast; their names list the ops they fused, `cutlass_scaled_mm` among them, but they are not GEMMs
    ("fp8_quant", re.compile(r"^triton_.*abs.*(reciprocal|clamp)|^triton_.*(reciprocal|clamp).*abs", re.I)),
    ("attention", re.compile(r"flash|fmha|attn|attention|paged", re.I)),
    (
        "gemm_fp8",
        re.compile(
            r"(gemm|cutlass|nvjet|xmma|wgmma|matmul|scaled_mm).*(fp8|e4m3|e5m2|float8)|"
            r"(fp8|e4m3|e5m2|float8).*(gemm|cutlass|nvjet|xmma|wgmma|matmul|scaled_mm)",
            re.I,
        ),
    ),
    ("gemm_bf16", re.compile(r"gemm|cutlass|nvjet|xmma|wgmma|matmul|cublas|Kernel2", re.I)),
    ("fp8_quant", re.compile(r"quant|fp8|e4m3|float8", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("activation", re.compile(r"silu|gelu|act_and_mul|swiglu", re.I)),
    ("rotary", re.compile(r"rotary|rope", re.I)),
    ("sampling", re.compile(r"sample|softmax|topk|top_k|argmax|sort", re.I)),
)
NO_SCOPE = "(no scope: between engine steps)"


def kernel_class(name: str) -> str:
    for cls, pattern in CLASSES:
        if pattern.search(name):
            return cls
    return "other"


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole else 0.0


def summarize(events: list[dict], top: int = 15) -> dict:
    """A trace's kernel time: its window, the GPU busy share of it, by class, by scope, the top kernels."""
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X" and "dur" in e]
    if not kernels:
        return {"kernels": 0, "error": "no kernel events in the trace"}
    scopes = sorted(
        (e["ts"], e["ts"] + e["dur"], e.get("name", "?"))
        for e in events
        if e.get("cat") == "gpu_user_annotation" and e.get("ph") == "X" and "dur" in e
    )
    start = min(k["ts"] for k in kernels)
    end = max(k["ts"] + k["dur"] for k in kernels)
    total = sum(k["dur"] for k in kernels)
    by_class: dict[str, float] = {}
    by_scope: dict[str, float] = {}
    by_name: dict[str, float] = {}
    active: list[tuple[float, float, str]] = []  # the scopes open at the kernel's start (a sweep in time order)
    nxt = 0
    for k in sorted(kernels, key=lambda k: k["ts"]):
        name = k.get("name", "?")
        by_class[kernel_class(name)] = by_class.get(kernel_class(name), 0.0) + k["dur"]
        by_name[name] = by_name.get(name, 0.0) + k["dur"]
        while nxt < len(scopes) and scopes[nxt][0] <= k["ts"]:
            active.append(scopes[nxt])
            nxt += 1
        active = [s for s in active if s[1] > k["ts"]]
        scope = min(active, key=lambda s: s[1] - s[0])[2] if active else NO_SCOPE
        by_scope[scope] = by_scope.get(scope, 0.0) + k["dur"]
    window = end - start
    busy = _union([(k["ts"], k["ts"] + k["dur"]) for k in kernels])

    def table(d: dict[str, float], n: int | None = None) -> list[dict]:
        rows = sorted(d.items(), key=lambda kv: -kv[1])[:n]
        return [{"name": k, "seconds": round(v / 1e6, 6), "share_of_kernel_time": _share(v, total)} for k, v in rows]

    return {
        "kernels": len(kernels),
        "window_s": round(window / 1e6, 6),
        "kernel_s": round(total / 1e6, 6),
        "gpu_busy_s": round(busy / 1e6, 6),
        "gpu_busy_share_of_window": _share(busy, window),
        "by_class": table(by_class),
        "by_scope": table(by_scope),
        "top_kernels": [dict(r, name=r["name"][:160], cls=kernel_class(r["name"])) for r in table(by_name, top)],
    }


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def wait_for_trace(folder: Path, timeout_s: float = 240.0, settle_s: float = 5.0) -> Path | None:
    """The engine's trace in `folder` once it is written whole (its size unchanged for `settle_s`), else None."""
    deadline, last = time.time() + timeout_s, None
    while time.time() < deadline:
        found = sorted(folder.glob("*.pt.trace.json*"), key=lambda p: p.stat().st_size)
        if found:
            size = found[-1].stat().st_size
            if last == size and size > 0:
                return found[-1]
            last = size
        time.sleep(settle_s)
    return None


def profiler_config(folder: Path, iterations: int) -> str:
    """The replica's `--profiler-config`: the torch profiler, the engine only, stopping after `iterations`."""
    return json.dumps(
        {
            "profiler": "torch",
            "torch_profiler_dir": str(folder.resolve()),
            "torch_profiler_with_stack": False,
            "ignore_frontend": True,
            "max_iterations": iterations,
        },
        separators=(",", ":"),
    )
