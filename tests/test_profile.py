"""Profile parsing on a real vLLM CPU trace (SmolLM2 under load) and a GPU-shaped trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from research.profile import TraceError, analyse_trace, classify, find_worker_trace, parse_profile

DATA = Path(__file__).parent / "data"
CPU_TRACE = DATA / "vllm_cpu_smollm2.pt.trace.json.gz"


@pytest.fixture(scope="module")
def cpu_breakdown():
    return parse_profile(CPU_TRACE)


def test_real_cpu_trace_breaks_down_by_category(cpu_breakdown):
    b = cpu_breakdown
    assert b.device == "cpu"
    assert abs(sum(b.category_share.values()) - 1.0) < 1e-3
    # A 135M model's forward pass on CPU: dense matmuls (oneDNN) dominate, attention second.
    assert b.share("matmul") > b.share("attention") > 0.05
    assert b.share("matmul") > 0.3
    assert b.share("sampling") > 0  # the sampler's ops are found under its scope
    assert b.share("communication") == 0  # one rank, nothing to reduce
    assert b.top_ops[0][0] == "_C::onednn_mm" and b.top_ops[0][1] == "matmul"
    categories = {cat for _, cat, _ in b.top_ops}
    assert "cpu_scheduling" in categories  # slot mapping / input preparation under _prepare_inputs
    assert b.busy_us <= b.window_us


def test_real_cpu_trace_timeline_sees_prefill_mixed_into_decode(cpu_breakdown):
    b = cpu_breakdown
    assert b.steps >= 5
    assert 0 < b.mixed_step_fraction < 1
    assert b.decode_step_ms and b.mixed_step_ms
    # Steps that prefill long prompts while others decode take much longer: decodes stall.
    assert b.mixed_step_ms > b.decode_step_ms
    assert b.prefill_interrupts_decode
    assert 0 <= b.idle_gap_fraction < 0.5


def test_generic_ops_are_named_by_their_scope():
    trace = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "python_function",
                "name": "vllm/v1/sample/sampler.py(73): forward",
                "ts": 0,
                "dur": 100,
                "pid": 1,
                "tid": 1,
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
            {
                "ph": "X",
                "cat": "python_function",
                "name": "vllm/v1/worker/gpu_model_runner.py(1920): _prepare_inputs",
                "ts": 200,
                "dur": 100,
                "pid": 1,
                "tid": 1,
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 210, "dur": 30, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 400, "dur": 100, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 410, "dur": 20, "pid": 1, "tid": 1},
        ]
    }
    b = analyse_trace(trace, "constructed")
    assert b.category_us["sampling"] == 50
    assert b.category_us["matmul"] == 100  # a copy nested in the matmul counts as matmul work
    assert b.category_us["cpu_scheduling"] >= 30


def test_gpu_kernels_categorised_by_name_and_launch_scope():
    def k(name, ts, dur, corr):
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "ts": ts,
            "dur": dur,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": corr},
        }

    def launch(ts, corr):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": ts,
            "dur": 5,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": corr},
        }

    trace = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "execute_context_0(0)_generation_8(8)",
                "ts": 0,
                "dur": 400,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "vllm::unified_attention_with_output",
                "ts": 50,
                "dur": 40,
                "pid": 1,
                "tid": 1,
            },
            launch(10, 1),
            launch(60, 2),
            launch(120, 3),
            launch(200, 4),
            k("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 100, 300, 1),
            k("void at::native::elementwise_kernel<128, 4>", 420, 20, 2),  # launched inside attention
            k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 500, 100, 3),
            k("void flash::flash_fwd_splitkv_kernel<>", 1000, 100, 4),  # gap before it: GPU idle
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pinned -> Device)",
                "ts": 1100,
                "dur": 10,
                "pid": 0,
                "tid": 8,
            },
        ]
    }
    b = analyse_trace(trace, "gpu")
    assert b.device == "gpu"
    assert b.category_us["matmul"] == 300
    assert b.category_us["attention"] == 120
    assert b.category_us["communication"] == 100
    assert b.category_us["memory"] == 10
    assert b.idle_gap_fraction > 0.3  # 400 us of 1010 us without a kernel
    assert b.cpu_gpu_overlap is not None and b.cpu_gpu_overlap < 0.5


@pytest.mark.parametrize(
    "name,category",
    [
        ("_C::onednn_mm", "matmul"),
        ("aten::addmm", "matmul"),
        ("fused_moe_kernel", "matmul"),
        ("_C::cpu_attention_with_kv_cache", "attention"),
        ("ncclDevKernel_AllGather_RING_LL", "communication"),
        ("_C::fused_gumbel_argmax", "sampling"),
        ("Memcpy DtoH (Device -> Pageable)", "memory"),
        ("aten::copy_", None),
    ],
)
def test_classify(name, category):
    assert classify(name) == category or (category is None and classify(name) is None)


def test_front_end_trace_redirects_to_worker_rank(tmp_path):
    rank = tmp_path / "rank0.123.pt.trace.json.gz"
    rank.write_bytes(CPU_TRACE.read_bytes())
    front = tmp_path / "vm_1.async_llm.456.pt.trace.json.gz"
    front.write_bytes(
        gzip.compress(
            json.dumps(
                {
                    "traceEvents": [
                        {"ph": "X", "cat": "python_function", "name": "uvloop/__init__.py(92): run", "ts": 0, "dur": 5}
                    ]
                }
            ).encode()
        )
    )
    assert find_worker_trace(front) == rank
    assert find_worker_trace(tmp_path) == rank


def test_bad_traces_raise_clear_errors(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="x.json"):
        parse_profile(bad)
    empty = tmp_path / "y.json"
    empty.write_text(
        json.dumps({"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f", "ts": 0, "dur": 1}]})
    )
    with pytest.raises(TraceError, match="no cpu_op or kernel"):
        parse_profile(empty)


def test_real_gpu_trace_of_an_eager_model_is_launch_bound():
    """A real H200 torch-profiler trace (tests/data/make_gpu_trace.py): small eager Qwen3, batch 8."""
    b = parse_profile(DATA / "gpu_qwen3_random.pt.trace.json.gz")
    assert b.device == "gpu"
    assert b.category_us["matmul"] > b.category_us["attention"] > 0  # nvjet GEMMs vs cuDNN flash SDPA
    assert b.category_us["sampling"] > 0  # softmax / radix top-k of the sampler
    assert any(cat == "matmul" and name.startswith("nvjet") for name, cat, _ in b.top_ops)
    # Thousands of tiny kernels with launch gaps between them: the GPU mostly waits on the host.
    assert b.busy_us < 0.5 * b.window_us
    assert b.share("cpu_scheduling") > 0.5 and b.idle_gap_fraction > 0.5
    assert b.cpu_gpu_overlap is not None and 0 < b.cpu_gpu_overlap <= 1
    assert b.steps == 7 and b.mixed_step_fraction == pytest.approx(1 / 7, abs=1e-3)
