#!/usr/bin/env python3
"""The GPU's dense matmul peaks, measured where a run happens: bf16 and FP8 (e4m3, per-tensor scales, what vLLM's
`--quantization fp8` runs) products of 8192 x 8192 x 8192 on random data, the mean of 20 timed products after 3
warm-ups. The denominators of the compute efficiency every GPU run reports (serving.flops.efficiency).

    python3 benchmarks/gpu_peak.py --out OUT/peak.json      # prints the JSON too; needs torch and a free GPU

Run it before the fleet starts: a GPU already running vLLM gives a share, not the peak. Without torch or a GPU
it writes nulls and the reason, and the reports fall back to the recorded figures (serving.flops.PEAK_TFLOPS).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def _rate(run, n: int, reps: int) -> float:
    import torch

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        run()
    torch.cuda.synchronize()
    return round(reps * 2 * n**3 / (time.perf_counter() - t) / 1e12, 1)


def measure(n: int = 8192, reps: int = 20) -> dict:
    """{"bf16_tflops", "fp8_tflops", "gpu", "errors"}: each rate None where it could not be measured."""
    out: dict = {"bf16_tflops": None, "fp8_tflops": None, "n": n, "reps": reps, "errors": {}}
    try:
        import torch

        if not torch.cuda.is_available():
            out["errors"]["gpu"] = "torch sees no CUDA device"
            return out
        out["gpu"] = torch.cuda.get_device_name(0)
    except Exception as e:  # no torch here: the report says so and falls back
        out["errors"]["gpu"] = f"{type(e).__name__}: {e}"
        return out
    for precision, product in (("bf16", _bf16), ("fp8", _fp8)):
        try:
            out[f"{precision}_tflops"] = _rate(product(n), n, reps)
        except Exception as e:  # e.g. no FP8 on this GPU: that rate stays null, with the reason
            out["errors"][precision] = f"{type(e).__name__}: {e}"
        torch.cuda.empty_cache()
    return out


def _bf16(n: int):
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: a @ b


def _fp8(n: int):
    import torch

    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants it
    one = torch.tensor(1.0, device="cuda")
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    ap.add_argument("--n", type=int, default=8192)
    a = ap.parse_args(argv)
    got = measure(a.n)
    text = json.dumps(got)
    print(text, flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
