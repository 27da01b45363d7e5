"""Which GPU a replica runs on, as `nvidia-smi` names it, and how a measurement's GPU is matched to a fleet's.

A rate measured on one GPU model says nothing certain about another: an H200 and an H100 happened to caption at
3.52 and 3.45 clips/s at one point (2026-12), and an L40S or an A100 would not. So the launcher records each
replica's GPU (`query`), every work-per-clip point and GPU test report records the model it was measured on, and
serving.cost prices a fleet only from points of its own model (`matches`).

    gpu_models.query([0, 1])       -> {0: {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}, ...}
    gpu_models.matches("H100", "NVIDIA H100 80GB HBM3")   -> True
    gpu_models.matches("NVIDIA H100 80GB HBM3", "NVIDIA H200")   -> False
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Iterable

MAX_SMI_BYTES = 64 * 1024  # nvidia-smi's answer for a node of GPUs is a few hundred bytes
MAX_NAME_CHARS = 120


def query(indices: Iterable[int] | None = None, *, timeout: float = 30.0) -> dict[int, dict]:
    """{GPU index: {"name", "memory_mib"}} from `nvidia-smi`, for the GPUs in `indices` (every GPU when None);
    {} without nvidia-smi or when it fails (the record then says nothing, which prices as "model unknown")."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
        ).stdout[:MAX_SMI_BYTES]
    except (OSError, subprocess.SubprocessError):
        return {}
    found = parse(out)
    wanted = None if indices is None else {int(i) for i in indices}
    return {i: g for i, g in found.items() if wanted is None or i in wanted}


def parse(text: str) -> dict[int, dict]:
    """The lines of `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`."""
    out: dict[int, dict] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        name = clean_name(parts[1])
        if not name:
            continue
        memory = int(parts[2]) if parts[2].isdigit() else None
        out[int(parts[0])] = {"name": name, "memory_mib": memory}
    return out


def clean_name(name: object) -> str:
    """A GPU model's name as shown and stored: printable, one line, bounded."""
    text = "".join(c for c in str(name or "") if c.isprintable())
    return " ".join(text.split())[:MAX_NAME_CHARS]


def key(name: object) -> tuple[str, ...]:
    """A model name's words for matching: case and a leading "NVIDIA" ignored ("NVIDIA H100 80GB HBM3" ->
    ("h100", "80gb", "hbm3"))."""
    words = re.findall(r"[0-9a-z]+", clean_name(name).casefold())
    return tuple(words[1:] if words[:1] == ["nvidia"] else words)


def matches(wanted: object, name: object) -> bool:
    """Whether the GPU `name` (as a record names it) is the model `wanted`: the same words, or `wanted` is the
    start of them ("H100" is "NVIDIA H100 80GB HBM3" and "NVIDIA H100 PCIe"; "H100" is not "H200"). A record
    with no model matches nothing."""
    w, n = key(wanted), key(name)
    return bool(w) and bool(n) and n[: len(w)] == w


def describe(models: Iterable[str]) -> str:
    """ "8 x NVIDIA H100 80GB HBM3" / "4 x NVIDIA H200, 4 x NVIDIA H100 80GB HBM3" for a fleet's replicas' models."""
    counts: dict[str, int] = {}
    for m in models:
        counts[m] = counts.get(m, 0) + 1
    return ", ".join(f"{n} x {m}" for m, n in counts.items())


__all__ = ["clean_name", "describe", "key", "matches", "parse", "query"]
