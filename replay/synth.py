"""Prompt text for token-count traces: exact lengths under the endpoint's tokenizer, and the
trace's shared-prefix structure reproduced block for block.

Text is made of words that are one token each under the endpoint's tokenizer (checked, not
assumed). Prompt position ``p`` (counted in the chat-templated prompt) belongs to trace block
``p // block``; its word is drawn from a stream seeded by that block's hash id, so equal ids
give identical text and the pool's token blocks line up with the trace's blocks. Lengths are
then checked by encoding every prompt, and corrected at the unshared tail when they are off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from replay.tokenize import ChatTokenizer

_WORD = re.compile(r"^ [a-z]{3,12}$")
SENTINEL = "\u0001SYNTH\u0001"


@dataclass
class TemplateFrame:
    prefix_tokens: int  # tokens the chat template puts before the user content
    suffix_tokens: int  # ... and after it (including the generation prompt)


def single_token_words(tok: ChatTokenizer, limit: int = 8192) -> list[str]:
    """Words ' xxx' that the tokenizer encodes as exactly one token, and that stay one token
    each when strung together (verified on a long random sequence)."""
    vocab = tok.tokenizer.get_vocab()
    ids = sorted(vocab.values())
    decoded = [tok.tokenizer.decode([i]) for i in ids]
    cands = sorted({w for w in decoded if _WORD.match(w)})
    encs = tok.tokenizer.encode_batch(cands, add_special_tokens=False)
    words = [w for w, e in zip(cands, encs) if len(e.ids) == 1][:limit]
    if len(words) < 16:
        raise ValueError(f"the tokenizer has only {len(words)} single-token lowercase words; cannot synthesise text")
    rng = np.random.default_rng(0)
    sample = [words[i] for i in rng.integers(0, len(words), 4000)]
    if len(tok.tokenizer.encode("".join(sample), add_special_tokens=False).ids) != len(sample):
        # Some words merge with neighbours under this tokenizer: keep the ones that survive pairing.
        keep = [w for w in words if len(tok.tokenizer.encode(w + w + words[0], add_special_tokens=False).ids) == 3]
        words = keep
    return words


def template_frame(tok: ChatTokenizer) -> TemplateFrame:
    text = tok.render({"messages": [{"role": "user", "content": SENTINEL}]})
    if SENTINEL not in text:
        raise ValueError("the chat template does not include the user message content verbatim")
    pre, post = text.split(SENTINEL, 1)
    return TemplateFrame(len(tok.encode_whole([pre])[0]) if pre else 0, len(tok.encode_whole([post])[0]) if post else 0)


class BlockText:
    """Deterministic word-index streams per block hash id (equal ids -> identical words)."""

    def __init__(self, n_words: int, block: int, seed: int):
        self.n_words, self.block, self.seed = n_words, block, seed
        self._cache: dict[int, np.ndarray] = {}

    def words(self, block_id: int) -> np.ndarray:
        arr = self._cache.get(block_id)
        if arr is None:
            rng = np.random.default_rng([self.seed, block_id & 0xFFFFFFFFFFFF, (block_id >> 48) & 0xFFFF, 7])
            arr = rng.integers(0, self.n_words, self.block)
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[block_id] = arr
        return arr


def content_indices(block_ids: list[int], start: int, end: int, text: BlockText) -> np.ndarray:
    """Word indices for prompt positions [start, end) (positions include the template prefix)."""
    if end <= start:
        return np.empty(0, np.int64)
    b = text.block
    parts = []
    for k in range(start // b, (end - 1) // b + 1):
        lo, hi = max(start, k * b), min(end, (k + 1) * b)
        parts.append(text.words(block_ids[k])[lo - k * b : hi - k * b])
    return np.concatenate(parts)


def synthesise(
    tok: ChatTokenizer, targets: np.ndarray, block_ids: list[list[int]], block: int, seed: int = 0, max_rounds: int = 4
) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """User-message texts whose templated prompts have ``targets`` tokens; returns
    (texts, actual prompt token counts, token ids). ``block_ids[i]`` must cover
    ceil(targets[i] / block) blocks."""
    words = np.array(single_token_words(tok), dtype=object)
    frame = template_frame(tok)
    if frame.prefix_tokens >= block:
        raise ValueError(
            f"the chat template puts {frame.prefix_tokens} tokens before the user text, not fewer than "
            f"the (scaled) block of {block} tokens: raise traffic.length_scale"
        )
    text = BlockText(len(words), block, seed)
    n = len(targets)
    idx: list[np.ndarray] = []
    for i in range(n):
        end = max(int(targets[i]) - frame.suffix_tokens, frame.prefix_tokens + 1)
        idx.append(content_indices(block_ids[i], frame.prefix_tokens, end, text))
    texts = ["".join(words[ix]) for ix in idx]
    bodies = [{"messages": [{"role": "user", "content": t}]} for t in texts]
    ids = tok.encode_whole([tok.render(b) for b in bodies])
    counts = np.array([len(x) for x in ids], dtype=np.int64)
    extra = np.random.default_rng(seed + 1)
    for _ in range(max_rounds):
        off = np.nonzero(counts != targets)[0]
        if len(off) == 0:
            break
        for i in off:
            diff = int(targets[i] - counts[i])
            if diff > 0:
                idx[i] = np.concatenate([idx[i], extra.integers(0, len(words), diff)])
            elif len(idx[i]) > 1:
                idx[i] = idx[i][: max(1, len(idx[i]) + diff)]
            texts[i] = "".join(words[idx[i]])
        new = tok.encode_whole([tok.render({"messages": [{"role": "user", "content": texts[i]}]}) for i in off])
        for j, i in enumerate(off):
            ids[i] = new[j]
            counts[i] = len(new[j])
    return texts, counts, ids
