"""Prompt token counts under the endpoint's own tokenizer and chat template (no torch).

The chat template is rendered with jinja2 the way transformers/vLLM do it, and the text is
encoded with the ``tokenizers`` library. Encoding is done per *segment*: ``tokenizers`` splits
text at special tokens before anything else, so a prompt's ids are the concatenation of its
segments' ids. Segments repeat a lot in production traffic (tenant system prompts, earlier
turns of a conversation), so their ids are cached; :meth:`ChatTokenizer.verify` checks the
equality against whole-prompt encoding on a sample, and the builder falls back to whole-prompt
encoding if it ever fails.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from datetime import datetime
from pathlib import Path

import numpy as np
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer


def _raise(message: str):
    raise ValueError(f"chat template error: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _token_str(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def chat_messages(body: dict) -> list[dict]:
    """Messages as a text-only chat template sees them (vLLM's 'string' content format):
    text parts joined with newlines, ``None`` content as an empty string."""
    out = []
    for m in body.get("messages") or []:
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            m["content"] = "\n".join(
                p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
            )
        elif content is None:
            m["content"] = ""
        out.append(m)
    return out


class ChatTokenizer:
    """An endpoint's tokenizer + chat template, for counting (and id-ing) chat prompts."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str, special: dict[str, str], cache_entries: int = 100_000):
        self.tokenizer = tokenizer
        self.special = special
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.template = env.from_string(chat_template)
        added = sorted((t.content for t in tokenizer.get_added_tokens_decoder().values()), key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(a) for a in added) + ")") if added else None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_entries = cache_entries
        self.cache_hits = 0
        self.cache_misses = 0

    @classmethod
    def from_dir(cls, directory: Path | str, cache_entries: int = 100_000) -> "ChatTokenizer":
        """Load ``tokenizer.json`` and the chat template (``chat_template.jinja`` or the
        ``chat_template`` key of ``tokenizer_config.json``) from a model folder."""
        directory = Path(directory)
        tok_file = directory / "tokenizer.json"
        if not tok_file.exists():
            raise FileNotFoundError(f"{tok_file} not found: the endpoint's model folder needs a tokenizer.json")
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.exists() else {}
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: take the default
            template = next((t["template"] for t in template if t.get("name") == "default"), template[0]["template"])
        jinja_file = directory / "chat_template.jinja"
        if jinja_file.exists():
            template = jinja_file.read_text()
        if not template:
            raise ValueError(
                f"{directory}: no chat template (neither chat_template.jinja nor tokenizer_config.json "
                "'chat_template'); the endpoint's prompts cannot be counted without it"
            )
        special = {k: _token_str(config.get(k)) or "" for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        return cls(Tokenizer.from_file(str(tok_file)), template, special, cache_entries)

    def render(self, body: dict) -> str:
        """The prompt text the engine builds for a chat-completions request body."""
        tools = body.get("tools") or None
        return self.template.render(
            messages=chat_messages(body), tools=tools, add_generation_prompt=True, **self.special
        )

    def render_messages(self, messages: list[dict]) -> str:
        return self.render({"messages": messages})

    def _segments(self, text: str) -> list[str]:
        return [s for s in self._split.split(text) if s] if self._split else [text]

    def encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids (uint32) of each rendered prompt, through the segment cache."""
        seg_lists = [self._segments(t) for t in texts]
        missing = list({s for segs in seg_lists for s in segs if s not in self._cache})
        self.cache_misses += len(missing)
        self.cache_hits += sum(len(segs) for segs in seg_lists) - len(missing)
        if missing:
            encs = self.tokenizer.encode_batch(missing, add_special_tokens=False)
            for s, e in zip(missing, encs):
                self._cache[s] = np.asarray(e.ids, dtype=np.uint32)
        out = []
        for segs in seg_lists:
            arrs = []
            for s in segs:
                arrs.append(self._cache[s])
            out.append(np.concatenate(arrs) if len(arrs) > 1 else arrs[0] if arrs else np.empty(0, np.uint32))
        for segs in seg_lists:  # refresh recency of what this batch used, then trim
            for s in segs:
                self._cache.move_to_end(s)
        while len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
        return out

    def encode_whole(self, texts: list[str]) -> list[np.ndarray]:
        """Whole-prompt encoding (no cache): the reference the segment path must equal."""
        return [
            np.asarray(e.ids, dtype=np.uint32) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)
        ]

    def encode_bodies(self, bodies: list[dict]) -> list[np.ndarray]:
        return self.encode_texts([self.render(b) for b in bodies])

    def count_bodies(self, bodies: list[dict]) -> np.ndarray:
        return np.array([len(ids) for ids in self.encode_bodies(bodies)], dtype=np.int64)

    def count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def verify(self, texts: list[str]) -> bool:
        """Whether segment-cached encoding equals whole-prompt encoding on ``texts``."""
        return all(np.array_equal(a, b) for a, b in zip(self.encode_texts(texts), self.encode_whole(texts)))
