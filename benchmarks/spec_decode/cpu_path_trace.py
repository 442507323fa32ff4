"""In-process trace of vLLM's CPU draft_model path (engine core in this process, so the wrappers below
see every step). The target serves as its own draft, temperature 0: every draft token should equal
the target's greedy token. For each step it prints what the drafter was given and what it proposed,
and what the rejection sampler saw (draft tokens vs the target's argmax).

    nice -n 19 .venv-engine/bin/python benchmarks/spec_decode/cpu_path_trace.py [K] [MAXTOK] [TEMP]

With PYTHONPATH=engines/patches/vllm_issue_55005 the expand_kernel runtime fix is loaded too.
"""

import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402, F401 - after the thread settings above, before vLLM imports it

K = int(sys.argv[1]) if len(sys.argv) > 1 else 3
MAXTOK = int(sys.argv[2]) if len(sys.argv) > 2 else 24
TEMP = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
MODEL = "/work/main/.autoresearch/models/smollm2-135m-instruct"

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.v1.sample import rejection_sampler as rs  # noqa: E402
from vllm.v1.spec_decode import llm_base_proposer as lbp  # noqa: E402

STEP = {"n": 0}


def t(x):
    return None if x is None else x.tolist()


orig_propose = lbp.SpecDecodeBaseProposer.propose


def propose(
    self,
    num_speculative_tokens,
    target_token_ids,
    target_positions,
    target_hidden_states,
    next_token_ids,
    token_indices_to_sample,
    common_attn_metadata,
    sampling_metadata,
    mm_embed_inputs=None,
    num_rejected_tokens_gpu=None,
    slot_mappings=None,
):
    cad = common_attn_metadata
    n = target_token_ids.shape[0]
    info = dict(
        ntok=n,
        tgt_ids=t(target_token_ids[-8:]),
        tgt_pos=t(target_positions[-8:]),
        next=t(next_token_ids),
        rej=t(num_rejected_tokens_gpu),
        qsl=t(cad.query_start_loc),
        seq_lens=t(cad.seq_lens),
        slots=t(cad.slot_mapping[-8:]) if n < 64 else "prefill",
    )
    out = orig_propose(
        self,
        num_speculative_tokens,
        target_token_ids,
        target_positions,
        target_hidden_states,
        next_token_ids,
        token_indices_to_sample,
        common_attn_metadata,
        sampling_metadata,
        mm_embed_inputs=mm_embed_inputs,
        num_rejected_tokens_gpu=num_rejected_tokens_gpu,
        slot_mappings=slot_mappings,
    )
    STEP["n"] += 1
    print(f"[propose {STEP['n']}] {info} -> draft {t(out)}", flush=True)
    return out


lbp.SpecDecodeBaseProposer.propose = propose

orig_first = lbp.SpecDecodeBaseProposer.set_inputs_first_pass


def set_inputs_first_pass(self, **kw):
    num_tokens, idx, cad = orig_first(self, **kw)
    if num_tokens < 64:
        print(
            f"   first pass: draft input_ids {t(self.input_ids[:num_tokens][-8:])} "
            f"pos {t(self.positions[:num_tokens][-8:])} sample_idx {t(idx)} "
            f"qsl {t(cad.query_start_loc)} seq_lens {t(cad.seq_lens)} slots {t(cad.slot_mapping[-8:])}",
            flush=True,
        )
    return num_tokens, idx, cad


lbp.SpecDecodeBaseProposer.set_inputs_first_pass = set_inputs_first_pass

orig_upd = lbp.SpecDecodeBaseProposer._update_positions_dependent_metadata


def upd(self, positions, cad, batch_size, input_batch_size, block_size):
    before = (t(positions), t(cad.seq_lens))
    out = orig_upd(self, positions, cad, batch_size, input_batch_size, block_size)
    print(
        f"   step update: pos {before[0]} -> {t(out)}, seq_lens {before[1]} -> {t(cad.seq_lens)}, "
        f"slot {t(cad.slot_mapping)}",
        flush=True,
    )
    return out


lbp.SpecDecodeBaseProposer._update_positions_dependent_metadata = upd

orig_rs = rs.rejection_sample


def rejection_sample(
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
    **kw,
):
    out = orig_rs(
        draft_token_ids,
        num_draft_tokens,
        max_spec_len,
        cu_num_draft_tokens,
        draft_probs,
        target_logits,
        bonus_token_ids,
        sampling_metadata,
        **kw,
    )
    print(
        f"[verify] draft {t(draft_token_ids)} target_argmax {t(target_logits.argmax(-1))} "
        f"bonus {t(bonus_token_ids.flatten())} -> out {t(out)}",
        flush=True,
    )
    return out


rs.rejection_sample = rejection_sample

llm = LLM(
    model=MODEL,
    max_model_len=2048,
    enforce_eager=True,
    max_num_seqs=1,
    speculative_config={"method": "draft_model", "model": MODEL, "num_speculative_tokens": K},
)
sp = SamplingParams(temperature=TEMP, top_p=0.9 if TEMP else 1.0, max_tokens=MAXTOK)
out = llm.chat([{"role": "user", "content": "What is the capital of France? Answer in one sentence."}], sp)
print("OUTPUT", repr(out[0].outputs[0].text), out[0].outputs[0].token_ids)
