"""The profile of a replica's engine, summed: what the threads stage's `prof` rows report (benchmarks/node/kernels.py).
The trace here is written by hand in the shape torch's profiler writes (Chrome trace events, microseconds)."""

import gzip
import json

import pytest

from benchmarks.node import kernels


def k(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


def scope(name, ts, dur):
    return {"ph": "X", "cat": "gpu_user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


TRACE = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},  # CPU side: not GPU time
    # the vision encoder, in no scope: a bf16 GEMM and its attention
    k("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 1000, 300),
    k("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>", 1300, 100),
    # the language model's forward: an FP8 GEMM, the activations' quantization, a norm; two kernels overlap
    scope("gpu_model_runner: forward", 1500, 700),
    k("void cutlass::device_kernel<vllm::cutlass_3x_gemm<cutlass::float_e4m3_t, cutlass::bfloat16_t>>", 1500, 400),
    k("void vllm::dynamic_scaled_fp8_quant_kernel<c10::BFloat16>", 1600, 100),
    k("void vllm::fused_add_rms_norm_kernel<c10::BFloat16>", 1950, 50),
    # the sampler in its own scope, after a gap where the GPU idles
    scope("gpu_model_runner: sample", 3000, 100),
    k("void at::native::sbtopk::gatherTopK<float>", 3000, 100),
]


def test_kernel_time_is_split_by_class_and_by_scope_and_the_idle_gap_shows():
    s = kernels.summarize(TRACE)
    assert s["kernels"] == 6
    assert s["window_s"] == pytest.approx(2100 / 1e6)  # the first kernel's start to the last one's end
    assert s["kernel_s"] == pytest.approx(1050 / 1e6)
    # the quantization kernel runs beside the GEMM: busy time counts it once
    assert s["gpu_busy_s"] == pytest.approx(950 / 1e6)
    assert s["gpu_busy_share_of_window"] == pytest.approx(950 / 2100, abs=1e-4)
    by_class = {r["name"]: r["seconds"] for r in s["by_class"]}
    assert by_class == {
        "gemm_fp8": 400 / 1e6,
        "gemm_bf16": 300 / 1e6,
        "attention": 100 / 1e6,
        "fp8_quant": 100 / 1e6,
        "sampling": 100 / 1e6,
        "norm": 50 / 1e6,
    }
    assert s["by_class"][0]["name"] == "gemm_fp8" and s["by_class"][0]["share_of_kernel_time"] == pytest.approx(
        400 / 1050, abs=1e-4
    )
    by_scope = {r["name"]: r["seconds"] for r in s["by_scope"]}
    assert by_scope == {
        "gpu_model_runner: forward": 550 / 1e6,
        kernels.NO_SCOPE: 400 / 1e6,
        "gpu_model_runner: sample": 100 / 1e6,
    }
    assert s["top_kernels"][0]["cls"] == "gemm_fp8"


def test_a_trace_without_kernels_says_so_and_a_written_trace_is_read_back(tmp_path):
    assert kernels.summarize([TRACE[0]]) == {"kernels": 0, "error": "no kernel events in the trace"}
    path = tmp_path / "engine.1.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": TRACE}, f)
    assert kernels.wait_for_trace(tmp_path, timeout_s=5, settle_s=0.1) == path
    assert kernels.summarize(kernels.read_trace(path))["kernels"] == 6
    assert kernels.wait_for_trace(tmp_path / "none", timeout_s=0.3, settle_s=0.1) is None


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm_bf16"),
        ("void cutlass::device_kernel<vllm::cutlass_3x_gemm_fp8<cutlass::float_e4m3_t>>", "gemm_fp8"),
        ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel>", "activation"),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "rotary"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "other"),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>", "attention"),
        # names seen in the FP8 engine's trace (2026-12-04): the activations' scales, fused by torch.compile
        ("triton_red_fused__to_copy_abs_clamp_max_mul_reciprocal_unsqueeze_0", "fp8_quant"),
        (
            "triton_red_fused__to_copy_abs_clamp_cutlass_scaled_mm_div_max_mul_reciprocal_silu_slice_unsqueeze_3",
            "fp8_quant",
        ),
        ("triton_poi_fused_mul_silu_slice_1", "activation"),
        ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm_bf16"),
        (
            "void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, cutlass::bfloat16_t, "
            "vllm::c3x::ScaledEpilogueBias",
            "gemm_fp8",
        ),
    ],
)
def test_kernel_names_fall_in_their_class(name, cls):
    assert kernels.kernel_class(name) == cls
