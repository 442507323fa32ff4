"""Unit check of vLLM CPU's C++ replacement for eagle_step_slot_mapping_metadata_kernel against the
Triton kernel's semantics (pure torch reference), with a multi-block block table like a long prompt's.

    nice -n 19 .venv-engine/bin/python benchmarks/spec_decode/cpu_kernel_unit.py
"""

import torch
import vllm._C  # noqa: F401  (registers torch.ops._C)
from vllm.utils import cpu_triton_utils as cpu_tl

BS, MAXLEN = 128, 2048
nblk = (MAXLEN + BS - 1) // BS


def reference(positions, block_table, seq_lens):
    newp = positions + 1
    exceeds = newp >= MAXLEN
    clamped = torch.where(exceeds, torch.zeros_like(newp), newp)
    bn = torch.clamp(clamped // BS, max=nblk - 1)
    bid = block_table[torch.arange(len(positions)), bn].to(torch.int64)
    slot = bid * BS + clamped % BS
    slot = torch.where(exceeds, torch.full_like(slot, -1), slot)
    sl = torch.where(exceeds, torch.ones_like(seq_lens), seq_lens + 1).clamp(max=MAXLEN)
    return clamped, slot, sl


for batch, positions in [(1, [60]), (1, [130]), (1, [600]), (2, [60, 300]), (2, [700, 130])]:
    block_table = torch.zeros((4, nblk), dtype=torch.int32)  # like the runner's (max_num_seqs, blocks)
    for r in range(4):
        block_table[r, :8] = torch.arange(1 + 10 * r, 9 + 10 * r, dtype=torch.int32)
    bt = block_table[:batch]
    pos = torch.tensor(positions, dtype=torch.int64)
    seq = pos.to(torch.int32) + 1
    ref = reference(pos, bt, seq.clone())
    outp = torch.zeros(batch, dtype=torch.int64)
    outs = torch.zeros(batch, dtype=torch.int64)
    seq2 = seq.clone()
    cpu_tl._eagle_step_slot_mapping_metadata_kernel_impl(
        pos, bt, bt.stride(0), seq2, outp, outs, BS, MAXLEN, nblk, -1, batch
    )
    ok = torch.equal(outp, ref[0]) and torch.equal(outs, ref[1]) and torch.equal(seq2, ref[2])
    print(
        f"batch {batch} positions {positions}: C++ pos {outp.tolist()} slot {outs.tolist()} seq {seq2.tolist()} | "
        f"reference pos {ref[0].tolist()} slot {ref[1].tolist()} seq {ref[2].tolist()} -> {'OK' if ok else 'MISMATCH'}"
    )

# --- expand_kernel (rejection_sampler.expand_batch_to_tokens: per-request temperature/top_p/top_k to tokens)
# (same body as vllm.v1.sample.rejection_sampler.expand_batch_to_tokens, launching the CPU override;
# importing rejection_sampler here would load a second vllm._C variant.)


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    expanded_x = x.new_empty(num_tokens)
    cpu_tl._expand_kernel_impl(expanded_x, x, cu_num_tokens, replace_from, replace_to)
    return expanded_x


cu = torch.tensor([3, 6], dtype=torch.int32)  # two requests, 3 draft tokens each
for name, x, rf, rt in [
    ("temperature float32", torch.tensor([0.3, 0.7]), 0, 1),
    ("top_p float32", torch.tensor([0.9, 0.95]), 0, 0),
    ("top_k int32", torch.tensor([20, 50], dtype=torch.int32), 0, 0),
    ("int64", torch.tensor([20, 50]), 0, 0),
]:
    got = expand_batch_to_tokens(x, cu, 6, replace_from=rf, replace_to=rt)
    want = x.repeat_interleave(3)
    print(
        f"expand_batch_to_tokens {name}: got {got.tolist()} want {want.tolist()} -> "
        f"{'OK' if torch.equal(got, want) else 'MISMATCH'}"
    )

# --- the same checks through the runtime fix (engines/patches/vllm_issue_55005/sitecustomize.py)
import importlib.util  # noqa: E402
import os  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "expand_fix",
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "..",
        "engines",
        "patches",
        "vllm_issue_55005",
        "sitecustomize.py",
    ),
)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
for name, x, rf, rt in [
    ("temperature float32 (fixed)", torch.tensor([0.3, 0.0]), 0, 1),
    ("top_p float32 (fixed)", torch.tensor([0.9, 0.95]), 0, 0),
    ("top_k int32 (fixed)", torch.tensor([20, 50], dtype=torch.int32), 0, 0),
]:
    got = expand_batch_to_tokens(x, cu, 6, replace_from=rf, replace_to=rt)
    want = torch.where(x == rf, torch.as_tensor(rt, dtype=x.dtype), x).repeat_interleave(3)
    print(
        f"expand_batch_to_tokens {name}: got {got.tolist()} want {want.tolist()} -> "
        f"{'OK' if torch.equal(got, want) else 'MISMATCH'}"
    )
