"""Throwaway fix for vLLM 0.32 CPU's expand_kernel override, loaded only by processes started with
PYTHONPATH=benchmarks/spec_decode/cpu_expand_fix (vLLM's engine-core subprocesses inherit it).

The bug: vllm/utils/cpu_triton_utils.py::_expand_kernel_impl passes _ensure_int64(output) to the C++
op. For a float32 output (temperature, top_p) or int32 output (top_k), _ensure_int64 returns a new
int64 copy, the C++ op fills that copy, and the copy is dropped: expand_batch_to_tokens returns its
new_empty() buffer uninitialised. RejectionSampler.apply_sampling_constraints then divides the target
logits by garbage temperatures and applies garbage top_p/top_k for every non-greedy request.

The replacement computes the same thing as the Triton expand_kernel, in torch, in the output's dtype.
"""
import os

if os.environ.get("SPEC_CPU_EXPAND_FIX", "1") == "1":
    try:
        import torch
        from vllm.utils import cpu_triton_utils as _cpu_tl

        def _expand_kernel_impl_fixed(output, input_val, cu_num_tokens, replace_from, replace_to,
                                      MAX_NUM_TOKENS=None):
            cu = cu_num_tokens.to(torch.int64)
            counts = torch.diff(cu, prepend=cu.new_zeros(1))
            vals = torch.where(input_val == replace_from,
                               torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
            n = int(cu[-1]) if cu.numel() else 0
            output[:n].copy_(torch.repeat_interleave(vals, counts).to(output.dtype))

        _cpu_tl._expand_kernel_impl = _expand_kernel_impl_fixed
        if os.environ.get("SPEC_CPU_EXPAND_FIX_LOG"):
            print(f"[sitecustomize] pid {os.getpid()}: patched cpu_triton_utils._expand_kernel_impl", flush=True)
    except ModuleNotFoundError:  # an interpreter without torch/vllm (e.g. the probe's own python3)
        pass
    except Exception as e:  # never break the interpreter
        print(f"[sitecustomize] expand fix not applied: {e!r}", flush=True)
