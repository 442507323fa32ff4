"""How tests/data/gpu_qwen3_random.pt.trace.json.gz was made (run on the GPU machine, once).

A randomly initialised small Qwen3 (transformers, sdpa attention, bf16) runs engine-like steps
under torch.profiler (CPU + CUDA): a mixed step (two 512-token prefills + decodes) and decode
steps, each inside a vLLM-style ``execute_context_N(..)_generation_M(..)`` annotation, with a
sampler (softmax / top-k / multinomial) and one NCCL all-reduce per step (world size 1).
"""

import gzip
import os
import shutil
import sys

import torch
import torch.distributed as dist
from transformers import Qwen3Config, Qwen3ForCausalLM

out = sys.argv[1]
torch.manual_seed(0)
cfg = Qwen3Config(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=32000,
    max_position_embeddings=4096,
)
model = Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
model.config._attn_implementation = "sdpa"
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29512")
comm = True
try:
    dist.init_process_group("nccl", rank=0, world_size=1)
except Exception as exc:  # noqa: BLE001
    print("no nccl:", exc)
    comm = False


def sample(logits):
    with torch.profiler.record_function("sampler"):
        probs = torch.softmax(logits[:, -1, :].float() / 0.7, dim=-1)
        top = torch.topk(probs, 50, dim=-1)
        choice = torch.multinomial(top.values, 1)
        return top.indices.gather(-1, choice)


@torch.inference_mode()
def step(ids, name):
    with torch.profiler.record_function(name):
        logits = model(ids).logits
        if comm:
            dist.all_reduce(logits[:, -1, :8].contiguous())
        return sample(logits)


decode = torch.randint(0, 32000, (8, 64), device="cuda")
prefill = torch.randint(0, 32000, (2, 512), device="cuda")
for _ in range(3):  # warm-up outside the trace
    step(decode, "warm")
    step(prefill, "warm")
torch.cuda.synchronize()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts, with_stack=False) as prof:
    for i in range(6):
        step(decode, "execute_context_0(0)_generation_8(8)")
        if i == 2:
            step(prefill, "execute_context_2(1024)_generation_6(6)")
        torch.cuda.synchronize()
prof.export_chrome_trace("/tmp/trace.json")
with open("/tmp/trace.json", "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
    shutil.copyfileobj(src, dst)
print("wrote", out, os.path.getsize(out))
