"""Runtime fix for vLLM issue 55005 (CPU builds): put this folder on the engine's PYTHONPATH.

    engine:
      env: {PYTHONPATH: engines/patches/vllm_issue_55005}   # an absolute path where the engine runs elsewhere

vLLM 0.32's CPU replacement of the Triton ``expand_kernel`` (vllm/utils/cpu_triton_utils.py,
``_expand_kernel_impl``) hands the C++ op an int64 *copy* of its float32/int32 output and never copies
it back, so ``rejection_sampler.expand_batch_to_tokens`` returns uninitialised memory as the per-token
temperature, top_p and top_k. Every speculative-decoding request with temperature > 0 is then verified
against garbage logits: drafts are rejected and the emitted text is nonsense, while greedy requests are
untouched. Upstream fix: vllm-project/vllm PR 55006. This module replaces that one function with the
same computation in torch, in the output's dtype, and only when a self-check shows the installed
function is broken (a fixed vLLM is left alone). The engine's log says whether it applied.
Found and measured in benchmarks/results/spec_decode_cpu_path_probe.txt.

As a candidate's overlay (``--overlay vllm_issue_55005``, the vLLM adapter's first patch recipe) a fix that
cannot apply (no such module or function in this vLLM) stops the engine with the reason: the candidate is
``invalid``, never measured unpatched.
"""

import sys


#: run by the overlay loader for a candidate that asked for this fix (engines/overlays.py): a fix that
#: cannot apply must stop the engine with the reason, never run the candidate unpatched
AS_OVERLAY = __name__ == "autoresearch_overlay"


def _not_applicable(why: str) -> str:
    if AS_OVERLAY:
        raise RuntimeError(f"vllm issue 55005 fix does not apply: {why}")
    return ""


def _apply() -> str:
    try:
        import torch
    except ImportError:  # not the engine's interpreter: nothing to fix
        return ""
    try:
        from vllm.utils import cpu_triton_utils as cpu_tl
    except ImportError as exc:
        return _not_applicable(f"this vLLM has no CPU Triton replacements ({exc})")
    original = getattr(cpu_tl, "_expand_kernel_impl", None)
    if original is None:
        return _not_applicable("vllm.utils.cpu_triton_utils has no _expand_kernel_impl to replace")

    def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
        cu = cu_num_tokens.to(torch.int64)
        counts = torch.diff(cu, prepend=cu.new_zeros(1))
        values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
        n = int(cu[-1]) if cu.numel() else 0
        output[:n].copy_(torch.repeat_interleave(values, counts).to(output.dtype))

    probe = torch.zeros(4, dtype=torch.float32)
    try:
        original(probe, torch.tensor([0.5, 0.75]), torch.tensor([2, 4], dtype=torch.int32), 0, 1)
        broken = probe.tolist() != [0.5, 0.5, 0.75, 0.75]
    except Exception:  # noqa: BLE001 - the op itself fails: replace it too
        broken = True
    if not broken:
        return "vllm issue 55005 fix: installed expand kernel is correct, left alone"
    cpu_tl._expand_kernel_impl = expand
    return "vllm issue 55005 fix: replaced vllm.utils.cpu_triton_utils._expand_kernel_impl"


try:
    _message = _apply()
    if _message:  # in each process of the engine that imports vLLM (sys.argv is not set yet at this point)
        print(f"[autoresearch] {_message}", file=sys.stderr, flush=True)
except Exception as _exc:  # noqa: BLE001 - on a bare PYTHONPATH never break the interpreter; as an overlay, stop
    if AS_OVERLAY:
        raise
    print(f"[autoresearch] vllm issue 55005 fix not applied: {_exc!r}", file=sys.stderr, flush=True)
