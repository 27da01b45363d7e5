"""serving.flops: the model FLOPs of a clip (docs/BENCHMARKS.md, "Compute efficiency") against a case worked by
hand, the vision grid against Qwen3-VL's video processor, and the share of the peak a run achieved."""

from __future__ import annotations

import pytest

from serving import flops
from serving.flops import ClipWork


def test_the_model_shape_gives_qwen3_vl_8b_parameter_counts():
    s = flops.QWEN3_VL_8B
    # one decoder layer: q 4096x4096 + k 4096x1024 + v 4096x1024 + o 4096x4096 + gate/up/down 3 x 4096x12288
    assert s.lm_layer_params == 16_777_216 + 4_194_304 + 4_194_304 + 16_777_216 + 150_994_944 == 192_937_984
    assert s.lm_params == 36 * 192_937_984 == 6_945_767_424  # "6.95 G non-embedding parameters"
    assert s.lm_head_params == 4096 * 151_936 == 622_329_856
    # a vision block: qkv 1152x3456 + proj 1152x1152 + fc1 1152x4304 + fc2 4304x1152
    assert s.vit_block_params == 3_981_312 + 1_327_104 + 4_958_208 + 4_958_208 == 15_224_832
    assert s.patch_embed_params == 3 * 2 * 16 * 16 * 1152 == 1_769_472
    assert s.merger_params == 4608 * 4608 + 4608 * 4096 == 40_108_032


def test_the_recipe_clip_worked_by_hand():
    """16 frames of a 1080p clip at the recipe's 9,437,184 pixels, 4,925 prompt and 150 output tokens (the
    vLLM-alone benchmark of 2026-11-30)."""
    # 16 x 1080 x 1920 = 33.2 M pixels > 9.44 M: beta = sqrt(33,177,600 / 9,437,184) = 1.875, so the frames become
    # floor(1080 / 1.875 / 32) x 32 = 576 by floor(1920 / 1.875 / 32) x 32 = 1024 pixels: 36 x 64 patches of 16,
    # 8 temporal patches of 2 frames
    grid = flops.vision_grid(16, 1080, 1920, 9_437_184)
    assert grid == (8, 36, 64)
    assert flops.vision_tokens(grid) == 8 * 36 * 64 // 4 == 4608
    f = flops.clip_flops(4925, 150, grid)
    patches = 18_432
    # vision: 2 x patches x (patch embed + 27 blocks) + 2 x vision tokens x 4 mergers
    vision = 2 * patches * (1_769_472 + 27 * 15_224_832) + 2 * 4608 * 4 * 40_108_032
    assert vision == 15_218_931_400_704 + 1_478_542_491_648 and f.vision == vision
    # attention inside each of the 8 temporal patches of 36 x 64 = 2,304 patches: 27 x 8 x 4 x 2304^2 x 1152
    assert f.vision_attention == 27 * 8 * 4 * 2304**2 * 1152 == 5_283_615_080_448
    # prefill: 2 x 4,925 tokens x 6.946 G weights, + the first token's logits; causal attention 2 x 36 x 4096 x P^2
    assert f.prefill == 2 * 4925 * 6_945_767_424 + 2 * 622_329_856 == 68_417_053_786_112
    assert f.prefill_attention == 2 * 36 * 4096 * 4925**2 == 7_153_274_880_000
    # 149 decode steps through every weight and the lm_head; step k attends over 4,925 + k positions
    assert f.decode == 2 * 149 * (6_945_767_424 + 622_329_856) == 2_255_292_989_440
    assert f.decode_attention == 4 * 36 * 4096 * (149 * 4925 + 149 * 150 / 2) == 439_418_880_000
    assert f.total == pytest.approx(100.246e12, rel=1e-4)  # BENCHMARKS.md's estimate then: "~98 TFLOP"


def test_the_grid_follows_the_pixel_budget_not_the_frames():
    # at the recipe's budget 8, 16 and 32 frames of a 1080p clip cost about the same vision tokens: more frames,
    # smaller frames (transformers' smart_resize bounds frames x height x width)
    tokens = {f: flops.vision_tokens(flops.vision_grid(f, 1080, 1920)) for f in (8, 16, 32)}
    assert tokens == {8: 4500, 16: 4608, 32: 4224}
    # half and a quarter of the budget: about half and a quarter of the tokens
    assert flops.vision_grid(16, 1080, 1920, 4_718_592) == (8, 24, 44)
    assert flops.vision_grid(16, 1080, 1920, 2_359_296) == (8, 18, 32)
    # a small clip under the budget keeps its size (rounded to 32), an odd frame count is padded
    assert flops.vision_grid(3, 360, 640) == (2, 22, 40)
    with pytest.raises(ValueError):
        flops.vision_grid(0, 1080, 1920)


def test_efficiency_is_the_share_of_the_peak_and_says_where_the_peak_comes_from():
    work = [ClipWork(4925, 150, 16, 1080, 1920)] * 3
    e = flops.efficiency(4.35, work, "bf16")
    assert e["tflop_per_clip"] == pytest.approx(100.25, abs=0.01)
    assert e["achieved_tflops"] == pytest.approx(4.35 * 100.246, rel=1e-3)
    assert e["fraction_of_peak"] == pytest.approx(4.35 * 100.246 / 790, rel=1e-3)  # 55 %
    assert "measured on the lent H200s" in e["peak_source"]
    # a run's own measurement wins; FP8 without one is twice bf16, and says so
    assert flops.efficiency(4.35, work, "bf16", measured_peak={"bf16_tflops": 775.0})["peak_tflops_per_gpu"] == 775
    fp8 = flops.efficiency(4.35, work, "fp8", measured_peak={"bf16_tflops": 775.0})
    assert fp8["peak_tflops_per_gpu"] == 1550 and "not measured" in fp8["peak_source"]
    assert flops.efficiency(4.35, work, "fp8", measured_peak={"fp8_tflops": 1400})["peak_tflops_per_gpu"] == 1400
    # two GPUs: twice the peak
    assert flops.efficiency(8.7, work, gpus=2)["fraction_of_peak"] == pytest.approx(e["fraction_of_peak"], rel=1e-3)
    assert "55% of bf16 peak" in flops.summary(e)
    assert flops.efficiency(1.0, [])["error"]


def test_prompt_tokens_the_prefix_cache_served_are_not_counted_as_computed():
    """The GPU test of 2026-12-04 (392 clips, 4.06 clips/s, 779.0 TFLOP/s measured): 5,699.6 prompt tokens per
    clip of which 948.8 came from vLLM's prefix cache (the fixed text before the video). Counting them as
    computed gave 60 %; the GPU computed 53 %."""
    work = [ClipWork(5700, 278, 16, 1080, 1920)] * 2
    whole = flops.efficiency(4.06, work, "bf16", measured_peak={"bf16_tflops": 779.0})
    cached = flops.efficiency(4.06, work, "bf16", measured_peak={"bf16_tflops": 779.0}, cached_prompt_tokens=948.8)
    # by hand: the cached prefix's linear layers (2 x c x W) and the causal attention among its own tokens (2 A c^2)
    saved = 2 * 948.8 * 6_945_767_424 + 2 * 36 * 4096 * 948.8**2
    assert cached["tflop_per_clip_computed"] == pytest.approx((whole["tflop_per_clip"] * 1e12 - saved) / 1e12, abs=0.01)
    assert cached["tflop_per_clip_computed"] == pytest.approx(102.4, abs=0.1)
    assert whole["fraction_of_peak"] == pytest.approx(0.604, abs=0.001)
    assert cached["fraction_of_peak"] == pytest.approx(0.534, abs=0.001)
    assert cached["fraction_of_peak_whole_prompt"] == whole["fraction_of_peak"]
    # each says what it counted, in the one line a console or a table shows
    assert "948.8 prompt tokens per clip from the prefix cache not counted, 60% with them" in flops.summary(cached)
    assert flops.summary(cached).startswith("53% of bf16 peak (102.4")
    assert "prefix-cache hits not measured" in flops.summary(whole) and "not measured" in whole["counted"]
    # none served from the cache: the same figure either way
    zero = flops.efficiency(4.06, work, "bf16", measured_peak={"bf16_tflops": 779.0}, cached_prompt_tokens=0)
    assert zero["fraction_of_peak"] == whole["fraction_of_peak"]
