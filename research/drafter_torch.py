"""The torch half of research/drafter/training.py, run by the engine environment's python (torch lives there).

    python research/drafter_torch.py truncate --target DIR --out DIR --layers N
    python research/drafter_torch.py train --target DIR --data train.jsonl --out DIR --layers N --steps S
    python research/drafter_torch.py eval --draft DIR --data heldout.jsonl --k 3

Standalone on purpose (stdlib, torch, transformers, safetensors only): it never imports the project.
Progress lines start with ``progress:``; the last line is ``result: {json}``. One thread: the host
shares its cores with the engine and the load generator.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
import sys
import time
from pathlib import Path

# Run as a script, this folder would come first on sys.path and its modules (profile.py, ...) would
# shadow the standard library's for torch and transformers.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)


def say(msg: str) -> None:
    print(f"progress: {msg}", flush=True)


def load_truncated(target: Path, layers: int, dtype=torch.float32):
    """The target's first ``layers`` decoder layers with its embeddings, final norm and head."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype)
    total = model.config.num_hidden_layers
    if not 1 <= layers <= total:
        raise SystemExit(f"--layers must be within 1..{total}, got {layers}")
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    return model


def save(model, target: Path, out: Path, dtype) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (target / name).exists():
            shutil.copy(target / name, out / name)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cmd_truncate(a) -> dict:
    from transformers import AutoConfig

    dtype = getattr(AutoConfig.from_pretrained(a.target), "dtype", None) or torch.bfloat16
    model = load_truncated(Path(a.target), a.layers)
    save(model, Path(a.target), Path(a.out), dtype)
    return {"params_m": sum(p.numel() for p in model.parameters()) / 1e6}


def cmd_train(a) -> dict:
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    from transformers import AutoConfig

    target, out = Path(a.target), Path(a.out)
    save_dtype = getattr(AutoConfig.from_pretrained(target), "dtype", None) or torch.bfloat16
    model = load_truncated(target, a.layers)
    model.train()
    emb = model.get_input_embeddings().weight
    for p in model.parameters():
        p.requires_grad_(True)
    if not a.train_embeddings:  # the (tied) embeddings and head stay the target's: faster, and shared vocabulary
        emb.requires_grad_(False)
        head = model.get_output_embeddings()
        if head is not None:
            head.weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    data = [e for e in read(Path(a.data)) if e["output_ids"]]
    if not data:
        raise SystemExit("no example with reply tokens")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.05, 1 - s / a.steps))
    started, losses = time.monotonic(), []
    order: list[int] = []
    for step in range(a.steps):
        if not order:
            order = list(range(len(data)))
            random.shuffle(order)
        e = data[order.pop()]
        prompt, reply = e["prompt_ids"], e["output_ids"]
        if a.max_context and len(prompt) > a.max_context:
            prompt = prompt[-a.max_context :]
        ids = torch.tensor([prompt + reply])
        # Hidden states at the positions that predict the reply tokens only; the head runs on those
        # (a 49k-vocabulary head over a 600-token prompt would cost more than the layers).
        hidden = model.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1 : -1]
        logits = model.lm_head(hidden)
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(reply))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if (step + 1) % max(1, a.steps // 10) == 0 or step == 0:
            recent = losses[-max(1, a.steps // 10) :]
            say(f"step {step + 1}/{a.steps} loss {sum(recent) / len(recent):.3f} ({time.monotonic() - started:.0f} s)")
    train_s = time.monotonic() - started
    model.eval()
    save(model, target, out, save_dtype)
    window = max(1, min(20, len(losses) // 5))
    return {
        "steps": a.steps,
        "train_examples": len(data),
        "train_tokens": sum(len(e["output_ids"]) for e in data),
        "train_s": round(train_s, 1),
        "loss_first": sum(losses[:window]) / window,
        "loss_last": sum(losses[-window:]) / window,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
    }


@torch.no_grad()
def cmd_eval(a) -> dict:
    """Simulated greedy speculation: from each verified prefix the draft proposes k tokens; they are
    accepted while they equal the target's reply; the target then adds one token (a bonus or its
    correction) and drafting resumes after it, as vLLM does at temperature 0."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(a.draft, dtype=getattr(torch, a.dtype)).eval()
    data = [e for e in read(Path(a.data)) if e["output_ids"]]
    k, started = a.k, time.monotonic()
    accepted = [0] * k
    rounds = agree = positions = 0
    for n, e in enumerate(data):
        prompt, reply = e["prompt_ids"], e["output_ids"]
        # One pass over prompt+reply gives every round's first draft token (teacher-forced argmax) and
        # the KV cache; each round crops a copy of it to its verified prefix and drafts the rest.
        full = model(input_ids=torch.tensor([prompt + reply]), use_cache=True)
        first = full.logits[0, len(prompt) - 1 : -1].argmax(-1).tolist()
        agree += sum(int(a == b) for a, b in zip(first, reply))  # top-1 agreement, teacher-forced
        positions += len(reply)
        i = 0
        while i < len(reply) - 1:  # the last reply token has nothing after it to draft
            draft = [first[i]]
            if k > 1:
                past = copy.deepcopy(full.past_key_values)
                past.crop(len(prompt) + i)
                nxt = first[i]
                for _ in range(k - 1):
                    out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                    past, nxt = out.past_key_values, int(out.logits[0, -1].argmax())
                    draft.append(nxt)
            rounds += 1
            ok = 0
            for j in range(k):
                if i + j < len(reply) and draft[j] == reply[i + j]:
                    accepted[j] += 1
                    ok += 1
                else:
                    break
            i += ok + 1
        if (n + 1) % 10 == 0:
            say(f"eval {n + 1}/{len(data)} ({time.monotonic() - started:.0f} s)")
    per_pos = [c / rounds if rounds else 0.0 for c in accepted]
    return {
        "examples": len(data),
        "drafts": rounds,
        "accepted_per_position": per_pos,
        "acceptance_length": 1.0 + (sum(accepted) / rounds if rounds else 0.0),
        "top1_agreement": agree / positions if positions else 0.0,
        "eval_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("truncate")
    t.add_argument("--target", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--layers", type=int, required=True)
    tr = sub.add_parser("train")
    tr.add_argument("--target", required=True)
    tr.add_argument("--data", required=True)
    tr.add_argument("--out", required=True)
    tr.add_argument("--layers", type=int, default=4)
    tr.add_argument("--steps", type=int, default=200)
    tr.add_argument("--lr", type=float, default=3e-4)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--max-context", type=int, default=0)
    tr.add_argument("--train-embeddings", action="store_true")
    ev = sub.add_parser("eval")
    ev.add_argument("--draft", required=True)
    ev.add_argument("--data", required=True)
    ev.add_argument("--k", type=int, default=3)
    ev.add_argument("--dtype", default="float32", help="compute dtype (vLLM serves the checkpoint's, bfloat16)")
    a = p.parse_args(argv)
    result = {"truncate": cmd_truncate, "train": cmd_train, "eval": cmd_eval}[a.cmd](a)
    print("result: " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
