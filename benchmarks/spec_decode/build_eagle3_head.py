"""Build a RANDOM-initialised EAGLE-3 head for SmolLM2-135M in the layout vLLM's
model_executor/models/llama_eagle3.py loads (HF EAGLE-3 checkpoint format: one 'midlayer' decoder
layer whose qkv takes [embeds, hidden] = 2*hidden, an fc from 3 target aux hidden states to hidden,
its own norm and lm_head; no embed_tokens, so vLLM shares the target's). Only for checking that the
eagle3 path starts and serves on the CPU build: its acceptance means nothing.

    nice -n 19 .venv-engine/bin/python benchmarks/spec_decode/build_eagle3_head.py TARGET_DIR OUT_DIR
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
t = json.loads((src / "config.json").read_text())
H, I, V = t["hidden_size"], t["intermediate_size"], t["vocab_size"]
nh, nkv = t["num_attention_heads"], t["num_key_value_heads"]
hd = t.get("head_dim", H // nh)
aux = [2, t["num_hidden_layers"] // 2, t["num_hidden_layers"] - 3]  # vLLM's Llama default pattern
cfg = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": H,
    "intermediate_size": I,
    "num_hidden_layers": 1,
    "num_attention_heads": nh,
    "num_key_value_heads": nkv,
    "head_dim": hd,
    "hidden_act": "silu",
    "rms_norm_eps": t["rms_norm_eps"],
    "max_position_embeddings": t["max_position_embeddings"],
    "rope_parameters": t.get("rope_parameters", {"rope_theta": 10000.0, "rope_type": "default"}),
    "vocab_size": V,
    "draft_vocab_size": V,
    "target_hidden_size": H,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": t.get("bos_token_id"),
    "eos_token_id": t.get("eos_token_id"),
    "dtype": "bfloat16",
    "torch_dtype": "bfloat16",
    "eagle_aux_hidden_state_layer_ids": aux,
    "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": aux},
}
(dst / "config.json").write_text(json.dumps(cfg, indent=1))
g = torch.Generator().manual_seed(0)


def rnd(*shape):
    return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)


w = {
    "midlayer.self_attn.q_proj.weight": rnd(nh * hd, 2 * H),
    "midlayer.self_attn.k_proj.weight": rnd(nkv * hd, 2 * H),
    "midlayer.self_attn.v_proj.weight": rnd(nkv * hd, 2 * H),
    "midlayer.self_attn.o_proj.weight": rnd(H, nh * hd),
    "midlayer.mlp.gate_proj.weight": rnd(I, H),
    "midlayer.mlp.up_proj.weight": rnd(I, H),
    "midlayer.mlp.down_proj.weight": rnd(H, I),
    "midlayer.input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
    "midlayer.hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16),
    "midlayer.post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
    "norm.weight": torch.ones(H, dtype=torch.bfloat16),
    "fc.weight": rnd(H, len(aux) * H),
    "lm_head.weight": rnd(V, H),
}
save_file(w, dst / "model.safetensors", metadata={"format": "pt"})
print(dst, len(w), "tensors", sum(v.numel() for v in w.values()) / 1e6, "M params, aux layers", aux)
