"""The arithmetic a clip costs the GPU, and the share of the GPU's peak a run achieved.

    from serving import flops
    grid = flops.vision_grid(frames=16, height=1080, width=1920, max_pixels=9_437_184)   # (8, 36, 64) patches
    f = flops.clip_flops(prompt_tokens=4925, completion_tokens=150, grid=grid)           # f.total ~ 1.0e14
    flops.efficiency(clips_per_s=4.35, work=[flops.ClipWork(4925, 150, 16, 1080, 1920)], precision="bf16")

Model FLOPs (the work the model's arithmetic needs, 2 FLOPs per multiply-add; not what the kernels happen to
execute) of Qwen3-VL-8B for one clip, from its prompt tokens, its sampled frames (which set the vision encoder's
patch grid) and its output tokens; the formula, term by term with the model's numbers, is in docs/BENCHMARKS.md
("Compute efficiency"). The shape is Qwen/Qwen3-VL-8B-Instruct's config.json (the same numbers as
serving/gpu_bundle/make_dummy_qwen3vl.py, which the GPU runs use; tests/serving/test_gpu_bundle.py holds them equal).
The vision grid follows Qwen3-VL's video processor (transformers `Qwen3VLVideoProcessor.resize` / `smart_resize`):
`max_pixels` (the processor's `size.longest_edge`) bounds frames x height x width together, so at the recipe's
budget more frames means smaller frames, not more vision tokens.

Pure functions: the GPU run reports (tests/serving/test_gpu_fleet.py, benchmarks/node_run.py, benchmarks/bench_fleet.py)
call `efficiency` with what they measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from data.job_params import MIN_PIXELS, RECIPE_MAX_PIXELS


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs of a Qwen3-VL model depend on (config.json: text_config and vision_config)."""

    name: str = "Qwen3-VL-8B"
    layers: int = 36  # text_config.num_hidden_layers
    hidden: int = 4096  # text_config.hidden_size
    intermediate: int = 12288  # text_config.intermediate_size (SwiGLU: gate, up, down)
    heads: int = 32  # text_config.num_attention_heads
    kv_heads: int = 8  # text_config.num_key_value_heads
    head_dim: int = 128  # text_config.head_dim
    vocab: int = 151936  # text_config.vocab_size (untied lm_head)
    vision_depth: int = 27  # vision_config.depth
    vision_hidden: int = 1152  # vision_config.hidden_size
    vision_intermediate: int = 4304  # vision_config.intermediate_size
    patch: int = 16  # vision_config.patch_size
    temporal_patch: int = 2  # vision_config.temporal_patch_size
    merge: int = 2  # vision_config.spatial_merge_size
    deepstack: int = 3  # len(vision_config.deepstack_visual_indexes): mergers besides the final one
    in_channels: int = 3

    @property
    def lm_layer_params(self) -> int:
        """Weights one token meets in one decoder layer: q, k, v, o projections and the SwiGLU MLP."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_o + k_v + 3 * self.hidden * self.intermediate

    @property
    def lm_params(self) -> int:
        return self.layers * self.lm_layer_params

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab

    @property
    def vit_block_params(self) -> int:
        """One vision block: qkv and output projections, then a two-layer MLP."""
        h = self.vision_hidden
        return 4 * h * h + 2 * h * self.vision_intermediate

    @property
    def patch_embed_params(self) -> int:
        return self.in_channels * self.temporal_patch * self.patch * self.patch * self.vision_hidden

    @property
    def merger_params(self) -> int:
        """One patch merger (2x2 patches -> one language-model token): fc1 4h x 4h, fc2 4h x hidden."""
        m = self.vision_hidden * self.merge * self.merge
        return m * m + m * self.hidden


QWEN3_VL_8B = ModelShape()

# Dense matmul peaks of one H200, TFLOP/s. bf16: measured, 8192^3 products on random data: 772-777 (this project,
# bench_fleet --tflops, 2026-11-30), 769-798 (the lent machines' notes, 2026-10-28/11-04). FP8 is measured by
# benchmarks/gpu_peak.py where a run can; without a measurement its peak is taken as twice bf16, Hopper's ratio
# by the datasheet (1979 vs 989 dense), and the report says so.
PEAK_TFLOPS = {"bf16": 790.0}
FP8_OVER_BF16 = 2.0


@dataclass(frozen=True)
class ClipFlops:
    """FLOPs of one clip, by part."""

    vision: float
    vision_attention: float
    prefill: float
    prefill_attention: float
    decode: float
    decode_attention: float
    parts: dict = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        return sum(
            (self.vision, self.vision_attention, self.prefill, self.prefill_attention, self.decode),
            self.decode_attention,
        )

    def as_dict(self) -> dict:
        """Each part and the total in TFLOP, rounded for a report."""
        names = ("vision", "vision_attention", "prefill", "prefill_attention", "decode", "decode_attention")
        out = {k: round(getattr(self, k) / 1e12, 3) for k in names}
        return {**out, "total": round(self.total / 1e12, 3)}


@dataclass(frozen=True)
class ClipWork:
    """What one captioned clip asked of the model: its prompt and output tokens, the frames sampled, the clip's
    size and the pixel budget of the request."""

    prompt_tokens: int
    completion_tokens: int
    frames: int
    height: int
    width: int
    max_pixels: int = RECIPE_MAX_PIXELS


def vision_grid(
    frames: int,
    height: int,
    width: int,
    max_pixels: int = RECIPE_MAX_PIXELS,
    min_pixels: int = MIN_PIXELS,
    shape: ModelShape = QWEN3_VL_8B,
) -> tuple[int, int, int]:
    """(temporal, height, width) of the vision encoder's patch grid for `frames` frames of a height x width
    clip under the pixel budget, as Qwen3-VL's video processor resizes them (transformers smart_resize)."""
    if frames < 1 or height < 1 or width < 1:
        raise ValueError(f"frames, height and width must be positive (got {frames}, {height}, {width})")
    factor = shape.patch * shape.merge
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(frames / shape.temporal_patch) * shape.temporal_patch
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    grid_t = -(-frames // shape.temporal_patch)  # the last frame is repeated to fill a temporal patch
    return grid_t, h_bar // shape.patch, w_bar // shape.patch


def vision_tokens(grid: tuple[int, int, int], shape: ModelShape = QWEN3_VL_8B) -> int:
    """Language-model tokens the grid becomes (2x2 patches merged into one)."""
    t, h, w = grid
    return t * h * w // (shape.merge * shape.merge)


def clip_flops(
    prompt_tokens: int, completion_tokens: int, grid: tuple[int, int, int], shape: ModelShape = QWEN3_VL_8B
) -> ClipFlops:
    """Model FLOPs of one clip: the vision encoder over `grid`, the prefill of `prompt_tokens` (vision tokens
    included), and `completion_tokens` generated one at a time (docs/BENCHMARKS.md, "Compute efficiency")."""
    p, o = max(0, int(prompt_tokens)), max(0, int(completion_tokens))
    t, h, w = grid
    patches = t * h * w
    v = vision_tokens(grid, shape)
    attn_width = shape.heads * shape.head_dim
    vision = 2 * patches * (shape.patch_embed_params + shape.vision_depth * shape.vit_block_params)
    vision += 2 * v * (1 + shape.deepstack) * shape.merger_params
    # full attention within each temporal patch (the encoder's cu_seqlens): QK^T and AV, 2 FLOPs per MAC each
    vision_attention = shape.vision_depth * t * 4 * (h * w) ** 2 * shape.vision_hidden
    prefill = 2 * p * shape.lm_params + (2 * shape.lm_head_params if o else 0)  # logits of the first token only
    prefill_attention = 2 * shape.layers * attn_width * p * p  # causal: half of the 4 * P^2 * width
    steps = max(0, o - 1)  # the first output token came out of the prefill
    decode = 2 * steps * (shape.lm_params + shape.lm_head_params)
    decode_attention = 4 * shape.layers * attn_width * (steps * p + steps * (steps + 1) / 2)
    return ClipFlops(
        vision=float(vision),
        vision_attention=float(vision_attention),
        prefill=float(prefill),
        prefill_attention=float(prefill_attention),
        decode=float(decode),
        decode_attention=float(decode_attention),
        parts={"patches": patches, "vision_tokens": v, "prompt_tokens": p, "completion_tokens": o},
    )


def work_flops(work: ClipWork, shape: ModelShape = QWEN3_VL_8B) -> ClipFlops:
    """`clip_flops` of one captioned clip, its grid from its frames, size and pixel budget."""
    grid = vision_grid(work.frames, work.height, work.width, work.max_pixels, shape=shape)
    return clip_flops(work.prompt_tokens, work.completion_tokens, grid, shape)


def peak_tflops(precision: str, measured: dict | None = None) -> tuple[float, str]:
    """(TFLOP/s, where it comes from) of the GPU's dense matmul peak for `precision` ('bf16' or 'fp8').
    `measured` is what benchmarks/gpu_peak.py wrote ({"bf16_tflops": ..., "fp8_tflops": ...}) where a run has it."""
    precision = "fp8" if str(precision).lower().startswith("fp8") else "bf16"
    measured = measured or {}
    got = measured.get(f"{precision}_tflops")
    if isinstance(got, (int, float)) and got > 0:
        return float(got), "measured in this run (benchmarks/gpu_peak.py)"
    if precision == "bf16":
        return PEAK_TFLOPS["bf16"], "bf16 dense matmul measured on the lent H200s (772-798 TFLOP/s)"
    bf16 = measured.get("bf16_tflops")
    base = float(bf16) if isinstance(bf16, (int, float)) and bf16 > 0 else PEAK_TFLOPS["bf16"]
    return base * FP8_OVER_BF16, "FP8 not measured: twice the bf16 peak (Hopper's datasheet ratio)"


def efficiency(
    clips_per_s: float | None,
    work: Iterable[ClipWork],
    precision: str = "bf16",
    *,
    measured_peak: dict | None = None,
    gpus: int = 1,
    shape: ModelShape = QWEN3_VL_8B,
    cached_prompt_tokens: float | None = None,
) -> dict:
    """What a run's clips cost and the share of the peak it achieved: the mean FLOPs per clip over `work` (the
    clips it captioned), times `clips_per_s`, over `gpus` GPUs' peak. A report field, so everything is plain.

    `cached_prompt_tokens`: the mean prompt tokens per clip that vLLM's prefix cache served (its
    `vllm:prompt_tokens_cached_total` over the job). The GPU did not compute their prefill, so the share of the
    peak (`fraction_of_peak`) counts only what it computed; `fraction_of_peak_whole_prompt` counts the whole
    prompt, as if prefilled (the figure every report gave until 2026-12-04: ~13 % higher with the ~950 cached
    tokens of the recipe's prompt). None: not measured, and the report says the whole prompt was counted."""
    items = list(work)
    if not items:
        return {"model": shape.name, "error": "no captioned clip to count"}
    per = [work_flops(w, shape) for w in items]
    n = len(per)
    mean = {
        k: sum(getattr(f, k) for f in per) / n
        for k in ("vision", "vision_attention", "prefill", "prefill_attention", "decode", "decode_attention")
    }
    mean_total = sum(f.total for f in per) / n
    peak, source = peak_tflops(precision, measured_peak)
    out = {
        "model": shape.name,
        "clips": n,
        "precision": "fp8" if str(precision).lower().startswith("fp8") else "bf16",
        "prompt_tokens_mean": round(sum(w.prompt_tokens for w in items) / n, 1),
        "completion_tokens_mean": round(sum(w.completion_tokens for w in items) / n, 1),
        "vision_tokens_mean": round(sum(f.parts["vision_tokens"] for f in per) / n, 1),
        "tflop_per_clip": round(mean_total / 1e12, 2),
        "tflop_per_clip_parts": {k: round(v / 1e12, 2) for k, v in mean.items()},
        "peak_tflops_per_gpu": round(peak, 1),
        "peak_source": source,
        "gpus": gpus,
    }
    computed = mean_total
    if cached_prompt_tokens is not None:
        c = max(0.0, float(cached_prompt_tokens))
        # the cached prefix's prefill: its linear layers and the causal attention among its own tokens (the new
        # tokens' attention over it is still computed)
        saved = 2 * c * shape.lm_params + 2 * shape.layers * shape.heads * shape.head_dim * c * c
        computed = mean_total - saved
        out.update(
            cached_prompt_tokens_mean=round(c, 1),
            tflop_per_clip_computed=round(computed / 1e12, 2),
            counted="computed: the prompt tokens the prefix cache served are not counted",
        )
    else:
        out["counted"] = "whole prompt: prefix-cache hits not measured, counted as computed"
    if clips_per_s:
        achieved = clips_per_s * computed / 1e12
        out.update(
            clips_per_s=round(clips_per_s, 3),
            achieved_tflops=round(achieved, 1),
            fraction_of_peak=round(achieved / (peak * max(1, gpus)), 3),
            fraction_of_peak_whole_prompt=round(clips_per_s * mean_total / 1e12 / (peak * max(1, gpus)), 3),
        )
    return out


def summary(eff: dict) -> str:
    """One line for a console or a table cell: '43 % of bf16 peak (100 TFLOP/clip x 3.9 clips/s)'."""
    if "fraction_of_peak" not in eff:
        return eff.get("error") or f"{eff.get('tflop_per_clip')} TFLOP per clip (no rate)"
    per = eff.get("tflop_per_clip_computed", eff["tflop_per_clip"])
    cached = (
        f"; {eff['cached_prompt_tokens_mean']:g} prompt tokens per clip from the prefix cache not counted, "
        f"{eff['fraction_of_peak_whole_prompt']:.0%} with them"
        if "cached_prompt_tokens_mean" in eff
        else "; the whole prompt counted (prefix-cache hits not measured)"
    )
    return (
        f"{eff['fraction_of_peak']:.0%} of {eff['precision']} peak ({per} TFLOP/clip x "
        f"{eff['clips_per_s']} clips/s = {eff['achieved_tflops']} TFLOP/s of {eff['peak_tflops_per_gpu']}"
        f"{' x ' + str(eff['gpus']) if eff['gpus'] > 1 else ''}{cached})"
    )
